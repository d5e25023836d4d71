//! Random quantized blocks with controlled scales: random quant bits, then every block's scale
//! fields written so that the dequantized weights have about the requested spread and no NaN.

use half::{bf16, f16};
use pocket_formats::GgmlType;

use crate::error::{BenchError, Result};
use crate::rng::{e4m3_normal_codes, f32_to_e4m3, Rng, FP8_SIGMA};

/// How a tensor's values are drawn: normal around `mean` with standard deviation `std`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Init {
    /// Centre of the values.
    pub mean: f32,
    /// Spread of the values.
    pub std: f32,
}

impl Init {
    /// Zero-mean weights of spread `std`.
    pub const fn normal(std: f32) -> Self {
        Init { mean: 0.0, std }
    }
    /// Values near `mean` (norm weights near 1, ...).
    pub const fn around(mean: f32, std: f32) -> Self {
        Init { mean, std }
    }
    #[inline]
    fn sample(&self, rng: &mut Rng) -> f32 {
        self.mean + self.std * rng.normal()
    }
}

/// Whether [`fill_ggml`] can generate `ty`.
pub fn can_generate(ty: GgmlType) -> bool {
    use GgmlType::*;
    matches!(
        ty,
        F32 | F16
            | BF16
            | Q4_0
            | Q4_1
            | Q5_0
            | Q5_1
            | Q8_0
            | Q2_K
            | Q3_K
            | Q4_K
            | Q5_K
            | Q6_K
            | IQ4_NL
            | IQ4_XS
    )
}

#[inline]
fn put_f16(b: &mut [u8], at: usize, v: f32) {
    b[at..at + 2].copy_from_slice(&f16::from_f32(v).to_le_bytes());
}

/// Fills `out` (whole blocks of `ty`) with random weights drawn per `init`.
pub fn fill_ggml(ty: GgmlType, init: Init, rng: &mut Rng, out: &mut [u8]) -> Result<()> {
    use GgmlType::*;
    let bb = ty.block_bytes();
    if !out.len().is_multiple_of(bb) {
        return Err(BenchError::Usage(format!(
            "{} bytes is not a whole number of {ty} blocks",
            out.len()
        )));
    }
    match ty {
        F32 => {
            for c in out.chunks_exact_mut(4) {
                c.copy_from_slice(&init.sample(rng).to_le_bytes());
            }
            return Ok(());
        }
        F16 => {
            for c in out.chunks_exact_mut(2) {
                c.copy_from_slice(&f16::from_f32(init.sample(rng)).to_le_bytes());
            }
            return Ok(());
        }
        BF16 => {
            for c in out.chunks_exact_mut(2) {
                c.copy_from_slice(&bf16::from_f32(init.sample(rng)).to_le_bytes());
            }
            return Ok(());
        }
        _ if !can_generate(ty) => {
            return Err(BenchError::UnsupportedFormat(
                ty.name().to_string(),
                "no random-block generator for this type".into(),
            ))
        }
        _ => {}
    }
    let s = init.std;
    rng.fill_bytes(out);
    for b in out.chunks_exact_mut(bb) {
        // per-block scale jitter in [0.75, 1.25)
        let j = 0.75 + 0.5 * rng.uniform();
        match ty {
            Q4_0 => put_f16(b, 0, s / 4.61 * j),
            Q4_1 => {
                let d = s / 4.61 * j;
                put_f16(b, 0, d);
                put_f16(b, 2, -7.5 * d);
            }
            Q5_0 => put_f16(b, 0, s / 9.23 * j),
            Q5_1 => {
                let d = s / 9.23 * j;
                put_f16(b, 0, d);
                put_f16(b, 2, -15.5 * d);
            }
            Q8_0 => put_f16(b, 0, s / 73.9 * j),
            Q2_K => {
                // scales[16] | qs[64] | d | dmin; value = d*sc*q - dmin*m with m = sc, q in 0..3
                for x in &mut b[..16] {
                    let sc = rng.range(1, 15) as u8;
                    *x = sc | (sc << 4);
                }
                let d = s / 10.2 * j;
                put_f16(b, 80, d);
                put_f16(b, 82, 1.5 * d);
            }
            Q3_K => put_f16(b, 108, s / 43.4 * j),
            Q4_K => {
                // d | dmin | scales[12] | qs[128]; centred: dmin*m = d*sc*7.5 with dmin = 4d
                let d = s / 117.0 * j;
                put_f16(b, 0, d);
                put_f16(b, 2, 4.0 * d);
                pack_k_scales(rng, 17, 33, 1.875, &mut b[4..16]);
            }
            Q5_K => {
                let d = s / 226.0 * j;
                put_f16(b, 0, d);
                put_f16(b, 2, 8.0 * d);
                pack_k_scales(rng, 16, 32, 1.9375, &mut b[4..16]);
            }
            Q6_K => {
                // ql[128] | qh[64] | scales[16] (i8) | d
                for x in &mut b[192..208] {
                    *x = rng.range(16, 48) as u8;
                }
                put_f16(b, 208, s / 620.0 * j);
            }
            IQ4_NL => put_f16(b, 0, s / 67.4 * j),
            IQ4_XS => put_f16(b, 0, s / 1247.0 * j),
            _ => unreachable!("checked by can_generate"),
        }
    }
    Ok(())
}

