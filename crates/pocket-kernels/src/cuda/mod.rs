//! The CUDA backend: kernels compiled ahead of time from `kernels/*.cu` (embedded PTX and cubin),
//! launched through cudarc with the driver loaded at run time, so one binary runs with or without
//! CUDA and reports a missing driver as [`KernelError::Unavailable`].
//!
//! One stream per device orders all work; device memory comes from a caching pool
//! ([`memory`]); every launch names its op and kernel in errors. Set `POCKET_CUDA_SYNC=1` to
//! synchronize after each launch, which pins an asynchronous fault on the launch that caused it.

/// Packs kernel arguments as the driver wants them: an array of pointers to each value. The
/// values are temporaries that live until the end of the enclosing statement (the launch).
macro_rules! args {
    ($($a:expr),* $(,)?) => {
        &mut [$( &mut { $a } as *mut _ as *mut std::ffi::c_void ),*]
    };
}

pub mod artifacts;
mod attn;
pub mod graph;
pub mod kernels;
mod matmul;
mod matmul_fp8;
pub mod memory;
mod ops;
mod recurrent;
mod sample;
mod split;

use std::ffi::c_void;
use std::sync::{Arc, Mutex};

use cudarc::driver::{result as dr, sys, CudaContext, CudaFunction, CudaStream};
use pocket_quant::QuantFormat;

pub use kernels::{Artifact, DevFormat, Kernel};
pub use memory::{CudaStorage, CudaWeight, WeightLayout};

use crate::error::shape_err;
use crate::rope::DeviceRope;
use crate::tensor::Storage;
use crate::{
    AttentionMeta, AttentionParams, Backend, DType, HostBytes, KernelError, Result, Tensor, Weight,
    WeightStorage,
};
use kernels::KernelTable;
use memory::{cuda_err, Pool};

/// Reusable device workspaces that ops grow on first use and then keep, so steady-state steps
/// allocate nothing.
#[derive(Default)]
pub(crate) struct Scratch {
    /// Activations quantized to 8-bit blocks for the dp4a GEMV.
    pub q8: Option<CudaStorage>,
    /// Flash-decoding partials (per split accumulators, max and sum).
    pub attn: Option<CudaStorage>,
    /// Dequantized f16 weight rows for the cuBLAS prefill GEMM.
    pub w16: Option<CudaStorage>,
    /// f16 activations for the cuBLAS prefill GEMM.
    pub x16: Option<CudaStorage>,
}

impl Scratch {
    /// Device address of `slot` with at least `bytes`, growing it if needed.
    pub(crate) fn get(
        slot: &mut Option<CudaStorage>,
        pool: &Arc<Pool>,
        bytes: usize,
    ) -> Result<u64> {
        if slot.as_ref().is_none_or(|s| s.len_bytes() < bytes) {
            *slot = None;
            *slot = Some(pool.alloc(bytes)?);
        }
        Ok(slot.as_ref().map(|s| s.ptr()).unwrap_or(0))
    }
}

/// A CUDA device: context, stream, memory pool and loaded kernels.
pub struct CudaBackend {
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    pool: Arc<Pool>,
    kernels: KernelTable,
    blas: Mutex<Option<cudarc::cublas::CudaBlas>>,
    scratch: Mutex<Scratch>,
    name: String,
    cc: (i32, i32),
    sm_count: u32,
    sync_each: bool,
    /// Decode GEMV variant: activation quantized inside the GEMV (true) or by a separate launch.
    fused_gemv: std::sync::atomic::AtomicBool,
    /// The activation rows (device address, rows, columns) whose 8-bit quantization is in the q8
    /// scratch: consecutive GEMVs over one input (Q, K and V; gate and up) quantize it once.
    /// Every op other than `matmul` clears it, since any of them may write that input or
    /// allocate over its freed block.
    q8_cache: Mutex<Option<(u64, usize, usize)>>,
    /// Prefill GEMM in f32 (SGEMM on an f32 dequantization) instead of f16 on the tensor cores:
    /// [`Backend::set_exact_prefill`], or `POCKET_PREFILL=exact` at open.
    exact_prefill: std::sync::atomic::AtomicBool,
}

