//! Decode GEMVs that also run the small kernel after them (kernels/gemv_tail.cuh): the stacked
//! gate|up projection with the SwiGLU and the down GEMV's int8 activation
//! ([`crate::Backend::matmul_silu_halves`]), and the o / down projections with the residual add,
//! RMSNorm and the next GEMV's int8 activation ([`crate::Backend::matmul_add_rms_norm`]). One
//! launch instead of two per fold; the outputs equal the unfused launches' bit for bit.
//!
//! Taken for one activation row of a dp4a format whose per-shape kernel is `gemv_q8r_*` or
//! `gemv_q8r1_*` (gemv_q8.rs) where the unfused path would run the quantizing small kernel
//! (`POCKET_NORM_Q8` on, the one-pass norm), and only with `POCKET_GEMV_TAIL=1` (or
//! [`CudaBackend::set_gemv_tail`]): by default every call runs the unfused composition, which
//! measured faster on the H200; `POCKET_GEMV_TAIL=silu` or `=norm` turns on one fold only.

use cudarc::driver::result as dr;

use super::gemv_q8::q8_one_row;
use super::kernels::{DevFormat, Kernel, Q8Gemv};
use super::matmul::{q8_scratch_bytes, quantize_act, warp_per_row, Q8Bufs};
use super::memory::cuda_err;
use super::ops::{norm_q8_block, norm_q8_on};
use super::switch::EnvChoice;
use super::{CudaBackend, Scratch};
use crate::error::shape_err;
use crate::{Backend, DType, Result, Tensor, Weight, WeightStorage};

/// Which tail a GEMV kernel runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GemvTail {
    /// SwiGLU over the stacked halves + int8 quantization (`_silu`).
    Silu,
    /// Residual add + RMSNorm + int8 quantization (`_norm`).
    Norm,
}

/// Completion counters the tails use: one per SwiGLU group of 256 outputs.
const COUNTERS: usize = 1024;
/// Outputs of one SwiGLU tail group (TAIL_GROUP in kernels/gemv_tail.cuh).
const GROUP: usize = 256;

/// Which tails are on: `POCKET_GEMV_TAIL` (off unless `1`; `silu` or `norm` turns on that fold
/// only, for A/B of each), or [`CudaBackend::set_gemv_tail`] (both or none). `None`: off.
static TAILS: EnvChoice<Option<TailSet>> = EnvChoice::new(
    "POCKET_GEMV_TAIL",
    &[
        None,
        Some(TailSet::Both),
        Some(TailSet::Silu),
        Some(TailSet::Norm),
    ],
    |v| match v {
        Some("1") => Some(TailSet::Both),
        Some("silu") => Some(TailSet::Silu),
        Some("norm") => Some(TailSet::Norm),
        _ => None,
    },
);

/// The tails a setting turns on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TailSet {
    Both,
    Silu,
    Norm,
}

/// Whether tail `t` is on (see [`TAILS`]). Off by default: on the H200 (session 5) each fold made
/// the 8B Q4_0 decode step ~0.8 ms slower (2.13 -> 3.62 ms with both;
/// docs/performance/cuda-dense.md).
pub(crate) fn tail_on(t: GemvTail) -> bool {
    match TAILS.get() {
        None => false,
        Some(TailSet::Both) => true,
        Some(TailSet::Silu) => t == GemvTail::Silu,
        Some(TailSet::Norm) => t == GemvTail::Norm,
    }
}

impl CudaBackend {
    /// Folds the SwiGLU and the residual-add RMSNorm into the preceding decode GEMV (`true`) or
    /// launches them separately (`false`, the default); process-wide, for A/B
    /// benchmarks and tests. Both give the same bits.
    pub fn set_gemv_tail(&self, on: bool) {
        TAILS.set(Some(on.then_some(TailSet::Both)));
    }

    /// Whether both GEMV tails are on.
    pub fn gemv_tail(&self) -> bool {
        tail_on(GemvTail::Silu) && tail_on(GemvTail::Norm)
    }
}

