//! AVX2 dots of the codebook (IQ1/IQ2/IQ3) and ternary (TQ) formats against Q8_K.
//!
//! Codebook formats: per 32 elements the grid entries are fetched with scalar loads (4 x u64 or
//! 8 x u32) into one vector of unsigned magnitudes, the sign bits are expanded to byte masks and
//! applied to the activations (`q8 * ±1`, exact since Q8_K codes never reach -128), and
//! `vpmaddubsw` / `vpmaddwd` produce the integer sums weighted by the odd sub-block scales
//! `2s + 1`. IQ1's grids are signed {-1, 0, 1}; their `±1/8` delta term comes from the activation
//! sums. Ternary formats decode trits with byte arithmetic and subtract the activation sums for
//! the `-1` offset.

use super::avx2::{bits_to_bytes, f16_at, hsum, load, scale_pair, srl16};
use crate::act::BlockQ8K;
use crate::dot::scalar_iq::iq1m_d_bits;
use crate::dot::Kernel;
use crate::format::QuantFormat;
use crate::grids::{IQ1S_GRID, IQ2S_GRID, IQ2XS_GRID, IQ2XXS_GRID, IQ3S_GRID, IQ3XXS_GRID};
use crate::util::{u16_at, u32_at};
use pocket_formats::ggml_type::GgmlType as G;
use std::arch::x86_64::*;

/// The AVX2 kernel for `f`, if this module has one.
pub(super) fn kernel(f: QuantFormat) -> Option<Kernel> {
    Some(match f {
        QuantFormat::Ggml(G::IQ2_XXS) => Kernel::Q8K(dot_iq2_xxs),
        QuantFormat::Ggml(G::IQ2_XS) => Kernel::Q8K(dot_iq2_xs),
        QuantFormat::Ggml(G::IQ2_S) => Kernel::Q8K(dot_iq2_s),
        QuantFormat::Ggml(G::IQ3_XXS) => Kernel::Q8K(dot_iq3_xxs),
        QuantFormat::Ggml(G::IQ3_S) => Kernel::Q8K(dot_iq3_s),
        QuantFormat::Ggml(G::IQ1_S) => Kernel::Q8K(dot_iq1_s),
        QuantFormat::Ggml(G::IQ1_M) => Kernel::Q8K(dot_iq1_m),
        QuantFormat::Ggml(G::TQ1_0) => Kernel::Q8K(dot_tq1_0),
        QuantFormat::Ggml(G::TQ2_0) => Kernel::Q8K(dot_tq2_0),
        _ => return None,
    })
}

/// The 32 activations at `y` with the sign of bit j of `signs` applied to element j.
#[inline(always)]
unsafe fn signed_y(y: *const i8, signs: u32) -> __m256i {
    let m = bits_to_bytes(signs);
    _mm256_sub_epi8(_mm256_xor_si256(load(y), m), m)
}

/// `ksigns_iq2xs` expanded to 8 bytes of ±1 per 7-bit sign index (ggml's `keven_signs_q2xs`
/// role): the sign bits of 8 weights become a `vpsignb` operand with one table load.
static KSIGNS_PM1: [u64; 128] = {
    let mut t = [0u64; 128];
    let mut i = 0;
    while i < 128 {
        // bit 7 is the parity of the 7 stored sign bits (the count of minus signs is even)
        let s = i as u32
            | if (i as u32).count_ones() % 2 == 1 {
                0x80
            } else {
                0
            };
        let mut v = 0u64;
        let mut k = 0;
        while k < 8 {
            let byte: u64 = if (s >> k) & 1 == 1 { 0xff } else { 0x01 };
            v |= byte << (8 * k);
            k += 1;
        }
        t[i] = v;
        i += 1;
    }
    t
};

/// The 32 activations at `y` times the ±1 signs of four 7-bit sign indices (bits 0..28 of `aux`).
#[inline(always)]
unsafe fn ksigned_y(y: *const i8, aux: u32) -> __m256i {
    let s = [0, 1, 2, 3].map(|l| KSIGNS_PM1[((aux >> (7 * l)) & 127) as usize]);
    _mm256_sign_epi8(load(y), grid64(s))
}

