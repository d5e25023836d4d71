//! Quantized activations: the in-memory blocks that weight rows are dotted against.
//!
//! These are working buffers, not file formats, so the scales are kept as f32 (more precise and
//! cheaper to use than ggml's f16 scales).

use crate::formats::kquants::{q8k_block, QK_K};

/// 32 activations as int8 with an f32 scale and the scaled sum (pairs with the 32-element formats).
#[derive(Clone, Copy, Debug)]
#[repr(C, align(8))]
pub struct BlockQ8 {
    /// Scale: value = d * q.
    pub d: f32,
    /// d * sum(qs), for formats with a minimum (Q4_1, Q5_1).
    pub s: f32,
    /// Quantized values.
    pub qs: [i8; 32],
}

/// 256 activations as int8 with an f32 scale and per-16 sums (pairs with K and IQ formats).
#[derive(Clone, Copy, Debug)]
#[repr(C, align(32))]
pub struct BlockQ8K {
    /// Quantized values.
    pub qs: [i8; QK_K],
    /// Scale: value = d * q.
    pub d: f32,
    /// Sums of each 16 consecutive qs.
    pub bsums: [i16; 16],
}

/// Quantizes `x` (a multiple of 32 long) to [`BlockQ8`] blocks, round half away from zero.
pub fn quantize_act_q8(x: &[f32], out: &mut Vec<BlockQ8>) {
    out.clear();
    #[cfg(target_arch = "x86_64")]
    if crate::simd::avx2_available() {
        out.reserve(x.len() / 32);
        // SAFETY: AVX2 was detected; the chunks are exactly 32 long.
        out.extend(
            x.chunks_exact(32)
                .map(|c| unsafe { q8_block_avx2(c.try_into().expect("32 values")) }),
        );
        return;
    }
    out.extend(x.chunks_exact(32).map(q8_block));
}

/// `1 / d`, or 0 where that is not finite (d = 0, or a subnormal d whose inverse overflows): the
/// block's quants are then all 0. A block that small is zero to f32 precision anyway, and an
/// infinite inverse would saturate the quants to ±127 / -128 (-128 breaks the AVX2 dots' sign
/// tricks). The CUDA quantizer (kernels/common.cuh `quant_lane`) applies the same rule.
#[inline(always)]
fn inverse_scale(d: f32) -> f32 {
    let id = 1.0 / d;
    if id.is_finite() {
        id
    } else {
        0.0
    }
}

/// One [`BlockQ8`]: the reference arithmetic (the AVX2 path and the CUDA kernels match it bit
/// for bit).
fn q8_block(c: &[f32]) -> BlockQ8 {
    let amax = c.iter().fold(0.0f32, |m, v| m.max(v.abs()));
    let d = amax / 127.0;
    let id = inverse_scale(d);
    let mut qs = [0i8; 32];
    let mut sum = 0i32;
    for (q, &v) in qs.iter_mut().zip(c) {
        *q = (v * id).round() as i8;
        sum += *q as i32;
    }
    BlockQ8 {
        d,
        s: d * sum as f32,
        qs,
    }
}

/// [`q8_block`] with AVX2, bit-identical: the same `amax`, `d`, `1/d` and products, and
/// `round()`'s half-away-from-zero rounding rebuilt from truncation (`x - trunc(x)` is exact).
/// Blocks with a non-finite value take the scalar path (its saturating casts differ from the
/// vector conversions only there).
///
/// # Safety
/// The CPU must support AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q8_block_avx2(c: &[f32; 32]) -> BlockQ8 {
    use std::arch::x86_64::*;
    let sign = _mm256_set1_ps(-0.0);
    let v: [__m256; 4] = std::array::from_fn(|i| _mm256_loadu_ps(c.as_ptr().add(8 * i)));
    // max(|v|, m) keeps m when |v| is NaN, as f32::max does.
    let mut m = _mm256_setzero_ps();
    for x in v {
        m = _mm256_max_ps(_mm256_andnot_ps(sign, x), m);
    }
    let m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    let m2 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    let amax = _mm_cvtss_f32(_mm_max_ss(m2, _mm_movehdup_ps(m2)));
    if !amax.is_finite() || c.iter().any(|x| x.is_nan()) {
        return q8_block(c);
    }
    let d = amax / 127.0;
    let id = inverse_scale(d);
    let idv = _mm256_set1_ps(id);
    let half = _mm256_set1_ps(0.5);
    let one = _mm256_set1_ps(1.0);
    let q: [__m256i; 4] = std::array::from_fn(|i| {
        let x = _mm256_mul_ps(v[i], idv);
        let t = _mm256_round_ps(x, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
        let frac = _mm256_andnot_ps(sign, _mm256_sub_ps(x, t));
        let up = _mm256_cmp_ps(frac, half, _CMP_GE_OQ);
        let step = _mm256_and_ps(up, _mm256_or_ps(one, _mm256_and_ps(sign, x)));
        _mm256_cvttps_epi32(_mm256_add_ps(t, step))
    });
    let s4 = _mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3]));
    let s2 = _mm_add_epi32(_mm256_castsi256_si128(s4), _mm256_extracti128_si256(s4, 1));
    let s1 = _mm_add_epi32(s2, _mm_shuffle_epi32(s2, 0b01_00_11_10));
    let sum = _mm_cvtsi128_si32(_mm_add_epi32(s1, _mm_shuffle_epi32(s1, 0b10_11_00_01)));
    // |q| <= 127, so the saturating packs are exact; undo their lane interleave.
    let p = _mm256_packs_epi16(
        _mm256_packs_epi32(q[0], q[1]),
        _mm256_packs_epi32(q[2], q[3]),
    );
    let p = _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    let mut qs = [0i8; 32];
    _mm256_storeu_si256(qs.as_mut_ptr() as *mut __m256i, p);
    BlockQ8 {
        d,
        s: d * sum as f32,
        qs,
    }
}

