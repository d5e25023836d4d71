//! Every SIMD kernel against the scalar reference on random data (proptest).
//!
//! Both paths quantize the activations identically and compute the same integer block sums; they
//! differ only in the order of f32 additions and in where block scales are multiplied. So the
//! difference is bounded by a few f32 ulps of the magnitude `sum |w_i x_i|`: we allow
//! `2e-5 * sum |w_i x_i|`, far below what any indexing or scale error produces.

use pocket_quant::{
    dequantize_matrix, matmul_with, quantize, simd_level, GgmlType, QuantFormat, QuantMatrix,
    SimdLevel,
};
use proptest::prelude::*;

/// Byte offsets of the f16 scale fields (ggml block structs), so random blocks stay finite.
fn f16_fields(t: GgmlType) -> &'static [usize] {
    match t {
        GgmlType::Q4_0 | GgmlType::Q5_0 | GgmlType::Q8_0 | GgmlType::IQ4_NL | GgmlType::IQ4_XS => {
            &[0]
        }
        GgmlType::IQ2_XXS
        | GgmlType::IQ2_XS
        | GgmlType::IQ2_S
        | GgmlType::IQ3_XXS
        | GgmlType::IQ3_S
        | GgmlType::IQ1_S => &[0],
        GgmlType::Q4_1 | GgmlType::Q5_1 | GgmlType::Q4_K | GgmlType::Q5_K => &[0, 2],
        GgmlType::Q2_K => &[80, 82],
        GgmlType::Q3_K => &[108],
        GgmlType::Q6_K => &[208],
        GgmlType::TQ1_0 => &[52],
        GgmlType::TQ2_0 => &[64],
        _ => &[],
    }
}

fn random_weights(t: GgmlType, rows: usize, cols: usize, seed: u64) -> Vec<u8> {
    let mut s = seed | 1;
    let mut next = move || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        s
    };
    let f = QuantFormat::Ggml(t);
    if matches!(t, GgmlType::F32 | GgmlType::F16 | GgmlType::BF16) {
        let v: Vec<f32> = (0..rows * cols)
            .map(|_| (next() % 2001) as f32 / 1000.0 - 1.0)
            .collect();
        return quantize(f, &v).unwrap();
    }
    let bb = f.block_bytes();
    let mut data: Vec<u8> = (0..rows * f.row_bytes(cols).unwrap())
        .map(|_| next() as u8)
        .collect();
    for block in data.chunks_exact_mut(bb) {
        for &off in f16_fields(t) {
            let mag = 2f32.powi(-((next() % 12) as i32)) * (1.0 + (next() % 100) as f32 / 100.0);
            let v = if next() % 2 == 0 { mag } else { -mag };
            block[off..off + 2].copy_from_slice(&half::f16::from_f32(v).to_le_bytes());
        }
        match t {
            // IQ1_M keeps its f16 scale in the top nibbles of its four u16 scale words
            GgmlType::IQ1_M => {
                let d = half::f16::from_f32(1.0 + (next() % 100) as f32 / 100.0).to_bits();
                for k in 0..4 {
                    let o = 48 + 2 * k;
                    let w = u16::from_le_bytes([block[o], block[o + 1]]);
                    let w = (w & 0x0fff) | (((d >> (4 * k)) & 0xf) << 12);
                    block[o..o + 2].copy_from_slice(&w.to_le_bytes());
                }
            }
            // E8M0 scales near 2^0 (127) keep the products finite
            GgmlType::MXFP4 => block[0] = 110 + (next() % 30) as u8,
            _ => {}
        }
    }
    data
}

