//! Weight-reading ops: the embedding lookup and `matmul`.
//!
//! `matmul` dispatches by batch size. Up to [`GEMV_MAX_ROWS`] activation rows (decode) run a
//! GEMV that reads each weight block once for all rows: the dp4a kernel over 8-bit activations
//! where the format has one, else the f32 dequantizing kernel. Larger batches (prefill) of
//! quantized weights dequantize row chunks of W to f16 and multiply on the tensor cores through
//! cuBLAS (or, with `POCKET_PREFILL=exact`, run the GEMV over 8-row chunks: the CPU's rounding
//! class); float weights keep the exact f32 GEMV path. Activations are quantized to int8 exactly
//! as the CPU backend does (pocket-quant `quantize_act_q8` / `quantize_act_q8k`, by the format's
//! pairing), for the GEMV and, as f16 values of q * d, for the prefill GEMM, so the two backends
//! multiply the same activation values.

use cudarc::cublas::sys as bsys;

use super::cublas::ChunkedGemm;
use super::gemv_q8::q8_one_row;
use super::kernels::{DevFormat, Kernel, Q8Gemv, Rows};
use super::memory::CudaWeight;
use super::switch::EnvChoice;
use super::{CudaBackend, Scratch};
use crate::error::shape_err;
use crate::{DType, KernelError, Result, Tensor, Weight, WeightStorage};

/// Activation rows one GEMV launch serves.
pub(crate) const GEMV_MAX_ROWS: usize = 8;
/// Warps (weight rows) per GEMV block, as in kernels/gemv.cu.
pub(super) const GEMV_WARPS: usize = 4;
/// Weight rows per block of the one-row dp4a GEMV `gemv_q8r_*` (GEMVR_ROWS in kernels/gemv.cu).
pub(super) const GEMVR_ROWS: usize = 4;
/// Elements of dequantized f16 weight per cuBLAS chunk (64 MiB).
const W16_CHUNK_ELEMS: usize = 32 << 20;

fn device_weight<'a>(
    be: &CudaBackend,
    op: &'static str,
    w: &'a Weight,
) -> Result<(&'a CudaWeight, DevFormat)> {
    let cw = match &w.storage {
        WeightStorage::Cuda(c) if c.ordinal() == be.ctx.ordinal() => c,
        _ => {
            return Err(KernelError::WrongDevice {
                op,
                tensor: "weight",
                found: match &w.storage {
                    WeightStorage::Host { .. } => "cpu".into(),
                    WeightStorage::Cuda(c) => format!("cuda:{}", c.ordinal()),
                },
                expected: format!("cuda:{}", be.ctx.ordinal()),
            })
        }
    };
    let f = DevFormat::of(w.format).ok_or_else(|| KernelError::Unsupported {
        op,
        device: be.name.clone(),
        what: w.format.to_string(),
    })?;
    Ok((cw, f))
}

pub(crate) fn embedding(
    be: &CudaBackend,
    table: &Weight,
    ids: &Tensor,
    out: &mut Tensor,
) -> Result<()> {
    const OP: &str = "embedding";
    let (cw, f) = device_weight(be, OP, table)?;
    let n = ids.numel();
    if out.numel() != n * table.cols || out.row_len() != table.cols {
        return Err(shape_err(
            OP,
            format!("out {:?} vs {n} ids of {} values", out.shape, table.cols),
        ));
    }
    let host_ids = be.host_u32(OP, "ids", ids)?;
    if let Some(&id) = host_ids.iter().find(|&&i| i as usize >= table.rows) {
        return Err(shape_err(
            OP,
            format!("token id {id} beyond the table's {} rows", table.rows),
        ));
    }
    let ip = be.ptr_of(OP, "ids", ids, DType::U32)?;
    let op = be.ptr_of(OP, "out", out, DType::F32)?;
    let chunks = table.cols / 16;
    be.launch(
        OP,
        Kernel::Embed(f),
        (chunks.div_ceil(128) as u32, n as u32, 1),
        128,
        args![
            cw.storage.ptr(),
            ip,
            op,
            table.rows as i32,
            table.cols as i32
        ],
    )
}

/// Checks `x` `[n, cols]` against a `[rows, cols]` weight and `out` `[n, rows]`; returns `n`.
pub(crate) fn check_matmul_shapes(
    op: &'static str,
    x: &Tensor,
    out: &Tensor,
    rows: usize,
    cols: usize,
) -> Result<usize> {
    if x.row_len() != cols {
        return Err(shape_err(
            op,
            format!("x rows of {} vs weight columns {cols}", x.row_len()),
        ));
    }
    let n = x.rows();
    if out.row_len() != rows || out.rows() != n {
        return Err(shape_err(
            op,
            format!("out {:?} vs [{n}, {rows}]", out.shape),
        ));
    }
    Ok(n)
}

