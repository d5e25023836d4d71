//! Deterministic fast randomness for synthetic weights: SplitMix64, a normal-quantile table and
//! FP8 E4M3 encoding.

use std::sync::OnceLock;

/// SplitMix64: tiny, fast and good enough for filling weight bytes.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator seeded with `seed`.
    pub fn new(seed: u64) -> Self {
        Rng(seed ^ 0x5851_F42D_4C95_7F2D)
    }

    /// A generator for chunk `chunk` of the stream named `name` (independent of thread count).
    pub fn for_chunk(seed: u64, name: &str, chunk: u64) -> Self {
        let mut h = Rng::new(seed ^ fnv1a(name.as_bytes()));
        let a = h.next_u64();
        Rng::new(a ^ chunk.wrapping_mul(0x9E37_79B9_7F4A_7C15))
    }

    /// The next 64 random bits.
    #[inline]
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A uniform f32 in [0, 1).
    #[inline]
    pub fn uniform(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 / (1u64 << 24) as f32
    }

    /// A uniform integer in `lo..=hi`.
    #[inline]
    pub fn range(&mut self, lo: u32, hi: u32) -> u32 {
        lo + ((self.next_u64() >> 32) % (hi - lo + 1) as u64) as u32
    }

    /// Fills `out` with random bytes.
    pub fn fill_bytes(&mut self, out: &mut [u8]) {
        let mut chunks = out.chunks_exact_mut(8);
        for c in &mut chunks {
            c.copy_from_slice(&self.next_u64().to_le_bytes());
        }
        let rest = chunks.into_remainder();
        let last = self.next_u64().to_le_bytes();
        let n = rest.len();
        rest.copy_from_slice(&last[..n]);
    }

    /// A standard-normal sample (table lookup of 65536 quantiles).
    #[inline]
    pub fn normal(&mut self) -> f32 {
        normal_table()[(self.next_u64() >> 48) as usize]
    }
}

/// FNV-1a over bytes (stable across runs and platforms).
pub fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= b as u64;
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// The 65536 standard-normal quantiles at (i + 0.5) / 65536.
fn normal_table() -> &'static [f32] {
    static T: OnceLock<Vec<f32>> = OnceLock::new();
    T.get_or_init(|| {
        (0..65536)
            .map(|i| inv_normal_cdf((i as f64 + 0.5) / 65536.0) as f32)
            .collect()
    })
}

/// Acklam's rational approximation of the inverse standard-normal CDF (relative error < 1.2e-9).
pub fn inv_normal_cdf(p: f64) -> f64 {
    const A: [f64; 6] = [
        -3.969_683_028_665_376e1,
        2.209_460_984_245_205e2,
        -2.759_285_104_469_687e2,
        1.383_577_518_672_69e2,
        -3.066_479_806_614_716e1,
        2.506_628_277_459_239,
    ];
    const B: [f64; 5] = [
        -5.447_609_879_822_406e1,
        1.615_858_368_580_409e2,
        -1.556_989_798_598_866e2,
        6.680_131_188_771_972e1,
        -1.328_068_155_288_572e1,
    ];
    const C: [f64; 6] = [
        -7.784_894_002_430_293e-3,
        -3.223_964_580_411_365e-1,
        -2.400_758_277_161_838,
        -2.549_732_539_343_734,
        4.374_664_141_464_968,
        2.938_163_982_698_783,
    ];
    const D: [f64; 4] = [
        7.784_695_709_041_462e-3,
        3.224_671_290_700_398e-1,
        2.445_134_137_142_996,
        3.754_408_661_907_416,
    ];
    let p = p.clamp(1e-300, 1.0 - 1e-16);
    let tail = |q: f64| {
        (((((C[0] * q + C[1]) * q + C[2]) * q + C[3]) * q + C[4]) * q + C[5])
            / ((((D[0] * q + D[1]) * q + D[2]) * q + D[3]) * q + 1.0)
    };
    if p < 0.02425 {
        tail((-2.0 * p.ln()).sqrt())
    } else if p > 1.0 - 0.02425 {
        -tail((-2.0 * (1.0 - p).ln()).sqrt())
    } else {
        let q = p - 0.5;
        let r = q * q;
        (((((A[0] * r + A[1]) * r + A[2]) * r + A[3]) * r + A[4]) * r + A[5]) * q
            / (((((B[0] * r + B[1]) * r + B[2]) * r + B[3]) * r + B[4]) * r + 1.0)
    }
}