impl CudaBackend {
    /// Opens GPU `ordinal`: fails with [`KernelError::Unavailable`] where there is no driver, no
    /// such GPU, or a GPU older than Turing.
    pub fn new(ordinal: usize) -> Result<CudaBackend> {
        // cudarc panics when a symbol is missing from an old driver; turn that into an error too.
        match std::panic::catch_unwind(|| Self::open(ordinal)) {
            Ok(r) => r,
            Err(_) => Err(KernelError::Unavailable(format!(
                "cuda:{ordinal}: the CUDA driver library is unusable (too old?)"
            ))),
        }
    }

    fn open(ordinal: usize) -> Result<CudaBackend> {
        if !unsafe { cudarc::driver::sys::is_culib_present() } {
            return Err(KernelError::Unavailable(
                "no CUDA driver library (libcuda.so) on this machine".into(),
            ));
        }
        let unavailable = |e: cudarc::driver::DriverError| {
            KernelError::Unavailable(format!("cuda:{ordinal}: {e}"))
        };
        let count = CudaContext::device_count().map_err(unavailable)?;
        if ordinal >= count.max(0) as usize {
            return Err(KernelError::Unavailable(format!(
                "cuda:{ordinal}: only {count} CUDA device(s) present"
            )));
        }
        let ctx = CudaContext::new(ordinal).map_err(unavailable)?;
        let cc = ctx.compute_capability().map_err(unavailable)?;
        let sm_count = ctx
            .attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
            .map_err(unavailable)? as u32;
        let gpu = ctx.name().map_err(unavailable)?;
        let stream = ctx.new_stream().map_err(unavailable)?;
        let kernels = KernelTable::load(&ctx, cc)?;
        let pool = Pool::new(ctx.clone());
        Ok(CudaBackend {
            name: format!("cuda:{ordinal} {gpu} (sm_{}{})", cc.0, cc.1),
            ctx,
            stream,
            pool,
            kernels,
            blas: Mutex::new(None),
            scratch: Mutex::new(Scratch::default()),
            cc,
            sm_count,
            sync_each: std::env::var("POCKET_CUDA_SYNC").is_ok_and(|v| v == "1"),
            // The fused variant measured slower on the H200 (docs/performance/cuda-kernels.md,
            // run 5): off unless asked for.
            q8_cache: Mutex::new(None),
            fused_gemv: std::sync::atomic::AtomicBool::new(
                std::env::var("POCKET_GEMV").is_ok_and(|v| v == "fused"),
            ),
            exact_prefill: std::sync::atomic::AtomicBool::new(
                std::env::var("POCKET_PREFILL").is_ok_and(|v| v == "exact"),
            ),
        })
    }

    /// Compute capability (major, minor).
    pub fn compute_capability(&self) -> (i32, i32) {
        self.cc
    }

    /// Multiprocessor count.
    pub fn sm_count(&self) -> u32 {
        self.sm_count
    }

    /// Which embedded artifact the kernels were loaded from.
    pub fn artifact(&self) -> Artifact {
        self.kernels.artifact
    }

    /// Chooses the one-row decode GEMV: activation quantized inside each GEMV block (`true`;
    /// `POCKET_GEMV=fused`) or by a separate quantize launch (`false`, the default: faster on the
    /// H200).
    pub fn set_fused_gemv(&self, fused: bool) {
        self.fused_gemv
            .store(fused, std::sync::atomic::Ordering::Relaxed);
    }

    /// Forgets the cached activation quantization (see `q8_cache`).
    pub(crate) fn invalidate_q8(&self) {
        if let Ok(mut c) = self.q8_cache.lock() {
            *c = None;
        }
    }

    pub(crate) fn fused_gemv(&self) -> bool {
        self.fused_gemv.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Bytes held by the allocator's cache of freed blocks.
    pub fn cached_bytes(&self) -> usize {
        self.pool.cached_bytes()
    }

    /// The stream all work of this device runs on.
    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }

