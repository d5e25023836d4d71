//! FP8 weights (E4M3/E5M2, per-tensor scale or 128x128 tile scales) on CUDA: upload, decode GEMV
//! and prefill GEMM, behind the same [`crate::Backend::matmul`] entry as every other format.
//!
//! Device layout ([`WeightLayout::ScalesAfter`]): the row-major codes as the checkpoint holds
//! them (one byte per weight), then, at a 256-byte aligned offset, the f32 tile scales
//! `[ceil(rows/128), ceil(cols/128)]`. A per-tensor scale stays on the host in
//! [`crate::Weight::tensor_scale`] and is applied to the result.
//!
//! Decode (n <= 8 rows) runs `gemv_fp8_*` (kernels/gemv_fp8.cu): 16-byte weight loads, f32
//! activations and accumulation, so it reads 1 byte per weight and is exact up to f32 rounding.
//!
//! Prefill dequantizes row chunks of W to f16 (tile scale folded in) and multiplies on the tensor
//! cores through cuBLAS, like the GGML formats' prefill in `matmul.rs`. This is the measured first
//! step the task allowed: cuBLAS picks the best f16 kernel for every GPU from Turing on (no
//! `mma.sync` of ours to guard by arch, the compute_75 PTX stays loadable), and the extra traffic
//! of the f16 scratch (write 2 + read 2 bytes per weight per chunk) is small next to the GEMM's
//! arithmetic at prefill batch sizes. The f16 scratch holds code x tile scale, which for real
//! checkpoints is the weight itself (scale = tile amax / largest code), far inside f16's range. A fused FP8-tile GEMM (dequantize into shared memory before
//! `mma.sync`, or Hopper's native FP8 `wgmma`) is the next step if the prefill profile asks.

use cudarc::cublas::{result as blas, sys as bsys, CudaBlas};
use pocket_quant::QuantFormat;

use super::kernels::Kernel;
use super::matmul::GEMV_MAX_ROWS;
use super::memory::{cuda_err, CudaWeight, WeightLayout};
use super::{CudaBackend, Scratch};
use crate::error::shape_err;
use crate::{DType, KernelError, Result, Tensor, Weight, WeightStorage};

/// Weight rows one GEMV block covers (4 warps x 2 rows, kernels/gemv_fp8.cu).
const GEMV_BLOCK_ROWS: usize = 8;
/// Elements of dequantized f16 weight per cuBLAS chunk (64 MiB), as in `matmul.rs`.
const W16_CHUNK_ELEMS: usize = 32 << 20;

/// An FP8 weight format the GPU reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Fp8Kind {
    /// E5M2 codes (else E4M3).
    pub e5m2: bool,
    /// f32 scales per 128x128 tile (else one per tensor).
    pub tiled: bool,
}

impl Fp8Kind {
    /// The FP8 kind of a weight format, `None` for every other format.
    pub fn of(f: QuantFormat) -> Option<Fp8Kind> {
        let (e5m2, tiled) = match f {
            QuantFormat::Fp8E4M3 => (false, false),
            QuantFormat::Fp8E5M2 => (true, false),
            QuantFormat::Fp8E4M3Block128 => (false, true),
            QuantFormat::Fp8E5M2Block128 => (true, true),
            _ => return None,
        };
        Some(Fp8Kind { e5m2, tiled })
    }
}

/// The kernels of `kernels/gemv_fp8.cu`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Fp8Kernel {
    /// Decode GEMV; `n8` serves 1..8 activation rows, else exactly one.
    Gemv(Fp8Kind, bool),
    /// Rows of W to f16 for the prefill GEMM.
    DequantF16(Fp8Kind),
}

impl Fp8Kernel {
    /// The `extern "C"` symbol (a table of literals).
    pub fn symbol(self) -> &'static str {
        use Fp8Kernel as K;
        match self {
            K::Gemv(f, n8) => match (f.e5m2, f.tiled, n8) {
                (false, false, false) => "gemv_fp8_e4m3_t_n1",
                (false, true, false) => "gemv_fp8_e4m3_b_n1",
                (true, false, false) => "gemv_fp8_e5m2_t_n1",
                (true, true, false) => "gemv_fp8_e5m2_b_n1",
                (false, false, true) => "gemv_fp8_e4m3_t_n8",
                (false, true, true) => "gemv_fp8_e4m3_b_n8",
                (true, false, true) => "gemv_fp8_e5m2_t_n8",
                (true, true, true) => "gemv_fp8_e5m2_b_n8",
            },
            K::DequantF16(f) => match (f.e5m2, f.tiled) {
                (false, false) => "dequant_fp8_e4m3_t_f16",
                (false, true) => "dequant_fp8_e4m3_b_f16",
                (true, false) => "dequant_fp8_e5m2_t_f16",
                (true, true) => "dequant_fp8_e5m2_b_f16",
            },
        }
    }
}

