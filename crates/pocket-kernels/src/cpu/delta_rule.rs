//! The gated delta rule on the CPU, in its two forms: chunked (prefill; the WY/UT-transform form
//! of transformers' `torch_chunk_gated_delta_rule`, 64-token chunks) and recurrent (decode; one
//! token at a time, as `torch_recurrent_gated_delta_rule`). Both read and write the same state,
//! so a prefill followed by decode steps continues exactly where the prompt left off.
//!
//! Work is split over (sequence, value head) pairs: each pair's state matrix is independent.

// The chunk loops index several per-token arrays by the same position; index loops read clearer.
#![allow(clippy::needless_range_loop)]

use rayon::prelude::*;

use super::deltanet::spans;
use super::host::{f32s, f32s_mut};
use crate::recurrent::{check_delta_rule, DeltaRuleParams, RecurrentMeta, SeqSpan};
use crate::{Result, Tensor};

/// Chunk length of the parallel form (transformers' default, so chunk boundaries match).
const CHUNK: usize = 64;

/// One (sequence, value head) problem: its inputs gathered contiguously.
struct Item {
    span: SeqSpan,
    head: usize,
}

/// `x * rsqrt(sum x² + eps)`, in place.
fn l2norm(x: &mut [f32], eps: f32) {
    let ss: f32 = x.iter().map(|v| v * v).sum();
    let inv = 1.0 / (ss + eps).sqrt();
    x.iter_mut().for_each(|v| *v *= inv);
}

fn dot(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// `out[d] = sum_k x[k] * s[k, d]` for `s` `[dk, dv]`.
fn vec_mat(x: &[f32], s: &[f32], dv: usize, out: &mut [f32]) {
    out.iter_mut().for_each(|o| *o = 0.0);
    for (xk, row) in x.iter().zip(s.chunks_exact(dv)) {
        for (o, sv) in out.iter_mut().zip(row) {
            *o += xk * sv;
        }
    }
}

/// Both forms: gathers each item's inputs, runs `form` on it in parallel, scatters the results.
#[allow(clippy::too_many_arguments)]
fn run(
    op: &'static str,
    qkv: &Tensor,
    g: &Tensor,
    beta: &Tensor,
    state: &mut Tensor,
    meta: &RecurrentMeta,
    p: &DeltaRuleParams,
    out: &mut Tensor,
    chunked: bool,
) -> Result<()> {
    let geo = check_delta_rule(op, qkv, g, beta, state, p, out)?;
    let spans = spans(op, meta, geo.n, geo.slots)?;
    let (hk, hv, dk, dv) = (p.k_heads, p.v_heads, p.k_dim, p.v_dim);
    let width = p.qkv_width();
    let x = f32s(op, "qkv", qkv)?;
    let gs = f32s(op, "g", g)?;
    let bs = f32s(op, "beta", beta)?;
    let items: Vec<Item> = spans
        .iter()
        .flat_map(|&span| (0..hv).map(move |head| Item { span, head }))
        .collect();
    let mat = dk * dv;
    let st_in = f32s(op, "state", state)?;
    let results: Vec<(Vec<f32>, Vec<f32>)> = items
        .par_iter()
        .map(|it| {
            let (start, len) = (it.span.start, it.span.end - it.span.start);
            let kh = p.grouping.key_head(it.head, hk, hv);
            let mut q = vec![0f32; len * dk];
            let mut k = vec![0f32; len * dk];
            let mut v = vec![0f32; len * dv];
            let mut gg = vec![0f32; len];
            let mut bb = vec![0f32; len];
            for t in 0..len {
                let row = &x[(start + t) * width..(start + t + 1) * width];
                let qd = &mut q[t * dk..(t + 1) * dk];
                qd.copy_from_slice(&row[kh * dk..(kh + 1) * dk]);
                l2norm(qd, p.l2_eps);
                qd.iter_mut().for_each(|e| *e *= p.scale);
                let kd = &mut k[t * dk..(t + 1) * dk];
                kd.copy_from_slice(&row[(hk + kh) * dk..(hk + kh + 1) * dk]);
                l2norm(kd, p.l2_eps);
                let v0 = 2 * hk * dk + it.head * dv;
                v[t * dv..(t + 1) * dv].copy_from_slice(&row[v0..v0 + dv]);
                gg[t] = gs[(start + t) * hv + it.head];
                bb[t] = bs[(start + t) * hv + it.head];
            }
            let mut s = vec![0f32; mat];
            if it.span.has_state {
                let off = (it.span.slot * hv + it.head) * mat;
                s.copy_from_slice(&st_in[off..off + mat]);
            }
            let mut o = vec![0f32; len * dv];
            let inputs = Inputs {
                q: &q,
                k: &k,
                v: &v,
                g: &gg,
                beta: &bb,
                dk,
                dv,
            };
            if chunked {
                chunked_form(&inputs, &mut s, &mut o);
            } else {
                recurrent_form(&inputs, &mut s, &mut o);
            }
            (o, s)
        })
        .collect();
    let os = f32s_mut(op, "out", out)?;
    for (it, (o, _)) in items.iter().zip(&results) {
        for t in 0..it.span.end - it.span.start {
            let row = (it.span.start + t) * hv * dv + it.head * dv;
            os[row..row + dv].copy_from_slice(&o[t * dv..(t + 1) * dv]);
        }
    }
    let st = f32s_mut(op, "state", state)?;
    for (it, (_, s)) in items.iter().zip(&results) {
        let off = (it.span.slot * hv + it.head) * mat;
        st[off..off + mat].copy_from_slice(s);
    }
    Ok(())
}

/// One item's inputs: `q` (normalised and scaled), `k` (normalised) `[len, dk]`, `v`
/// `[len, dv]`, `g` and `beta` `[len]`.
struct Inputs<'a> {
    q: &'a [f32],
    k: &'a [f32],
    v: &'a [f32],
    g: &'a [f32],
    beta: &'a [f32],
    dk: usize,
    dv: usize,
}