const SIMD_TYPES: [GgmlType; 26] = [
    GgmlType::Q2_K,
    GgmlType::Q3_K,
    GgmlType::IQ2_XXS,
    GgmlType::IQ2_XS,
    GgmlType::IQ2_S,
    GgmlType::IQ3_XXS,
    GgmlType::IQ3_S,
    GgmlType::IQ1_S,
    GgmlType::IQ1_M,
    GgmlType::TQ1_0,
    GgmlType::TQ2_0,
    GgmlType::MXFP4,
    GgmlType::NVFP4,
    GgmlType::F32,
    GgmlType::F16,
    GgmlType::BF16,
    GgmlType::Q4_0,
    GgmlType::Q4_1,
    GgmlType::Q5_0,
    GgmlType::Q5_1,
    GgmlType::Q8_0,
    GgmlType::IQ4_NL,
    GgmlType::Q4_K,
    GgmlType::Q5_K,
    GgmlType::Q6_K,
    GgmlType::IQ4_XS,
];

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]
    #[test]
    fn simd_matches_scalar(ti in 0usize..SIMD_TYPES.len(), rows in 1usize..6, kb in 1usize..5, n in 1usize..4, seed in any::<u64>()) {
        let t = SIMD_TYPES[ti];
        let cols = 256 * kb;
        let f = QuantFormat::Ggml(t);
        let data = random_weights(t, rows, cols, seed);
        let m = QuantMatrix { format: f, rows, cols, data: &data, scales: None, tensor_scale: None };
        let mut s = seed.rotate_left(17) | 1;
        let x: Vec<f32> = (0..n * cols).map(|_| { s = s.wrapping_mul(6364136223846793005).wrapping_add(1); ((s >> 33) % 2001) as f32 / 500.0 - 2.0 }).collect();
        let mut ys = vec![0.0f32; n * rows];
        let mut yv = vec![0.0f32; n * rows];
        matmul_with(&m, &x, n, &mut ys, SimdLevel::Scalar, false).unwrap();
        matmul_with(&m, &x, n, &mut yv, SimdLevel::Avx2, false).unwrap();
        let mut w = vec![0.0f32; rows * cols];
        dequantize_matrix(&m, &mut w).unwrap();
        for j in 0..n {
            for r in 0..rows {
                let mag: f64 = (0..cols).map(|c| (w[r * cols + c] as f64 * x[j * cols + c] as f64).abs()).sum();
                let (a, b) = (ys[j * rows + r] as f64, yv[j * rows + r] as f64);
                prop_assert!((a - b).abs() <= 2e-5 * mag + 1e-30, "{t}: row {r} batch {j}: scalar {a} simd {b} mag {mag}");
            }
        }
    }
}

/// Formats with companion scales (FP8 per tensor and per 128x128 tile, safetensors FP4), built by
/// `quantize_matrix` from random values (random codes would include FP8 NaNs, which propagate).
const SCALED: [QuantFormat; 6] = [
    QuantFormat::Fp8E4M3,
    QuantFormat::Fp8E5M2,
    QuantFormat::Fp8E4M3Block128,
    QuantFormat::Fp8E5M2Block128,
    QuantFormat::NvFp4,
    QuantFormat::MxFp4Blocks,
];

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]
    #[test]
    fn simd_matches_scalar_with_companion_scales(fi in 0usize..SCALED.len(), rows in 1usize..140, kc in 1usize..6, n in 1usize..3, seed in any::<u64>()) {
        let f = SCALED[fi];
        // FP8 rows may be any length; FP4 rows are whole 32-element blocks
        let cols = if f.block_size() == 1 { 37 * kc + 91 } else { 32 * kc };
        let mut s = seed | 1;
        let mut next = move || { s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407); ((s >> 33) % 20001) as f32 / 1000.0 - 10.0 };
        let src: Vec<f32> = (0..rows * cols).map(|_| next()).collect();
        let q = pocket_quant::quantize_matrix(f, rows, cols, &src).unwrap();
        let m = q.view();
        let x: Vec<f32> = (0..n * cols).map(|_| next() / 5.0).collect();
        let mut ys = vec![0.0f32; n * rows];
        let mut yv = vec![0.0f32; n * rows];
        matmul_with(&m, &x, n, &mut ys, SimdLevel::Scalar, false).unwrap();
        matmul_with(&m, &x, n, &mut yv, SimdLevel::Avx2, false).unwrap();
        let mut w = vec![0.0f32; rows * cols];
        dequantize_matrix(&m, &mut w).unwrap();
        for j in 0..n {
            for r in 0..rows {
                let mag: f64 = (0..cols).map(|c| (w[r * cols + c] as f64 * x[j * cols + c] as f64).abs()).sum();
                let (a, b) = (ys[j * rows + r] as f64, yv[j * rows + r] as f64);
                prop_assert!((a - b).abs() <= 2e-5 * mag + 1e-30, "{f}: row {r} batch {j}: scalar {a} simd {b} mag {mag}");
            }
        }
    }
}

#[test]
fn reports_level() {
    // Informational: which path the property test above exercised.
    eprintln!("simd level: {:?}", simd_level());
}