    /// The device address of a CUDA tensor after checking that it lives on this device and that
    /// its shape fits its storage.
    pub(crate) fn ptr(&self, op: &'static str, name: &'static str, t: &Tensor) -> Result<u64> {
        match &t.storage {
            Storage::Cuda(c) if c.ordinal() == self.ctx.ordinal() => {
                if t.numel() * t.dtype.size() > c.len_bytes() {
                    return Err(shape_err(
                        op,
                        format!("`{name}` shape {:?} exceeds its storage", t.shape),
                    ));
                }
                Ok(c.ptr())
            }
            _ => Err(KernelError::WrongDevice {
                op,
                tensor: name,
                found: t.location(),
                expected: format!("cuda:{}", self.ctx.ordinal()),
            }),
        }
    }

    /// [`Self::ptr`] plus a dtype check.
    pub(crate) fn ptr_of(
        &self,
        op: &'static str,
        name: &'static str,
        t: &Tensor,
        dtype: DType,
    ) -> Result<u64> {
        if t.dtype != dtype {
            return Err(shape_err(
                op,
                format!("`{name}` must be {dtype:?}, is {:?}", t.dtype),
            ));
        }
        self.ptr(op, name, t)
    }

    /// The host copy of a u32 tensor's elements: the shadow the host wrote, else read back.
    pub(crate) fn host_u32(
        &self,
        op: &'static str,
        name: &'static str,
        t: &Tensor,
    ) -> Result<Vec<u32>> {
        self.ptr_of(op, name, t, DType::U32)?;
        let n = t.numel();
        if let Storage::Cuda(c) = &t.storage {
            if let Some(s) = &c.shadow {
                if s.len() >= n {
                    return Ok(s[..n].to_vec());
                }
            }
        }
        self.read_u32(t)
    }

    /// Launches kernel `k` for `op`; errors name both, plus the grid.
    pub(crate) fn launch(
        &self,
        op: &'static str,
        k: Kernel,
        grid: (u32, u32, u32),
        block: u32,
        params: &mut [*mut c_void],
    ) -> Result<()> {
        self.launch_smem(op, k, grid, block, 0, params)
    }

    /// [`Self::launch`] with `smem` bytes of dynamic shared memory.
    pub(crate) fn launch_smem(
        &self,
        op: &'static str,
        k: Kernel,
        grid: (u32, u32, u32),
        block: u32,
        smem: u32,
        params: &mut [*mut c_void],
    ) -> Result<()> {
        if grid.0 == 0 || grid.1 == 0 || grid.2 == 0 {
            return Ok(()); // nothing to do (empty batch)
        }
        let func: CudaFunction = self.kernels.get(k)?;
        let fail = |e: cudarc::driver::DriverError| KernelError::Cuda {
            op,
            msg: format!(
                "launch of {} grid {grid:?} block {block}: {e}",
                k.symbol().1
            ),
        };
        self.ctx.bind_to_thread().map_err(fail)?;
        unsafe {
            dr::launch_kernel(
                func.cu_function(),
                grid,
                (block, 1, 1),
                smem,
                self.stream.cu_stream(),
                params,
            )
        }
        .map_err(fail)?;
        if self.sync_each {
            self.stream.synchronize().map_err(|e| KernelError::Cuda {
                op,
                msg: format!("{} failed while running: {e}", k.symbol().1),
            })?;
        }
        Ok(())
    }

    fn upload_bytes(&self, op: &'static str, bytes: &[u8]) -> Result<CudaStorage> {
        let s = self.pool.alloc(bytes.len())?;
        if !bytes.is_empty() {
            self.ctx.bind_to_thread().map_err(|e| cuda_err(op, e))?;
            unsafe { dr::memcpy_htod_async(s.ptr(), bytes, self.stream.cu_stream()) }
                .map_err(|e| cuda_err(op, e))?;
        }
        Ok(s)
    }

