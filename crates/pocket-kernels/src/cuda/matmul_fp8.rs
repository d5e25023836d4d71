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
//! One row of activations takes one of the [`Fp8Row1`] variants of one template, chosen per
//! shape ([`Fp8Row1::for_shape`]) unless `POCKET_GEMV_FP8` forces one; 2..4 and 5..8 rows the
//! `n4`/`n8` kernels, which stage x in shared memory so every weight byte is read and decoded
//! once for all rows.
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

use std::sync::atomic::AtomicU8;
use std::sync::atomic::Ordering::Relaxed;

use cudarc::cublas::sys as bsys;
use pocket_quant::QuantFormat;

use super::cublas::ChunkedGemm;
use super::kernels::Kernel;
use super::matmul::{check_matmul_shapes, GEMV_MAX_ROWS};
use super::memory::{cuda_err, CudaWeight, WeightLayout};
use super::{CudaBackend, Scratch};
use crate::error::shape_err;
use crate::{DType, KernelError, Result, Tensor, Weight, WeightStorage};

/// Weight rows one GEMV block covers (4 warps x 4 rows, the `n4`/`n8` kernels).
const GEMV_BLOCK_ROWS: usize = 16;
/// Threads per GEMV block (4 warps; FP8R_THREADS of the one-row kernels too).
const GEMV_BLOCK_THREADS: u32 = 128;

/// The one-row (n = 1) FP8 GEMV variants: one template (`gemv_fp8_row1` in kernels/gemv_fp8.cu)
/// that differs in how a 128-thread block is split over weight rows. Every variant keeps 8-16
/// independent 16-byte weight loads in flight per thread and refills each slot as it is used.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Fp8Row1 {
    /// One warp per 4 rows, 16 rows per block (`_n1`).
    Warp4,
    /// One warp per 8 rows, 32 rows per block (`_n1w8`): half the activation reads per weight.
    Warp8,
    /// The whole block per 2 rows (`_n1k2`).
    Split2,
    /// The whole block per 4 rows (`_n1k4`).
    Split4,
}

impl Fp8Row1 {
    /// Every variant, in the order the benchmarks print them.
    pub const ALL: [Fp8Row1; 4] = [
        Fp8Row1::Warp4,
        Fp8Row1::Warp8,
        Fp8Row1::Split2,
        Fp8Row1::Split4,
    ];

    /// Weight rows one 128-thread block covers.
    pub fn rows_per_block(self) -> usize {
        match self {
            Fp8Row1::Warp4 => 16,
            Fp8Row1::Warp8 => 32,
            Fp8Row1::Split2 => 2,
            Fp8Row1::Split4 => 4,
        }
    }

    /// The name `POCKET_GEMV_FP8` takes and the benchmarks print.
    pub fn name(self) -> &'static str {
        match self {
            Fp8Row1::Warp4 => "warp4",
            Fp8Row1::Warp8 => "warp8",
            Fp8Row1::Split2 => "split2",
            Fp8Row1::Split4 => "split4",
        }
    }

    /// The variant named `s` (see [`Fp8Row1::name`]).
    pub fn parse(s: &str) -> Option<Fp8Row1> {
        Fp8Row1::ALL.into_iter().find(|v| v.name() == s)
    }

    /// The default for a `rows x cols` weight, from the H200 measurement of every variant at the
    /// 27B shapes with the f16-conversion decode (`bench_fp8_gemv_27b`,
    /// docs/performance/logs/2026-11-30-s4-run1/cuda_bench_decode.log): the 8-row warp kernel
    /// was fastest at 14336..17408 rows (20.9 / 23.0 / 24.3 us against 21.7 / 24.1 / 25.2 for
    /// the 4-row block split), the 4-row warp kernel everywhere else (34816 rows 44.3 us,
    /// 10240 rows 14.8 against 17.1, 5120 rows at 6144 and 17408 columns 11.7 / 26.7 against
    /// 12.0 / 27.4); the block splits won no shape once the decode got cheaper.
    pub fn for_shape(rows: usize, _cols: usize) -> Fp8Row1 {
        if (WARP8_MIN_ROWS..WARP8_END_ROWS).contains(&rows) {
            Fp8Row1::Warp8
        } else {
            Fp8Row1::Warp4
        }
    }
}

