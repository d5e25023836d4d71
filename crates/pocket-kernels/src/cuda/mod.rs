//! The CUDA backend: kernels compiled ahead of time from `kernels/*.cu` (embedded PTX and cubin),
//! launched through cudarc with the driver loaded at run time, so one binary runs with or without
//! CUDA and reports a missing driver as [`KernelError::Unavailable`].
//!
//! One stream per device orders all work; device memory comes from a caching pool
//! ([`memory`]); every launch names its op and kernel in errors. Set `POCKET_CUDA_SYNC=1` to
//! synchronize after each launch, which pins an asynchronous fault on the launch that caused it.
//!
//! Programmatic dependent launch (PDL): on a GPU that runs the sm_90 cubin, kernels marked
//! PDL-aware in [`kernels::PDL_AWARE`] are launched with programmatic stream serialization, so
//! each may start (and prefetch its weights) while the previous kernel drains; the kernel's
//! `pdl_wait()` orders it after its predecessor. `POCKET_PDL=0` turns it off
//! ([`CudaBackend::set_pdl`] at run time).

/// Packs kernel arguments as the driver wants them: an array of pointers to each value. The
/// values are temporaries that live until the end of the enclosing statement (the launch).
macro_rules! args {
    ($($a:expr),* $(,)?) => {
        &mut [$( &mut { $a } as *mut _ as *mut std::ffi::c_void ),*]
    };
}

pub mod artifacts;
mod attn;
mod attn_plan;
pub mod attn_prefill;
mod backend_impl;
mod cublas;
mod gate_up_fp8;
mod gemv_fp8;
mod gemv_q8;
pub mod graph;
pub mod kernels;
mod matmul;
mod matmul_fp8;
pub mod memory;
mod ops;
mod persist_probe;
pub use persist_probe::RingProbe;
mod qkv_rope;
mod recurrent;
mod repack;
mod rms_fold;
mod sample;
mod split;
mod step_trace;
mod switch;
mod transfer;

use std::ffi::c_void;
use std::sync::{Arc, Mutex};

use cudarc::driver::{result as dr, sys, CudaContext, CudaFunction, CudaStream};

pub use gemv_fp8::Fp8Row1;
pub use kernels::{Artifact, DevFormat, Kernel};
pub use memory::{CudaStorage, CudaWeight, WeightLayout};

use crate::error::shape_err;
use crate::tensor::Storage;
use crate::{Backend, DType, KernelError, Result, Tensor};
use kernels::KernelTable;
use memory::Pool;

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
    /// The fused DeltaNet decode's per-(key head, sequence) arrival counters (zeroed once; every
    /// launch leaves them zero; cuda/recurrent/decode.rs).
    pub deltanet_counters: Option<CudaStorage>,
    /// The folded norm's x * g row and per-block sums of squares (cuda/rms_fold.rs).
    pub rms_fold: Option<CudaStorage>,
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
    /// Whether PDL-aware kernels are launched with programmatic stream serialization; only ever
    /// true where `pdl_supported`.
    pdl: std::sync::atomic::AtomicBool,
    /// PDL can be used: the sm_90 cubin is loaded. The compute_75 PTX other GPUs JIT-compile has
    /// no `griddepcontrol.wait` (pdl_wait() compiles to nothing below sm_90), so launching it
    /// with the attribute would let a kernel read its predecessor's output early.
    pdl_supported: bool,
    /// A folded norm whose output is not written yet (`rms_fold`).
    rms_fold: Mutex<Option<rms_fold::PendingFold>>,
    /// The step trace's stamp buffer and capture names (`POCKET_STEP_TRACE=1`).
    trace: Option<Arc<step_trace::StepTrace>>,
    /// The decode attention kernels may stage keys (`attn_plan::opt_in_stage_smem`).
    attn_stage_smem: bool,
}

/// Which GEMVs trigger their dependent launch early (kernels/common.cuh `pdl_early`). Early
/// lets the next kernel's blocks take SM slots as this one's tail frees them and issue their
/// weight loads there. Measured on the H200: the Llama-8B Q4_0 step graph 2.148 -> 2.121 ms with
/// the dp4a GEMVs early (2.151 with only their one-wave launches early); the Qwen3.5-27B FP8
/// decode 121.0 -> 122.7 tok/s with the one-wave FP8 launches early as well (122.3 with every
/// FP8 GEMV early; session 7, docs/performance/logs/2026-11-30-s7-run1/). With n1w8s2 in n1d6's
/// place (session 14) every FP8 GEMV early won instead: 125.79 / 126.60 against 125.05 / 125.11
/// tok/s (docs/performance/logs/2026-12-02-s14-call4/), so [`PdlEarly::All`] is the default.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PdlEarly {
    /// Every GEMV triggers after its main loop (`POCKET_PDL_EARLY=0`).
    None,
    /// The dp4a GEMVs (kernels/gemv.cu) early, the FP8 ones late (`POCKET_PDL_EARLY=dp4a`).
    Dp4a,
    /// Every GEMV early (the default).
    All,
    /// The dp4a GEMVs early, the FP8 ones early only where their grid fits in one wave
    /// (`POCKET_PDL_EARLY=fp8wave`; the default until session 14): a one-wave grid has every
    /// block resident, so the next kernel's blocks only take slots it leaves free.
    Fp8Wave,
    /// Every GEMV early only where its grid fits in one wave (`POCKET_PDL_EARLY=wave`).
    Wave,
}