    fn read_bytes(&self, op: &'static str, ptr: u64, len: usize) -> Result<Vec<u8>> {
        let mut out = vec![0u8; len];
        if len > 0 {
            self.ctx.bind_to_thread().map_err(|e| cuda_err(op, e))?;
            unsafe { dr::memcpy_dtoh_async(&mut out[..], ptr, self.stream.cu_stream()) }
                .map_err(|e| cuda_err(op, e))?;
            self.stream.synchronize().map_err(|e| cuda_err(op, e))?;
        }
        Ok(out)
    }

    fn write_host(
        &self,
        op: &'static str,
        dst: &mut Tensor,
        bytes: &[u8],
        dtype: DType,
        shape: &[usize],
    ) -> Result<()> {
        let n: usize = shape.iter().product();
        if n * dtype.size() != bytes.len() {
            return Err(shape_err(
                op,
                format!("{} values for shape {shape:?}", bytes.len() / dtype.size()),
            ));
        }
        if dst.dtype != dtype {
            return Err(shape_err(op, format!("destination is {:?}", dst.dtype)));
        }
        let ptr = self.ptr(op, "dst", dst)?;
        if n > dst.capacity() {
            return Err(shape_err(
                op,
                format!(
                    "shape {shape:?} exceeds the tensor's capacity {}",
                    dst.capacity()
                ),
            ));
        }
        if !bytes.is_empty() {
            self.ctx.bind_to_thread().map_err(|e| cuda_err(op, e))?;
            unsafe { dr::memcpy_htod_async(ptr, bytes, self.stream.cu_stream()) }
                .map_err(|e| cuda_err(op, e))?;
        }
        dst.shape = shape.to_vec();
        Ok(())
    }
}

fn as_bytes<T: Copy>(v: &[T]) -> &[u8] {
    // SAFETY: f32 and u32 have no padding and any byte pattern is a valid u8.
    unsafe { std::slice::from_raw_parts(v.as_ptr() as *const u8, std::mem::size_of_val(v)) }
}

impl Backend for CudaBackend {
    fn name(&self) -> String {
        self.name.clone()
    }

    fn memory_info(&self) -> Option<crate::backend::MemoryInfo> {
        // cuMemGetInfo reports on the context current to this thread.
        self.ctx.bind_to_thread().ok()?;
        let (free, total) = dr::mem_get_info().ok()?;
        Some(crate::backend::MemoryInfo {
            used_bytes: total.saturating_sub(free) as u64,
            total_bytes: total as u64,
            process_bytes: Some(self.pool.held_bytes() as u64),
            process_peak_bytes: Some(self.pool.peak_held_bytes() as u64),
        })
    }

    fn alloc(&self, dtype: DType, shape: &[usize]) -> Result<Tensor> {
        self.invalidate_q8();
        let n = shape
            .iter()
            .try_fold(1usize, |a, &d| a.checked_mul(d))
            .and_then(|n| n.checked_mul(dtype.size()))
            .ok_or_else(|| shape_err("alloc", format!("shape {shape:?} overflows")))?;
        Ok(Tensor {
            dtype,
            shape: shape.to_vec(),
            storage: Storage::Cuda(self.pool.alloc(n)?),
        })
    }

    fn upload_f32(&self, data: &[f32], shape: &[usize]) -> Result<Tensor> {
        self.invalidate_q8();
        if data.len() != shape.iter().product::<usize>() {
            return Err(shape_err(
                "upload_f32",
                format!("{} values for {shape:?}", data.len()),
            ));
        }
        Ok(Tensor {
            dtype: DType::F32,
            shape: shape.to_vec(),
            storage: Storage::Cuda(self.upload_bytes("upload_f32", as_bytes(data))?),
        })
    }

    fn upload_u32(&self, data: &[u32], shape: &[usize]) -> Result<Tensor> {
        self.invalidate_q8();
        if data.len() != shape.iter().product::<usize>() {
            return Err(shape_err(
                "upload_u32",
                format!("{} values for {shape:?}", data.len()),
            ));
        }
        let mut s = self.upload_bytes("upload_u32", as_bytes(data))?;
        s.shadow = Some(data.to_vec());
        Ok(Tensor {
            dtype: DType::U32,
            shape: shape.to_vec(),
            storage: Storage::Cuda(s),
        })
    }

