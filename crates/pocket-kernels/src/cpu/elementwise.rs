//! Row-wise and elementwise ops: bias, RMSNorm (plain and fused with the residual add), add,
//! SwiGLU, RoPE, argmax and row gathers.

use rayon::prelude::*;

use super::host::{f32s, f32s_mut, same_len, u32s};
use crate::error::shape_err;
use crate::rope::{DeviceRope, RopeLayout};
use crate::{Result, Tensor};

/// Elements below which an op runs on the calling thread (rayon's overhead exceeds the work).
const PAR_MIN: usize = 1 << 14;

/// `x[i, :] += bias`.
pub(crate) fn add_bias(x: &mut Tensor, bias: &Tensor) -> Result<()> {
    const OP: &str = "add_bias";
    let b = f32s(OP, "bias", bias)?;
    let m = b.len();
    if m == 0 || x.row_len() != m {
        return Err(shape_err(
            OP,
            format!("x rows of {} vs bias of {m}", x.row_len()),
        ));
    }
    let xs = f32s_mut(OP, "x", x)?;
    for row in xs.chunks_exact_mut(m) {
        for (v, b) in row.iter_mut().zip(b) {
            *v += b;
        }
    }
    Ok(())
}

/// `out_row = row * w / rms(row)` for one row.
#[inline]
fn norm_row(row: &[f32], w: &[f32], eps: f32, out: &mut [f32]) {
    let ss: f32 = row.iter().map(|v| v * v).sum();
    let inv = 1.0 / (ss / row.len() as f32 + eps).sqrt();
    for ((o, v), w) in out.iter_mut().zip(row).zip(w) {
        *o = v * inv * w;
    }
}

/// Checks the RMSNorm shapes and returns the row length.
fn norm_shapes(op: &'static str, x: &Tensor, w: &[f32], out: &Tensor) -> Result<usize> {
    let d = w.len();
    if d == 0 || !x.numel().is_multiple_of(d) {
        return Err(shape_err(
            op,
            format!("{} elements are not rows of {d}", x.numel()),
        ));
    }
    same_len(op, "x and out elements", x.numel(), out.numel())?;
    Ok(d)
}

/// `out = x / rms(x) * weight` over rows of `weight.len()`.
pub(crate) fn rms_norm(x: &Tensor, weight: &Tensor, eps: f32, out: &mut Tensor) -> Result<()> {
    const OP: &str = "rms_norm";
    let w = f32s(OP, "weight", weight)?;
    let d = norm_shapes(OP, x, w, out)?;
    let xs = f32s(OP, "x", x)?;
    let os = f32s_mut(OP, "out", out)?;
    if xs.len() >= PAR_MIN {
        os.par_chunks_mut(d)
            .zip(xs.par_chunks(d))
            .for_each(|(o, r)| norm_row(r, w, eps, o));
    } else {
        for (o, r) in os.chunks_mut(d).zip(xs.chunks(d)) {
            norm_row(r, w, eps, o);
        }
    }
    Ok(())
}

/// `residual += delta; out = rms_norm(residual) * weight`.
pub(crate) fn add_rms_norm(
    residual: &mut Tensor,
    delta: &Tensor,
    weight: &Tensor,
    eps: f32,
    out: &mut Tensor,
) -> Result<()> {
    const OP: &str = "add_rms_norm";
    let w = f32s(OP, "weight", weight)?;
    let d = norm_shapes(OP, residual, w, out)?;
    same_len(
        OP,
        "residual and delta elements",
        residual.numel(),
        delta.numel(),
    )?;
    let ds = f32s(OP, "delta", delta)?;
    let rs = f32s_mut(OP, "residual", residual)?;
    let os = f32s_mut(OP, "out", out)?;
    let row = |(r, (dl, o)): (&mut [f32], (&[f32], &mut [f32]))| {
        for (a, b) in r.iter_mut().zip(dl) {
            *a += b;
        }
        norm_row(r, w, eps, o);
    };
    if rs.len() >= PAR_MIN {
        rs.par_chunks_mut(d)
            .zip(ds.par_chunks(d).zip(os.par_chunks_mut(d)))
            .for_each(row);
    } else {
        rs.chunks_mut(d)
            .zip(ds.chunks(d).zip(os.chunks_mut(d)))
            .for_each(row);
    }
    Ok(())
}

/// `x += y`.
pub(crate) fn add_assign(x: &mut Tensor, y: &Tensor) -> Result<()> {
    const OP: &str = "add_assign";
    same_len(OP, "x and y elements", x.numel(), y.numel())?;
    let ys = f32s(OP, "y", y)?;
    let xs = f32s_mut(OP, "x", x)?;
    for (a, b) in xs.iter_mut().zip(ys) {
        *a += b;
    }
    Ok(())
}

