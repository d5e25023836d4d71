//! Device memory: a caching allocator, tensor storage and weight storage.
//!
//! Buffers are returned to a per-device pool on drop and reused by the next allocation of the
//! same size class, so a steady-state decode step allocates nothing from the driver (and can be
//! captured as a CUDA graph). All work runs on one stream per device, so a block handed back to the
//! pool can be reused at once: every later use is ordered after every earlier one.
//!
//! While a stream capture is recording, nothing runs, so that reasoning does not hold: a block
//! freed during the capture may be addressed by a captured op, and the graph replays those ops
//! long after. Such blocks are therefore held back from reuse and handed to the graph at the end
//! of the capture ([`Pool::end_capture`]), which returns them to the pool when it is dropped. A
//! block the capture needs that the cache cannot supply is allocated from the driver in relaxed
//! capture mode (a plain `cuMemAlloc` is refused inside a thread-local capture), and the cache
//! is never released while capturing (that synchronizes the context, which a capture refuses).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
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

/// Size-class free lists plus the capture rule of the module doc, without the driver (so the
/// bookkeeping is testable on any machine). Addresses are plain `u64`s.
#[derive(Default)]
struct FreeLists {
    free: BTreeMap<usize, Vec<u64>>,
    /// Open captures (a count, so nested or concurrent begin/end pairs balance).
    capturing: usize,
    /// Blocks freed while a capture was open: not reusable until that graph is gone.
    held_for_graph: Vec<(u64, usize)>,
}

impl FreeLists {
    /// A cached block of exactly `class` bytes, if any.
    fn take(&mut self, class: usize) -> Option<u64> {
        self.free.get_mut(&class).and_then(|v| v.pop())
    }

    /// Takes a freed block back: cached at once, or held for the graph while capturing.
    fn give_back(&mut self, ptr: u64, class: usize) {
        if self.capturing > 0 {
            self.held_for_graph.push((ptr, class));
        } else {
            self.free.entry(class).or_default().push(ptr);
        }
    }

    fn begin_capture(&mut self) {
        self.capturing += 1;
    }

    /// Closes a capture; the blocks freed during it, for the graph to own.
    fn end_capture(&mut self) -> Vec<(u64, usize)> {
        self.capturing = self.capturing.saturating_sub(1);
        std::mem::take(&mut self.held_for_graph)
    }

    /// Whether the cache may be freed to the driver now (never while a capture is open).
    fn may_release(&self) -> bool {
        self.capturing == 0
    }

    /// Every cached block, removed from the cache.
    fn drain(&mut self) -> Vec<(u64, usize)> {
        std::mem::take(&mut self.free)
            .into_iter()
            .flat_map(|(class, ptrs)| ptrs.into_iter().map(move |p| (p, class)))
            .collect()
    }

    fn cached_bytes(&self) -> usize {
        self.free.iter().map(|(k, v)| k * v.len()).sum()
    }
}

/// Switches this thread to relaxed stream-capture mode until dropped, so `cuMemAlloc` is allowed
/// inside a capture (the pattern the driver documents for `cuThreadExchangeStreamCaptureMode`).
struct RelaxedCapture(sys::CUstreamCaptureMode);

impl RelaxedCapture {
    fn new() -> Result<RelaxedCapture> {
        let mut mode = sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED;
        // SAFETY: exchanges a thread-local setting through a valid pointer.
        unsafe { sys::cuThreadExchangeStreamCaptureMode(&mut mode) }
            .result()
            .map_err(|e| cuda_err("alloc", e))?;
        Ok(RelaxedCapture(mode))
    }
}

impl Drop for RelaxedCapture {
    fn drop(&mut self) {
        let mut mode = self.0;
        // SAFETY: as in `new`; restores the mode this thread had.
        let _ = unsafe { sys::cuThreadExchangeStreamCaptureMode(&mut mode) };
    }
}