/// Uploads an FP8 weight: codes, then the tile scales (checked against the shape).
#[allow(clippy::too_many_arguments)]
pub(crate) fn upload(
    be: &CudaBackend,
    format: QuantFormat,
    kind: Fp8Kind,
    rows: usize,
    cols: usize,
    bytes: &[u8],
    scales: Option<&[u8]>,
    tensor_scale: Option<f32>,
) -> Result<Weight> {
    const OP: &str = "upload_weight";
    if !cols.is_multiple_of(16) {
        // The kernels read 16 codes per load from 16-byte aligned rows.
        return Err(KernelError::Unsupported {
            op: OP,
            device: be.name.clone(),
            what: format!("{format} rows of {cols} (the GPU reads FP8 rows in chunks of 16)"),
        });
    }
    if rows > i32::MAX as usize || cols > i32::MAX as usize {
        return Err(shape_err(OP, "matrix dimensions exceed i32"));
    }
    let want = format.scale_bytes(rows, cols);
    let got = scales.map_or(0, |s| s.len());
    if got != want {
        return Err(shape_err(
            OP,
            format!("{format} [{rows}, {cols}] needs {want} scale bytes, got {got}"),
        ));
    }
    if kind.tiled && tensor_scale.is_some() {
        return Err(shape_err(
            OP,
            format!("{format}: a tensor scale on top of tile scales is not a known layout"),
        ));
    }
    let (storage, layout) = match scales {
        Some(s) if kind.tiled => {
            let at = bytes.len().div_ceil(256) * 256;
            let mut packed = vec![0u8; at + s.len()];
            packed[..bytes.len()].copy_from_slice(bytes);
            packed[at..].copy_from_slice(s);
            (
                be.upload_bytes(OP, &packed)?,
                WeightLayout::ScalesAfter { offset: at },
            )
        }
        _ => (be.upload_bytes(OP, bytes)?, WeightLayout::Ggml),
    };
    // The host bytes may be a temporary: finish the copy before returning.
    be.stream.synchronize().map_err(|e| cuda_err(OP, e))?;
    Ok(Weight {
        format,
        rows,
        cols,
        tensor_scale,
        storage: WeightStorage::Cuda(CudaWeight { storage, layout }),
    })
}

/// `out [n, rows] = x [n, cols] · Wᵀ` for an FP8 weight.
pub(crate) fn matmul(
    be: &CudaBackend,
    kind: Fp8Kind,
    x: &Tensor,
    w: &Weight,
    out: &mut Tensor,
) -> Result<()> {
    const OP: &str = "matmul";
    // This path never reads the 8-bit activation cache, but it writes `out`, which may hold the
    // cached input: forget the cache.
    be.invalidate_q8();
    let cw = match &w.storage {
        WeightStorage::Cuda(c) if c.ordinal() == be.ctx.ordinal() => c,
        other => {
            return Err(KernelError::WrongDevice {
                op: OP,
                tensor: "weight",
                found: match other {
                    WeightStorage::Host { .. } => "cpu".into(),
                    WeightStorage::Cuda(c) => format!("cuda:{}", c.ordinal()),
                },
                expected: format!("cuda:{}", be.ctx.ordinal()),
            })
        }
    };
    let (rows, cols) = (w.rows, w.cols);
    if x.row_len() != cols {
        return Err(shape_err(
            OP,
            format!("x rows of {} vs weight columns {cols}", x.row_len()),
        ));
    }
    let n = x.rows();
    if out.row_len() != rows || out.rows() != n {
        return Err(shape_err(
            OP,
            format!("out {:?} vs [{n}, {rows}]", out.shape),
        ));
    }
    let xp = be.ptr_of(OP, "x", x, DType::F32)?;
    let op = be.ptr_of(OP, "out", out, DType::F32)?;
    if n == 0 {
        return Ok(());
    }
    let wp = cw.storage.ptr();
    let sp = match (kind.tiled, cw.layout) {
        (true, WeightLayout::ScalesAfter { offset }) => wp + offset as u64,
        (false, _) => 0u64,
        (true, l) => {
            return Err(shape_err(
                OP,
                format!("{} weight in layout {l:?} has no tile scales", w.format),
            ))
        }
    };
    let ts = w.tensor_scale.unwrap_or(1.0);
    if n <= GEMV_MAX_ROWS {
        return gemv(be, kind, wp, sp, ts, xp, op, rows, cols, n);
    }
    gemm(be, kind, wp, sp, ts, xp, op, rows, cols, n)
}