    fn write_u32(&self, dst: &mut Tensor, data: &[u32], shape: &[usize]) -> Result<()> {
        self.invalidate_q8();
        self.write_host("write_u32", dst, as_bytes(data), DType::U32, shape)?;
        if let Storage::Cuda(c) = &mut dst.storage {
            c.shadow = Some(data.to_vec());
        }
        Ok(())
    }

    fn write_f32(&self, dst: &mut Tensor, data: &[f32], shape: &[usize]) -> Result<()> {
        self.invalidate_q8();
        self.write_host("write_f32", dst, as_bytes(data), DType::F32, shape)
    }

    fn read_f32(&self, src: &Tensor) -> Result<Vec<f32>> {
        const OP: &str = "read_f32";
        let ptr = self.ptr(OP, "src", src)?;
        let n = src.numel();
        let b = self.read_bytes(OP, ptr, n * src.dtype.size())?;
        Ok(match src.dtype {
            DType::F32 => b
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect(),
            DType::F16 => b
                .chunks_exact(2)
                .map(|c| half::f16::from_le_bytes([c[0], c[1]]).to_f32())
                .collect(),
            DType::BF16 => b
                .chunks_exact(2)
                .map(|c| half::bf16::from_le_bytes([c[0], c[1]]).to_f32())
                .collect(),
            DType::U32 => return Err(shape_err(OP, "tensor is u32")),
        })
    }

    fn read_u32(&self, src: &Tensor) -> Result<Vec<u32>> {
        const OP: &str = "read_u32";
        let ptr = self.ptr_of(OP, "src", src, DType::U32)?;
        let b = self.read_bytes(OP, ptr, src.numel() * 4)?;
        Ok(b.chunks_exact(4)
            .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect())
    }

    fn upload_weight(
        &self,
        format: QuantFormat,
        rows: usize,
        cols: usize,
        data: HostBytes,
        scales: Option<HostBytes>,
        tensor_scale: Option<f32>,
    ) -> Result<Weight> {
        self.invalidate_q8();
        const OP: &str = "upload_weight";
        let row_bytes = format.row_bytes(cols)?;
        let want = row_bytes
            .checked_mul(rows)
            .ok_or_else(|| shape_err(OP, format!("[{rows}, {cols}] overflows")))?;
        let bytes = data.as_slice();
        if bytes.len() != want {
            return Err(shape_err(
                OP,
                format!(
                    "{format} [{rows}, {cols}] needs {want} bytes, got {}",
                    bytes.len()
                ),
            ));
        }
        if let Some(kind) = matmul_fp8::Fp8Kind::of(format) {
            let s = scales.as_ref().map(|s| s.as_slice());
            return matmul_fp8::upload(self, format, kind, rows, cols, bytes, s, tensor_scale);
        }
        if scales.is_some() || format.scale_bytes(rows, cols) != 0 {
            return Err(KernelError::Unsupported {
                op: OP,
                device: self.name.clone(),
                what: format!("{format} (companion scales)"),
            });
        }
        let dev = DevFormat::of(format).ok_or_else(|| KernelError::Unsupported {
            op: OP,
            device: self.name.clone(),
            what: format.to_string(),
        })?;
        if !cols.is_multiple_of(dev.block_elems()) {
            return Err(KernelError::Unsupported {
                op: OP,
                device: self.name.clone(),
                what: format!(
                    "{format} rows of {cols} (the GPU reads rows in chunks of {})",
                    dev.block_elems()
                ),
            });
        }
        let (storage, layout) = if let Some((qr, ar)) = dev.split_scales() {
            let (bb, qb, ab) = (format.block_bytes(), qr.len(), ar.len());
            let nblocks = bytes.len() / bb;
            let mut packed = vec![0u8; bytes.len()];
            let (q, d) = packed.split_at_mut(nblocks * qb);
            for (i, blk) in bytes.chunks_exact(bb).enumerate() {
                d[ab * i..ab * (i + 1)].copy_from_slice(&blk[ar.clone()]);
                q[qb * i..qb * (i + 1)].copy_from_slice(&blk[qr.clone()]);
            }
            (self.upload_bytes(OP, &packed)?, WeightLayout::SplitScales)
        } else {
            (self.upload_bytes(OP, bytes)?, WeightLayout::Ggml)
        };
        // The host bytes may be a temporary: finish the copy before returning.
        self.stream.synchronize().map_err(|e| cuda_err(OP, e))?;
        Ok(Weight {
            format,
            rows,
            cols,
            tensor_scale,
            storage: WeightStorage::Cuda(CudaWeight { storage, layout }),
        })
    }

