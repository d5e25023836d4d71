//! The exact-arithmetic matmul: f32 activations (no int8 activation quantization), each weight
//! row dequantized and dotted in f32, the way the numpy reference (`scripts/reference_forward.py`)
//! computes. The fast path's int8 activation roundings can flip when float summation order
//! changes; this path has no such rounding, so it follows an f32 reference to f32 accuracy.

use crate::codec::QuantMatrix;
use crate::error::{QuantError, Result};
use rayon::prelude::*;

/// `y[n, rows] = x[n, cols] · Wᵀ` with f32 activations: each weight row is dequantized once
/// (tensor scale applied) and dotted in f32 with every activation row. The result does not depend
/// on the CPU's SIMD level or on threading (a fixed 8-lane summation order), so it is
/// reproducible bit for bit. Slower than [`crate::matmul`] (no int8 dot).
pub fn matmul_exact(w: &QuantMatrix, x: &[f32], n: usize, y: &mut [f32]) -> Result<()> {
    let rb = super::check_shapes(w, x, n, y)?;
    let (rows, cols) = (w.rows, w.cols);
    let ny = n * rows; // checked by check_shapes
    let dq = w
        .format
        .spec()
        .dequant
        .ok_or_else(|| QuantError::Unsupported(w.format.name().into()))?;
    let ts = w.tensor_scale;
    // Weight-row-major output ([rows, n]) so each task owns whole rows; transposed below.
    let mut yt_store = Vec::new();
    let yt: &mut [f32] = if n == 1 {
        &mut *y
    } else {
        yt_store = vec![0.0f32; ny];
        &mut yt_store
    };
    let per = (rows / (rayon::current_num_threads().max(1) * 8)).clamp(1, 64);
    yt.par_chunks_mut(per * n).enumerate().for_each_init(
        || vec![0.0f32; cols],
        |wrow, (ci, chunk)| {
            for (i, out) in chunk.chunks_mut(n).enumerate() {
                let (d, s) = w.row_parts(ci * per + i, rb);
                dq(d, s, wrow);
                if let Some(ts) = ts {
                    wrow.iter_mut().for_each(|v| *v *= ts);
                }
                for (j, o) in out.iter_mut().enumerate() {
                    *o = dot_f32(wrow, &x[j * cols..(j + 1) * cols]);
                }
            }
        },
    );
    if n > 1 {
        for r in 0..rows {
            for j in 0..n {
                y[j * rows + r] = yt_store[r * n + j];
            }
        }
    }
    Ok(())
}

