//! FP8 weights (E4M3/E5M2, per-tensor scale or 128x128 tile scales) on CUDA: upload, decode GEMV
//! and prefill GEMM, behind the same [`crate::Backend::matmul`] entry as every other format.
//!
//! Device layout ([`WeightLayout::ScalesAfter`]): the codes (one byte per weight) row by row,
//! each whole 128-column tile of a row in tile-lane order ([`pocket_quant::fp8_tile_lanes`]; the checkpoint's
//! order with `POCKET_FP8_LANES=0`), then, at a 256-byte aligned offset, the f32 tile scales
//! `[ceil(rows/128), ceil(cols/128)]`. A per-tensor scale stays on the host in
//! [`crate::Weight::tensor_scale`] and is applied to the result.
//!
//! Decode (n <= 8 rows) runs the GEMV of `gemv_fp8.rs` (kernels/gemv_fp8.cu).
//!
//! Prefill dequantizes row chunks of W (tile scale folded in) and multiplies through cuBLAS:
//! * fast (default): W and x in f16 on the tensor cores, f32 accumulation, like the GGML formats'
//!   prefill in `matmul.rs`. cuBLAS picks the best f16 kernel for every GPU from Turing on (no
//!   `mma.sync` of ours to guard by arch, the compute_75 PTX stays loadable), and the scratch
//!   traffic (write 2 + read 2 bytes per weight per chunk) is small next to the GEMM's arithmetic
//!   at prefill batch sizes. The f16 scratch holds code x tile scale, which for real checkpoints
//!   is the weight itself (scale = tile amax / largest code), far inside f16's range. The two
//!   f16 roundings (2^-11 relative each) bound the error at 2^-10 of Σ|w·x|: on a real model's
//!   logits that is ~5e-3, above the 1e-3 of the transformers-parity tests.
//! * exact ([`crate::Backend::set_exact_prefill`], `POCKET_PREFILL=exact`): W dequantized to f32
//!   (one rounding of code x scale, as the CPU and transformers dequantize) and an SGEMM with
//!   `CUBLAS_COMPUTE_32F_PEDANTIC`, so no TF32 even where the math mode or
//!   `NVIDIA_TF32_OVERRIDE` would allow it: TF32 keeps 10 mantissa bits per operand, the same
//!   2^-11 relative rounding as f16, so it would not close the gap. What is left is f32
//!   summation order, as on the CPU. ~4x the scratch traffic and no tensor cores: for tests and
//!   reference runs, not serving.
//!
//! Chunks are whole multiples of 128 rows: each cuBLAS call writes its output at a 512-byte
//! aligned column offset with an aligned row count (an odd chunk such as 6553 rows of a
//! 5120-column weight made cuBLAS fall back to slow unaligned kernels: 91 against 365 TFLOP/s).
//! A fused FP8-tile GEMM (dequantize into shared memory before `mma.sync`, or Hopper's native
//! FP8 `wgmma`) is the next step if the prefill profile asks.

use cudarc::cublas::sys as bsys;
use pocket_quant::{fp8_tile_lanes, QuantFormat};

use super::cublas::ChunkedGemm;
use super::gate_up_fp8::Fp8GateUp;
use super::gemv_fp8::{gemv, Fp8Row1, GemvRows};
use super::kernels::Kernel;
use super::matmul::{check_matmul_shapes, GEMV_MAX_ROWS};
use super::memory::{cuda_err, CudaWeight, WeightLayout};
use super::switch::EnvSwitch;
use super::{CudaBackend, Scratch};
use crate::error::shape_err;
use crate::{DType, KernelError, Result, Tensor, Weight, WeightStorage};

/// Bytes of dequantized weight per cuBLAS chunk (64 MiB: 32M f16 or 16M f32 weights), so the
/// FP8 path never holds a wider copy of a whole matrix.
const W_CHUNK_BYTES: usize = 64 << 20;
/// Chunks are whole multiples of this many rows (aligned cuBLAS output offsets and shapes).
const CHUNK_ROW_ALIGN: usize = 128;

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
    /// Decode GEMV for a number of activation rows.
    Gemv(Fp8Kind, GemvRows),
    /// One-row decode GEMV of a variant, with the previous integer E4M3 decode (`true`: the
    /// `_bits` kernels; E5M2 has none and takes the f16 one) or the f16 conversion (`false`).
    Row1(Fp8Kind, Fp8Row1, bool),
    /// One-row GEMV of a stacked `[gate; up]` weight with the SwiGLU epilogue, of a variant.
    SiluRow1(Fp8Kind, Fp8GateUp),
    /// Rows of W to f16 for the fast prefill GEMM.
    DequantF16(Fp8Kind),
    /// Rows of W to f32 for the exact prefill GEMM.
    DequantF32(Fp8Kind),
}

