//! `matmul` against a float reference built from `dequantize_matrix`, for every format.
//!
//! Tolerance: activations are quantized to int8 with step `d = amax(block) / 127`, so each
//! activation is off by at most `d / 2`; the dot can then be off by at most
//! `sum_i |w_i| * d_i / 2`. We allow that bound plus f32 accumulation slack
//! (`1e-5 * sum |w_i x_i|`) — a wrong scale or a shifted nibble exceeds it by orders of magnitude.

use pocket_quant::{
    dequantize_matrix, matmul, matmul_with, quantize_matrix, ActFormat, GgmlType, QuantFormat,
    QuantMatrix, SimdLevel,
};
use std::path::PathBuf;

fn fixture_blocks(name: &str) -> Vec<u8> {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(format!("{}.dequant.in.bin", name.to_lowercase()));
    std::fs::read(p).expect("fixture")
}

fn lcg(seed: &mut u64) -> f32 {
    *seed = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    ((*seed >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
}

/// Checks y = x · Wᵀ within the bound above; `act_block` is the activation block size.
fn check(m: &QuantMatrix, x: &[f32], n: usize, y: &[f32]) {
    let mut w = vec![0.0f32; m.rows * m.cols];
    dequantize_matrix(m, &mut w).unwrap();
    let ab = match m.format.activation_format() {
        ActFormat::F32 => 1,
        ActFormat::Q8_0 | ActFormat::Q8_1 => 32,
        ActFormat::Q8_K => 256,
    };
    for j in 0..n {
        let xr = &x[j * m.cols..(j + 1) * m.cols];
        for r in 0..m.rows {
            let wr = &w[r * m.cols..(r + 1) * m.cols];
            let mut exact = 0.0f64;
            let mut bound = 0.0f64;
            let mut mag = 0.0f64;
            for (wc, xc) in wr.chunks(ab).zip(xr.chunks(ab)) {
                let amax = xc.iter().fold(0.0f32, |a, v| a.max(v.abs())) as f64;
                let half_step = if ab == 1 { 0.0 } else { amax / 127.0 / 2.0 };
                for (a, b) in wc.iter().zip(xc) {
                    exact += *a as f64 * *b as f64;
                    bound += (*a as f64).abs() * half_step;
                    mag += (*a as f64 * *b as f64).abs();
                }
            }
            let got = y[j * m.rows + r] as f64;
            let tol = bound * 1.001 + 1e-5 * mag + 1e-30;
            assert!(
                (got - exact).abs() <= tol,
                "{}: row {r} batch {j}: got {got} want {exact} (tol {tol})",
                m.format
            );
        }
    }
}

#[test]
fn every_gguf_format_multiplies_like_its_dequantization() {
    let types = [
        "F32", "F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K", "Q4_K",
        "Q5_K", "Q6_K", "IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ3_XXS", "IQ3_S", "IQ1_S", "IQ1_M",
        "IQ4_NL", "IQ4_XS", "TQ1_0", "TQ2_0", "MXFP4", "NVFP4",
    ];
    let mut seed = 7u64;
    for name in types {
        let t = GgmlType::from_name(name).unwrap();
        let f = QuantFormat::Ggml(t);
        let data = fixture_blocks(name);
        let cols = 256;
        let rows = data.len() / f.row_bytes(cols).unwrap();
        let m = QuantMatrix {
            format: f,
            rows,
            cols,
            data: &data,
            scales: None,
            tensor_scale: None,
        };
        for n in [1usize, 3] {
            let x: Vec<f32> = (0..n * cols).map(|_| lcg(&mut seed)).collect();
            for level in [SimdLevel::Scalar, SimdLevel::Avx2] {
                let mut y = vec![0.0f32; n * rows];
                matmul_with(&m, &x, n, &mut y, level, true).unwrap();
                check(&m, &x, n, &y);
            }
        }
    }
}

#[test]
fn companion_scale_formats_multiply_like_their_dequantization() {
    let mut seed = 11u64;
    let (rows, cols) = (130, 256);
    let src: Vec<f32> = (0..rows * cols).map(|_| lcg(&mut seed) * 3.0).collect();
    for f in [
        QuantFormat::Fp8E4M3,
        QuantFormat::Fp8E5M2,
        QuantFormat::Fp8E4M3Block128,
        QuantFormat::Fp8E5M2Block128,
        QuantFormat::NvFp4,
        QuantFormat::MxFp4Blocks,
        QuantFormat::Ggml(GgmlType::NVFP4),
    ] {
        let q = quantize_matrix(f, rows, cols, &src).unwrap();
        let m = q.view();
        let x: Vec<f32> = (0..2 * cols).map(|_| lcg(&mut seed)).collect();
        let mut y = vec![0.0f32; 2 * rows];
        matmul(&m, &x, 2, &mut y).unwrap();
        check(&m, &x, 2, &y);
    }
}

/// Decode GEMV (n = 1) across threads equals the single-thread result bit for bit: the guided
/// row chunks start on whole 8-row GEMV groups, so every row takes the same kernel path (shapes
/// of many chunks: the 32-element tiled path, the K-quant row path, a ragged row count).
#[test]
fn parallel_decode_gemv_equals_serial() {
    let mut seed = 7u64;
    for (t, rows, cols) in [
        (GgmlType::Q5_0, 1203usize, 256usize),
        (GgmlType::Q8_0, 4099, 64),
        (GgmlType::Q4_K, 517, 512),
        (GgmlType::Q6_K, 333, 256),
    ] {
        let f = QuantFormat::Ggml(t);
        let src: Vec<f32> = (0..rows * cols).map(|_| lcg(&mut seed)).collect();
        let q = quantize_matrix(f, rows, cols, &src).unwrap();
        let x: Vec<f32> = (0..cols).map(|_| lcg(&mut seed)).collect();
        let (mut ys, mut yp) = (vec![0.0f32; rows], vec![f32::NAN; rows]);
        let level = pocket_quant::simd_level();
        matmul_with(&q.view(), &x, 1, &mut ys, level, false).unwrap();
        for _ in 0..20 {
            matmul_with(&q.view(), &x, 1, &mut yp, level, true).unwrap();
            assert_eq!(
                ys.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                yp.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                "{t:?} {rows}x{cols}"
            );
        }
    }
}