pub(crate) fn matmul(be: &CudaBackend, x: &Tensor, w: &Weight, out: &mut Tensor) -> Result<()> {
    const OP: &str = "matmul";
    if let Some(kind) = super::matmul_fp8::Fp8Kind::of(w.format) {
        return super::matmul_fp8::matmul(be, kind, x, w, out);
    }
    let (cw, f) = device_weight(be, OP, w)?;
    let (rows, cols) = (w.rows, w.cols);
    let n = check_matmul_shapes(OP, x, out, rows, cols)?;
    if rows > i32::MAX as usize || cols > i32::MAX as usize {
        return Err(shape_err(OP, "matrix dimensions exceed i32"));
    }
    let xp = be.ptr_of(OP, "x", x, DType::F32)?;
    let op = be.ptr_of(OP, "out", out, DType::F32)?;
    let wp = cw.storage.ptr();
    if n == 0 {
        return Ok(());
    }
    // Every path writes `out`: if it holds the input of the cached quantization, forget it.
    if let Ok(mut c) = be.q8_cache.lock() {
        if let Some((cx, cm, cc)) = *c {
            let (lo, hi) = (cx, cx + (cm * cc * 4) as u64);
            if op < hi && lo < op + (n * rows * 4) as u64 {
                *c = None;
            }
        }
    }
    let float_weights = matches!(f, DevFormat::F32 | DevFormat::F16 | DevFormat::BF16);
    if n <= GEMV_MAX_ROWS || float_weights || exact_prefill(be) {
        for start in (0..n).step_by(GEMV_MAX_ROWS) {
            let m = (n - start).min(GEMV_MAX_ROWS);
            let xs = xp + (start * cols * 4) as u64;
            let os = op + (start * rows * 4) as u64;
            gemv(be, f, wp, xs, os, rows, cols, m)?;
        }
        return Ok(());
    }
    gemm_cublas(be, f, wp, xp, op, rows, cols, n)
}

/// Whether `POCKET_GEMV=warp` asks for the previous one-row decode GEMV (a warp per weight row,
/// `gemv_q8_*_n1`) instead of `gemv_q8r_*`; kept for comparison and tested by the device run.
pub(super) fn warp_per_row() -> bool {
    static WARP: EnvChoice<bool> = EnvChoice::flag("POCKET_GEMV", |v| v == Some("warp"));
    WARP.get()
}

/// Process-wide choice of the one-row decode GEMV generation: the split-K kernels (`true`, the
/// default) or the previous ones (`POCKET_GEMV_SPLIT=0`).
static SPLIT_GEMV: EnvChoice<bool> = EnvChoice::flag("POCKET_GEMV_SPLIT", |v| v != Some("0"));

/// Whether the one-row GEMVs of 16-bit float (`gemv_h_*`) and FP8 (`gemv_fp8_*_n1k*`) weights
/// take the kernels that split the columns over a whole block (default) rather than the previous
/// warp-per-row(s) kernels (`POCKET_GEMV_SPLIT=0`, or [`CudaBackend::set_split_gemv`], selects
/// the previous ones; for dp4a formats it also turns the `auto` choice of `gemv_q8::q8_one_row` into
/// `gemv_q8r_*`, the legacy choice without the 64-thread kernel).
pub(crate) fn split_gemv() -> bool {
    SPLIT_GEMV.get()
}

impl CudaBackend {
    /// Selects the one-row decode GEMV generation for F16/BF16 and FP8 weights and, under the
    /// `auto` dp4a variant, for quantized ones: `true` the split-column kernels and the per-shape
    /// dp4a choice (the default), `false` the previous ones and `gemv_q8r_*` (as
    /// `POCKET_GEMV_SPLIT=0`).
    /// Process-wide, for A/B benchmarks and tests; both give results within the same bounds.
    pub fn set_split_gemv(&self, on: bool) {
        SPLIT_GEMV.set(Some(on));
    }
}

/// Rows below which 16-bit float weights take the one-row-per-block kernel (`gemv_h_*_r1`): a
/// four-row block would leave most SMs idle (96 rows are 24 blocks on 132 SMs).
const HALF_R1_MAX_ROWS: usize = 1024;

