//! Launchers of the recurrent-layer (Gated DeltaNet) kernels of `kernels/deltanet.cu`, with the
//! CPU backend's shape checks. The varlen metadata is validated on the host from the u32 shadows
//! the host wrote (no device round trip), so the kernels can trust it.

use super::kernels::Kernel;
use super::CudaBackend;
use crate::error::shape_err;
use crate::recurrent::{
    check_delta_rule, check_gates, check_norm_rows, conv_state_slots, conv_taps, half_width,
    seq_spans, DeltaRuleParams, HeadGrouping, RecurrentMeta,
};
use crate::{DType, KernelError, Result, Tensor};

mod chunked;
mod decode;
use chunked::{delta_rule_chunked, prefill_form, PrefillForm};
pub(super) use decode::EARLY_STATE;
pub(crate) use decode::{fused_ba_supported, fused_supported, gated_deltanet_decode};

/// Threads per block of the elementwise kernels.
const TPB: u32 = 256;
/// Longest conv kernel the conv kernel keeps in registers (`CONV_MAX_K` in deltanet.cu).
const CONV_MAX_K: usize = 8;
/// State rows each thread of the delta-rule kernel holds (`DR_RPT` in deltanet.cu).
const DR_RPT: usize = 16;
/// Most threads of a delta-rule block (its `__launch_bounds__`).
const DR_MAX_THREADS: usize = 512;

fn blocks(op: &'static str, total: usize) -> Result<u32> {
    u32::try_from(total.div_ceil(TPB as usize))
        .map_err(|_| shape_err(op, format!("{total} elements exceed one grid")))
}

fn same_len(op: &'static str, what: &str, a: usize, b: usize) -> Result<()> {
    if a != b {
        return Err(shape_err(op, format!("{what}: {a} vs {b}")));
    }
    Ok(())
}

/// Device addresses of the batch metadata after validating it as the CPU backend does
/// ([`seq_spans`]: rows in order covering `rows`, slots below `slots` and distinct).
fn check_meta(
    be: &CudaBackend,
    op: &'static str,
    meta: &RecurrentMeta,
    rows: usize,
    slots: usize,
) -> Result<(u64, u64, u64)> {
    let qs = be.host_u32(op, "query_start", &meta.query_start)?;
    let sl = be.host_u32(op, "state_slots", &meta.state_slots)?;
    let hs = be.host_u32(op, "has_state", &meta.has_state)?;
    seq_spans(op, meta.num_seqs, &qs, &sl, &hs, rows, slots)?;
    Ok((
        be.ptr_of(op, "query_start", &meta.query_start, DType::U32)?,
        be.ptr_of(op, "state_slots", &meta.state_slots, DType::U32)?,
        be.ptr_of(op, "has_state", &meta.has_state, DType::U32)?,
    ))
}

/// Number of sequences as a grid dimension.
fn grid_seqs(op: &'static str, meta: &RecurrentMeta) -> Result<u32> {
    u32::try_from(meta.num_seqs).map_err(|_| shape_err(op, format!("{} sequences", meta.num_seqs)))
}

pub(crate) fn causal_conv1d_silu(
    be: &CudaBackend,
    x: &Tensor,
    weight: &Tensor,
    conv_state: &mut Tensor,
    meta: &RecurrentMeta,
    out: &mut Tensor,
) -> Result<()> {
    const OP: &str = "causal_conv1d_silu";
    let c = x.row_len();
    let n = x.rows();
    let k = conv_taps(OP, weight, c)?;
    if k > CONV_MAX_K {
        return Err(KernelError::Unsupported {
            op: OP,
            device: be.name.clone(),
            what: format!("conv kernel of {k} taps (at most {CONV_MAX_K})"),
        });
    }
    let win = k - 1;
    same_len(OP, "x and out elements", x.numel(), out.numel())?;
    let slots = conv_state_slots(OP, conv_state, win, c)?;
    let (qs, sl, hs) = check_meta(be, OP, meta, n, slots)?;
    let xp = be.ptr_of(OP, "x", x, DType::F32)?;
    let wp = be.ptr_of(OP, "weight", weight, DType::F32)?;
    let sp = be.ptr_of(OP, "conv_state", conv_state, DType::F32)?;
    let op = be.ptr_of(OP, "out", out, DType::F32)?;
    be.launch(
        OP,
        Kernel::CausalConv1dSilu,
        (blocks(OP, c)?, grid_seqs(OP, meta)?, 1),
        TPB,
        args![xp, wp, sp, op, qs, sl, hs, c as i32, k as i32],
    )
}

