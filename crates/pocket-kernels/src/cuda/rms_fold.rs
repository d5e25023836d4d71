//! The residual-add RMSNorm between two one-row FP8 decode GEMVs, folded into them
//! (kernels/rms_fold.cuh): no norm launch between a block's last projection and the next
//! block's first. [`crate::Backend::matmul_add_rms_norm`] launches the producer GEMV with the
//! fold's epilogue (residual += out, x * g and per-block sums of squares into the fold scratch)
//! and leaves the norm *pending*: `normed` is not written yet. The next op decides:
//!  * a one-row FP8 GEMV (`matmul`, `matmul_silu_halves`) whose input is `normed` takes the
//!    pending fold ([`take_for_consumer`]): it reads x * g, scales its outputs by 1 / rms and its
//!    blocks write `normed` as they finish;
//!  * any other launch, read-back, host write or graph boundary first runs `rms_fold_apply`
//!    ([`flush`]), which writes `normed` from the same scratch, so no reader ever sees it stale.
//!
//! Freeing `normed` cancels its pending write (the pool clears its watched address).
//! `POCKET_RMS_FOLD=0` keeps the unfused GEMV + `add_rms_norm` (A/B).

use super::gemv_fp8::Fp8Row1;
use super::kernels::Kernel;
use super::matmul_fp8::Fp8Kind;
use super::switch::EnvChoice;
use super::{CudaBackend, Scratch};
use crate::error::shape_err;
use crate::{DType, Result, Tensor, Weight};

/// `POCKET_RMS_FOLD=0` turns the fold off; [`CudaBackend::set_rms_fold`] overrides it.
static FOLD: EnvChoice<bool> = EnvChoice::flag("POCKET_RMS_FOLD", |v| v != Some("0"));

/// Whether the device ranges `[a, a + a_bytes)` and `[b, b + b_bytes)` overlap.
fn overlaps(a: u64, a_bytes: usize, b: u64, b_bytes: usize) -> bool {
    a < b + b_bytes as u64 && b < a + a_bytes as u64
}

/// Longest normalized row the fold scratch holds (f32 elements of x * g).
const MAX_DIM: usize = 64 * 1024;
/// Most per-block partial sums a consumer reads (RMS_FOLD_MAX_PARTS in rms_fold.cuh).
const MAX_PARTS: usize = 512;

/// The kernels' `RmsFold` argument (kernels/rms_fold.cuh), field for field.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct RmsFoldArgs {
    parts_in: u64,
    normed: u64,
    res: u64,
    g: u64,
    xg: u64,
    parts_out: u64,
    nparts: i32,
    eps: f32,
}

/// A norm whose output `normed` is still to be written from the fold scratch (`xg`, `parts`:
/// addresses kept here so writing it out takes no scratch lock, which a launching op may hold).
#[derive(Debug, Clone, Copy)]
pub(crate) struct PendingFold {
    normed: u64,
    dim: usize,
    eps: f32,
    nparts: usize,
    xg: u64,
    parts: u64,
}

/// The fold scratch's two regions: x * g (`MAX_DIM` floats), then the partial sums.
fn scratch_ptrs(be: &CudaBackend, op: &'static str) -> Result<(u64, u64)> {
    let mut s = be
        .scratch
        .lock()
        .map_err(|_| shape_err(op, "scratch lock poisoned"))?;
    // One fixed size, so the buffer never regrows inside a graph capture.
    let base = Scratch::get(&mut s.rms_fold, &be.pool, 4 * (MAX_DIM + MAX_PARTS))?;
    Ok((base, base + 4 * MAX_DIM as u64))
}

/// The blocks `variant` launches for a `rows`-row weight if a fold may use it: whole blocks
/// only (the fold's barriers need every warp of a block).
pub(crate) fn fold_blocks(variant: Fp8Row1, rows: usize) -> Option<usize> {
    let rpb = variant.rows_per_block();
    (rows > 0 && rows.is_multiple_of(rpb)).then_some(rows / rpb)
}