/// Quantizes `x` (a multiple of 256 long) to [`BlockQ8K`] blocks, as ggml's `quantize_row_q8_K`.
pub fn quantize_act_q8k(x: &[f32], out: &mut Vec<BlockQ8K>) {
    out.clear();
    out.extend(x.chunks_exact(QK_K).map(|c| {
        let (d, qs, bsums) = q8k_block(c);
        BlockQ8K { qs, d, bsums }
    }));
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn same(a: &BlockQ8, b: &BlockQ8) -> bool {
        a.d.to_bits() == b.d.to_bits() && a.s.to_bits() == b.s.to_bits() && a.qs == b.qs
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]
        /// The vector path equals the reference bit for bit, including values landing exactly
        /// on .5 after scaling, zero blocks, tiny and huge magnitudes.
        #[test]
        fn q8_simd_is_bit_identical(v in prop::collection::vec(prop_oneof![
            -4.0f32..4.0,
            (-254i32..=254).prop_map(|k| k as f32 * 0.5),
            Just(0.0f32),
            prop::num::f32::NORMAL | prop::num::f32::SUBNORMAL | prop::num::f32::ZERO,
        ], 32 * 3)) {
            let mut got = Vec::new();
            quantize_act_q8(&v, &mut got);
            for (c, g) in v.chunks_exact(32).zip(&got) {
                let want = q8_block(c);
                prop_assert!(same(&want, g), "{c:?}: want {want:?} got {g:?}");
            }
        }
    }

    /// Scaled values exactly halfway between integers (d = 1) round away from zero.
    #[test]
    fn q8_simd_halfway() {
        let mut v: Vec<f32> = (0..32).map(|i| (i as f32 - 16.0) * 3.5 + 0.5).collect();
        v[0] = 127.0;
        let mut got = Vec::new();
        quantize_act_q8(&v, &mut got);
        assert!(same(&q8_block(&v), &got[0]));
        // (i - 16) * 3.5 + 0.5: -48.5 -> -49, -41.5 -> -42, 7.5 -> 8
        assert_eq!((got[0].qs[2], got[0].qs[4], got[0].qs[18]), (-49, -42, 8));
    }

    /// Blocks whose scale is subnormal with an infinite inverse quantize to all zeros on both
    /// paths (never the saturated ±127 / -128 pattern), and blocks of large subnormal scale
    /// (finite inverse) stay bit-identical too.
    #[test]
    fn q8_subnormal_scale_blocks() {
        for amax in [1e-39f32, 1e-44, 1.4e-45, 1e-37, 1.5e-36, 1.2e-38 * 127.0] {
            let v: Vec<f32> = (0..32)
                .map(|i| amax * [-1.0, -0.5, 0.0, 0.5, 1.0][i % 5])
                .collect();
            let mut got = Vec::new();
            quantize_act_q8(&v, &mut got);
            let want = q8_block(&v);
            assert!(
                same(&want, &got[0]),
                "{amax:e}: want {want:?} got {:?}",
                got[0]
            );
            assert!(want.qs.iter().all(|&q| q != -128), "{amax:e}: {want:?}");
            if !(1.0 / (amax / 127.0)).is_finite() {
                assert_eq!(want.qs, [0; 32], "{amax:e}");
            }
            // Q8_K: -127 / max overflows below ~3.7e-37: an all-zero block with d = 0.
            let big: Vec<f32> = (0..QK_K).map(|i| v[i % 32]).collect();
            let mut k = Vec::new();
            quantize_act_q8k(&big, &mut k);
            assert!(k[0].qs.iter().all(|&q| q != -128), "{amax:e}");
            if amax > 0.0 && !(-127.0 / -amax).is_finite() {
                assert!(k[0].qs.iter().all(|&q| q == 0) && k[0].d == 0.0, "{amax:e}");
            }
        }
    }

    /// Non-finite inputs follow the reference too.
    #[test]
    fn q8_simd_non_finite() {
        for bad in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
            let mut v: Vec<f32> = (0..32).map(|i| i as f32 - 15.5).collect();
            v[7] = bad;
            let mut got = Vec::new();
            quantize_act_q8(&v, &mut got);
            assert!(same(&q8_block(&v), &got[0]), "{bad}");
        }
    }
}