/// Token by token: `S *= exp(g)`, `S += k ⊗ beta (v - Sᵀk)`, `o = Sᵀq`.
fn recurrent_form(x: &Inputs, s: &mut [f32], out: &mut [f32]) {
    let (dk, dv) = (x.dk, x.dv);
    let mut kv = vec![0f32; dv];
    for t in 0..x.g.len() {
        let decay = x.g[t].exp();
        s.iter_mut().for_each(|e| *e *= decay);
        let k = &x.k[t * dk..(t + 1) * dk];
        vec_mat(k, s, dv, &mut kv);
        let v = &x.v[t * dv..(t + 1) * dv];
        for (d, kvd) in kv.iter_mut().enumerate() {
            *kvd = (v[d] - *kvd) * x.beta[t];
        }
        for (kk, row) in k.iter().zip(s.chunks_exact_mut(dv)) {
            for (sv, dd) in row.iter_mut().zip(&kv) {
                *sv += kk * dd;
            }
        }
        vec_mat(
            &x.q[t * dk..(t + 1) * dk],
            s,
            dv,
            &mut out[t * dv..(t + 1) * dv],
        );
    }
}

/// Chunks of [`CHUNK`] tokens: within a chunk the updates are condensed by the UT transform
/// (a unit lower-triangular solve), across chunks the state carries over.
fn chunked_form(x: &Inputs, s: &mut [f32], out: &mut [f32]) {
    let (dk, dv) = (x.dk, x.dv);
    let len = x.g.len();
    let mut gam = vec![0f32; CHUNK];
    let mut a = vec![0f32; CHUNK * CHUNK];
    let mut u = vec![0f32; CHUNK * dv];
    let mut w = vec![0f32; CHUNK * dk];
    let mut tmp = vec![0f32; dv];
    let mut next = vec![0f32; dk * dv];
    for c0 in (0..len).step_by(CHUNK) {
        let m = CHUNK.min(len - c0);
        let k = |i: usize| &x.k[(c0 + i) * dk..(c0 + i + 1) * dk];
        let q = |i: usize| &x.q[(c0 + i) * dk..(c0 + i + 1) * dk];
        let mut acc = 0f32;
        for i in 0..m {
            acc += x.g[c0 + i];
            gam[i] = acc;
        }
        // A[i, j] = beta_i (k_i · k_j) exp(γ_i - γ_j), strictly lower.
        for i in 0..m {
            for j in 0..i {
                a[i * CHUNK + j] = x.beta[c0 + i] * dot(k(i), k(j)) * (gam[i] - gam[j]).exp();
            }
        }
        // Forward substitution of (I + A) U = beta v and (I + A) W = beta exp(γ) k.
        for i in 0..m {
            let b = x.beta[c0 + i];
            let eg = gam[i].exp();
            let vi = &x.v[(c0 + i) * dv..(c0 + i + 1) * dv];
            let (done_u, rest_u) = u.split_at_mut(i * dv);
            let ui = &mut rest_u[..dv];
            ui.iter_mut().zip(vi).for_each(|(o, v)| *o = b * v);
            let (done_w, rest_w) = w.split_at_mut(i * dk);
            let wi = &mut rest_w[..dk];
            wi.iter_mut().zip(k(i)).for_each(|(o, kv)| *o = b * eg * kv);
            for j in 0..i {
                let aij = a[i * CHUNK + j];
                ui.iter_mut()
                    .zip(&done_u[j * dv..(j + 1) * dv])
                    .for_each(|(o, x)| *o -= aij * x);
                wi.iter_mut()
                    .zip(&done_w[j * dk..(j + 1) * dk])
                    .for_each(|(o, x)| *o -= aij * x);
            }
        }
        // v_new_i = U_i - W_i S (the part of the values the carried state does not predict).
        for i in 0..m {
            vec_mat(&w[i * dk..(i + 1) * dk], s, dv, &mut tmp);
            u[i * dv..(i + 1) * dv]
                .iter_mut()
                .zip(&tmp)
                .for_each(|(o, t)| *o -= t);
        }
        // o_i = exp(γ_i) q_i S + Σ_{j<=i} (q_i · k_j) exp(γ_i - γ_j) v_new_j.
        for i in 0..m {
            let o = &mut out[(c0 + i) * dv..(c0 + i + 1) * dv];
            vec_mat(q(i), s, dv, o);
            let eg = gam[i].exp();
            o.iter_mut().for_each(|e| *e *= eg);
            for j in 0..=i {
                let c = dot(q(i), k(j)) * (gam[i] - gam[j]).exp();
                o.iter_mut()
                    .zip(&u[j * dv..(j + 1) * dv])
                    .for_each(|(e, vn)| *e += c * vn);
            }
        }
        // S = exp(γ_last) S + Σ_j exp(γ_last - γ_j) k_j ⊗ v_new_j.
        let last = gam[m - 1];
        let el = last.exp();
        next.iter_mut()
            .zip(s.iter())
            .for_each(|(n, sv)| *n = el * sv);
        for j in 0..m {
            let d = (last - gam[j]).exp();
            for (kk, row) in k(j).iter().zip(next.chunks_exact_mut(dv)) {
                let f = d * kk;
                row.iter_mut()
                    .zip(&u[j * dv..(j + 1) * dv])
                    .for_each(|(r, vn)| *r += f * vn);
            }
        }
        s.copy_from_slice(&next);
    }
}

/// The chunked (prefill) form.
pub(crate) fn gated_delta_rule_chunked(
    qkv: &Tensor,
    g: &Tensor,
    beta: &Tensor,
    state: &mut Tensor,
    meta: &RecurrentMeta,
    p: &DeltaRuleParams,
    out: &mut Tensor,
) -> Result<()> {
    run(
        "gated_delta_rule_chunked",
        qkv,
        g,
        beta,
        state,
        meta,
        p,
        out,
        true,
    )
}

/// The recurrent (decode) form.
pub(crate) fn gated_delta_rule_recurrent(
    qkv: &Tensor,
    g: &Tensor,
    beta: &Tensor,
    state: &mut Tensor,
    meta: &RecurrentMeta,
    p: &DeltaRuleParams,
    out: &mut Tensor,
) -> Result<()> {
    run(
        "gated_delta_rule_recurrent",
        qkv,
        g,
        beta,
        state,
        meta,
        p,
        out,
        false,
    )
}