/// Widest rows `gemv_q8r64_*` serves: one loop pass of 64 threads x 2 work items (32 columns
/// each for Q4_0/Q4_1, 16 for Q8_0's half blocks); 0 where the kernel is not built. It serves
/// them in the `legacy` and `r64` variants only (wider rows there take `gemv_q8r_*`).
pub(super) fn rows64_max_cols(q: Q8Gemv) -> usize {
    match q {
        Q8Gemv::Q4_0 | Q8Gemv::Q4_1 => 4096,
        Q8Gemv::Q8_0 => 2048,
        _ => 0,
    }
}

/// The symbol of the one-row F16/BF16 GEMV (kernels/gemv.cu `gemv_h_*`).
pub(crate) fn half_gemv_symbol(bf16: bool, r4: bool) -> &'static str {
    match (bf16, r4) {
        (false, false) => "gemv_h_f16_r1",
        (false, true) => "gemv_h_f16_r4",
        (true, false) => "gemv_h_bf16_r1",
        (true, true) => "gemv_h_bf16_r4",
    }
}

/// Whether exact prefill is on ([`crate::Backend::set_exact_prefill`], `POCKET_PREFILL=exact`):
/// GGML formats then run prefill in the CPU's rounding class, the dp4a GEMV over chunks of 8
/// activation rows (the CPU's int8 activations, f32 accumulation) instead of f16 operands on the
/// tensor cores, whose 2^-11 rounding of W and of q * d (about 3e-4 relative per product on the
/// synthetic models, `pocket-bench parity --ops`) the next layer's int8 requantization amplifies.
/// Slower (W is read once per 8 rows); for reference-parity runs.
fn exact_prefill(be: &CudaBackend) -> bool {
    crate::Backend::exact_prefill(be)
}

/// Whether `POCKET_PREFILL_ACT=f16` asks the prefill GEMM for plain f16 activations instead of
/// the CPU-matching int8 rounding (kept to measure what the rounding costs in accuracy).
fn plain_f16_prefill() -> bool {
    static F16: EnvChoice<bool> = EnvChoice::flag("POCKET_PREFILL_ACT", |v| v == Some("f16"));
    F16.get()
}

/// One GEMV launch for `m <= 8` activation rows.
#[allow(clippy::too_many_arguments)]
fn gemv(
    be: &CudaBackend,
    f: DevFormat,
    w: u64,
    x: u64,
    out: u64,
    rows: usize,
    cols: usize,
    m: usize,
) -> Result<()> {
    const OP: &str = "matmul";
    let half = matches!(f, DevFormat::F16 | DevFormat::BF16);
    // 16-byte loads of weight rows and activations: rows of 8s and an aligned x.
    if half && m == 1 && cols.is_multiple_of(8) && x.is_multiple_of(16) && split_gemv() {
        let r4 = rows >= HALF_R1_MAX_ROWS;
        let (per, threads) = if r4 { (4, 128) } else { (1, 256) };
        return be.launch(
            OP,
            Kernel::GemvHalf(f == DevFormat::BF16, r4),
            (rows.div_ceil(per) as u32, 1, 1),
            threads,
            args![w, x, out, rows as i32, cols as i32],
        );
    }
    let variant = if m == 1 { Rows::One } else { Rows::UpTo8 };
    let grid = (rows.div_ceil(GEMV_WARPS) as u32, 1, 1);
    // Rows of a fused block (8 warps x 2 rows, kernels/gemv.cu) and its shared activation bytes.
    const FUSED_ROWS: usize = 16;
    let smem = cols + 8 * (cols / 32);
    match f.q8_gemv() {
        Some(q) if m == 1 && q.has_fused() && be.fused_gemv() && smem <= 48 * 1024 => be
            .launch_smem(
                OP,
                Kernel::GemvQ8Fused(q),
                (rows.div_ceil(FUSED_ROWS) as u32, 1, 1),
                256,
                smem as u32,
                args![w, x, out, rows as i32, cols as i32],
            ),
        Some(q) => {
            // Quantize the activations once, then every weight row meets them in dp4a. The
            // quantization is reused by the next GEMV over the same input (see `q8_cache`).
            let mut scratch = be
                .scratch
                .lock()
                .map_err(|_| shape_err(OP, "scratch lock poisoned"))?;
            let need = q8_scratch_bytes(m, cols);
            let grows = scratch.q8.as_ref().is_none_or(|s| s.len_bytes() < need);
            let base = Scratch::get(&mut scratch.q8, &be.pool, need)?;
            let bufs = Q8Bufs::at(base, m, cols);
            let mut cache = be
                .q8_cache
                .lock()
                .map_err(|_| shape_err(OP, "q8 cache lock poisoned"))?;
            if grows || *cache != Some((x, m, cols)) {
                quantize_act(be, OP, x, &bufs, m, cols)?;
                *cache = Some((x, m, cols));
            }
            // This GEMV's output must not be the cached input (it is about to change).
            if let Some((cx, cm, cc)) = *cache {
                let (lo, hi) = (cx, cx + (cm * cc * 4) as u64);
                let (olo, ohi) = (out, out + (m * rows * 4) as u64);
                if olo < hi && lo < ohi {
                    *cache = None;
                }
            }
            drop(cache);
            // The kind the CPU pairs with this format (bit-identical int8 blocks).
            let (xq, xd, xs) = bufs.kind(q.act_k());
            if m == 1 && !warp_per_row() {
                let (k, blocks, threads) = q8_one_row(q, rows, cols);
                return be.launch(
                    OP,
                    k,
                    (blocks, 1, 1),
                    threads,
                    args![w, xq, xd, xs, out, rows as i32, cols as i32],
                );
            }
            be.launch(
                OP,
                Kernel::GemvQ8(q, variant),
                grid,
                128,
                args![w, xq, xd, xs, out, rows as i32, cols as i32, m as i32],
            )
        }
        None => be.launch(
            OP,
            Kernel::GemvF(f, variant),
            grid,
            128,
            args![w, x, out, rows as i32, cols as i32, m as i32],
        ),
    }
}