/// `POCKET_PDL_EARLY`: `0` none, `dp4a` the dp4a GEMVs, `fp8wave` the dp4a GEMVs and the
/// one-wave FP8 launches, `wave` every one-wave launch, else every GEMV (read once, at the first
/// device open).
static PDL_EARLY: switch::EnvChoice<PdlEarly> = switch::EnvChoice::new(
    "POCKET_PDL_EARLY",
    &[
        PdlEarly::None,
        PdlEarly::Dp4a,
        PdlEarly::All,
        PdlEarly::Fp8Wave,
        PdlEarly::Wave,
    ],
    |v| match v {
        Some("0") => PdlEarly::None,
        Some("dp4a") => PdlEarly::Dp4a,
        Some("fp8wave") => PdlEarly::Fp8Wave,
        Some("wave") => PdlEarly::Wave,
        _ => PdlEarly::All,
    },
);

impl PdlEarly {
    /// Module `m`'s `pdl_early` mask (common.cuh): bit 0 every GEMV early, bit 1 one-wave
    /// launches only.
    fn mask(self, m: artifacts::ModuleId) -> i32 {
        let dp4a = (m == artifacts::ModuleId::Gemv) as i32;
        match self {
            PdlEarly::None => 0,
            PdlEarly::Dp4a => dp4a,
            PdlEarly::All => 1,
            PdlEarly::Fp8Wave => dp4a | (2 * (m == artifacts::ModuleId::GemvFp8) as i32),
            PdlEarly::Wave => 2,
        }
    }
}

/// `POCKET_PDL=0`: a backend opens with programmatic dependent launch off (else on where
/// supported; [`CudaBackend::set_pdl`] changes it later).
static PDL_ENV: switch::EnvSwitch = switch::EnvSwitch::on_unless_zero("POCKET_PDL");
/// `POCKET_GEMV=fused`: a backend opens with the fused quantize-and-GEMV variant on (measured
/// slower on the H200, docs/performance/cuda-kernels.md, run 5: off unless asked for).
static GEMV_FUSED_ENV: switch::EnvChoice<bool> =
    switch::EnvChoice::flag("POCKET_GEMV", |v| v == Some("fused"));
