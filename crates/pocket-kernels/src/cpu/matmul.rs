//! Quantized matmul and embedding lookup: both read the weight's blocks through pocket-quant.

use super::host::{f32s, f32s_mut, u32s};
use crate::error::shape_err;
use crate::{KernelError, Result, Tensor, Weight};

/// The host view of a weight, or a device error.
fn host_matrix<'a>(op: &'static str, w: &'a Weight) -> Result<pocket_quant::QuantMatrix<'a>> {
    w.host_matrix().ok_or_else(|| KernelError::WrongDevice {
        op,
        tensor: "weight",
        found: "cuda".into(),
        expected: "cpu".into(),
    })
}

/// `out[n, rows] = x[n, cols] · Wᵀ`.
pub(crate) fn matmul(x: &Tensor, w: &Weight, out: &mut Tensor) -> Result<()> {
    const OP: &str = "matmul";
    if x.row_len() != w.cols || out.row_len() != w.rows || x.rows() != out.rows() {
        return Err(shape_err(
            OP,
            format!(
                "x {:?} · W[{}, {}]ᵀ -> out {:?}",
                x.shape, w.rows, w.cols, out.shape
            ),
        ));
    }
    let n = x.rows();
    let m = host_matrix(OP, w)?;
    let xs = f32s(OP, "x", x)?;
    let ys = f32s_mut(OP, "out", out)?;
    pocket_quant::matmul(&m, xs, n, ys)?;
    Ok(())
}

/// `out[i, :] = dequantize(table[ids[i], :])`.
pub(crate) fn embedding(table: &Weight, ids: &Tensor, out: &mut Tensor) -> Result<()> {
    const OP: &str = "embedding";
    let idx = u32s(OP, "ids", ids)?;
    if out.row_len() != table.cols || out.rows() != idx.len() {
        return Err(shape_err(
            OP,
            format!(
                "{} ids of a [{}, {}] table -> out {:?}",
                idx.len(),
                table.rows,
                table.cols,
                out.shape
            ),
        ));
    }
    if let Some(&bad) = idx.iter().find(|&&i| i as usize >= table.rows) {
        return Err(shape_err(
            OP,
            format!("token id {bad} out of a {}-row table", table.rows),
        ));
    }
    let m = host_matrix(OP, table)?;
    let os = f32s_mut(OP, "out", out)?;
    for (row, &id) in os.chunks_mut(table.cols).zip(idx) {
        pocket_quant::dequantize_row(&m, id as usize, row)?;
    }
    Ok(())
}
