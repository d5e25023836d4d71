//! CPU recurrent-layer ops (Gated DeltaNet): the short causal conv with its state window, the
//! delta-rule gates, the gated RMSNorm, the half split and the sigmoid gate. The delta rule itself
//! is in `delta_rule.rs`.

use rayon::prelude::*;

use super::host::{f32s, f32s_mut, same_len, u32s};
use crate::recurrent::{
    check_gates, check_norm_rows, conv_state_slots, conv_taps, half_width, seq_spans,
    RecurrentMeta, SeqSpan,
};
use crate::{Result, Tensor};

/// Elements below which an op runs on the calling thread.
const PAR_MIN: usize = 1 << 14;

/// Reads the batch description from host memory and validates it
/// ([`crate::recurrent::seq_spans`]).
pub(crate) fn spans(
    op: &'static str,
    meta: &RecurrentMeta,
    rows: usize,
    slots: usize,
) -> Result<Vec<SeqSpan>> {
    let qs = u32s(op, "query_start", &meta.query_start)?;
    let sl = u32s(op, "state_slots", &meta.state_slots)?;
    let hs = u32s(op, "has_state", &meta.has_state)?;
    seq_spans(op, meta.num_seqs, qs, sl, hs, rows, slots)
}

#[inline]
fn silu(x: f32) -> f32 {
    x / (1.0 + (-x).exp())
}

#[inline]
fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + (-x).exp())
}

/// torch's `softplus` (beta 1, threshold 20: linear above it).
#[inline]
fn softplus(x: f32) -> f32 {
    if x > 20.0 {
        x
    } else {
        x.exp().ln_1p()
    }
}

/// Depthwise causal conv1d + SiLU per sequence, continuing from and updating the state window.
pub(crate) fn causal_conv1d_silu(
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
    let win = k - 1;
    same_len(OP, "x and out elements", x.numel(), out.numel())?;
    let per_slot = win * c;
    let slots = conv_state_slots(OP, conv_state, win, c)?;
    let spans = spans(OP, meta, n, slots)?;
    let w = f32s(OP, "weight", weight)?;
    let xs = f32s(OP, "x", x)?;
    let os = f32s_mut(OP, "out", out)?;
    let st = f32s_mut(OP, "conv_state", conv_state)?;
    let mut window = Vec::new();
    for sp in spans {
        let len = sp.end - sp.start;
        // The window: the previous K-1 inputs (zeros for a fresh sequence), then this step's rows.
        window.clear();
        window.resize((win + len) * c, 0.0);
        let state = &mut st[sp.slot * per_slot..(sp.slot + 1) * per_slot];
        if sp.has_state {
            window[..per_slot].copy_from_slice(state);
        }
        window[per_slot..].copy_from_slice(&xs[sp.start * c..sp.end * c]);
        let rows = &mut os[sp.start * c..sp.end * c];
        let body = |(t, orow): (usize, &mut [f32])| {
            for (ch, o) in orow.iter_mut().enumerate() {
                let wr = &w[ch * k..(ch + 1) * k];
                let acc: f32 = (0..k).map(|j| wr[j] * window[(t + j) * c + ch]).sum();
                *o = silu(acc);
            }
        };
        if len * c * k >= PAR_MIN {
            rows.par_chunks_mut(c).enumerate().for_each(body);
        } else {
            rows.chunks_mut(c).enumerate().for_each(body);
        }
        state.copy_from_slice(&window[len * c..]);
    }
    Ok(())
}

/// `g = a_neg * softplus(alpha + dt_bias)`, `beta = sigmoid(b)`.
pub(crate) fn delta_gates(
    alpha: &Tensor,
    b: &Tensor,
    a_neg: &Tensor,
    dt_bias: &Tensor,
    g: &mut Tensor,
    beta: &mut Tensor,
) -> Result<()> {
    const OP: &str = "delta_gates";
    let an = f32s(OP, "a_neg", a_neg)?;
    let dt = f32s(OP, "dt_bias", dt_bias)?;
    let h = an.len();
    check_gates(OP, h, dt.len(), alpha, b, g, beta)?;
    let al = f32s(OP, "alpha", alpha)?;
    let bs = f32s(OP, "b", b)?;
    let gs = f32s_mut(OP, "g", g)?;
    for (i, (o, a)) in gs.iter_mut().zip(al).enumerate() {
        let hh = i % h;
        *o = an[hh] * softplus(a + dt[hh]);
    }
    let be = f32s_mut(OP, "beta", beta)?;
    for (o, v) in be.iter_mut().zip(bs) {
        *o = sigmoid(*v);
    }
    Ok(())
}

/// `out = x / rms(x) * weight * silu(gate)` per row of `weight.len()`.
pub(crate) fn gated_rms_norm(
    x: &Tensor,
    gate: &Tensor,
    weight: &Tensor,
    eps: f32,
    out: &mut Tensor,
) -> Result<()> {
    const OP: &str = "gated_rms_norm";
    let w = f32s(OP, "weight", weight)?;
    let d = w.len();
    check_norm_rows(OP, x.numel(), d)?;
    same_len(OP, "x and gate elements", x.numel(), gate.numel())?;
    same_len(OP, "x and out elements", x.numel(), out.numel())?;
    let xs = f32s(OP, "x", x)?;
    let gs = f32s(OP, "gate", gate)?;
    let os = f32s_mut(OP, "out", out)?;
    let body = |((o, r), gr): ((&mut [f32], &[f32]), &[f32])| {
        let ss: f32 = r.iter().map(|v| v * v).sum();
        let inv = 1.0 / (ss / d as f32 + eps).sqrt();
        for (((o, v), w), g) in o.iter_mut().zip(r).zip(w).zip(gr) {
            *o = v * inv * w * silu(*g);
        }
    };
    if xs.len() >= PAR_MIN {
        os.par_chunks_mut(d)
            .zip(xs.par_chunks(d))
            .zip(gs.par_chunks(d))
            .for_each(body);
    } else {
        os.chunks_mut(d)
            .zip(xs.chunks(d))
            .zip(gs.chunks(d))
            .for_each(body);
    }
    Ok(())
}

/// Splits each row of `x` into its two halves.
pub(crate) fn split_halves(x: &Tensor, first: &mut Tensor, second: &mut Tensor) -> Result<()> {
    const OP: &str = "split_halves";
    let w = x.row_len();
    let d = half_width(OP, w)?;
    same_len(OP, "first elements", first.numel(), x.numel() / 2)?;
    same_len(OP, "second elements", second.numel(), x.numel() / 2)?;
    let xs = f32s(OP, "x", x)?;
    let a = f32s_mut(OP, "first", first)?;
    for (o, r) in a.chunks_mut(d).zip(xs.chunks(w)) {
        o.copy_from_slice(&r[..d]);
    }
    let b = f32s_mut(OP, "second", second)?;
    for (o, r) in b.chunks_mut(d).zip(xs.chunks(w)) {
        o.copy_from_slice(&r[d..]);
    }
    Ok(())
}

/// `x *= sigmoid(gate)`.
pub(crate) fn sigmoid_mul(x: &mut Tensor, gate: &Tensor) -> Result<()> {
    const OP: &str = "sigmoid_mul";
    same_len(OP, "x and gate elements", x.numel(), gate.numel())?;
    let gs = f32s(OP, "gate", gate)?;
    let xs = f32s_mut(OP, "x", x)?;
    for (v, g) in xs.iter_mut().zip(gs) {
        *v *= sigmoid(*g);
    }
    Ok(())
}