/// Whether kernels/gemv.cu builds the tail kernels for `q` (FOR_EACH_Q8_TAIL).
fn has_tail(q: Q8Gemv) -> bool {
    matches!(
        q,
        Q8Gemv::Q4_0
            | Q8Gemv::Q4_1
            | Q8Gemv::Q5_0
            | Q8Gemv::Q8_0
            | Q8Gemv::Q4_K
            | Q8Gemv::Q5_K
            | Q8Gemv::Q6_K
    )
}

/// The symbol of a tail kernel (`gemv_q8r{,1}_<fmt>_{silu,norm}`).
pub(crate) fn symbol(q: Q8Gemv, row1: bool, t: GemvTail) -> &'static str {
    macro_rules! tab {
        ($($v:ident => $n:literal),*) => {
            match (q, row1, t) {
                $(
                    (Q8Gemv::$v, false, GemvTail::Silu) => concat!("gemv_q8r_", $n, "_silu"),
                    (Q8Gemv::$v, false, GemvTail::Norm) => concat!("gemv_q8r_", $n, "_norm"),
                    (Q8Gemv::$v, true, GemvTail::Silu) => concat!("gemv_q8r1_", $n, "_silu"),
                    (Q8Gemv::$v, true, GemvTail::Norm) => concat!("gemv_q8r1_", $n, "_norm"),
                )*
                // Not built (has_tail is false): the dispatch never launches it.
                _ => "gemv_q8r_tail_unbuilt",
            }
        };
    }
    tab!(Q4_0 => "q4_0", Q4_1 => "q4_1", Q5_0 => "q5_0", Q8_0 => "q8_0", Q4_K => "q4_k",
         Q5_K => "q5_k", Q6_K => "q6_k")
}

/// The tail kernel for one activation row of `w` (`rows x cols`) and its grid, where the GEMV
/// would run `gemv_q8r_*` / `gemv_q8r1_*` on the device's own weight; `None` otherwise.
fn tail_kernel(be: &CudaBackend, w: &Weight, t: GemvTail) -> Option<(Q8Gemv, Kernel, u32, u64)> {
    if !tail_on(t) || !norm_q8_on() || be.fused_gemv() || warp_per_row() {
        return None;
    }
    let cw = match &w.storage {
        WeightStorage::Cuda(c) if c.ordinal() == be.ctx.ordinal() => c,
        _ => return None,
    };
    let q = DevFormat::of(w.format)?.q8_gemv()?;
    if !has_tail(q) || w.rows > i32::MAX as usize || w.cols > i32::MAX as usize {
        return None;
    }
    let (k, blocks, threads) = q8_one_row(q, w.rows, w.cols);
    let row1 = match k {
        Kernel::GemvQ8Rows(_) => false,
        Kernel::GemvQ8Row1(_) => true,
        _ => return None,
    };
    (threads == 128).then_some((q, Kernel::GemvQ8Tail(q, row1, t), blocks, cw.storage.ptr()))
}

/// The counters, zeroed on the stream when first allocated (inside a capture that is a memset
/// node the graph replays before its first tail: harmless, the tails leave them zero anyway).
fn counters(be: &CudaBackend, s: &mut Scratch) -> Result<u64> {
    if s.tail_counters.is_none() {
        let c = be.pool.alloc(4 * COUNTERS)?;
        be.ctx
            .bind_to_thread()
            .map_err(|e| cuda_err("gemv_tail", e))?;
        // SAFETY: `c` is a live device block of at least 4 * COUNTERS bytes.
        unsafe { dr::memset_d8_async(c.ptr(), 0, 4 * COUNTERS, be.stream.cu_stream()) }
            .map_err(|e| cuda_err("gemv_tail", e))?;
        s.tail_counters = Some(c);
    }
    Ok(s.tail_counters.as_ref().map_or(0, |c| c.ptr()))
}

