//! Device memory: a caching allocator, tensor storage and weight storage.
//!
//! Buffers are returned to a per-device pool on drop and reused by the next allocation of the
//! same size class, so a steady-state decode step allocates nothing from the driver (and can be
//! captured as a CUDA graph). All work runs on one stream per device, so a block handed back to the
//! pool can be reused at once: every later use is ordered after every earlier one.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use cudarc::driver::{result as dr, sys, CudaContext};

use crate::{KernelError, Result};

/// Rounds a request up to its size class: 256-byte steps under 64 KiB, then eight classes per
/// power of two (at most 12.5% slack), then 2 MiB steps past 64 MiB where slack would be large.
fn size_class(bytes: usize) -> usize {
    let b = bytes.max(256);
    if b <= 1 << 16 {
        return b.div_ceil(256) * 256;
    }
    if b >= 1 << 26 {
        return b.div_ceil(1 << 21) << 21;
    }
    // Steps of an eighth of the power of two at or below the request: at most 12.5% slack.
    let step = (1usize << (usize::BITS - 1 - b.leading_zeros())) / 8;
    b.div_ceil(step) * step
}

/// The per-device cache of freed blocks, keyed by size class.
pub(crate) struct Pool {
    ctx: Arc<CudaContext>,
    free: Mutex<BTreeMap<usize, Vec<sys::CUdeviceptr>>>,
    /// Bytes allocated from the driver and not yet freed (live blocks plus cached ones).
    held: AtomicUsize,
    /// The highest `held` so far: the allocator's high-water mark.
    peak_held: AtomicUsize,
}

impl Pool {
    /// An empty pool on `ctx`.
    pub(crate) fn new(ctx: Arc<CudaContext>) -> Arc<Pool> {
        Arc::new(Pool {
            ctx,
            free: Mutex::new(BTreeMap::new()),
            held: AtomicUsize::new(0),
            peak_held: AtomicUsize::new(0),
        })
    }

    /// A block of at least `bytes` bytes (contents unspecified).
    pub(crate) fn alloc(self: &Arc<Self>, bytes: usize) -> Result<CudaStorage> {
        let class = size_class(bytes);
        let reused = self
            .free
            .lock()
            .map_err(|_| poisoned())?
            .get_mut(&class)
            .and_then(|v| v.pop());
        let ptr = match reused {
            Some(p) => p,
            None => self.fresh(class)?,
        };
        Ok(CudaStorage {
            ptr,
            bytes: class,
            pool: self.clone(),
            shadow: None,
        })
    }

    /// Allocates from the driver; on failure releases the cached blocks and tries once more.
    fn fresh(&self, class: usize) -> Result<sys::CUdeviceptr> {
        self.ctx
            .bind_to_thread()
            .map_err(|e| cuda_err("alloc", e))?;
        let p = match unsafe { dr::malloc_sync(class) } {
            Ok(p) => p,
            Err(first) => {
                // Inside a stream capture both the allocation and the release are refused; say
                // so, since the capture's own error ("operation not permitted") names neither.
                if let Err(e) = self.release_cached() {
                    return Err(KernelError::Cuda {
                        op: "alloc",
                        msg: format!(
                            "{class} bytes: {first}; releasing the cache to retry failed too \
                             ({e}): an allocation inside a stream capture fails this way, so \
                             size the buffer before capturing"
                        ),
                    });
                }
                unsafe { dr::malloc_sync(class) }.map_err(|_| KernelError::OutOfMemory {
                    bytes: class,
                    device: format!("cuda:{}", self.ctx.ordinal()),
                })?
            }
        };
        let held = self.held.fetch_add(class, Ordering::Relaxed) + class;
        self.peak_held.fetch_max(held, Ordering::Relaxed);
        Ok(p)
    }

    /// Bytes this pool holds from the driver now (live plus cached blocks).
    pub(crate) fn held_bytes(&self) -> usize {
        self.held.load(Ordering::Relaxed)
    }

    /// The most bytes this pool has held from the driver at once.
    pub(crate) fn peak_held_bytes(&self) -> usize {
        self.peak_held.load(Ordering::Relaxed)
    }

    /// Frees every cached block back to the driver.
    pub(crate) fn release_cached(&self) -> Result<()> {
        let blocks: Vec<(sys::CUdeviceptr, usize)> = {
            let mut free = self.free.lock().map_err(|_| poisoned())?;
            std::mem::take(&mut *free)
                .into_iter()
                .flat_map(|(class, ptrs)| ptrs.into_iter().map(move |p| (p, class)))
                .collect()
        };
        self.ctx
            .bind_to_thread()
            .map_err(|e| cuda_err("release_cached", e))?;
        // Pending kernels may still read a block that was handed back; finish them first.
        self.ctx
            .synchronize()
            .map_err(|e| cuda_err("release_cached", e))?;
        for (p, class) in blocks {
            unsafe { dr::free_sync(p) }.map_err(|e| cuda_err("release_cached", e))?;
            self.held.fetch_sub(class, Ordering::Relaxed);
        }
        Ok(())
    }

    /// Bytes currently held in the cache (for tests and diagnostics).
    pub(crate) fn cached_bytes(&self) -> usize {
        self.free
            .lock()
            .map(|f| f.iter().map(|(k, v)| k * v.len()).sum())
            .unwrap_or(0)
    }