/// `out = silu(gate) * up`.
pub(crate) fn silu_mul(gate: &Tensor, up: &Tensor, out: &mut Tensor) -> Result<()> {
    const OP: &str = "silu_mul";
    same_len(OP, "gate and up elements", gate.numel(), up.numel())?;
    same_len(OP, "gate and out elements", gate.numel(), out.numel())?;
    let g = f32s(OP, "gate", gate)?;
    let u = f32s(OP, "up", up)?;
    let o = f32s_mut(OP, "out", out)?;
    let f = |((o, g), u): ((&mut f32, &f32), &f32)| *o = g / (1.0 + (-g).exp()) * u;
    if o.len() >= PAR_MIN {
        o.par_iter_mut()
            .zip(g.par_iter())
            .zip(u.par_iter())
            .for_each(f);
    } else {
        o.iter_mut().zip(g).zip(u).for_each(f);
    }
    Ok(())
}

/// Rotates the leading `rot_dim` dims of each head of `x` `[n, heads, head_dim]` in place.
pub(crate) fn rope(x: &mut Tensor, positions: &Tensor, rope: &DeviceRope) -> Result<()> {
    const OP: &str = "rope";
    if x.shape.len() != 3 {
        return Err(shape_err(
            OP,
            format!("x must be [n, heads, head_dim], is {:?}", x.shape),
        ));
    }
    let (n, heads, hd) = (x.shape[0], x.shape[1], x.shape[2]);
    let rot = rope.config.rot_dim;
    if rot == 0 || !rot.is_multiple_of(2) || rot > hd {
        return Err(shape_err(
            OP,
            format!("rot_dim {rot} does not fit head_dim {hd}"),
        ));
    }
    let half = rot / 2;
    let pos = u32s(OP, "positions", positions)?;
    same_len(OP, "positions vs tokens", pos.len(), n)?;
    let cos = f32s(OP, "cos", &rope.cos)?;
    let sin = f32s(OP, "sin", &rope.sin)?;
    let max_pos = cos.len() / half;
    if let Some(&p) = pos.iter().find(|&&p| p as usize >= max_pos) {
        return Err(shape_err(
            OP,
            format!("position {p} beyond the table's {max_pos}"),
        ));
    }
    let layout = rope.config.layout;
    let xs = f32s_mut(OP, "x", x)?;
    let tok = |(t, row): (usize, &mut [f32])| {
        let p = pos[t] as usize;
        let (c, s) = (
            &cos[p * half..(p + 1) * half],
            &sin[p * half..(p + 1) * half],
        );
        for head in row.chunks_exact_mut(hd) {
            for i in 0..half {
                let (a, b) = match layout {
                    RopeLayout::Interleaved => (2 * i, 2 * i + 1),
                    RopeLayout::NeoX => (i, i + half),
                };
                let (x0, x1) = (head[a], head[b]);
                head[a] = x0 * c[i] - x1 * s[i];
                head[b] = x0 * s[i] + x1 * c[i];
            }
        }
    };
    if xs.len() >= PAR_MIN {
        xs.par_chunks_mut(heads * hd).enumerate().for_each(tok);
    } else {
        xs.chunks_mut(heads * hd).enumerate().for_each(tok);
    }
    Ok(())
}

/// Index of the largest value of each row (the first one on ties; NaN never wins).
pub(crate) fn argmax(logits: &Tensor, out: &mut Tensor) -> Result<()> {
    const OP: &str = "argmax";
    let v = logits.row_len();
    let n = logits.rows();
    same_len(OP, "rows vs out", n, out.numel())?;
    let ls = f32s(OP, "logits", logits)?;
    let os = match &mut out.storage {
        crate::Storage::Host(crate::tensor::HostData::U32(o)) => o
            .get_mut(..n)
            .ok_or_else(|| shape_err(OP, "out shape exceeds its storage"))?,
        #[allow(unreachable_patterns)]
        _ => return Err(shape_err(OP, "out must be a host u32 tensor")),
    };
    for (o, row) in os.iter_mut().zip(ls.chunks(v.max(1))) {
        let mut best = 0usize;
        let mut best_v = f32::NEG_INFINITY;
        for (i, &x) in row.iter().enumerate() {
            if x > best_v {
                best_v = x;
                best = i;
            }
        }
        *o = best as u32;
    }
    Ok(())
}

/// `out[i, :] = src[src_rows[i], :]`.
pub(crate) fn gather_rows(src: &Tensor, src_rows: &Tensor, out: &mut Tensor) -> Result<()> {
    const OP: &str = "gather_rows";
    let d = src.row_len();
    if out.row_len() != d {
        return Err(shape_err(
            OP,
            format!("row length {} vs {d}", out.row_len()),
        ));
    }
    let m = src.rows();
    let idx = u32s(OP, "src_rows", src_rows)?;
    same_len(OP, "indices vs out rows", idx.len(), out.rows())?;
    if let Some(&r) = idx.iter().find(|&&r| r as usize >= m) {
        return Err(shape_err(OP, format!("row {r} out of {m}")));
    }
    let s = f32s(OP, "src", src)?;
    let o = f32s_mut(OP, "out", out)?;
    for (row, &r) in o.chunks_mut(d).zip(idx) {
        row.copy_from_slice(&s[r as usize * d..(r as usize + 1) * d]);
    }
    Ok(())
}