/// `u8 magnitudes · i8` with the products of elements 0..16 times `s0`, 16..32 times `s1`.
#[inline(always)]
unsafe fn scaled_dot(g: __m256i, y: __m256i, s0: i16, s1: i16) -> __m256i {
    _mm256_madd_epi16(_mm256_maddubs_epi16(g, y), scale_pair(s0, s1))
}

#[inline(always)]
unsafe fn grid64(e: [u64; 4]) -> __m256i {
    _mm256_setr_epi64x(e[0] as i64, e[1] as i64, e[2] as i64, e[3] as i64)
}

/// The skeleton of the IQ2 / IQ3 dots: per super-block of `BB` bytes (an f16 scale first), the
/// exact integer sums of its 8 sub-blocks (`sub(block, y, ib)`, i32 lanes) scaled by `d * y.d`
/// with one FMA; returns the lanes' total.
#[inline(always)]
unsafe fn codebook_dot<const BB: usize>(
    w: &[u8],
    x: &[BlockQ8K],
    sub: impl Fn(&[u8], &BlockQ8K, usize) -> __m256i,
) -> f32 {
    let nb = (w.len() / BB).min(x.len());
    let mut acc = _mm256_setzero_ps();
    for i in 0..nb {
        let b = std::slice::from_raw_parts(w.as_ptr().add(i * BB), BB);
        let y = &*x.as_ptr().add(i);
        let mut sumi = _mm256_setzero_si256();
        for ib in 0..8 {
            sumi = _mm256_add_epi32(sumi, sub(b, y, ib));
        }
        acc = _mm256_fmadd_ps(
            _mm256_set1_ps(f16_at(b.as_ptr()) * y.d),
            _mm256_cvtepi32_ps(sumi),
            acc,
        );
    }
    hsum(acc)
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot_iq2_xxs_impl(w: &[u8], _s: &[u8], x: &[BlockQ8K]) -> f32 {
    0.125
        * codebook_dot::<66>(w, x, |b, y, ib| {
            let o = 2 + ib * 8;
            let aux = u32_at(b, o + 4);
            let g = grid64([0, 1, 2, 3].map(|l| IQ2XXS_GRID[b[o + l] as usize]));
            let ys = ksigned_y(y.qs.as_ptr().add(ib * 32), aux);
            let ls = (2 * (aux >> 28) + 1) as i16;
            scaled_dot(g, ys, ls, ls)
        })
}
safe_wrapper!(dot_iq2_xxs, dot_iq2_xxs_impl, BlockQ8K);

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot_iq2_xs_impl(w: &[u8], _s: &[u8], x: &[BlockQ8K]) -> f32 {
    0.125
        * codebook_dot::<74>(w, x, |b, y, ib| {
            let qv = [0, 1, 2, 3].map(|l| u16_at(b, 2 + 2 * (ib * 4 + l)));
            let g = grid64(qv.map(|q| IQ2XS_GRID[(q & 511) as usize]));
            let signs = grid64(qv.map(|q| KSIGNS_PM1[(q >> 9) as usize]));
            let ys = _mm256_sign_epi8(load(y.qs.as_ptr().add(ib * 32)), signs);
            let sc = b[66 + ib];
            let (l0, l1) = (2 * (sc & 0xf) as i16 + 1, 2 * (sc >> 4) as i16 + 1);
            scaled_dot(g, ys, l0, l1)
        })
}
safe_wrapper!(dot_iq2_xs, dot_iq2_xs_impl, BlockQ8K);

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot_iq2_s_impl(w: &[u8], _s: &[u8], x: &[BlockQ8K]) -> f32 {
    0.125
        * codebook_dot::<82>(w, x, |b, y, ib| {
            let qh = b[66 + ib] as usize;
            let g = grid64(
                [0, 1, 2, 3]
                    .map(|l| IQ2S_GRID[b[2 + ib * 4 + l] as usize | (((qh >> (2 * l)) & 3) << 8)]),
            );
            let ys = signed_y(y.qs.as_ptr().add(ib * 32), u32_at(b, 34 + ib * 4));
            let sc = b[74 + ib];
            let (l0, l1) = (2 * (sc & 0xf) as i16 + 1, 2 * (sc >> 4) as i16 + 1);
            scaled_dot(g, ys, l0, l1)
        })
}
safe_wrapper!(dot_iq2_s, dot_iq2_s_impl, BlockQ8K);

#[inline(always)]
unsafe fn grid32(e: [u32; 8]) -> __m256i {
    _mm256_setr_epi32(
        e[0] as i32,
        e[1] as i32,
        e[2] as i32,
        e[3] as i32,
        e[4] as i32,
        e[5] as i32,
        e[6] as i32,
        e[7] as i32,
    )
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot_iq3_xxs_impl(w: &[u8], _s: &[u8], x: &[BlockQ8K]) -> f32 {
    0.25 * codebook_dot::<98>(w, x, |b, y, ib| {
        let aux = u32_at(b, 66 + 4 * ib);
        let g = grid32([0, 1, 2, 3, 4, 5, 6, 7].map(|k| IQ3XXS_GRID[b[2 + ib * 8 + k] as usize]));
        let ys = ksigned_y(y.qs.as_ptr().add(ib * 32), aux);
        let ls = (2 * (aux >> 28) + 1) as i16;
        scaled_dot(g, ys, ls, ls)
    })
}
safe_wrapper!(dot_iq3_xxs, dot_iq3_xxs_impl, BlockQ8K);

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot_iq3_s_impl(w: &[u8], _s: &[u8], x: &[BlockQ8K]) -> f32 {
    codebook_dot::<110>(w, x, |b, y, ib| {
        let qh = b[66 + ib] as usize;
        let g = grid32(
            [0, 1, 2, 3, 4, 5, 6, 7]
                .map(|k| IQ3S_GRID[b[2 + ib * 8 + k] as usize | (((qh >> k) & 1) << 8)]),
        );
        let ys = signed_y(y.qs.as_ptr().add(ib * 32), u32_at(b, 74 + ib * 4));
        let ls = 2 * ((b[106 + ib / 2] >> (4 * (ib % 2))) & 0xf) as i16 + 1;
        scaled_dot(g, ys, ls, ls)
    })
}
safe_wrapper!(dot_iq3_s, dot_iq3_s_impl, BlockQ8K);

/// Signed grid bytes · int8 activations, elements 0..16 times `s0` and 16..32 times `s1`.
#[inline(always)]
unsafe fn signed_scaled_dot(g: __m256i, y: __m256i, s0: i16, s1: i16) -> __m256i {
    let p = _mm256_maddubs_epi16(_mm256_sign_epi8(g, g), _mm256_sign_epi8(y, g));
    _mm256_madd_epi16(p, scale_pair(s0, s1))
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot_iq1_s_impl(w: &[u8], _s: &[u8], x: &[BlockQ8K]) -> f32 {
    let nb = (w.len() / 50).min(x.len());
    let mut acc = _mm256_setzero_ps();
    for i in 0..nb {
        let b = std::slice::from_raw_parts(w.as_ptr().add(i * 50), 50);
        let y = &*x.as_ptr().add(i);
        let mut sumi = _mm256_setzero_si256();
        let mut sumi1 = 0i32;
        for ib in 0..8 {
            let qh = u16_at(b, 34 + 2 * ib) as usize;
            let g = grid64(
                [0, 1, 2, 3]
                    .map(|l| IQ1S_GRID[b[2 + ib * 4 + l] as usize | (((qh >> (3 * l)) & 7) << 8)]),
            );
            let ls = 2 * ((qh >> 12) & 7) as i16 + 1;
            sumi = _mm256_add_epi32(
                sumi,
                signed_scaled_dot(g, load(y.qs.as_ptr().add(ib * 32)), ls, ls),
            );
            let ysum = y.bsums[2 * ib] as i32 + y.bsums[2 * ib + 1] as i32;
            // branch-free: the delta sign bit is random in real weights
            let sign = 1 - 2 * (qh >> 15) as i32;
            sumi1 += sign * ysum * ls as i32;
        }
        let t = _mm256_add_ps(
            _mm256_cvtepi32_ps(sumi),
            _mm256_set_ps(0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.125 * sumi1 as f32),
        );
        acc = _mm256_fmadd_ps(_mm256_set1_ps(f16_at(b.as_ptr()) * y.d), t, acc);
    }
    hsum(acc)
}
safe_wrapper!(dot_iq1_s, dot_iq1_s_impl, BlockQ8K);

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot_iq1_m_impl(w: &[u8], _s: &[u8], x: &[BlockQ8K]) -> f32 {
    let nb = (w.len() / 56).min(x.len());
    let ones = _mm256_set1_epi8(1);
    let delta_bits = _mm256_setr_epi32(8, 8, 0x80, 0x80, 0x800, 0x800, 0x8000, 0x8000);
    let mut acc = _mm256_setzero_ps();
    for i in 0..nb {
        let b = std::slice::from_raw_parts(w.as_ptr().add(i * 56), 56);
        let y = &*x.as_ptr().add(i);
        let mut sumi1 = _mm256_setzero_si256();
        let mut sumi2 = _mm256_setzero_si256();
        let d = _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(iq1m_d_bits(b) as i32)));
        for ib in 0..8 {
            // one nibble per 8 elements: 3 high grid-index bits and the delta sign (bit 3)
            let qh16 = u16_at(b, 32 + 2 * ib) as i32;
            let g = grid64([0, 1, 2, 3].map(|l| {
                IQ1S_GRID[b[ib * 4 + l] as usize | ((((qh16 >> (4 * l)) & 7) as usize) << 8)]
            }));
            // the delta signs as a ±1 byte vector, branch-free (the bits are random in real weights)
            let clear = _mm256_cmpeq_epi32(
                _mm256_and_si256(_mm256_set1_epi32(qh16), delta_bits),
                _mm256_setzero_si256(),
            );
            let dl = _mm256_or_si256(_mm256_andnot_si256(clear, _mm256_set1_epi8(-1)), ones);
            let sc = u16_at(b, 48 + 2 * (ib / 2)) >> (6 * (ib % 2));
            let (l0, l1) = (2 * (sc & 7) as i16 + 1, 2 * ((sc >> 3) & 7) as i16 + 1);
            let yv = load(y.qs.as_ptr().add(ib * 32));
            sumi1 = _mm256_add_epi32(sumi1, signed_scaled_dot(g, yv, l0, l1));
            let p2 = _mm256_maddubs_epi16(ones, _mm256_sign_epi8(yv, dl));
            sumi2 = _mm256_add_epi32(sumi2, _mm256_madd_epi16(p2, scale_pair(l0, l1)));
        }
        let t = _mm256_fmadd_ps(
            _mm256_set1_ps(0.125),
            _mm256_cvtepi32_ps(sumi2),
            _mm256_cvtepi32_ps(sumi1),
        );
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d * y.d), t, acc);
    }
    hsum(acc)
}
safe_wrapper!(dot_iq1_m, dot_iq1_m_impl, BlockQ8K);