/// Packs eight (scale, min) 6-bit pairs as Q4_K/Q5_K store them, with scale in `lo..=hi` and
/// min = round(scale * `ratio`), which centres each sub-block on zero.
fn pack_k_scales(rng: &mut Rng, lo: u32, hi: u32, ratio: f32, q: &mut [u8]) {
    let mut sc = [0u8; 8];
    let mut m = [0u8; 8];
    for i in 0..8 {
        sc[i] = rng.range(lo, hi) as u8;
        m[i] = ((sc[i] as f32 * ratio).round() as u8).min(63);
    }
    for j in 0..4 {
        q[j] = sc[j] | ((sc[j + 4] >> 4) << 6);
        q[j + 4] = m[j] | ((m[j + 4] >> 4) << 6);
        q[j + 8] = (sc[j + 4] & 0xF) | ((m[j + 4] & 0xF) << 4);
    }
}

/// Fills FP8 E4M3 weights (one byte each) with normal-shaped codes of spread [`FP8_SIGMA`].
pub fn fill_fp8(rng: &mut Rng, out: &mut [u8]) {
    let codes = e4m3_normal_codes();
    for c in out.chunks_mut(5) {
        let r = rng.next_u64();
        for (i, x) in c.iter_mut().enumerate() {
            *x = codes[((r >> (12 * i)) & 4095) as usize];
        }
    }
}

/// The `weight_scale_inv` value that gives FP8 codes from [`fill_fp8`] a spread of `std`.
pub fn fp8_scale_inv(std: f32, rng: &mut Rng) -> f32 {
    std / FP8_SIGMA * (0.75 + 0.5 * rng.uniform())
}

/// Root mean square of the 16 E2M1 values (uniform random nibbles).
pub const E2M1_RMS: f32 = 2.926;

/// Fills NVFP4 per-16 block scales (E4M3) with values in [1, 2).
pub fn fill_nvfp4_scales(rng: &mut Rng, out: &mut [u8]) {
    let one = f32_to_e4m3(1.0);
    for x in out.iter_mut() {
        *x = one + rng.range(0, 7) as u8;
    }
}

/// The NVFP4 `weight_scale_2` that gives random nibbles and [`fill_nvfp4_scales`] a spread of `std`.
pub fn nvfp4_global_scale(std: f32) -> f32 {
    std / (E2M1_RMS * 1.45)
}

#[cfg(test)]
mod tests {
    use super::*;
    use pocket_quant::{dequantize, QuantFormat};

    fn stats(v: &[f32]) -> (f32, f32) {
        let n = v.len() as f64;
        let mean = v.iter().map(|&x| x as f64).sum::<f64>() / n;
        let var = v.iter().map(|&x| (x as f64 - mean).powi(2)).sum::<f64>() / n;
        (mean as f32, var.sqrt() as f32)
    }

    #[test]
    fn every_generated_type_has_sane_values() {
        for ty in GgmlType::all().filter(|&t| can_generate(t)) {
            let n = 256 * 64;
            let mut bytes = vec![0u8; ty.bytes_for(n as u64).unwrap() as usize];
            fill_ggml(ty, Init::normal(0.02), &mut Rng::new(3), &mut bytes).unwrap();
            let mut out = vec![0f32; n];
            dequantize(QuantFormat::Ggml(ty), &bytes, &mut out).unwrap();
            assert!(out.iter().all(|v| v.is_finite()), "{ty}");
            let (mean, std) = stats(&out);
            assert!(mean.abs() < 0.01, "{ty}: mean {mean}");
            assert!((0.01..0.04).contains(&std), "{ty}: std {std}");
        }
    }

    #[test]
    fn fp8_and_nvfp4_spreads() {
        let mut r = Rng::new(5);
        let mut b = vec![0u8; 1 << 16];
        fill_fp8(&mut r, &mut b);
        let s = fp8_scale_inv(0.02, &mut r);
        let v: Vec<f32> = b.iter().map(|&c| crate::rng::e4m3_to_f32(c) * s).collect();
        assert!(v.iter().all(|x| x.is_finite()));
        let (_, std) = stats(&v);
        assert!((0.01..0.04).contains(&std), "fp8 std {std}");
        let mut sc = vec![0u8; 64];
        fill_nvfp4_scales(&mut r, &mut sc);
        assert!(sc
            .iter()
            .all(|&c| (1.0..2.0).contains(&crate::rng::e4m3_to_f32(c))));
    }

    #[test]
    fn rejects_partial_blocks_and_unknown_types() {
        let mut b = vec![0u8; 17];
        assert!(fill_ggml(GgmlType::Q4_0, Init::normal(0.02), &mut Rng::new(1), &mut b).is_err());
        let mut b = vec![0u8; GgmlType::IQ2_XXS.block_bytes()];
        assert!(fill_ggml(
            GgmlType::IQ2_XXS,
            Init::normal(0.02),
            &mut Rng::new(1),
            &mut b
        )
        .is_err());
    }
}