pub(crate) fn delta_gates(
    be: &CudaBackend,
    alpha: &Tensor,
    b: &Tensor,
    a_neg: &Tensor,
    dt_bias: &Tensor,
    g: &mut Tensor,
    beta: &mut Tensor,
) -> Result<()> {
    const OP: &str = "delta_gates";
    let h = a_neg.numel();
    check_gates(OP, h, dt_bias.numel(), alpha, b, g, beta)?;
    let ap = be.ptr_of(OP, "alpha", alpha, DType::F32)?;
    let bp = be.ptr_of(OP, "b", b, DType::F32)?;
    let anp = be.ptr_of(OP, "a_neg", a_neg, DType::F32)?;
    let dtp = be.ptr_of(OP, "dt_bias", dt_bias, DType::F32)?;
    let gp = be.ptr_of(OP, "g", g, DType::F32)?;
    let betap = be.ptr_of(OP, "beta", beta, DType::F32)?;
    let total = alpha.numel();
    be.launch(
        OP,
        Kernel::DeltaGates,
        (blocks(OP, total)?, 1, 1),
        TPB,
        args![ap, bp, anp, dtp, gp, betap, total as u64, h as i32],
    )
}

/// Both forms of the delta rule. Decode (`gated_delta_rule_recurrent`) always scans tokens with
/// the state on chip; prefill (`gated_delta_rule_chunked`) takes the chunked WY/UT kernels of
/// deltanet.cu when [`prefill_form`] picks them, else the same scan.
#[allow(clippy::too_many_arguments)]
pub(crate) fn gated_delta_rule(
    be: &CudaBackend,
    op: &'static str,
    qkv: &Tensor,
    g: &Tensor,
    beta: &Tensor,
    state: &mut Tensor,
    meta: &RecurrentMeta,
    p: &DeltaRuleParams,
    out: &mut Tensor,
) -> Result<()> {
    let geo = check_delta_rule(op, qkv, g, beta, state, p, out)?;
    if op == "gated_delta_rule_chunked" && prefill_form(p, meta.max_rows) == PrefillForm::Chunked {
        // `None`: this GPU cannot give the chunk kernels their shared memory; scan instead.
        if let Some(r) = delta_rule_chunked(be, op, qkv, g, beta, state, meta, p, out, geo.slots) {
            return r;
        }
    }
    let n = geo.n;
    // R warps of DR_RPT rows each cover the k_dim rows of a 32-column slab.
    let warps = p.k_dim.div_ceil(DR_RPT);
    let threads = 32 * warps;
    if threads > DR_MAX_THREADS {
        return Err(KernelError::Unsupported {
            op,
            device: be.name.clone(),
            what: format!(
                "k_dim {} (at most {})",
                p.k_dim,
                DR_MAX_THREADS / 32 * DR_RPT
            ),
        });
    }
    let (qs, sl, hs) = check_meta(be, op, meta, n, geo.slots)?;
    let xp = be.ptr_of(op, "qkv", qkv, DType::F32)?;
    let gp = be.ptr_of(op, "g", g, DType::F32)?;
    let bp = be.ptr_of(op, "beta", beta, DType::F32)?;
    let sp = be.ptr_of(op, "state", state, DType::F32)?;
    let outp = be.ptr_of(op, "out", out, DType::F32)?;
    let smem = (2 * p.k_dim + 2 * warps * 32) * 4;
    if smem > 48 * 1024 {
        return Err(KernelError::Unsupported {
            op,
            device: be.name.clone(),
            what: format!("k_dim {}", p.k_dim),
        });
    }
    let tiled = i32::from(p.grouping == HeadGrouping::Tiled);
    let slabs = u32::try_from(p.v_dim.div_ceil(32))
        .map_err(|_| shape_err(op, format!("v_dim {}", p.v_dim)))?;
    let heads =
        u32::try_from(p.v_heads).map_err(|_| shape_err(op, format!("{} heads", p.v_heads)))?;
    be.launch_smem(
        op,
        Kernel::GatedDeltaRule,
        (grid_seqs(op, meta)?, heads, slabs),
        threads as u32,
        smem as u32,
        args![
            xp,
            gp,
            bp,
            sp,
            outp,
            qs,
            sl,
            hs,
            p.k_heads as i32,
            p.v_heads as i32,
            p.k_dim as i32,
            p.v_dim as i32,
            tiled,
            p.l2_eps,
            p.scale
        ],
    )
}