impl Fp8Kernel {
    /// The `extern "C"` symbol (a table of literals).
    pub fn symbol(self) -> &'static str {
        use Fp8Kernel as K;
        match self {
            K::Gemv(f, n) => {
                use GemvRows::{Eight, Four, One};
                match (f.e5m2, f.tiled, n) {
                    (false, false, One) => "gemv_fp8_e4m3_t_n1",
                    (false, true, One) => "gemv_fp8_e4m3_b_n1",
                    (true, false, One) => "gemv_fp8_e5m2_t_n1",
                    (true, true, One) => "gemv_fp8_e5m2_b_n1",
                    (false, false, Four) => "gemv_fp8_e4m3_t_n4",
                    (false, true, Four) => "gemv_fp8_e4m3_b_n4",
                    (true, false, Four) => "gemv_fp8_e5m2_t_n4",
                    (true, true, Four) => "gemv_fp8_e5m2_b_n4",
                    (false, false, Eight) => "gemv_fp8_e4m3_t_n8",
                    (false, true, Eight) => "gemv_fp8_e4m3_b_n8",
                    (true, false, Eight) => "gemv_fp8_e5m2_t_n8",
                    (true, true, Eight) => "gemv_fp8_e5m2_b_n8",
                }
            }
            K::Row1(f, v, bits) => {
                macro_rules! row1 {
                    ($f:literal, $b:literal) => {
                        match v {
                            Fp8Row1::Warp4 => concat!("gemv_fp8_", $f, "_n1", $b),
                            Fp8Row1::Warp8 => concat!("gemv_fp8_", $f, "_n1w8", $b),
                            Fp8Row1::Warp4Deep => concat!("gemv_fp8_", $f, "_n1d", $b),
                            Fp8Row1::Warp8Deep => concat!("gemv_fp8_", $f, "_n1w8d", $b),
                            Fp8Row1::Warp4Deep6 => concat!("gemv_fp8_", $f, "_n1d6", $b),
                            Fp8Row1::Warp8Split2 => concat!("gemv_fp8_", $f, "_n1w8s2", $b),
                        }
                    };
                }
                match (f.e5m2, f.tiled, bits) {
                    (false, false, false) => row1!("e4m3_t", ""),
                    (false, true, false) => row1!("e4m3_b", ""),
                    (false, false, true) => row1!("e4m3_t", "_bits"),
                    (false, true, true) => row1!("e4m3_b", "_bits"),
                    (true, false, _) => row1!("e5m2_t", ""),
                    (true, true, _) => row1!("e5m2_b", ""),
                }
            }
            K::SiluRow1(f, v) => {
                macro_rules! gu {
                    ($f:literal) => {
                        match v {
                            Fp8GateUp::Warp1 => concat!("gemv_fp8_silu_", $f, "_gu1"),
                            Fp8GateUp::Warp2 => concat!("gemv_fp8_silu_", $f, "_gu2"),
                            Fp8GateUp::Warp4 => concat!("gemv_fp8_silu_", $f, "_gu4"),
                        }
                    };
                }
                match (f.e5m2, f.tiled) {
                    (false, false) => gu!("e4m3_t"),
                    (false, true) => gu!("e4m3_b"),
                    (true, false) => gu!("e5m2_t"),
                    (true, true) => gu!("e5m2_b"),
                }
            }
            K::DequantF16(f) => match (f.e5m2, f.tiled) {
                (false, false) => "dequant_fp8_e4m3_t_f16",
                (false, true) => "dequant_fp8_e4m3_b_f16",
                (true, false) => "dequant_fp8_e5m2_t_f16",
                (true, true) => "dequant_fp8_e5m2_b_f16",
            },
            K::DequantF32(f) => match (f.e5m2, f.tiled) {
                (false, false) => "dequant_fp8_e4m3_t_f32",
                (false, true) => "dequant_fp8_e4m3_b_f32",
                (true, false) => "dequant_fp8_e5m2_t_f32",
                (true, true) => "dequant_fp8_e5m2_b_f32",
            },
        }
    }
}

/// `POCKET_FP8_LANES=0`: FP8 codes stay in the checkpoint's row-major order on the device (A/B);
/// otherwise tile-lane order (read once, at the first device open, which also tells the
/// kernels through their `fp8_lanes` constant).
pub(super) static TILE_LANES: EnvSwitch = EnvSwitch::on_unless_zero("POCKET_FP8_LANES");

