//! The one-row dp4a GEMV with an epilogue (`gemv_q8e_*`, `gemv_q8g_*` of
//! kernels/gemv_q8_epi.cu), which takes over the small kernels beside the GGUF decode step's
//! GEMVs: the residual-add RMSNorm folded into the projection before it and the one after it
//! (cuda/rms_fold.rs), and the SwiGLU of a stacked `[gate; up]` weight. Each leaves the 8-bit
//! quantization of the vector the next GEMV reads in the fold scratch, so no quantize launch
//! runs either. Each applies where the plain one-row GEMV would take the 4-row kernel
//! (`gemv_q8r_*` or `gemv_q8r64_*`, whose block and registers it keeps); elsewhere the
//! unfused ops run.

use super::gate_up_fp8::gate_up_fused_on;
use super::gemv_q8::q8_one_row;
use super::kernels::{DevFormat, Kernel, Q8Gemv};
use super::matmul::{device_weight, q8_input, warp_per_row, Q8Bufs, Q8Cached, GEMVR_ROWS};
use super::rms_fold::{self, FoldScratch, RmsFoldArgs};
use super::CudaBackend;
use crate::error::shape_err;
use crate::{DType, Result, Tensor, Weight};

/// The kernels' `Q8Out` argument (kernels/gemv_q8_epi.cu): where the epilogue writes its 8-bit
/// copy of a vector, both kinds (the Q8K one null where the length is not a multiple of 256).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
struct Q8OutArgs {
    q: u64,
    d: u64,
    s: u64,
    qk: u64,
    dk: u64,
    sk: u64,
}

impl Q8OutArgs {
    /// The [`Q8Bufs`] at `base` for one row of `n` values.
    fn at(base: u64, n: usize) -> Q8OutArgs {
        let b = Q8Bufs::at(base, 1, n);
        let (qk, dk, sk) = if n.is_multiple_of(256) {
            b.k
        } else {
            (0, 0, 0)
        };
        Q8OutArgs {
            q: b.q8.0,
            d: b.q8.1,
            s: b.q8.2,
            qk,
            dk,
            sk,
        }
    }
}

/// The kernels' `Q8Epi` argument, field for field.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
struct Q8EpiArgs {
    fold: RmsFoldArgs,
    xg_in: u64,
    q8: Q8OutArgs,
    counters: u64,
    inter: i32,
    nout: i32,
}

/// The epilogue kernel for a one-row GEMV of a `rows x cols` matrix of `q` (`glu`: the SwiGLU
/// form over a stacked weight) and its block threads, where the plain GEMV would take the 4-row
/// kernel; `None` where it would take another (the unfused ops keep that choice).
fn epi_kernel(
    be: &CudaBackend,
    q: Q8Gemv,
    rows: usize,
    cols: usize,
    glu: bool,
) -> Option<(Kernel, u32)> {
    if warp_per_row() || be.fused_gemv() {
        return None;
    }
    match q8_one_row(q, rows, cols) {
        (Kernel::GemvQ8Rows(_), _, t) => Some((Kernel::GemvQ8Epi(q, glu, false), t)),
        (Kernel::GemvQ8Rows64(_), _, t) => Some((Kernel::GemvQ8Epi(q, glu, true), t)),
        _ => None,
    }
}

/// The dp4a format of `w`, if it has one.
fn q8_format(w: &Weight) -> Option<Q8Gemv> {
    DevFormat::of(w.format)?.q8_gemv()
}

/// Whether `w` can be a folded norm's producer here (rms_fold.rs checks the rest): a dp4a
/// format taking the 4-row kernel, rows a multiple of 32 (whole quantization blocks).
pub(crate) fn producer_applies(be: &CudaBackend, w: &Weight) -> bool {
    q8_format(w).is_some_and(|q| {
        w.rows.is_multiple_of(32) && epi_kernel(be, q, w.rows, w.cols, false).is_some()
    })
}

/// One epilogue launch: `out = x · Wᵀ` over the activation `act` ([`Q8Bufs`] base) with `epi`.
#[allow(clippy::too_many_arguments)]
fn launch(
    be: &CudaBackend,
    op: &'static str,
    w: &Weight,
    act: u64,
    out: u64,
    blocks: usize,
    glu: bool,
    epi: Q8EpiArgs,
) -> Result<()> {
    let (cw, f) = device_weight(be, op, w)?;
    let q = f
        .q8_gemv()
        .ok_or_else(|| shape_err(op, "not a dp4a format"))?;
    let (k, threads) = epi_kernel(be, q, w.rows, w.cols, glu)
        .ok_or_else(|| shape_err(op, "the one-row GEMV is not the 4-row kernel"))?;
    let (xq, xd, xs) = Q8Bufs::at(act, 1, w.cols).kind(q.act_k());
    be.launch(
        op,
        k,
        (blocks as u32, 1, 1),
        threads,
        args![
            cw.storage.ptr(),
            xq,
            xd,
            xs,
            out,
            w.rows as i32,
            w.cols as i32,
            epi
        ],
    )
}