    fn give_back(&self, ptr: sys::CUdeviceptr, class: usize) {
        if let Ok(mut f) = self.free.lock() {
            f.entry(class).or_default().push(ptr);
        }
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        // Best effort: the context is still alive (we hold it), errors here have no one to go to.
        let _ = self.release_cached();
    }
}

fn poisoned() -> KernelError {
    KernelError::Cuda {
        op: "alloc",
        msg: "allocator lock poisoned by a panic on another thread".into(),
    }
}

/// Wraps a driver error with the op that met it.
pub(crate) fn cuda_err(op: &'static str, e: impl std::fmt::Display) -> KernelError {
    KernelError::Cuda {
        op,
        msg: e.to_string(),
    }
}

/// Device bytes behind a [`crate::Tensor`] on a CUDA device.
pub struct CudaStorage {
    ptr: sys::CUdeviceptr,
    bytes: usize,
    pool: Arc<Pool>,
    /// Host copy of u32 contents the host itself wrote (ids, positions, cache metadata), so ops
    /// can validate indices without a device round trip. `None` once a kernel wrote the buffer.
    pub(crate) shadow: Option<Vec<u32>>,
}

impl CudaStorage {
    /// Ordinal of the device holding the bytes.
    pub fn ordinal(&self) -> usize {
        self.pool.ctx.ordinal()
    }

    /// Capacity in bytes.
    pub fn len_bytes(&self) -> usize {
        self.bytes
    }

    /// The raw device address (kernel argument).
    pub(crate) fn ptr(&self) -> u64 {
        self.ptr
    }
}

impl Drop for CudaStorage {
    fn drop(&mut self) {
        self.pool.give_back(self.ptr, self.bytes);
    }
}

/// How a weight's blocks are laid out on the device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WeightLayout {
    /// GGML's own block layout, copied as is.
    Ggml,
    /// Quants of every block first, then the companion bytes (the f16 scale of Q4_0 and Q8_0;
    /// Q6_K's scales and d): 16-byte loads.
    SplitScales,
    /// The row-major codes as the checkpoint holds them, then f32 companion scales from byte
    /// `offset` (FP8 with 128x128 tile scales; `matmul_fp8.rs`).
    ScalesAfter {
        /// Byte offset of the scales (256-byte aligned).
        offset: usize,
    },
}

/// A quantized matrix on a CUDA device.
pub struct CudaWeight {
    pub(crate) storage: CudaStorage,
    pub(crate) layout: WeightLayout,
}

impl CudaWeight {
    /// Ordinal of the device holding the weight.
    pub fn ordinal(&self) -> usize {
        self.storage.ordinal()
    }

    /// The device layout of the blocks.
    pub fn layout(&self) -> WeightLayout {
        self.layout
    }

    /// Bytes on the device.
    pub fn len_bytes(&self) -> usize {
        self.storage.len_bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::size_class;
    use crate::{DType, Device, DeviceKind};

    /// The driver's free/total and the pool's counters follow a 256 MiB allocation: driver use
    /// grows by at least that much, the pool holds exactly that much more (a fresh device has no
    /// cached block to reuse), and after the tensor is dropped its block stays cached, so held
    /// bytes and the peak stay.
    #[test]
    fn memory_info_tracks_driver_use_and_the_pool_peak() {
        let dev = match Device::open(DeviceKind::Cuda(0)) {
            Ok(d) => d,
            Err(e) => {
                eprintln!("skipped: no CUDA device ({e})");
                return;
            }
        };
        let before = dev.memory_info().expect("CUDA reports memory");
        assert!(before.total_bytes > 0 && before.used_bytes <= before.total_bytes);
        let held0 = before.process_bytes.expect("pool bytes");
        let n = 256usize << 20;
        let t = dev.alloc(DType::F32, &[n / 4]).expect("alloc 256 MiB");
        let during = dev.memory_info().unwrap();
        let grew = during.used_bytes as i64 - before.used_bytes as i64;
        // Other test threads may allocate meanwhile, so only the lower bound is firm (less 2 MiB
        // for the driver's page rounding).
        assert!(
            grew >= n as i64 - (2 << 20),
            "driver use grew by {grew} for a {n}-byte tensor"
        );
        assert_eq!(during.process_bytes.unwrap(), held0 + n as u64);
        assert!(during.process_peak_bytes.unwrap() >= held0 + n as u64);
        drop(t);
        let cached = dev.memory_info().unwrap();
        // Dropped blocks stay cached: still held, peak unchanged.
        assert!(cached.process_bytes.unwrap() >= held0 + n as u64);
        assert!(cached.process_peak_bytes.unwrap() >= held0 + n as u64);
    }

    #[test]
    fn size_classes_cover_requests_with_bounded_slack() {
        for b in [
            1usize,
            255,
            257,
            65_536,
            65_537,
            1 << 20,
            (1 << 20) + 1,
            3 << 25,
            1 << 30,
        ] {
            let c = size_class(b);
            assert!(c >= b);
            assert!(
                c as f64 <= (b.max(256) as f64) * 1.125 + 256.0,
                "{b} -> {c}"
            );
        }
    }
}