/// The per-device cache of freed blocks, keyed by size class.
pub(crate) struct Pool {
    ctx: Arc<CudaContext>,
    lists: Mutex<FreeLists>,
    /// Bytes allocated from the driver and not yet freed (live blocks plus cached ones).
    held: AtomicUsize,
    /// The highest `held` so far: the allocator's high-water mark.
    peak_held: AtomicUsize,
    /// A block with a deferred write queued (a pending folded norm's output, cuda/rms_fold.rs);
    /// freeing it clears this, which cancels that write. 0: none.
    watched: AtomicU64,
}

impl Pool {
    /// An empty pool on `ctx`.
    pub(crate) fn new(ctx: Arc<CudaContext>) -> Arc<Pool> {
        Arc::new(Pool {
            ctx,
            lists: Mutex::new(FreeLists::default()),
            held: AtomicUsize::new(0),
            peak_held: AtomicUsize::new(0),
            watched: AtomicU64::new(0),
        })
    }

    /// A block of at least `bytes` bytes (contents unspecified).
    pub(crate) fn alloc(self: &Arc<Self>, bytes: usize) -> Result<CudaStorage> {
        let class = size_class(bytes);
        let (reused, capturing) = {
            let mut l = self.lists.lock().map_err(|_| poisoned())?;
            (l.take(class), !l.may_release())
        };
        let ptr = match reused {
            Some(p) => p,
            None => self.fresh(class, capturing)?,
        };
        Ok(CudaStorage {
            ptr,
            bytes: class,
            pool: self.clone(),
            shadow: None,
        })
    }