/// One GEMV launch for `m <= 8` activation rows.
#[allow(clippy::too_many_arguments)]
pub(crate) fn gemv(
    be: &CudaBackend,
    kind: Fp8Kind,
    w: u64,
    scales: u64,
    tscale: f32,
    x: u64,
    out: u64,
    rows: usize,
    cols: usize,
    m: usize,
) -> Result<()> {
    be.launch(
        "matmul",
        Kernel::Fp8(Fp8Kernel::Gemv(kind, m > 1)),
        (rows.div_ceil(GEMV_BLOCK_ROWS) as u32, 1, 1),
        128,
        args![
            w,
            scales,
            tscale,
            x,
            out,
            rows as i32,
            cols as i32,
            m as i32
        ],
    )
}

/// Prefill: W dequantized to f16 in row chunks, the product through cuBLAS (f16 inputs, f32
/// accumulation and output; the per-tensor scale is the GEMM's alpha).
#[allow(clippy::too_many_arguments)]
fn gemm(
    be: &CudaBackend,
    kind: Fp8Kind,
    w: u64,
    scales: u64,
    tscale: f32,
    x: u64,
    out: u64,
    rows: usize,
    cols: usize,
    n: usize,
) -> Result<()> {
    const OP: &str = "matmul";
    let chunk_rows = (W16_CHUNK_ELEMS / cols).clamp(1, rows);
    let mut scratch = be
        .scratch
        .lock()
        .map_err(|_| shape_err(OP, "scratch lock poisoned"))?;
    let w16 = Scratch::get(&mut scratch.w16, &be.pool, chunk_rows * cols * 2)?;
    let x16 = Scratch::get(&mut scratch.x16, &be.pool, n * cols * 2)?;
    let total = n * cols;
    be.launch(
        OP,
        Kernel::F32ToF16,
        (total.div_ceil(256) as u32, 1, 1),
        256,
        args![x, x16, total as u64],
    )?;
    let mut blas_guard = be
        .blas
        .lock()
        .map_err(|_| shape_err(OP, "cuBLAS lock poisoned"))?;
    if blas_guard.is_none() {
        let h = CudaBlas::new(be.stream.clone()).map_err(|e| KernelError::Cuda {
            op: OP,
            msg: format!("cuBLAS init: {e}"),
        })?;
        *blas_guard = Some(h);
    }
    let handle = *blas_guard
        .as_ref()
        .map(|b| b.handle())
        .ok_or_else(|| shape_err(OP, "no cuBLAS handle"))?;
    let (alpha, beta) = (tscale, 0.0f32);
    for r0 in (0..rows).step_by(chunk_rows) {
        let nr = chunk_rows.min(rows - r0);
        let chunks = nr * cols / 16;
        be.launch(
            OP,
            Kernel::Fp8(Fp8Kernel::DequantF16(kind)),
            (chunks.div_ceil(256) as u32, 1, 1),
            256,
            args![w, scales, w16, cols as i32, r0 as i32, nr as i32],
        )?;
        // Column-major view: C[nr, n] (ld rows) = W16[cols, nr]ᵀ · X16[cols, n].
        unsafe {
            blas::gemm_ex(
                handle,
                bsys::cublasOperation_t::CUBLAS_OP_T,
                bsys::cublasOperation_t::CUBLAS_OP_N,
                nr as i32,
                n as i32,
                cols as i32,
                &alpha as *const f32 as *const _,
                w16 as *const _,
                bsys::cudaDataType::CUDA_R_16F,
                cols as i32,
                x16 as *const _,
                bsys::cudaDataType::CUDA_R_16F,
                cols as i32,
                &beta as *const f32 as *const _,
                (out + (r0 * 4) as u64) as *mut _,
                bsys::cudaDataType::CUDA_R_32F,
                rows as i32,
                bsys::cublasComputeType_t::CUBLAS_COMPUTE_32F,
                bsys::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
            )
        }
        .map_err(|e| KernelError::Cuda {
            op: OP,
            msg: format!("cublasGemmEx [{nr}x{n}x{cols}]: {e}"),
        })?;
    }
    Ok(())
}
