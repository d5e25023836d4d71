//! Launchers of `kernels/split.cu`: the column split of a fused `[q | k | v]` projection output
//! and SwiGLU over the halves of a fused `[gate | up]` one, with the CPU backend's shape checks.

use super::kernels::Kernel;
use super::matmul::GEMV_MAX_ROWS;
use super::ops::{norm_q8_scratch, small_kernels_legacy};
use super::CudaBackend;
use crate::error::shape_err;
use crate::{DType, Result, Tensor};

/// Threads per block of the elementwise kernels.
const TPB: u32 = 256;

fn blocks(op: &'static str, total: usize) -> Result<u32> {
    u32::try_from(total.div_ceil(TPB as usize))
        .map_err(|_| shape_err(op, format!("{total} elements exceed one grid")))
}

fn int(op: &'static str, v: usize) -> Result<i32> {
    i32::try_from(v).map_err(|_| shape_err(op, format!("{v} exceeds i32")))
}

pub(crate) fn split_columns(be: &CudaBackend, x: &Tensor, outs: &mut [&mut Tensor]) -> Result<()> {
    const OP: &str = "split_columns";
    if outs.is_empty() || outs.len() > 3 {
        return Err(shape_err(
            OP,
            format!("{} outputs (1 to 3 supported)", outs.len()),
        ));
    }
    let n = x.rows();
    let mut w = [0usize; 3];
    for (wi, o) in w.iter_mut().zip(outs.iter()) {
        *wi = o.row_len();
        if o.rows() != n {
            return Err(shape_err(
                OP,
                format!("output of {} rows for x of {n} rows", o.rows()),
            ));
        }
    }
    if w.iter().sum::<usize>() != x.row_len() {
        return Err(shape_err(
            OP,
            format!("output widths {w:?} do not tile a row of {}", x.row_len()),
        ));
    }
    let xp = be.ptr_of(OP, "x", x, DType::F32)?;
    let mut p = [0u64; 3];
    for (pi, o) in p.iter_mut().zip(outs.iter()) {
        *pi = be.ptr_of(OP, "out", o, DType::F32)?;
    }
    let total = x.numel();
    if total == 0 {
        return Ok(());
    }
    let (w0, w1, w2) = (int(OP, w[0])?, int(OP, w[1])?, int(OP, w[2])?);
    be.launch(
        OP,
        Kernel::SplitColumns3,
        (blocks(OP, total)?, 1, 1),
        TPB,
        args![xp, p[0], p[1], p[2], total as u64, w0, w1, w2],
    )
}

pub(crate) fn silu_mul_halves(be: &CudaBackend, x: &Tensor, out: &mut Tensor) -> Result<()> {
    const OP: &str = "silu_mul_halves";
    let d = out.row_len();
    if d == 0 || x.row_len() != 2 * d {
        return Err(shape_err(
            OP,
            format!("x rows of {} are not twice out rows of {d}", x.row_len()),
        ));
    }
    let rows = out.rows();
    if x.rows() != rows {
        return Err(shape_err(
            OP,
            format!("x of {} rows vs out of {rows}", x.rows()),
        ));
    }
    let xp = be.ptr_of(OP, "x", x, DType::F32)?;
    let op = be.ptr_of(OP, "out", out, DType::F32)?;
    let total = out.numel();
    if total == 0 {
        return Ok(());
    }
    let di = int(OP, d)?;
    // Decode: also quantize the output for the down GEMV (as silu_mul does), where the GEMV can
    // use it (a multiple of 32 columns, at most GEMV_MAX_ROWS rows).
    if rows <= GEMV_MAX_ROWS && d.is_multiple_of(32) {
        if let Some(b) = norm_q8_scratch(be, OP, op, rows, d)? {
            let total32 = total / 32;
            // One warp per 256 outputs; two warps per block spread them over more SMs.
            let warps = if small_kernels_legacy() { 8 } else { 2 };
            return be
                .launch(
                    OP,
                    Kernel::SiluMulHalvesQ8,
                    (total32.div_ceil(8).div_ceil(warps) as u32, 1, 1),
                    32 * warps as u32,
                    args![
                        xp,
                        op,
                        total32 as i32,
                        di,
                        b.q8.0,
                        b.q8.1,
                        b.q8.2,
                        b.k.0,
                        b.k.1,
                        b.k.2
                    ],
                )
                .inspect_err(|_| be.invalidate_q8());
        }
    }
    be.launch(
        OP,
        Kernel::SiluMulHalves,
        (blocks(OP, total)?, 1, 1),
        TPB,
        args![xp, op, total as u64, di],
    )
}