/// The producer half of a folded norm for a dp4a weight (rms_fold.rs `produce` checked the
/// shapes and buffers): `delta = x · Wᵀ` with `fold`'s residual add and, per 256 outputs, the
/// sum of squares and x * g's quantization. Returns where that quantization lies.
pub(crate) fn produce(
    be: &CudaBackend,
    w: &Weight,
    x: u64,
    delta: u64,
    fold: RmsFoldArgs,
    fs: &FoldScratch,
) -> Result<u64> {
    const OP: &str = "matmul_add_rms_norm";
    let input = q8_input(be, OP, x, 1, w.cols)?;
    let q8 = fs.q8_out(input.q8.0);
    let epi = Q8EpiArgs {
        fold,
        q8: Q8OutArgs::at(q8, w.rows),
        counters: fs.counters,
        nout: w.rows as i32,
        ..Q8EpiArgs::default()
    };
    launch(
        be,
        OP,
        w,
        input.q8.0,
        delta,
        w.rows.div_ceil(GEMVR_ROWS),
        false,
        epi,
    )?;
    Ok(q8)
}

/// `matmul`'s one-row dp4a GEMV as the consumer of a pending folded norm whose output is `x`:
/// `Ok(false)` (nothing launched) where no such fold is pending or the kernel does not apply.
pub(crate) fn matmul_fold_consumer(
    be: &CudaBackend,
    q: Q8Gemv,
    w: &Weight,
    x: u64,
    out: u64,
) -> Result<bool> {
    const OP: &str = "matmul";
    if epi_kernel(be, q, w.rows, w.cols, false).is_none() {
        return Ok(false);
    }
    let Some((act, xg, fold)) = rms_fold::take_for_q8_consumer(be, x, w.cols, (out, 4 * w.rows))?
    else {
        return Ok(false);
    };
    be.forget_q8_if_overlaps(out, 4 * w.rows);
    let epi = Q8EpiArgs {
        fold,
        xg_in: xg,
        nout: w.rows as i32,
        ..Q8EpiArgs::default()
    };
    launch(be, OP, w, act, out, w.rows.div_ceil(GEMVR_ROWS), false, epi)?;
    Ok(true)
}

/// `matmul_silu_halves` of a stacked dp4a `[gate; up]` weight and one activation row in one
/// launch (`gemv_q8g_*`), also leaving `out`'s quantization for the down projection; the
/// consumer of a pending folded norm whose output is `x`. `Ok(false)` (nothing launched) where
/// it does not apply: `POCKET_GATE_UP_FUSED=0`, not a dp4a weight, not one row, shapes (an
/// intermediate width that is not a multiple of 32), or the plain GEMV's kernel choice.
pub(crate) fn gate_up_silu(
    be: &CudaBackend,
    x: &Tensor,
    w: &Weight,
    out: &mut Tensor,
) -> Result<bool> {
    const OP: &str = "matmul_silu_halves";
    let inter = out.numel();
    let Some(q) = q8_format(w) else {
        return Ok(false);
    };
    let fits = gate_up_fused_on()
        && x.rows() == 1
        && x.row_len() == w.cols
        && w.rows == 2 * inter
        && inter.is_multiple_of(32)
        && x.dtype == DType::F32
        && out.dtype == DType::F32;
    if !fits || epi_kernel(be, q, w.rows, w.cols, true).is_none() {
        return Ok(false);
    }
    let xp = be.ptr_of(OP, "x", x, DType::F32)?;
    let op = be.ptr_of(OP, "out", out, DType::F32)?;
    let fs = rms_fold::fold_scratch(be, OP)?;
    let (act, fold, xg_in) = match rms_fold::take_for_q8_consumer(be, xp, w.cols, (op, 4 * inter))?
    {
        Some((act, xg, fold)) => (act, fold, xg),
        None => (
            q8_input(be, OP, xp, 1, w.cols)?.q8.0,
            RmsFoldArgs::default(),
            0,
        ),
    };
    let q8 = fs.q8_out(act);
    be.invalidate_q8();
    let epi = Q8EpiArgs {
        fold,
        xg_in,
        q8: Q8OutArgs::at(q8, inter),
        counters: fs.counters,
        inter: inter as i32,
        nout: inter as i32,
    };
    launch(be, OP, w, act, op, inter / 2, true, epi)?;
    // The down projection reads `out`: its quantization is where this launch left it.
    *be.q8_cache
        .lock()
        .map_err(|_| shape_err(OP, "q8 cache lock poisoned"))? = Some(Q8Cached {
        x: op,
        m: 1,
        cols: inter,
        base: q8,
    });
    Ok(true)
}