/// An f32 dot product in a fixed order: 8 interleaved partial sums (which the compiler keeps in
/// one vector register), then a pairwise reduction, then the tail. No FMA contraction, so the
/// result is the same on every x86-64 and ARM CPU.
fn dot_f32(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0.0f32; 8];
    let (ac, bc) = (a.chunks_exact(8), b.chunks_exact(8));
    let (at, bt) = (ac.remainder(), bc.remainder());
    for (x, y) in ac.zip(bc) {
        for l in 0..8 {
            acc[l] += x[l] * y[l];
        }
    }
    let s4 = [
        acc[0] + acc[4],
        acc[1] + acc[5],
        acc[2] + acc[6],
        acc[3] + acc[7],
    ];
    let mut s = (s4[0] + s4[2]) + (s4[1] + s4[3]);
    for (x, y) in at.iter().zip(bt) {
        s += x * y;
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{dequantize_matrix, matmul_with, quantize_matrix, QuantFormat, SimdLevel};

    /// A deterministic pseudo-random sequence in [-1, 1).
    fn data(len: usize, seed: u64) -> Vec<f32> {
        let mut s = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (0..len)
            .map(|_| {
                s = s
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
            })
            .collect()
    }

    /// The scalar reference: the dequantized matrix (gguf-py's dequantizer is tested equal to
    /// ours in tests/fixtures.rs) times `x`, accumulated in f64.
    fn reference(m: &QuantMatrix, x: &[f32], n: usize) -> (Vec<f64>, Vec<f64>) {
        let mut wd = vec![0.0f32; m.rows * m.cols];
        dequantize_matrix(m, &mut wd).unwrap();
        let (mut y, mut mag) = (vec![0.0; n * m.rows], vec![0.0; n * m.rows]);
        for j in 0..n {
            for r in 0..m.rows {
                let (mut s, mut a) = (0.0f64, 0.0f64);
                for c in 0..m.cols {
                    let p = wd[r * m.cols + c] as f64 * x[j * m.cols + c] as f64;
                    s += p;
                    a += p.abs();
                }
                y[j * m.rows + r] = s;
                mag[j * m.rows + r] = a;
            }
        }
        (y, mag)
    }

    /// Every GGUF block format the models load (32- and 256-element blocks, float weights), at
    /// decode (n = 1) and prefill sizes, with a column count that leaves an 8-lane tail where the
    /// format allows it: within f32 summation error (cols * eps * sum |w x|) of the f64 reference.
    #[test]
    fn matches_f64_reference_of_dequantized_weights() {
        use crate::GgmlType as G;
        let ggml = [
            G::Q4_0,
            G::Q4_1,
            G::Q5_0,
            G::Q8_0,
            G::Q4_K,
            G::Q5_K,
            G::Q6_K,
            G::F16,
            G::F32,
        ];
        let formats = ggml.into_iter().map(QuantFormat::Ggml);
        // A companion-scale format too (per-tile scales through `row_parts`).
        for t in formats.chain([QuantFormat::Fp8E4M3Block128]) {
            let bs = t.spec().block_size.max(1);
            let cols = if bs == 1 { 260 } else { bs.max(128) * 2 };
            let rows = 37;
            let q = quantize_matrix(t, rows, cols, &data(rows * cols, 7)).unwrap();
            let m = q.view();
            for n in [1, 5] {
                let x = data(n * cols, 11 + n as u64);
                let mut y = vec![0.0f32; n * rows];
                matmul_exact(&m, &x, n, &mut y).unwrap();
                let (want, mag) = reference(&m, &x, n);
                for i in 0..y.len() {
                    let tol = cols as f64 * f32::EPSILON as f64 * mag[i];
                    assert!(
                        (y[i] as f64 - want[i]).abs() <= tol,
                        "{t:?} n={n} [{i}]: {} vs {} (tol {tol})",
                        y[i],
                        want[i]
                    );
                }
                // Bitwise independent of batching: row j of a batch equals the same row alone.
                let mut y1 = vec![0.0f32; rows];
                matmul_exact(&m, &x[(n - 1) * cols..], 1, &mut y1).unwrap();
                assert_eq!(
                    &y[(n - 1) * rows..],
                    &y1[..],
                    "{t:?} n={n}: batch dependence"
                );
            }
        }
    }

    /// The exact path differs from the int8-activation path by about the activation rounding,
    /// and is closer to the f64 reference than it (the reason it exists).
    #[test]
    fn closer_to_reference_than_int8_activations() {
        let f = QuantFormat::Ggml(crate::GgmlType::Q4_1);
        let (rows, cols, n) = (64, 576, 3);
        let q = quantize_matrix(f, rows, cols, &data(rows * cols, 3)).unwrap();
        let m = q.view();
        let x = data(n * cols, 5);
        let (mut ye, mut yq) = (vec![0.0f32; n * rows], vec![0.0f32; n * rows]);
        matmul_exact(&m, &x, n, &mut ye).unwrap();
        matmul_with(&m, &x, n, &mut yq, SimdLevel::Scalar, false).unwrap();
        let (want, _) = reference(&m, &x, n);
        let err = |y: &[f32]| {
            y.iter()
                .zip(&want)
                .map(|(a, b)| (*a as f64 - b).abs())
                .fold(0.0, f64::max)
        };
        assert!(err(&ye) * 100.0 < err(&yq), "{} vs {}", err(&ye), err(&yq));
    }

    /// Bad shapes are typed errors.
    #[test]
    fn rejects_bad_shapes() {
        let f = QuantFormat::Ggml(crate::GgmlType::Q8_0);
        let q = quantize_matrix(f, 4, 32, &data(4 * 32, 1)).unwrap();
        let m = q.view();
        let mut y = vec![0.0f32; 4];
        assert!(matmul_exact(&m, &[0.0; 31], 1, &mut y).is_err());
        assert!(matmul_exact(&m, &[0.0; 32], 0, &mut y).is_err());
        assert!(matmul_exact(&m, &[0.0; 32], 1, &mut y[..3]).is_err());
    }
}