/// `POCKET_PREFILL=exact`: a backend opens with the exact (f32) prefill GEMMs
/// ([`crate::Backend::set_exact_prefill`]).
static PREFILL_EXACT_ENV: switch::EnvChoice<bool> =
    switch::EnvChoice::flag("POCKET_PREFILL", |v| v == Some("exact"));

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
        static SYNC_EACH: switch::EnvSwitch = switch::EnvSwitch::off_unless_one("POCKET_CUDA_SYNC");
        let pdl_supported = kernels.artifact == Artifact::Sm90Cubin && cc.0 >= 9;
        kernels.set_constant(&stream, "pdl_sms", |_| sm_count as i32)?;
        let lanes = matmul_fp8::TILE_LANES.on() as i32;
        kernels.set_constant(&stream, "fp8_lanes", |_| lanes)?;
        let early_state = recurrent::EARLY_STATE.on() as i32;
        kernels.set_constant(&stream, "fd_early_state", |_| early_state)?;
        let trace = if pdl_supported && step_trace::STEP_TRACE.on() {
            let t = step_trace::StepTrace::new(ctx.clone(), stream.clone(), &pool)?;
            kernels.set_constant(&stream, "pdl_trace", |_| t.ptr())?;
            Some(t)
        } else {
            None
        };
        let attn_stage_smem = attn_plan::opt_in_stage_smem(&kernels);
        let be = CudaBackend {
            name: format!("cuda:{ordinal} {gpu} (sm_{}{})", cc.0, cc.1),
            ctx,
            stream,
            pool,
            kernels,
            blas: Mutex::new(None),
            scratch: Mutex::new(Scratch::default()),
            cc,
            sm_count,
            sync_each: SYNC_EACH.on(),
            q8_cache: Mutex::new(None),
            fused_gemv: std::sync::atomic::AtomicBool::new(GEMV_FUSED_ENV.get()),
            exact_prefill: std::sync::atomic::AtomicBool::new(PREFILL_EXACT_ENV.get()),
            pdl: std::sync::atomic::AtomicBool::new(pdl_supported && PDL_ENV.on()),
            pdl_supported,
            rms_fold: Mutex::new(None),
            trace,
            attn_stage_smem,
        };
        be.set_pdl_early(PDL_EARLY.get())?;
        Ok(be)
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

    /// Whether this device can launch with programmatic dependent launch (it runs the sm_90
    /// cubin, whose PDL-aware kernels wait on their predecessor).
    pub fn pdl_supported(&self) -> bool {
        self.pdl_supported
    }

    /// Whether PDL-aware kernels are launched with programmatic stream serialization now.
    pub fn pdl(&self) -> bool {
        self.pdl.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Turns programmatic dependent launch on or off for later launches (on only where
    /// [`Self::pdl_supported`]); returns whether it is on. A graph keeps the launches it
    /// captured.
    pub fn set_pdl(&self, on: bool) -> bool {
        let on = on && self.pdl_supported;
        self.pdl.store(on, std::sync::atomic::Ordering::Relaxed);
        on
    }

    /// Which decode GEMVs trigger their dependent launch right after their own wait instead of
    /// after their main loop (kernels/common.cuh `pdl_early`); the environment's choice is
    /// `POCKET_PDL_EARLY`. Affects launches and graph replays that run after it.
    pub fn set_pdl_early(&self, early: PdlEarly) -> Result<()> {
        self.kernels
            .set_constant(&self.stream, "pdl_early", |m| early.mask(m))
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

    /// Device address of the counters in `slot` with at least `bytes`, zeroed when (re)allocated:
    /// the kernels that count in them leave them zero (cuda/recurrent/decode.rs).
    pub(crate) fn zeroed_scratch(
        &self,
        op: &'static str,
        slot: &mut Option<CudaStorage>,
        bytes: usize,
    ) -> Result<u64> {
        if slot.as_ref().is_none_or(|c| c.len_bytes() < bytes) {
            *slot = None;
            let c = self.pool.alloc(bytes)?;
            self.zero_async(op, c.ptr(), bytes)?;
            *slot = Some(c);
        }
        Ok(slot.as_ref().map_or(0, |c| c.ptr()))
    }

    /// Zeroes `bytes` of device memory at `ptr` on the stream (inside a capture: a memset node).
    pub(crate) fn zero_async(&self, op: &'static str, ptr: u64, bytes: usize) -> Result<()> {
        self.ctx
            .bind_to_thread()
            .map_err(|e| memory::cuda_err(op, e))?;
        // SAFETY: the caller owns `bytes` bytes of live device memory at `ptr`.
        unsafe { dr::memset_d8_async(ptr, 0, bytes, self.stream.cu_stream()) }
            .map_err(|e| memory::cuda_err(op, e))
    }

    /// Raises kernel `k`'s dynamic shared memory limit to `bytes`; false where the GPU has less
    /// per block (the caller then takes a path that needs less).
    pub(crate) fn allow_dynamic_smem(&self, k: Kernel, bytes: usize) -> Result<bool> {
        let attr = sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES;
        let bytes = i32::try_from(bytes).unwrap_or(i32::MAX);
        Ok(self.kernels.get(k)?.set_attribute(attr, bytes).is_ok())
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
        // A pending folded norm's output first: this kernel may read it.
        rms_fold::flush(self)?;
        let (func, pdl_aware): (CudaFunction, bool) = self.kernels.get_launch(k)?;
        if let (true, Some(t)) = (pdl_aware, &self.trace) {
            t.note_launch(k.symbol().1, grid);
        }
        let fail = |e: cudarc::driver::DriverError| KernelError::Cuda {
            op,
            msg: format!(
                "launch of {} grid {grid:?} block {block}: {e}",
                k.symbol().1
            ),
        };
        self.ctx.bind_to_thread().map_err(fail)?;
        if pdl_aware && self.pdl() {
            // SAFETY: the attribute union is plain data (zero is a valid value of every member);
            // the config points at `attr`, which outlives the call; `params` is the kernel's
            // argument array as for cuLaunchKernel.
            let mut attr = sys::CUlaunchAttribute {
                id: sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION,
                pad: [0; 4],
                value: unsafe { std::mem::zeroed() },
            };
            attr.value.programmaticStreamSerializationAllowed = 1;
            let config = sys::CUlaunchConfig {
                gridDimX: grid.0,
                gridDimY: grid.1,
                gridDimZ: grid.2,
                blockDimX: block,
                blockDimY: 1,
                blockDimZ: 1,
                sharedMemBytes: smem,
                hStream: self.stream.cu_stream(),
                attrs: &mut attr,
                numAttrs: 1,
            };
            unsafe {
                sys::cuLaunchKernelEx(
                    &config,
                    func.cu_function(),
                    params.as_mut_ptr(),
                    std::ptr::null_mut(),
                )
            }
            .result()
            .map_err(fail)?;
        } else {
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
        }
        if self.sync_each {
            self.stream.synchronize().map_err(|e| KernelError::Cuda {
                op,
                msg: format!("{} failed while running: {e}", k.symbol().1),
            })?;
        }
        Ok(())
    }
}