/// Bytes of q8 scratch for `m` activation rows of `cols`: both activation kinds (Q8 and Q8K),
/// each int8 quants plus an f32 scale and an f32 scaled sum per 32 elements.
pub(crate) fn q8_scratch_bytes(m: usize, cols: usize) -> usize {
    2 * q8_kind_bytes(m, cols)
}

/// Bytes of one kind, rounded up to 256 so the second kind's quants stay 16-byte aligned (the
/// GEMV reads them as int4).
fn q8_kind_bytes(m: usize, cols: usize) -> usize {
    (m * cols + 8 * (m * cols / 32)).next_multiple_of(256)
}

/// Device addresses of the two quantized-activation kinds in the q8 scratch (kernels/common.cuh
/// `quant256`): Q8 (per-32 scale, the CPU's `quantize_act_q8`) and Q8K (per-256 scale stored per
/// 32, `quantize_act_q8k`; written only where `cols` is a multiple of 256).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Q8Bufs {
    /// Q8 quants, scales, scaled sums.
    pub(crate) q8: (u64, u64, u64),
    /// Q8K quants, scales (per 32, repeated over each 256), scaled sums per 32.
    pub(crate) k: (u64, u64, u64),
}

impl Q8Bufs {
    /// The layout at `base`: [Q8 quants | scales | sums | Q8K quants | scales | sums].
    pub(crate) fn at(base: u64, m: usize, cols: usize) -> Q8Bufs {
        let (e, nblk) = ((m * cols) as u64, (m * cols / 32) as u64);
        let kb = base + q8_kind_bytes(m, cols) as u64;
        Q8Bufs {
            q8: (base, base + e, base + e + 4 * nblk),
            k: (kb, kb + e, kb + e + 4 * nblk),
        }
    }

    /// The (quants, scales, sums) of one kind.
    pub(crate) fn kind(&self, act_k: bool) -> (u64, u64, u64) {
        if act_k {
            self.k
        } else {
            self.q8
        }
    }
}

/// Quantizes `m` rows of `cols` at `x` into both kinds (Q8K only where `cols` is a multiple of
/// 256: the K formats need no other width).
fn quantize_act(
    be: &CudaBackend,
    op: &'static str,
    x: u64,
    b: &Q8Bufs,
    m: usize,
    cols: usize,
) -> Result<()> {
    let total32 = m * cols / 32;
    let warps = total32.div_ceil(8);
    let want_k = cols.is_multiple_of(256) as i32;
    be.launch(
        op,
        Kernel::QuantizeQ8,
        (warps.div_ceil(8) as u32, 1, 1),
        256,
        args![
            x,
            b.q8.0,
            b.q8.1,
            b.q8.2,
            b.k.0,
            b.k.1,
            b.k.2,
            total32 as i32,
            want_k
        ],
    )
}