/// Sum of all 256 activations of a Q8_K block (from its per-16 sums).
#[inline(always)]
fn ysum(y: &BlockQ8K) -> i32 {
    y.bsums.iter().map(|&s| s as i32).sum()
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot_tq2_0_impl(w: &[u8], _s: &[u8], x: &[BlockQ8K]) -> f32 {
    let nb = (w.len() / 66).min(x.len());
    let m3 = _mm256_set1_epi8(3);
    let mut acc = _mm256_setzero_ps();
    let mut corr = 0.0f32;
    for i in 0..nb {
        let b = w.as_ptr().add(i * 66);
        let y = &*x.as_ptr().add(i);
        let mut sumi = _mm256_setzero_si256();
        for h in 0..2 {
            let q = _mm256_loadu_si256(b.add(32 * h) as *const __m256i);
            for s in 0..4 {
                let v = _mm256_and_si256(srl16(q, 2 * s as i32), m3);
                let p = _mm256_maddubs_epi16(v, load(y.qs.as_ptr().add(h * 128 + s * 32)));
                sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(p, _mm256_set1_epi16(1)));
            }
        }
        let d = f16_at(b.add(64)) * y.d;
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
        corr += d * ysum(y) as f32;
    }
    hsum(acc) - corr
}
safe_wrapper!(dot_tq2_0, dot_tq2_0_impl, BlockQ8K);

