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

/// `out[n, rows] = x[n, cols] · Wᵀ`; `exact`: f32 activations (`pocket_quant::matmul_exact`, see
/// [`crate::Backend::set_exact_arithmetic`]) instead of the format's int8 activation dot.
pub(crate) fn matmul(x: &Tensor, w: &Weight, out: &mut Tensor, exact: bool) -> Result<()> {
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
    if exact {
        pocket_quant::matmul_exact(&m, xs, n, ys)?;
    } else {
        pocket_quant::matmul(&m, xs, n, ys)?;
    }
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

#[cfg(test)]
mod tests {
    use super::super::CpuBackend;
    use crate::{Backend, HostBytes, Tensor, Weight};
    use pocket_quant::{quantize_matrix, GgmlType, QuantFormat, SimdLevel};

    /// The backend's switch routes decode (n = 1) and prefill alike: exact mode equals
    /// `pocket_quant::matmul_exact` (itself tested against an f64 reference) and is closer to
    /// the dequantized weights' f64 product than the default int8 path, which equals the scalar
    /// reference of the int8 dot to rounding.
    #[test]
    fn exact_arithmetic_switch_selects_f32_activations() {
        let (rows, cols) = (48, 256);
        let f = QuantFormat::Ggml(GgmlType::Q4_1);
        let src: Vec<f32> = (0..rows * cols)
            .map(|i| ((i * 7919) % 1000) as f32 / 500.0 - 1.0)
            .collect();
        let q = quantize_matrix(f, rows, cols, &src).unwrap();
        let w = Weight::host(f, rows, cols, HostBytes::from_vec(q.data.clone()));
        let mut wd = vec![0.0f32; rows * cols];
        pocket_quant::dequantize_matrix(&q.view(), &mut wd).unwrap();
        let be = CpuBackend::new();
        assert!(!be.exact_arithmetic(), "fast path by default");
        for n in [1usize, 6] {
            let xv: Vec<f32> = (0..n * cols)
                .map(|i| ((i * 104729) % 997) as f32 / 498.0 - 1.0)
                .collect();
            let x = Tensor::host_f32(xv.clone(), &[n, cols]);
            let run = |exact: bool| {
                be.set_exact_arithmetic(exact);
                let mut out = be.alloc(crate::DType::F32, &[n, rows]).unwrap();
                be.matmul(&x, &w, &mut out).unwrap();
                super::f32s("t", "out", &out).unwrap().to_vec()
            };
            let (fast, exact) = (run(false), run(true));
            let mut want = vec![0.0f32; n * rows];
            pocket_quant::matmul_exact(&q.view(), &xv, n, &mut want).unwrap();
            assert_eq!(exact, want, "n={n}: exact mode is matmul_exact");
            let mut scalar = vec![0.0f32; n * rows];
            pocket_quant::matmul_with(&q.view(), &xv, n, &mut scalar, SimdLevel::Scalar, false)
                .unwrap();
            let f64ref: Vec<f64> = (0..n * rows)
                .map(|i| {
                    let (j, r) = (i / rows, i % rows);
                    (0..cols)
                        .map(|c| wd[r * cols + c] as f64 * xv[j * cols + c] as f64)
                        .sum()
                })
                .collect();
            let err = |y: &[f32]| {
                y.iter()
                    .zip(&f64ref)
                    .map(|(a, b)| (*a as f64 - b).abs())
                    .fold(0.0, f64::max)
            };
            for (a, b) in fast.iter().zip(&scalar) {
                assert!(
                    (a - b).abs() <= 1e-4 * (1.0 + b.abs()),
                    "n={n}: fast {a} vs scalar {b}"
                );
            }
            assert!(
                err(&exact) * 50.0 < err(&fast),
                "n={n}: {} vs {}",
                err(&exact),
                err(&fast)
            );
        }
        be.set_exact_arithmetic(false);
    }
}