/// [`crate::Backend::matmul_add_rms_norm`] as a producer fold: `Ok(false)` (nothing launched)
/// where it does not apply: the switch is off, the weight is not FP8, `x` is not one row, a
/// shape or the GEMV variant does not fit, or buffers overlap.
#[allow(clippy::too_many_arguments)]
pub(crate) fn produce(
    be: &CudaBackend,
    x: &Tensor,
    w: &Weight,
    delta: &mut Tensor,
    residual: &mut Tensor,
    norm_w: &Tensor,
    eps: f32,
    normed: &mut Tensor,
) -> Result<bool> {
    const OP: &str = "matmul_add_rms_norm";
    let Some(kind) = Fp8Kind::of(w.format) else {
        return Ok(false);
    };
    let d = w.rows;
    let shapes_fit = x.rows() == 1
        && x.row_len() == w.cols
        && delta.numel() == d
        && residual.numel() == d
        && normed.numel() == d
        && norm_w.numel() == d
        && d <= MAX_DIM
        // Other dtypes take the unfused ops, which say what they accept.
        && [x, &*delta, &*residual, &*normed, norm_w]
            .iter()
            .all(|t| t.dtype == DType::F32);
    let variant = super::gemv_fp8::row1_variant(be, w.rows, w.cols);
    let Some(blocks) = fold_blocks(variant, d).filter(|&b| b <= MAX_PARTS) else {
        return Ok(false);
    };
    if !FOLD.get() || !shapes_fit {
        return Ok(false);
    }
    let xp = be.ptr_of(OP, "x", x, DType::F32)?;
    let dp = be.ptr_of(OP, "delta", delta, DType::F32)?;
    let rp = be.ptr_of(OP, "residual", residual, DType::F32)?;
    let gp = be.ptr_of(OP, "norm weight", norm_w, DType::F32)?;
    let np = be.ptr_of(OP, "normed", normed, DType::F32)?;
    let bufs = [(xp, 4 * w.cols), (dp, 4 * d), (rp, 4 * d), (np, 4 * d)];
    if bufs
        .iter()
        .enumerate()
        .any(|(i, &(a, an))| bufs[i + 1..].iter().any(|&(b, bn)| overlaps(a, an, b, bn)))
    {
        return Ok(false);
    }
    let (xg, parts) = scratch_ptrs(be, OP)?;
    be.invalidate_q8();
    let args = RmsFoldArgs {
        res: rp,
        g: gp,
        xg,
        parts_out: parts,
        ..RmsFoldArgs::default()
    };
    // The launch first writes out any earlier pending norm (it may read this scratch).
    super::gemv_fp8::launch_row1_fold(be, kind, variant, x, w, delta, args)?;
    let pending = PendingFold {
        normed: np,
        dim: d,
        eps,
        nparts: blocks,
        xg,
        parts,
    };
    *be.rms_fold
        .lock()
        .map_err(|_| shape_err(OP, "fold lock poisoned"))? = Some(pending);
    be.pool.watch_free(np);
    Ok(true)
}

/// The pending fold a one-row FP8 GEMV takes when its input at `x` (of `cols` floats) is the
/// pending norm's output, it launches `whole_blocks` (the consumer's barriers need every warp)
/// and its output (`out_bytes` at `out`) does not overlap the norm's, which its blocks write: the
/// x it must read instead (x * g in the fold scratch) and its consumer arguments. `None` leaves
/// the fold pending (the launch writes it out first).
pub(crate) fn take_for_consumer(
    be: &CudaBackend,
    x: u64,
    cols: usize,
    whole_blocks: bool,
    (out, out_bytes): (u64, usize),
) -> Result<Option<(u64, RmsFoldArgs)>> {
    const OP: &str = "rms_fold";
    let mut slot = be
        .rms_fold
        .lock()
        .map_err(|_| shape_err(OP, "fold lock poisoned"))?;
    let Some(p) = *slot else {
        return Ok(None);
    };
    let writes_normed = overlaps(out, out_bytes, p.normed, 4 * p.dim);
    if p.normed != x || p.dim != cols || !whole_blocks || writes_normed {
        return Ok(None);
    }
    *slot = None;
    drop(slot);
    if !be.pool.unwatch(p.normed) {
        return Ok(None); // `normed` was freed: nothing to write, and x is not it any more
    }
    Ok(Some((p.xg, consumer_args(p))))
}

fn consumer_args(p: PendingFold) -> RmsFoldArgs {
    RmsFoldArgs {
        parts_in: p.parts,
        normed: p.normed,
        nparts: p.nparts as i32,
        eps: p.eps,
        ..RmsFoldArgs::default()
    }
}

/// Writes out the pending norm, if any (`rms_fold_apply`, one block): before any op that is
/// not its consumer GEMV, a read-back, a host write, or a graph boundary.
pub(crate) fn flush(be: &CudaBackend) -> Result<()> {
    const OP: &str = "rms_fold_apply";
    let pending = be
        .rms_fold
        .lock()
        .map_err(|_| shape_err(OP, "fold lock poisoned"))?
        .take();
    let Some(p) = pending else {
        return Ok(());
    };
    if !be.pool.unwatch(p.normed) {
        return Ok(()); // freed before anyone read it
    }
    be.launch(
        OP,
        Kernel::RmsFoldApply,
        (1, 1, 1),
        1024,
        args![consumer_args(p), p.xg, p.dim as i32],
    )
}

impl CudaBackend {
    /// Overrides `POCKET_RMS_FOLD` for the `matmul_add_rms_norm` calls that follow, in the whole
    /// process (`Some(on)`, or `None`: the environment): tests and benches compare both in one
    /// process.
    pub fn set_rms_fold(&self, on: Option<bool>) {
        FOLD.set(on);
    }
}