    fn synchronize(&self) -> Result<()> {
        self.ctx
            .bind_to_thread()
            .map_err(|e| cuda_err("synchronize", e))?;
        self.stream
            .synchronize()
            .map_err(|e| cuda_err("synchronize", e))
    }

    fn embedding(&self, table: &Weight, ids: &Tensor, out: &mut Tensor) -> Result<()> {
        self.invalidate_q8();
        matmul::embedding(self, table, ids, out)
    }

    fn matmul(&self, x: &Tensor, w: &Weight, out: &mut Tensor) -> Result<()> {
        matmul::matmul(self, x, w, out)
    }

    fn add_bias(&self, x: &mut Tensor, bias: &Tensor) -> Result<()> {
        self.invalidate_q8();
        ops::add_bias(self, x, bias)
    }

    fn rms_norm(&self, x: &Tensor, weight: &Tensor, eps: f32, out: &mut Tensor) -> Result<()> {
        self.invalidate_q8();
        ops::rms_norm(self, x, weight, eps, out)
    }

    fn add_rms_norm(
        &self,
        residual: &mut Tensor,
        delta: &Tensor,
        weight: &Tensor,
        eps: f32,
        out: &mut Tensor,
    ) -> Result<()> {
        self.invalidate_q8();
        ops::add_rms_norm(self, residual, delta, weight, eps, out)
    }

    fn add_assign(&self, x: &mut Tensor, y: &Tensor) -> Result<()> {
        self.invalidate_q8();
        ops::add_assign(self, x, y)
    }

    fn rope(&self, x: &mut Tensor, positions: &Tensor, rope: &DeviceRope) -> Result<()> {
        self.invalidate_q8();
        ops::rope(self, x, positions, rope)
    }

    fn silu_mul(&self, gate: &Tensor, up: &Tensor, out: &mut Tensor) -> Result<()> {
        self.invalidate_q8();
        ops::silu_mul(self, gate, up, out)
    }

    fn kv_write(
        &self,
        k: &Tensor,
        v: &Tensor,
        k_cache: &mut Tensor,
        v_cache: &mut Tensor,
        meta: &AttentionMeta,
    ) -> Result<()> {
        self.invalidate_q8();
        attn::kv_write(self, k, v, k_cache, v_cache, meta)
    }

    fn attention(
        &self,
        q: &Tensor,
        k_cache: &Tensor,
        v_cache: &Tensor,
        meta: &AttentionMeta,
        params: &AttentionParams,
        out: &mut Tensor,
    ) -> Result<()> {
        self.invalidate_q8();
        attn::attention(self, q, k_cache, v_cache, meta, params, out)
    }

    fn argmax(&self, logits: &Tensor, out: &mut Tensor) -> Result<()> {
        self.invalidate_q8();
        ops::argmax(self, logits, out)
    }

    fn gather_rows(&self, src: &Tensor, src_rows: &Tensor, out: &mut Tensor) -> Result<()> {
        self.invalidate_q8();
        ops::gather_rows(self, src, src_rows, out)
    }

    fn supports_graphs(&self) -> bool {
        true
    }

