//! Every row kernel (scalar reference and, where the CPU has it, AVX2) against an independent
//! reference: the format's dequantizer (bit-exact with gguf-py where gguf-py has the format) dotted
//! in f64 with the exact values the quantized activations stand for (`d * q`).
//!
//! Both sides see identical numbers, so they differ only by the kernel's f32 rounding: scale
//! products and the f32 accumulation over at most a few thousand terms. We allow
//! `1e-5 * sum |w_i a_i|`; a wrong grid entry, sign, scale or nibble is off by far more.

use crate::act::{quantize_act_q8, quantize_act_q8k};
use crate::dot::Kernel;
use crate::format::{QuantFormat, ScaleLayout};
use crate::GgmlType as G;

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn f32(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0
    }
    /// A finite f16 of magnitude 2^-10 .. 2^2 with either sign.
    fn f16(&mut self) -> [u8; 2] {
        let mag = 2f32.powi(-((self.next() % 12) as i32)) * (1.0 + self.f32().abs());
        let v = if self.next().is_multiple_of(2) {
            mag
        } else {
            -mag
        };
        half::f16::from_f32(v).to_le_bytes()
    }
}

/// Byte offsets of the f16 scale fields of each block type (ggml struct layouts).
fn f16_fields(t: G) -> &'static [usize] {
    match t {
        G::Q4_0 | G::Q5_0 | G::Q8_0 | G::IQ4_NL | G::IQ4_XS => &[0],
        G::IQ2_XXS | G::IQ2_XS | G::IQ2_S | G::IQ3_XXS | G::IQ3_S | G::IQ1_S => &[0],
        G::Q4_1 | G::Q5_1 | G::Q4_K | G::Q5_K => &[0, 2],
        G::Q2_K => &[80, 82],
        G::Q3_K => &[108],
        G::Q6_K => &[208],
        G::TQ1_0 => &[52],
        G::TQ2_0 => &[64],
        _ => &[],
    }
}

fn is_fp8_nan(f: QuantFormat, c: u8) -> bool {
    match f {
        QuantFormat::Fp8E4M3 | QuantFormat::Fp8E4M3Block128 | QuantFormat::NvFp4 => {
            c & 0x7f == 0x7f
        }
        QuantFormat::Fp8E5M2 | QuantFormat::Fp8E5M2Block128 => c & 0x7c == 0x7c,
        _ => false,
    }
}

/// Random row data and companion scales of `cols` elements for `f` (finite values only).
fn random_row(f: QuantFormat, cols: usize, rng: &mut Rng) -> (Vec<u8>, Vec<u8>) {
    let rb = f.row_bytes(cols).unwrap();
    if let QuantFormat::Ggml(t @ (G::F32 | G::F16 | G::BF16)) = f {
        let v: Vec<f32> = (0..cols).map(|_| rng.f32()).collect();
        return (crate::quantize(QuantFormat::Ggml(t), &v).unwrap(), vec![]);
    }
    let mut data: Vec<u8> = (0..rb).map(|_| rng.next() as u8).collect();
    for c in data.iter_mut() {
        while is_fp8_nan(f, *c) && !matches!(f, QuantFormat::NvFp4) {
            *c = rng.next() as u8;
        }
    }
    if let QuantFormat::Ggml(t) = f {
        for b in data.chunks_exact_mut(f.block_bytes()) {
            for &o in f16_fields(t) {
                b[o..o + 2].copy_from_slice(&rng.f16());
            }
            match t {
                G::IQ1_M => {
                    let d = u16::from_le_bytes(rng.f16());
                    for k in 0..4 {
                        let w = u16::from_le_bytes([b[48 + 2 * k], b[49 + 2 * k]]);
                        let w = (w & 0x0fff) | (((d >> (4 * k)) & 0xf) << 12);
                        b[48 + 2 * k..50 + 2 * k].copy_from_slice(&w.to_le_bytes());
                    }
                }
                G::MXFP4 => b[0] = 100 + (rng.next() % 50) as u8,
                _ => {}
            }
        }
    }
    let scales = match f.scale_layout() {
        ScaleLayout::Inline => vec![],
        ScaleLayout::Tile128 => (0..cols.div_ceil(128))
            .flat_map(|_| (0.5 + rng.f32().abs() * 1.5).to_le_bytes())
            .collect(),
        ScaleLayout::PerGroup { group, .. } => (0..cols / group)
            .map(|_| loop {
                let c = if f == QuantFormat::MxFp4Blocks {
                    100 + (rng.next() % 50) as u8
                } else {
                    rng.next() as u8
                };
                if !is_fp8_nan(f, c) {
                    break c;
                }
            })
            .collect(),
    };
    (data, scales)
}