pub(crate) fn gated_rms_norm(
    be: &CudaBackend,
    x: &Tensor,
    gate: &Tensor,
    weight: &Tensor,
    eps: f32,
    out: &mut Tensor,
) -> Result<()> {
    const OP: &str = "gated_rms_norm";
    let d = weight.numel();
    check_norm_rows(OP, x.numel(), d)?;
    same_len(OP, "x and gate elements", x.numel(), gate.numel())?;
    same_len(OP, "x and out elements", x.numel(), out.numel())?;
    let xp = be.ptr_of(OP, "x", x, DType::F32)?;
    let gp = be.ptr_of(OP, "gate", gate, DType::F32)?;
    let wp = be.ptr_of(OP, "weight", weight, DType::F32)?;
    let op = be.ptr_of(OP, "out", out, DType::F32)?;
    let rows = u32::try_from(x.numel() / d)
        .map_err(|_| shape_err(OP, format!("{} rows", x.numel() / d)))?;
    // One block per row; up to 256 threads, a multiple of a warp (the block sum needs it).
    let threads = d.next_multiple_of(32).min(256) as u32;
    be.launch(
        OP,
        Kernel::GatedRmsNorm,
        (rows, 1, 1),
        threads,
        args![xp, gp, wp, op, d as i32, eps],
    )
}

pub(crate) fn split_halves(
    be: &CudaBackend,
    x: &Tensor,
    first: &mut Tensor,
    second: &mut Tensor,
) -> Result<()> {
    const OP: &str = "split_halves";
    let w = x.row_len();
    let d = half_width(OP, w)?;
    same_len(OP, "first elements", first.numel(), x.numel() / 2)?;
    same_len(OP, "second elements", second.numel(), x.numel() / 2)?;
    let xp = be.ptr_of(OP, "x", x, DType::F32)?;
    let ap = be.ptr_of(OP, "first", first, DType::F32)?;
    let bp = be.ptr_of(OP, "second", second, DType::F32)?;
    let total = x.numel() / 2;
    be.launch(
        OP,
        Kernel::SplitHalves,
        (blocks(OP, total)?, 1, 1),
        TPB,
        args![xp, ap, bp, total as u64, d as i32],
    )
}

pub(crate) fn sigmoid_mul(be: &CudaBackend, x: &mut Tensor, gate: &Tensor) -> Result<()> {
    const OP: &str = "sigmoid_mul";
    same_len(OP, "x and gate elements", x.numel(), gate.numel())?;
    let gp = be.ptr_of(OP, "gate", gate, DType::F32)?;
    let xp = be.ptr_of(OP, "x", x, DType::F32)?;
    let total = x.numel();
    be.launch(
        OP,
        Kernel::SigmoidMul,
        (blocks(OP, total)?, 1, 1),
        TPB,
        args![xp, gp, total as u64],
    )
}