    fn set_exact_prefill(&self, exact: bool) {
        self.exact_prefill
            .store(exact, std::sync::atomic::Ordering::Relaxed);
    }

    fn exact_prefill(&self) -> bool {
        self.exact_prefill
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    fn begin_graph_capture(&self) -> Result<()> {
        CudaBackend::begin_capture(self)
    }

    fn end_graph_capture(&self) -> Result<Box<dyn crate::device::GraphExec>> {
        Ok(Box::new(CudaBackend::end_capture(self)?))
    }

    fn argmax_logprob(
        &self,
        logits: &Tensor,
        ids: &mut Tensor,
        logprobs: &mut Tensor,
    ) -> Result<()> {
        self.invalidate_q8();
        sample::sample_rows(self, logits, None, ids, logprobs)
    }

    fn sample_rows(
        &self,
        logits: &Tensor,
        params: &Tensor,
        seeds: &Tensor,
        ids: &mut Tensor,
        logprobs: &mut Tensor,
    ) -> Result<()> {
        self.invalidate_q8();
        sample::sample_rows(self, logits, Some((params, seeds)), ids, logprobs)
    }

    fn causal_conv1d_silu(
        &self,
        x: &Tensor,
        weight: &Tensor,
        conv_state: &mut Tensor,
        meta: &crate::RecurrentMeta,
        out: &mut Tensor,
    ) -> Result<()> {
        self.invalidate_q8();
        recurrent::causal_conv1d_silu(self, x, weight, conv_state, meta, out)
    }

    fn delta_gates(
        &self,
        alpha: &Tensor,
        b: &Tensor,
        a_neg: &Tensor,
        dt_bias: &Tensor,
        g: &mut Tensor,
        beta: &mut Tensor,
    ) -> Result<()> {
        self.invalidate_q8();
        recurrent::delta_gates(self, alpha, b, a_neg, dt_bias, g, beta)
    }

    fn gated_delta_rule_chunked(
        &self,
        qkv: &Tensor,
        g: &Tensor,
        beta: &Tensor,
        state: &mut Tensor,
        meta: &crate::RecurrentMeta,
        params: &crate::DeltaRuleParams,
        out: &mut Tensor,
    ) -> Result<()> {
        self.invalidate_q8();
        let op = "gated_delta_rule_chunked";
        recurrent::gated_delta_rule(self, op, qkv, g, beta, state, meta, params, out)
    }

    fn gated_delta_rule_recurrent(
        &self,
        qkv: &Tensor,
        g: &Tensor,
        beta: &Tensor,
        state: &mut Tensor,
        meta: &crate::RecurrentMeta,
        params: &crate::DeltaRuleParams,
        out: &mut Tensor,
    ) -> Result<()> {
        self.invalidate_q8();
        let op = "gated_delta_rule_recurrent";
        recurrent::gated_delta_rule(self, op, qkv, g, beta, state, meta, params, out)
    }

    fn gated_rms_norm(
        &self,
        x: &Tensor,
        gate: &Tensor,
        weight: &Tensor,
        eps: f32,
        out: &mut Tensor,
    ) -> Result<()> {
        self.invalidate_q8();
        recurrent::gated_rms_norm(self, x, gate, weight, eps, out)
    }

    fn split_halves(&self, x: &Tensor, first: &mut Tensor, second: &mut Tensor) -> Result<()> {
        self.invalidate_q8();
        recurrent::split_halves(self, x, first, second)
    }

    fn sigmoid_mul(&self, x: &mut Tensor, gate: &Tensor) -> Result<()> {
        self.invalidate_q8();
        recurrent::sigmoid_mul(self, x, gate)
    }

    fn split_columns(&self, x: &Tensor, outs: &mut [&mut Tensor]) -> Result<()> {
        self.invalidate_q8();
        split::split_columns(self, x, outs)
    }

    fn silu_mul_halves(&self, x: &Tensor, out: &mut Tensor) -> Result<()> {
        self.invalidate_q8();
        split::silu_mul_halves(self, x, out)
    }
}