/// Uploads an FP8 weight: codes (in tile-lane order unless `POCKET_FP8_LANES=0`), then the tile
/// scales (checked against the shape).
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
    let lanes = TILE_LANES.on() && cols >= 128;
    let (storage, layout) = match scales {
        Some(s) if kind.tiled => {
            let at = bytes.len().div_ceil(256) * 256;
            let mut packed = vec![0u8; at + s.len()];
            packed[..bytes.len()].copy_from_slice(bytes);
            if lanes {
                fp8_tile_lanes(&mut packed[..bytes.len()], cols);
            }
            packed[at..].copy_from_slice(s);
            (
                be.upload_bytes(OP, &packed)?,
                WeightLayout::ScalesAfter { offset: at },
            )
        }
        _ if lanes => {
            let mut codes = bytes.to_vec();
            fp8_tile_lanes(&mut codes, cols);
            (be.upload_bytes(OP, &codes)?, WeightLayout::Ggml)
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

/// Device pointers and shape of one FP8 matmul, checked.
pub(crate) struct Fp8Call {
    pub(super) w: u64,
    pub(super) scales: u64,
    pub(super) tscale: f32,
    pub(super) x: u64,
    pub(super) out: u64,
    pub(super) rows: usize,
    pub(super) cols: usize,
    pub(super) n: usize,
}

/// Checks the weight's device and layout and the shapes of `x` and `out`.
pub(super) fn prepare(
    be: &CudaBackend,
    op: &'static str,
    kind: Fp8Kind,
    x: &Tensor,
    w: &Weight,
    out: &mut Tensor,
) -> Result<Fp8Call> {
    // This path never reads the 8-bit activation cache, but it writes `out`, which may hold the
    // cached input: forget the cache.
    be.invalidate_q8();
    let (wp, sp) = weight_ptrs(be, op, kind, w)?;
    let (rows, cols) = (w.rows, w.cols);
    let n = check_matmul_shapes(op, x, out, rows, cols)?;
    let xp = be.ptr_of(op, "x", x, DType::F32)?;
    let outp = be.ptr_of(op, "out", out, DType::F32)?;
    Ok(Fp8Call {
        w: wp,
        scales: sp,
        tscale: w.tensor_scale.unwrap_or(1.0),
        x: xp,
        out: outp,
        rows,
        cols,
        n,
    })
}

/// The device addresses of an FP8 weight's codes and tile scales (0 without), checked to be on
/// this backend's device and, for a tiled format, in the layout that holds the scales.
pub(super) fn weight_ptrs(
    be: &CudaBackend,
    op: &'static str,
    kind: Fp8Kind,
    w: &Weight,
) -> Result<(u64, u64)> {
    let cw = match &w.storage {
        WeightStorage::Cuda(c) if c.ordinal() == be.ctx.ordinal() => c,
        other => {
            return Err(KernelError::WrongDevice {
                op,
                tensor: "weight",
                found: match other {
                    WeightStorage::Host { .. } => "cpu".into(),
                    WeightStorage::Cuda(c) => format!("cuda:{}", c.ordinal()),
                },
                expected: format!("cuda:{}", be.ctx.ordinal()),
            })
        }
    };
    let wp = cw.storage.ptr();
    let sp = match (kind.tiled, cw.layout) {
        (true, WeightLayout::ScalesAfter { offset }) => wp + offset as u64,
        (false, _) => 0u64,
        (true, l) => {
            return Err(shape_err(
                op,
                format!("{} weight in layout {l:?} has no tile scales", w.format),
            ))
        }
    };
    Ok((wp, sp))
}

/// `out [n, rows] = x [n, cols] · Wᵀ` for an FP8 weight.
pub(crate) fn matmul(
    be: &CudaBackend,
    kind: Fp8Kind,
    x: &Tensor,
    w: &Weight,
    out: &mut Tensor,
) -> Result<()> {
    let p = prepare(be, "matmul", kind, x, w, out)?;
    if p.n == 0 {
        return Ok(());
    }
    if p.n <= GEMV_MAX_ROWS {
        return gemv(
            be, kind, p.w, p.scales, p.tscale, p.x, p.out, p.rows, p.cols, p.n,
        );
    }
    gemm(
        be, kind, p.w, p.scales, p.tscale, p.x, p.out, p.rows, p.cols, p.n,
    )
}

/// Rows per dequantization chunk: as many as fit `W_CHUNK_BYTES` at `elem_bytes` per weight.
fn chunk_rows(rows: usize, cols: usize, elem_bytes: usize) -> usize {
    aligned_chunk_rows(rows, cols, W_CHUNK_BYTES / elem_bytes)
}

/// Rows per prefill chunk of a `[rows, cols]` weight with room for `max_elems` dequantized
/// weights: rounded down to a multiple of `CHUNK_ROW_ALIGN` (at least one), at most `rows`.
/// Shared with the GGML formats' prefill in `matmul.rs`, which had the same unaligned chunks
/// (4096x14336 at 172 TFLOP/s against 409 for 14336x4096 on the H200).
pub(crate) fn aligned_chunk_rows(rows: usize, cols: usize, max_elems: usize) -> usize {
    (max_elems / cols.max(1) / CHUNK_ROW_ALIGN * CHUNK_ROW_ALIGN)
        .max(CHUNK_ROW_ALIGN)
        .min(rows)
}

/// Prefill: W dequantized in row chunks (f16, or f32 in the exact mode), the product through
/// cuBLAS (f32 accumulation and output; the per-tensor scale is the GEMM's alpha).
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
    let exact = crate::Backend::exact_prefill(be);
    let (elem_bytes, dequant, ty, compute) = if exact {
        (
            4,
            Fp8Kernel::DequantF32(kind),
            bsys::cudaDataType::CUDA_R_32F,
            bsys::cublasComputeType_t::CUBLAS_COMPUTE_32F_PEDANTIC,
        )
    } else {
        (
            2,
            Fp8Kernel::DequantF16(kind),
            bsys::cudaDataType::CUDA_R_16F,
            bsys::cublasComputeType_t::CUBLAS_COMPUTE_32F,
        )
    };
    let chunk_rows = chunk_rows(rows, cols, elem_bytes);
    let mut scratch = be
        .scratch
        .lock()
        .map_err(|_| shape_err(OP, "scratch lock poisoned"))?;
    let wc = Scratch::get(&mut scratch.w16, &be.pool, chunk_rows * cols * elem_bytes)?;
    // The exact mode multiplies the f32 activations as they are.
    let xg = if exact {
        x
    } else {
        let x16 = Scratch::get(&mut scratch.x16, &be.pool, n * cols * 2)?;
        let total = n * cols;
        be.launch(
            OP,
            Kernel::F32ToF16,
            (total.div_ceil(256) as u32, 1, 1),
            256,
            args![x, x16, total as u64],
        )?;
        x16
    };
    let (_blas_guard, handle) = super::cublas::lock_handle(be, OP)?;
    let gemm = ChunkedGemm {
        handle,
        op: OP,
        ty,
        compute,
        alpha: tscale,
        rows,
        cols,
        n,
        x: xg,
        out,
    };
    // SAFETY: `wc` holds `chunk_rows` rows of `cols` elements of `ty`, `xg` the `n` activation
    // rows of type `ty`.
    unsafe {
        gemm.run(chunk_rows, wc, |r0, nr| {
            let chunks = nr * cols / 16;
            be.launch(
                OP,
                Kernel::Fp8(dequant),
                (chunks.div_ceil(256) as u32, 1, 1),
                256,
                args![w, scales, wc, cols as i32, r0 as i32, nr as i32],
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_are_aligned_and_bounded() {
        // 27B shapes: f16 chunks of 6528 rows (not 6553) of 5120 columns, 1920 of 17408.
        assert_eq!(chunk_rows(17408, 5120, 2), 6528);
        assert_eq!(chunk_rows(5120, 17408, 2), 1920);
        assert_eq!(chunk_rows(5120, 17408, 4), 896);
        // Small matrices: one chunk of all rows.
        assert_eq!(chunk_rows(200, 208, 2), 200);
        // Very wide rows: at least one aligned group, even past the byte budget.
        assert_eq!(chunk_rows(1000, 1 << 20, 4), 128);
        // The GGML prefill's budget (32M f16 weights): 4096x14336 in chunks of 2304 (not 2340).
        assert_eq!(aligned_chunk_rows(4096, 14336, 32 << 20), 2304);
        assert_eq!(aligned_chunk_rows(14336, 4096, 32 << 20), 8192);
        for (r, c, b) in [(17408, 5120, 2), (5120, 17408, 4), (151936, 5120, 2)] {
            let k = chunk_rows(r, c, b);
            assert!(k.is_multiple_of(CHUNK_ROW_ALIGN) && k * c * b <= W_CHUNK_BYTES);
        }
    }
}