/// Quantizes `x` (one row of `cols`) into the q8 scratch at `base` unless it already holds it.
fn ensure_input_q8(
    be: &CudaBackend,
    op: &'static str,
    x: u64,
    cols: usize,
    base: u64,
    grew: bool,
) -> Result<Q8Bufs> {
    let bufs = Q8Bufs::at(base, 1, cols);
    let mut cache = be
        .q8_cache
        .lock()
        .map_err(|_| shape_err(op, "q8 cache lock poisoned"))?;
    if grew || *cache != Some((x, 1, cols)) {
        quantize_act(be, op, x, &bufs, 1, cols)?;
        *cache = Some((x, 1, cols));
    }
    Ok(bufs)
}

fn set_cache(be: &CudaBackend, v: Option<(u64, usize, usize)>) {
    if let Ok(mut c) = be.q8_cache.lock() {
        *c = v;
    }
}

/// Whether the device ranges `[a, a + a_bytes)` and `[b, b + b_bytes)` overlap.
pub(crate) fn overlaps(a: u64, a_bytes: usize, b: u64, b_bytes: usize) -> bool {
    a < b + b_bytes as u64 && b < a + a_bytes as u64
}

/// [`crate::Backend::matmul_silu_halves`] on CUDA.
pub(crate) fn matmul_silu_halves(
    be: &CudaBackend,
    x: &Tensor,
    w: &Weight,
    gate_up: &mut Tensor,
    out: &mut Tensor,
) -> Result<()> {
    const OP: &str = "matmul_silu_halves";
    let (rows, cols, inter) = (w.rows, w.cols, out.row_len());
    let fold = tail_kernel(be, w, GemvTail::Silu).filter(|_| {
        x.rows() == 1
            && x.row_len() == cols
            && rows == 2 * inter
            && inter.is_multiple_of(32)
            && inter.div_ceil(GROUP) <= COUNTERS
            && gate_up.rows() == 1
            && gate_up.row_len() == rows
            && out.rows() == 1
    });
    let Some((q, k, blocks, wp)) = fold else {
        be.matmul(x, w, gate_up)?;
        return be.silu_mul_halves(gate_up, out);
    };
    let xp = be.ptr_of(OP, "x", x, DType::F32)?;
    let gp = be.ptr_of(OP, "gate_up", gate_up, DType::F32)?;
    let op = be.ptr_of(OP, "out", out, DType::F32)?;
    if gp % 16 != 0
        || op % 16 != 0
        || overlaps(gp, 4 * rows, xp, 4 * cols)
        || overlaps(op, 4 * inter, xp, 4 * cols)
        || overlaps(op, 4 * inter, gp, 4 * rows)
    {
        be.matmul(x, w, gate_up)?;
        return be.silu_mul_halves(gate_up, out);
    }
    let mut scratch = be
        .scratch
        .lock()
        .map_err(|_| shape_err(OP, "scratch lock poisoned"))?;
    let need = q8_scratch_bytes(1, cols);
    let grew = scratch.q8.as_ref().is_none_or(|s| s.len_bytes() < need);
    let base = Scratch::get(&mut scratch.q8, &be.pool, need)?;
    let alt = Scratch::get(&mut scratch.q8_alt, &be.pool, q8_scratch_bytes(1, inter))?;
    let cnt = counters(be, &mut scratch)?;
    let input = ensure_input_q8(be, OP, xp, cols, base, grew)?;
    let (xq, xd, xs) = input.kind(q.act_k());
    // The tails write `out`'s quantization while other blocks still read x's: a second buffer,
    // which becomes the q8 scratch (holding `out`) once the launch is queued.
    let o = Q8Bufs::at(alt, 1, inter);
    let launched = be.launch(
        OP,
        k,
        (blocks, 1, 1),
        128,
        args![
            wp,
            xq,
            xd,
            xs,
            gp,
            rows as i32,
            cols as i32,
            op,
            o.q8.0,
            o.q8.1,
            o.q8.2,
            o.k.0,
            o.k.1,
            o.k.2,
            cnt
        ],
    );
    if launched.is_err() {
        set_cache(be, None);
        return launched;
    }
    let s = &mut *scratch;
    std::mem::swap(&mut s.q8, &mut s.q8_alt);
    set_cache(be, Some((op, 1, inter)));
    Ok(())
}