/// Decodes an FP8 E4M3 ("fn": no infinities, 0x7F/0xFF are NaN) byte.
pub fn e4m3_to_f32(b: u8) -> f32 {
    let sign = if b & 0x80 != 0 { -1.0 } else { 1.0 };
    let e = ((b >> 3) & 0xF) as i32;
    let m = (b & 7) as f32;
    if e == 15 && b & 7 == 7 {
        return f32::NAN;
    }
    let v = if e == 0 {
        m / 8.0 * 2f32.powi(-6)
    } else {
        (1.0 + m / 8.0) * 2f32.powi(e - 7)
    };
    sign * v
}

/// Encodes to the nearest FP8 E4M3 value, saturating at ±448 (never NaN).
pub fn f32_to_e4m3(v: f32) -> u8 {
    let sign = if v.is_sign_negative() { 0x80u8 } else { 0 };
    let a = v.abs();
    if a.is_nan() {
        return sign;
    }
    let mut best = 0u8;
    let mut best_err = f32::INFINITY;
    for code in 0u8..0x7F {
        let err = (e4m3_to_f32(code) - a).abs();
        if err < best_err {
            best_err = err;
            best = code;
        }
    }
    sign | best
}

/// 4096 E4M3 codes whose values are normal quantiles times [`FP8_SIGMA`]: sampling an index gives
/// FP8 weights with a normal shape and standard deviation of about `FP8_SIGMA` before scaling.
pub fn e4m3_normal_codes() -> &'static [u8] {
    static T: OnceLock<Vec<u8>> = OnceLock::new();
    T.get_or_init(|| {
        (0..4096)
            .map(|i| f32_to_e4m3((inv_normal_cdf((i as f64 + 0.5) / 4096.0) as f32) * FP8_SIGMA))
            .collect()
    })
}

/// The standard deviation of the E4M3 codes drawn from [`e4m3_normal_codes`] (max 448 at 4.5 sigma).
pub const FP8_SIGMA: f32 = 100.0;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn e4m3_round_trips() {
        for code in 0u8..0x7F {
            assert_eq!(f32_to_e4m3(e4m3_to_f32(code)), code);
            assert_eq!(f32_to_e4m3(-e4m3_to_f32(code)) & 0x7F, code);
        }
        assert_eq!(e4m3_to_f32(0x7E), 448.0);
        assert_eq!(f32_to_e4m3(1e6), 0x7E);
    }

    #[test]
    fn normal_samples_have_unit_spread() {
        let mut r = Rng::new(1);
        let n = 200_000;
        let xs: Vec<f32> = (0..n).map(|_| r.normal()).collect();
        let mean = xs.iter().sum::<f32>() / n as f32;
        let var = xs.iter().map(|x| (x - mean) * (x - mean)).sum::<f32>() / n as f32;
        assert!(mean.abs() < 0.02, "{mean}");
        assert!((var.sqrt() - 1.0).abs() < 0.02, "{var}");
    }

    #[test]
    fn chunks_are_deterministic_and_distinct() {
        let a = Rng::for_chunk(7, "t", 0).next_u64();
        assert_eq!(a, Rng::for_chunk(7, "t", 0).next_u64());
        assert_ne!(a, Rng::for_chunk(7, "t", 1).next_u64());
        assert_ne!(a, Rng::for_chunk(7, "u", 0).next_u64());
    }
}