impl CudaBackend {
    /// The int8 activation blocks the dp4a GEMV would read for `x` (`[m, cols]` f32, m <= 8,
    /// cols a multiple of 32) in the kind `act_k` selects, as (quants, per-32 scales, per-32
    /// scaled sums). Uses the quantization a preceding norm left for `x` if there is one, else
    /// quantizes. For tests that compare the device's quantizer with pocket-quant's.
    pub fn quantized_activation(
        &self,
        x: &Tensor,
        act_k: bool,
    ) -> Result<(Vec<i8>, Vec<f32>, Vec<f32>)> {
        const OP: &str = "quantized_activation";
        let (m, cols) = (x.rows(), x.row_len());
        if m == 0 || m > GEMV_MAX_ROWS || !cols.is_multiple_of(32) {
            return Err(shape_err(
                OP,
                format!("x {:?}: want 1..=8 rows of 32s", x.shape),
            ));
        }
        if act_k && !cols.is_multiple_of(256) {
            return Err(shape_err(OP, "the Q8K kind needs rows of 256s"));
        }
        let xp = self.ptr_of(OP, "x", x, DType::F32)?;
        let mut scratch = self
            .scratch
            .lock()
            .map_err(|_| shape_err(OP, "scratch lock poisoned"))?;
        let need = q8_scratch_bytes(m, cols);
        let grows = scratch.q8.as_ref().is_none_or(|s| s.len_bytes() < need);
        let base = Scratch::get(&mut scratch.q8, &self.pool, need)?;
        let bufs = Q8Bufs::at(base, m, cols);
        let mut cache = self
            .q8_cache
            .lock()
            .map_err(|_| shape_err(OP, "q8 cache lock poisoned"))?;
        if grows || *cache != Some((xp, m, cols)) {
            quantize_act(self, OP, xp, &bufs, m, cols)?;
            *cache = Some((xp, m, cols));
        }
        drop(cache);
        let (q, d, s) = bufs.kind(act_k);
        let nblk = m * cols / 32;
        let f32s = |b: Vec<u8>| -> Vec<f32> {
            b.chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect()
        };
        let qv = self
            .read_bytes(OP, q, m * cols)?
            .into_iter()
            .map(|b| b as i8)
            .collect();
        let dv = f32s(self.read_bytes(OP, d, 4 * nblk)?);
        let sv = f32s(self.read_bytes(OP, s, 4 * nblk)?);
        Ok((qv, dv, sv))
    }
}

/// Prefill: `out [n, rows] = x [n, cols] · Wᵀ` with W dequantized to f16 in row chunks and the
/// product on the tensor cores (f32 accumulation, f32 output).
#[allow(clippy::too_many_arguments)]
fn gemm_cublas(
    be: &CudaBackend,
    f: DevFormat,
    w: u64,
    x: u64,
    out: u64,
    rows: usize,
    cols: usize,
    n: usize,
) -> Result<()> {
    const OP: &str = "matmul";
    // Whole multiples of 128 rows: aligned cuBLAS output offsets (an odd chunk ran ~2x slower).
    let chunk_rows = super::matmul_fp8::aligned_chunk_rows(rows, cols, W16_CHUNK_ELEMS);
    let mut scratch = be
        .scratch
        .lock()
        .map_err(|_| shape_err(OP, "scratch lock poisoned"))?;
    let w16 = Scratch::get(&mut scratch.w16, &be.pool, chunk_rows * cols * 2)?;
    let x16 = Scratch::get(&mut scratch.x16, &be.pool, n * cols * 2)?;
    let total = n * cols;
    // The activations as the CPU's dot rounds them (its int8 kind for this format), unless
    // `POCKET_PREFILL_ACT=f16` asks for the plain f16 conversion.
    match f.q8_gemv() {
        Some(q) if !plain_f16_prefill() => {
            let total32 = total / 32;
            let k = if q.act_k() {
                Kernel::ActQ8KF16
            } else {
                Kernel::ActQ8F16
            };
            be.launch(
                OP,
                k,
                (total32.div_ceil(8).div_ceil(8) as u32, 1, 1),
                256,
                args![x, x16, total32 as i32],
            )?;
        }
        _ => be.launch(
            OP,
            Kernel::F32ToF16,
            (total.div_ceil(256) as u32, 1, 1),
            256,
            args![x, x16, total as u64],
        )?,
    }
    let (_blas_guard, handle) = super::cublas::lock_handle(be, OP)?;
    let gemm = ChunkedGemm {
        handle,
        op: OP,
        ty: bsys::cudaDataType::CUDA_R_16F,
        compute: bsys::cublasComputeType_t::CUBLAS_COMPUTE_32F,
        alpha: 1.0,
        rows,
        cols,
        n,
        x: x16,
        out,
    };
    // SAFETY: `w16` holds `chunk_rows` rows of `cols` f16, `x16` the `n` converted activation rows.
    unsafe {
        gemm.run(chunk_rows, w16, |r0, nr| {
            let elems = nr * cols / 16;
            be.launch(
                OP,
                Kernel::DequantF16(f),
                (elems.div_ceil(256) as u32, 1, 1),
                256,
                args![w, w16, rows as i32, cols as i32, r0 as i32, nr as i32],
            )
        })
    }
}
