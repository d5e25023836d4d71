//! CPU ops over fused projection outputs: the column split of a `[q | k | v]` row and SwiGLU
//! over the halves of a `[gate | up]` row (models stack those projections into one weight).

use rayon::prelude::*;

use super::host::{f32s, f32s_mut, same_len};
use crate::error::shape_err;
use crate::{Result, Tensor};

/// Elements below which an op runs on the calling thread.
const PAR_MIN: usize = 1 << 14;

/// The column widths of `outs` (each `[n, w_i]`), checked to tile `x` (`[n, sum w_i]`).
pub(crate) fn split_widths(
    op: &'static str,
    x: &Tensor,
    outs: &[&mut Tensor],
) -> Result<Vec<usize>> {
    if outs.is_empty() {
        return Err(shape_err(op, "no outputs"));
    }
    let n = x.rows();
    let widths: Vec<usize> = outs.iter().map(|o| o.row_len()).collect();
    let total: usize = widths.iter().sum();
    if total != x.row_len() {
        return Err(shape_err(
            op,
            format!(
                "output widths {widths:?} do not tile a row of {}",
                x.row_len()
            ),
        ));
    }
    for o in outs {
        same_len(op, "output rows vs x rows", o.rows(), n)?;
    }
    Ok(widths)
}

/// Copies each row's consecutive column ranges of `x` into `outs`.
pub(crate) fn split_columns(x: &Tensor, outs: &mut [&mut Tensor]) -> Result<()> {
    const OP: &str = "split_columns";
    let widths = split_widths(OP, x, outs)?;
    let w = x.row_len();
    let xs = f32s(OP, "x", x)?;
    let mut start = 0;
    for (o, &wi) in outs.iter_mut().zip(&widths) {
        let dst = f32s_mut(OP, "out", o)?;
        if wi > 0 {
            for (d, r) in dst.chunks_mut(wi).zip(xs.chunks(w)) {
                d.copy_from_slice(&r[start..start + wi]);
            }
        }
        start += wi;
    }
    Ok(())
}

/// `out[r, :] = silu(x[r, :d]) * x[r, d..]` for `x` `[n, 2d]`, `out` `[n, d]`.
pub(crate) fn silu_mul_halves(x: &Tensor, out: &mut Tensor) -> Result<()> {
    const OP: &str = "silu_mul_halves";
    let d = out.row_len();
    if d == 0 || x.row_len() != 2 * d {
        return Err(shape_err(
            OP,
            format!("x rows of {} are not twice out rows of {d}", x.row_len()),
        ));
    }
    same_len(OP, "x rows vs out rows", x.rows(), out.rows())?;
    let xs = f32s(OP, "x", x)?;
    let o = f32s_mut(OP, "out", out)?;
    // The same expression as `silu_mul`, so the fused and split paths agree bit for bit.
    let row = |(o, r): (&mut [f32], &[f32])| {
        let (g, u) = r.split_at(d);
        for ((o, g), u) in o.iter_mut().zip(g).zip(u) {
            *o = g / (1.0 + (-g).exp()) * u;
        }
    };
    if o.len() >= PAR_MIN {
        o.par_chunks_mut(d).zip(xs.par_chunks(2 * d)).for_each(row);
    } else {
        o.chunks_mut(d).zip(xs.chunks(2 * d)).for_each(row);
    }
    Ok(())
}