    /// Allocates from the driver; on failure releases the cached blocks and tries once more
    /// (not while capturing: see the module doc).
    fn fresh(&self, class: usize, capturing: bool) -> Result<sys::CUdeviceptr> {
        self.ctx
            .bind_to_thread()
            .map_err(|e| cuda_err("alloc", e))?;
        let oom = || KernelError::OutOfMemory {
            bytes: class,
            device: format!("cuda:{}", self.ctx.ordinal()),
        };
        let p = if capturing {
            let _relaxed = RelaxedCapture::new()?;
            unsafe { dr::malloc_sync(class) }.map_err(|e| KernelError::Cuda {
                op: "alloc",
                msg: format!(
                    "{class} bytes inside a stream capture: {e} (the cache cannot be released \
                     while capturing)"
                ),
            })?
        } else {
            match unsafe { dr::malloc_sync(class) } {
                Ok(p) => p,
                Err(_) => {
                    self.release_cached()?;
                    unsafe { dr::malloc_sync(class) }.map_err(|_| oom())?
                }
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

    /// Frees every cached block back to the driver; refused while a capture is open.
    pub(crate) fn release_cached(&self) -> Result<()> {
        let blocks = {
            let mut l = self.lists.lock().map_err(|_| poisoned())?;
            if !l.may_release() {
                return Err(KernelError::Cuda {
                    op: "release_cached",
                    msg: "a stream capture is open: cached blocks stay until it ends".into(),
                });
            }
            l.drain()
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
        self.lists.lock().map(|l| l.cached_bytes()).unwrap_or(0)
    }

    /// A stream capture starts: blocks freed from now on are held for its graph.
    pub(crate) fn begin_capture(&self) {
        if let Ok(mut l) = self.lists.lock() {
            l.begin_capture();
        }
    }

    /// The capture ended (whether or not a graph came of it): the blocks freed during it, which
    /// its graph must own (dropping them returns them to the cache).
    pub(crate) fn end_capture(self: &Arc<Self>) -> Vec<CudaStorage> {
        let held = match self.lists.lock() {
            Ok(mut l) => l.end_capture(),
            Err(_) => Vec::new(),
        };
        held.into_iter()
            .map(|(ptr, bytes)| CudaStorage {
                ptr,
                bytes,
                pool: self.clone(),
                shadow: None,
            })
            .collect()
    }

    /// Watches the block at `ptr`: freeing it before [`Pool::unwatch`] cancels the write.
    pub(crate) fn watch_free(&self, ptr: u64) {
        self.watched.store(ptr, Ordering::SeqCst);
    }

    /// Stops watching `ptr`: whether it was still watched (not freed meanwhile).
    pub(crate) fn unwatch(&self, ptr: u64) -> bool {
        self.watched
            .compare_exchange(ptr, 0, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok()
    }

    fn give_back(&self, ptr: sys::CUdeviceptr, class: usize) {
        let _ = self
            .watched
            .compare_exchange(ptr, 0, Ordering::SeqCst, Ordering::SeqCst);
        if let Ok(mut l) = self.lists.lock() {
            l.give_back(ptr, class);
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
    /// GGML's blocks with each block's quants reordered by 32-element sub-block (Q4_K;
    /// `repack.rs`).
    SubBlockOrder,
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
    use super::{size_class, FreeLists};
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

    /// The sequence that failed on the H200 (`cuda_graph::pdl_decode_step_matches_plain_launches`,
    /// first shape): an eager step sizes the scratch (the q8 slot grows, freeing its first block),
    /// capture 1 moves the scratch into its graph, and capture 2 starts with none. Capture 2 reuses
    /// a cached block where one fits, must get the attention partials fresh and must not release
    /// the cache to do so (the old pool did, and the capture refused the synchronize); a block it
    /// frees while growing the q8 slot is held for its graph, not handed out again, until the
    /// graph is dropped.
    #[test]
    fn a_capture_without_scratch_allocates_and_frees_nothing_the_graph_uses() {
        let (q8_small, q8_big, attn) = (size_class(300), size_class(600), size_class(2112));
        let mut l = FreeLists::default();
        // Eager step: q8 at 0x1000 is replaced by a larger block (0x2000), attention gets 0x3000.
        assert_eq!(l.take(q8_small), None);
        l.give_back(0x1000, q8_small);
        assert!(l.may_release());
        // Capture 1 finds its scratch sized and frees nothing; its graph takes 0x2000 and 0x3000.
        l.begin_capture();
        assert!(l.end_capture().is_empty());
        // Capture 2: the q8 slot is empty and a cached block fits it.
        l.begin_capture();
        assert_eq!(l.take(q8_small), Some(0x1000));
        assert_eq!(l.take(attn), None, "attention partials must come fresh");
        assert!(
            !l.may_release(),
            "the cache must not be released while capturing"
        );
        // The q8 slot grows mid-capture (0x4000 fresh): 0x1000 is freed but captured ops use it.
        assert_eq!(l.take(q8_big), None);
        l.give_back(0x1000, q8_small);
        assert_eq!(
            l.take(q8_small),
            None,
            "a block freed while capturing was reused"
        );
        let for_graph = l.end_capture();
        assert_eq!(for_graph, vec![(0x1000, q8_small)]);
        assert!(l.may_release());
        assert_eq!(l.take(q8_small), None, "the graph's block was cached");
        // Graph 2 dropped: its blocks return to the cache.
        for (p, c) in for_graph {
            l.give_back(p, c);
        }
        assert_eq!(l.cached_bytes(), q8_small);
        assert_eq!(l.drain(), vec![(0x1000, q8_small)]);
        assert_eq!(l.cached_bytes(), 0);
    }

    /// Begin/end pairs balance: the cache stays unreleasable until the last capture ends, and
    /// each end hands over what was freed since.
    #[test]
    fn captures_balance_and_hand_over_their_frees() {
        let mut l = FreeLists::default();
        l.begin_capture();
        l.begin_capture();
        l.give_back(0x10, 256);
        assert_eq!(l.end_capture(), vec![(0x10, 256)]);
        assert!(!l.may_release());
        assert!(l.end_capture().is_empty());
        assert!(l.may_release());
        // An unmatched end does not underflow into a capture state.
        assert!(l.end_capture().is_empty());
        l.give_back(0x20, 512);
        assert_eq!(l.take(512), Some(0x20));
    }
}
