//! The attention-input op on the CPU: the reference of the CUDA kernel, composed of the unfused
//! ops' own functions (gather + bias as `split_columns` + `add_bias` (+ `split_halves`), then
//! `rms_norm` for QK-norm, `rope` and `kv_write`), so the fused and unfused CPU paths agree bit
//! for bit.

use super::attention;
use super::elementwise;
use super::host::{f32s, f32s_mut, u32s};
use crate::qkv_rope::{
    check_extras, plan, BiasPart, Part, QkNorm, QkvBias, QkvRopeParams, QkvSource, OP,
};
use crate::rope::DeviceRope;
use crate::{AttentionMeta, Result, Tensor};

/// Copies `heads` heads of `head_dim` per token from `part` (query heads `head_stride` apart)
/// plus the bias into `out` (`[n, heads * head_dim]`), adding as `add_bias` does.
fn gather(
    part: &Part<'_>,
    bias: &BiasPart<'_>,
    n: usize,
    heads: usize,
    head_dim: usize,
    head_stride: usize,
    out: &mut [f32],
) -> Result<()> {
    let x = f32s(OP, "qkv", part.tensor)?;
    let b = match bias {
        Some((t, col)) => Some(&f32s(OP, "bias", t)?[*col..]),
        None => None,
    };
    for t in 0..n {
        for h in 0..heads {
            let src = t * part.stride + part.col + h * head_stride;
            let dst = &mut out[(t * heads + h) * head_dim..][..head_dim];
            dst.copy_from_slice(&x[src..src + head_dim]);
            if let Some(b) = b {
                for (o, &bv) in dst.iter_mut().zip(&b[h * head_stride..]) {
                    *o += bv;
                }
            }
        }
    }
    Ok(())
}

/// `x = rms_norm(x)` over rows of `head_dim`, through the op's own function (`x` is copied first:
/// `rms_norm` reads and writes distinct tensors).
fn norm_heads(x: &mut Tensor, rows: usize, head_dim: usize, w: &Tensor, eps: f32) -> Result<()> {
    let src = Tensor::host_f32(f32s(OP, "rows", x)?.to_vec(), &[rows, head_dim]);
    elementwise::rms_norm(&src, w, eps, x)
}

/// See [`crate::Backend::qkv_norm_rope_kv_write`]: gather + bias (as `split_columns`, `add_bias`
/// and `split_halves`), then `rms_norm`, `rope` and `kv_write`, each the unfused op's function.
#[allow(clippy::too_many_arguments)]
pub(crate) fn qkv_norm_rope_kv_write(
    src: QkvSource<'_>,
    bias: QkvBias<'_>,
    p: &QkvRopeParams,
    norm: QkNorm<'_>,
    positions: &Tensor,
    rope: &DeviceRope,
    q_out: &mut Tensor,
    gate_out: Option<&mut Tensor>,
    k_cache: &mut Tensor,
    v_cache: &mut Tensor,
    meta: &AttentionMeta,
) -> Result<()> {
    let pos = u32s(OP, "positions", positions)?;
    let slots = u32s(OP, "slot_mapping", &meta.slot_mapping)?;
    let pl = plan(src, bias, p, pos, rope, q_out, k_cache, v_cache, slots)?;
    check_extras(p, pl.n, &norm, gate_out.as_deref())?;
    let (n, h, kvh, hd) = (pl.n, p.heads, p.kv_heads, p.head_dim);
    {
        let q = f32s_mut(OP, "q_out", q_out)?;
        gather(&pl.parts[0], &pl.bias[0], n, h, hd, p.q_head_stride, q)?;
    }
    if let Some((w, eps)) = norm.q {
        norm_heads(q_out, n * h, hd, w, eps)?;
    }
    elementwise::rope(q_out, positions, rope)?;
    if let Some(g) = gate_out {
        // The second half of each [query | gate] head.
        let part = Part {
            col: pl.parts[0].col + hd,
            ..pl.parts[0]
        };
        let b = pl.bias[0].map(|(t, col)| (t, col + hd));
        gather(
            &part,
            &b,
            n,
            h,
            hd,
            p.q_head_stride,
            f32s_mut(OP, "gate_out", g)?,
        )?;
    }
    let mut k = Tensor::host_f32(vec![0.0; n * kvh * hd], &[n, kvh, hd]);
    let mut v = Tensor::host_f32(vec![0.0; n * kvh * hd], &[n, kvh, hd]);
    gather(
        &pl.parts[1],
        &pl.bias[1],
        n,
        kvh,
        hd,
        hd,
        f32s_mut(OP, "k", &mut k)?,
    )?;
    gather(
        &pl.parts[2],
        &pl.bias[2],
        n,
        kvh,
        hd,
        hd,
        f32s_mut(OP, "v", &mut v)?,
    )?;
    if let Some((w, eps)) = norm.k {
        norm_heads(&mut k, n * kvh, hd, w, eps)?;
    }
    elementwise::rope(&mut k, positions, rope)?;
    attention::kv_write(&k, &v, k_cache, v_cache, meta)
}