/// The row range in which [`Fp8Row1::for_shape`] takes the 8-row warp kernel (10240 rows
/// measured slower with it, 14336..17408 faster, 34816 slower).
const WARP8_MIN_ROWS: usize = 12 * 1024;
const WARP8_END_ROWS: usize = 32 * 1024;

/// Process-wide one-row variant: 0 = not read yet, 1 = per shape, 2 + index in
/// [`Fp8Row1::ALL`] = forced.
static ROW1: AtomicU8 = AtomicU8::new(0);
/// Process-wide E4M3 decode of the one-row GEMV: 0 = not read yet, 1 = f16 conversion, 2 = the
/// previous integer decode (`_bits` kernels).
static ROW1_BITS: AtomicU8 = AtomicU8::new(0);

/// The forced one-row variant, `None` for the per-shape choice. `POCKET_GEMV_FP8` =
/// warp4|warp8|split2|split4 forces one (anything else, or unset, is per shape);
/// `POCKET_GEMV_SPLIT=0` (the previous one-row kernels of every format) means warp4.
fn forced_row1() -> Option<Fp8Row1> {
    let v = match ROW1.load(Relaxed) {
        0 => {
            let env = std::env::var("POCKET_GEMV_FP8").ok();
            let v = match env.as_deref().and_then(Fp8Row1::parse) {
                Some(f) => Some(f),
                None if !super::matmul::split_gemv() => Some(Fp8Row1::Warp4),
                None => None,
            };
            store_row1(v);
            return v;
        }
        v => v,
    };
    (v >= 2).then(|| Fp8Row1::ALL[(v - 2) as usize])
}

fn store_row1(v: Option<Fp8Row1>) {
    let code = match v {
        None => 1,
        Some(f) => 2 + Fp8Row1::ALL.iter().position(|&a| a == f).unwrap() as u8,
    };
    ROW1.store(code, Relaxed);
}

/// Whether the one-row E4M3 GEMV runs the previous integer decode
/// (`POCKET_GEMV_FP8_DECODE=bits`) instead of the f16 conversion.
fn int_decode() -> bool {
    match ROW1_BITS.load(Relaxed) {
        0 => {
            let on = std::env::var("POCKET_GEMV_FP8_DECODE").is_ok_and(|v| v == "bits");
            ROW1_BITS.store(if on { 2 } else { 1 }, Relaxed);
            on
        }
        v => v == 2,
    }
}

impl CudaBackend {
    /// Forces the one-row FP8 GEMV variant (`None`: the per-shape choice), as `POCKET_GEMV_FP8`.
    /// Process-wide, for A/B benchmarks.
    pub fn set_fp8_gemv(&self, v: Option<Fp8Row1>) {
        store_row1(v);
    }

    /// Selects the previous integer E4M3 decode for the one-row FP8 GEMV (`true`) or the f16
    /// conversion (`false`, the default), as `POCKET_GEMV_FP8_DECODE=bits`. Process-wide.
    pub fn set_fp8_int_decode(&self, on: bool) {
        ROW1_BITS.store(if on { 2 } else { 1 }, Relaxed);
    }

    /// `out [1, rows] = x [1, cols] · Wᵀ` for an FP8 weight through one given one-row variant
    /// and decode (`int_decode`: the `_bits` kernels; E5M2 has none and ignores it), whatever the
    /// process-wide choice: for tests and benchmarks that compare variants side by side.
    pub fn fp8_gemv_row1(
        &self,
        x: &Tensor,
        w: &Weight,
        out: &mut Tensor,
        variant: Fp8Row1,
        int_decode: bool,
    ) -> Result<()> {
        const OP: &str = "fp8_gemv_row1";
        let kind = Fp8Kind::of(w.format)
            .ok_or_else(|| shape_err(OP, format!("{} is not an FP8 weight format", w.format)))?;
        if x.rows() != 1 {
            return Err(shape_err(OP, format!("x {:?} is not one row", x.shape)));
        }
        let p = prepare(self, OP, kind, x, w, out)?;
        launch_row1(self, kind, variant, int_decode, &p)
    }
}

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

/// Which GEMV variant serves a number of activation rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GemvRows {
    /// Exactly one row (`_n1`).
    One,
    /// 2..4 rows (`_n4`, x staged in shared memory).
    Four,
    /// 5..8 rows (`_n8`, x staged in shared memory).
    Eight,
}