/// [`crate::Backend::matmul_add_rms_norm`] on CUDA.
#[allow(clippy::too_many_arguments)]
pub(crate) fn matmul_add_rms_norm(
    be: &CudaBackend,
    x: &Tensor,
    w: &Weight,
    delta: &mut Tensor,
    residual: &mut Tensor,
    norm_w: &Tensor,
    eps: f32,
    normed: &mut Tensor,
) -> Result<()> {
    const OP: &str = "matmul_add_rms_norm";
    let (d, cols) = (w.rows, w.cols);
    let fold = tail_kernel(be, w, GemvTail::Norm).filter(|_| {
        x.rows() == 1
            && x.row_len() == cols
            && norm_w.numel() == d
            && delta.rows() == 1
            && delta.row_len() == d
            && residual.numel() == d
            && normed.numel() == d
            && d.is_multiple_of(32)
    });
    let unfused = |delta: &mut Tensor, residual: &mut Tensor, normed: &mut Tensor| {
        be.matmul(x, w, delta)?;
        be.add_rms_norm(residual, delta, norm_w, eps, normed)
    };
    let Some((q, k, blocks, wp)) = fold else {
        return unfused(delta, residual, normed);
    };
    let xp = be.ptr_of(OP, "x", x, DType::F32)?;
    let dp = be.ptr_of(OP, "delta", delta, DType::F32)?;
    let rp = be.ptr_of(OP, "residual", residual, DType::F32)?;
    let wn = be.ptr_of(OP, "norm weight", norm_w, DType::F32)?;
    let np = be.ptr_of(OP, "normed", normed, DType::F32)?;
    // The tail is the one-pass norm's body: where the unfused launch would take the strided
    // kernel (long rows, misaligned rows, POCKET_SMALL_KERNELS=old), keep the unfused launches.
    let (_, fast) = norm_q8_block(d, &[rp, dp, wn, np]);
    let (xb, db) = (4 * cols, 4 * d);
    if fast != 1
        || [dp, rp, np].iter().any(|&p| overlaps(p, db, xp, xb))
        || overlaps(dp, db, rp, db)
        || overlaps(dp, db, np, db)
        || overlaps(rp, db, np, db)
    {
        return unfused(delta, residual, normed);
    }
    let mut scratch = be
        .scratch
        .lock()
        .map_err(|_| shape_err(OP, "scratch lock poisoned"))?;
    // The tail writes the normed row's quantization over x's, after every block has read it.
    let need = q8_scratch_bytes(1, cols).max(q8_scratch_bytes(1, d));
    let grew = scratch.q8.as_ref().is_none_or(|s| s.len_bytes() < need);
    let base = Scratch::get(&mut scratch.q8, &be.pool, need)?;
    let cnt = counters(be, &mut scratch)?;
    let input = ensure_input_q8(be, OP, xp, cols, base, grew)?;
    let (xq, xd, xs) = input.kind(q.act_k());
    let o = Q8Bufs::at(base, 1, d);
    // From here the q8 scratch holds `normed` (or, if the launch fails, nothing known).
    set_cache(be, None);
    be.launch(
        OP,
        k,
        (blocks, 1, 1),
        128,
        args![
            wp,
            xq,
            xd,
            xs,
            dp,
            d as i32,
            cols as i32,
            rp,
            wn,
            np,
            eps,
            o.q8.0,
            o.q8.1,
            o.q8.2,
            o.k.0,
            o.k.1,
            o.k.2,
            cnt
        ],
    )?;
    set_cache(be, Some((np, 1, d)));
    Ok(())
}