/// Runs `k` on a row and compares it with the f64 reference; returns an error message on failure.
fn check_kernel(f: QuantFormat, k: Kernel, what: &str, seed: u64) -> Result<(), String> {
    let mut rng = Rng(seed | 1);
    let cols = 1024;
    let (data, scales) = random_row(f, cols, &mut rng);
    let mut w = vec![0.0f32; cols];
    (f.spec().dequant.unwrap())(&data, &scales, &mut w);
    let x: Vec<f32> = (0..cols).map(|_| rng.f32() * 3.0).collect();
    let (got, act): (f32, Vec<f64>) = match k {
        Kernel::F32(kf) => (
            kf(&data, &scales, &x),
            x.iter().map(|&v| v as f64).collect(),
        ),
        Kernel::Q8(kf) => {
            let mut a = Vec::new();
            quantize_act_q8(&x, &mut a);
            let vals = a
                .iter()
                .flat_map(|b| b.qs.iter().map(move |&q| b.d as f64 * q as f64))
                .collect();
            (kf(&data, &scales, &a), vals)
        }
        Kernel::Q8K(kf) => {
            let mut a = Vec::new();
            quantize_act_q8k(&x, &mut a);
            let vals = a
                .iter()
                .flat_map(|b| b.qs.iter().map(move |&q| b.d as f64 * q as f64))
                .collect();
            (kf(&data, &scales, &a), vals)
        }
    };
    let want: f64 = w.iter().zip(&act).map(|(&a, &b)| a as f64 * b).sum();
    let mag: f64 = w
        .iter()
        .zip(&act)
        .map(|(&a, &b)| (a as f64 * b).abs())
        .sum();
    if (got as f64 - want).abs() <= 1e-5 * mag + 1e-30 {
        Ok(())
    } else {
        Err(format!("{f} {what}: got {got} want {want} (mag {mag})"))
    }
}

#[test]
fn every_kernel_matches_dequantize_then_f64_dot() {
    let mut failures = Vec::new();
    let mut scalar = 0;
    let mut simd = 0;
    for f in QuantFormat::all() {
        for seed in [3u64, 77, 1234567] {
            if let Some(k) = f.spec().dot {
                scalar += 1;
                if let Err(e) = check_kernel(f, k, "scalar", seed) {
                    failures.push(e);
                }
            }
            if let Some(k) = crate::simd::avx2_kernel(f) {
                simd += 1;
                if let Err(e) = check_kernel(f, k, "avx2", seed) {
                    failures.push(e);
                }
            }
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
    eprintln!("checked {scalar} scalar and {simd} AVX2 kernel runs");
    // every format with a dequantizer has a scalar dot, except the integer types and Q8_1/Q8_K
    // (activation formats) and F64
    let missing: Vec<_> = QuantFormat::all()
        .filter(|f| f.has_dequantizer() && f.spec().dot.is_none())
        .map(|f| f.name())
        .collect();
    assert_eq!(
        missing,
        ["Q8_1", "Q8_K", "I8", "I16", "I32", "I64", "F64"],
        "formats without a scalar dot"
    );
}

#[test]
fn fp8_nan_codes_propagate_in_every_kernel() {
    for (f, nan) in [
        (QuantFormat::Fp8E4M3, 0x7fu8),
        (QuantFormat::Fp8E4M3, 0xff),
        (QuantFormat::Fp8E5M2, 0x7e),
    ] {
        let mut w = vec![0x38u8; 70];
        w[45] = nan;
        let x = vec![1.0f32; 70];
        let mut kernels = vec![f.spec().dot.unwrap()];
        kernels.extend(crate::simd::avx2_kernel(f));
        for k in kernels {
            let Kernel::F32(kf) = k else {
                panic!("FP8 pairs with f32")
            };
            assert!(kf(&w, &[], &x).is_nan(), "{f} code {nan:#x}");
        }
    }
}

/// The AVX2 kernels negate activations with `vpsignb` / xor-sub, which is exact only if no code is
/// -128: the activation quantizers must keep codes in -127..=127 (they scale by 127 / amax).
#[test]
fn activation_codes_never_reach_minus_128() {
    let mut rng = Rng(99);
    for case in 0..200 {
        let mut x: Vec<f32> = (0..512)
            .map(|_| rng.f32() * 10f32.powi(case % 7 - 3))
            .collect();
        // the extreme element negative, positive, and ties of both signs
        x[case as usize % 512] = -1e3;
        if case % 3 == 0 {
            x[(case as usize + 7) % 512] = 1e3;
        }
        let (mut a, mut k) = (Vec::new(), Vec::new());
        quantize_act_q8(&x, &mut a);
        quantize_act_q8k(&x, &mut k);
        assert!(a.iter().all(|b| b.qs.iter().all(|&q| q != -128)));
        assert!(k.iter().all(|b| b.qs.iter().all(|&q| q != -128)));
    }
}