/// Trits (0..2) of 32 bytes `v` multiplied bytewise by the 16-bit-lane constants `pow`
/// (the same power of 3 for both bytes of a lane): `((v * pow mod 256) * 3) >> 8`.
#[inline(always)]
unsafe fn trits(v: __m256i, pow: __m256i) -> __m256i {
    let lo_mask = _mm256_set1_epi16(0x00ff);
    let even = _mm256_and_si256(_mm256_mullo_epi16(v, pow), lo_mask);
    let odd = _mm256_srli_epi16(_mm256_mullo_epi16(_mm256_andnot_si256(lo_mask, v), pow), 8);
    let three = _mm256_set1_epi16(3 << 8);
    let te = _mm256_mulhi_epu16(even, three);
    let to = _mm256_mulhi_epu16(odd, three);
    _mm256_or_si256(te, _mm256_slli_epi16(to, 8))
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot_tq1_0_impl(w: &[u8], _s: &[u8], x: &[BlockQ8K]) -> f32 {
    let nb = (w.len() / 54).min(x.len());
    let mut acc = _mm256_setzero_ps();
    let mut corr = 0.0f32;
    // qh: 4 bytes repeated per 4-element group k = 0..3 in the high half
    let pow_qh = _mm256_set_epi16(27, 27, 9, 9, 3, 3, 1, 1, 81, 81, 81, 81, 81, 81, 81, 81);
    for i in 0..nb {
        let b = w.as_ptr().add(i * 54);
        let y = &*x.as_ptr().add(i);
        let q0 = _mm256_loadu_si256(b as *const __m256i);
        let q1 = _mm256_broadcastsi128_si256(_mm_loadu_si128(b.add(32) as *const __m128i));
        let qh = std::ptr::read_unaligned(b.add(48) as *const u32) as i32;
        let q2 = _mm256_set_m128i(
            _mm_set1_epi32(qh),
            _mm_loadu_si128(b.add(32) as *const __m128i),
        );
        let vs = [
            trits(q0, _mm256_set1_epi16(1)),
            trits(q0, _mm256_set1_epi16(3)),
            trits(q0, _mm256_set1_epi16(9)),
            trits(q0, _mm256_set1_epi16(27)),
            trits(q0, _mm256_set1_epi16(81)),
            trits(q1, _mm256_set_m128i(_mm_set1_epi16(3), _mm_set1_epi16(1))),
            trits(q1, _mm256_set_m128i(_mm_set1_epi16(27), _mm_set1_epi16(9))),
            trits(q2, pow_qh),
        ];
        let mut sumi = _mm256_setzero_si256();
        for (k, v) in vs.into_iter().enumerate() {
            let p = _mm256_maddubs_epi16(v, load(y.qs.as_ptr().add(32 * k)));
            sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(p, _mm256_set1_epi16(1)));
        }
        let d = f16_at(b.add(52)) * y.d;
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
        corr += d * ysum(y) as f32;
    }
    hsum(acc) - corr
}
safe_wrapper!(dot_tq1_0, dot_tq1_0_impl, BlockQ8K);