impl GemvRows {
    /// The variant for `m` activation rows (`1..=8`).
    pub fn for_rows(m: usize) -> GemvRows {
        match m {
            0 | 1 => GemvRows::One,
            2..=4 => GemvRows::Four,
            _ => GemvRows::Eight,
        }
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
                            Fp8Row1::Split2 => concat!("gemv_fp8_", $f, "_n1k2", $b),
                            Fp8Row1::Split4 => concat!("gemv_fp8_", $f, "_n1k4", $b),
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

/// Device pointers and shape of one FP8 matmul, checked.
pub(crate) struct Fp8Call {
    w: u64,
    scales: u64,
    tscale: f32,
    x: u64,
    out: u64,
    rows: usize,
    cols: usize,
    n: usize,
}

/// Checks the weight's device and layout and the shapes of `x` and `out`.
fn prepare(
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
    let (rows, cols) = (w.rows, w.cols);
    let n = check_matmul_shapes(op, x, out, rows, cols)?;
    let xp = be.ptr_of(op, "x", x, DType::F32)?;
    let outp = be.ptr_of(op, "out", out, DType::F32)?;
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

/// One launch of a one-row GEMV variant.
fn launch_row1(
    be: &CudaBackend,
    kind: Fp8Kind,
    variant: Fp8Row1,
    int_decode: bool,
    p: &Fp8Call,
) -> Result<()> {
    if p.rows == 0 {
        return Ok(());
    }
    be.launch(
        "matmul",
        Kernel::Fp8(Fp8Kernel::Row1(kind, variant, int_decode)),
        (p.rows.div_ceil(variant.rows_per_block()) as u32, 1, 1),
        GEMV_BLOCK_THREADS,
        args![
            p.w,
            p.scales,
            p.tscale,
            p.x,
            p.out,
            p.rows as i32,
            p.cols as i32,
            1i32
        ],
    )
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
    if m == 1 {
        let variant = forced_row1().unwrap_or_else(|| Fp8Row1::for_shape(rows, cols));
        let p = Fp8Call {
            w,
            scales,
            tscale,
            x,
            out,
            rows,
            cols,
            n: 1,
        };
        return launch_row1(be, kind, variant, int_decode(), &p);
    }
    be.launch(
        "matmul",
        Kernel::Fp8(Fp8Kernel::Gemv(kind, GemvRows::for_rows(m))),
        (rows.div_ceil(GEMV_BLOCK_ROWS) as u32, 1, 1),
        GEMV_BLOCK_THREADS,
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

    #[test]
    fn row1_variant_per_shape_and_by_name() {
        use Fp8Row1::{Warp4, Warp8};
        // The FP8 projections of Qwen3.5-27B: MLP gate|up and down, DeltaNet qkv|z and out,
        // attention q|gate|k|v and o.
        let shapes = [
            (34816, 5120, Warp4),
            (16384, 5120, Warp8),
            (14336, 5120, Warp8),
            (17408, 5120, Warp8),
            (10240, 5120, Warp4),
            (5120, 17408, Warp4),
            (5120, 6144, Warp4),
        ];
        for (r, c, want) in shapes {
            assert_eq!(Fp8Row1::for_shape(r, c), want, "{r}x{c}");
        }
        for v in Fp8Row1::ALL {
            assert_eq!(Fp8Row1::parse(v.name()), Some(v));
            assert_eq!(128 % v.rows_per_block().min(128), 0);
        }
        assert_eq!(Fp8Row1::parse("auto"), None);
    }

    #[test]
    fn row1_symbols_are_distinct_and_built() {
        let ptx = crate::cuda::artifacts::ModuleId::GemvFp8.ptx();
        let mut seen = std::collections::HashSet::new();
        for e5m2 in [false, true] {
            for tiled in [false, true] {
                for v in Fp8Row1::ALL {
                    for bits in [false, true] {
                        let k = Fp8Kernel::Row1(Fp8Kind { e5m2, tiled }, v, bits).symbol();
                        assert!(ptx.contains(&format!(".entry {k}(")), "{k} not in the PTX");
                        // E5M2 has no integer-decode kernels: both map to one symbol.
                        assert!(seen.insert(k) || e5m2, "{k} twice");
                    }
                }
            }
        }
        assert_eq!(seen.len(), 24);
    }

    #[test]
    fn gemv_variant_by_rows() {
        let v: Vec<GemvRows> = (1..=8).map(GemvRows::for_rows).collect();
        use GemvRows::{Eight, Four, One};
        assert_eq!(v, [One, Four, Four, Four, Eight, Eight, Eight, Eight]);
    }
}
