//! AVX2 dots of the 2- and 3-bit K-quants (Q2_K, Q3_K) against Q8_K.
//!
//! Both unpack 2-bit fields of 32 bytes with a shift and a mask, multiply the unsigned codes with
//! the int8 activations (`vpmaddubsw`) and weight each 16-element half with its sub-block scale
//! (`vpmaddwd` by a two-valued scale vector). Offsets (Q2_K's minimum, Q3_K's `-4` for a clear
//! high bit) are applied through the activation sums per 16, `bsums`.

use super::avx2::{f16_at, hsum, load, scale_pair, srl16};
use crate::act::BlockQ8K;
use crate::dot::Kernel;
use crate::format::QuantFormat;
use crate::formats::kquants::q3k_scales;
use pocket_formats::ggml_type::GgmlType as G;
use std::arch::x86_64::*;

/// The AVX2 kernel for `f`, if this module has one.
pub(super) fn kernel(f: QuantFormat) -> Option<Kernel> {
    Some(match f {
        QuantFormat::Ggml(G::Q2_K) => Kernel::Q8K(dot_q2_k),
        QuantFormat::Ggml(G::Q3_K) => Kernel::Q8K(dot_q3_k),
        _ => return None,
    })
}

/// `sum_g a[g] * bsums[g]` over the 16 sub-blocks, with `a` as 16 i16 lanes.
#[inline(always)]
unsafe fn bsum_dot(a: __m256i, y: &BlockQ8K) -> __m256i {
    let bs = _mm256_loadu_si256(y.bsums.as_ptr() as *const __m256i);
    _mm256_madd_epi16(a, bs)
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot_q2_k_impl(w: &[u8], _s: &[u8], x: &[BlockQ8K]) -> f32 {
    let nb = (w.len() / 84).min(x.len());
    let m3 = _mm256_set1_epi8(3);
    let m4 = _mm_set1_epi8(0x0f);
    let mut acc = _mm256_setzero_ps();
    let mut accm = _mm256_setzero_ps();
    for i in 0..nb {
        let b = w.as_ptr().add(i * 84);
        let y = &*x.as_ptr().add(i);
        let sc = _mm_loadu_si128(b as *const __m128i);
        let mins = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(sc, 4), m4));
        let msum = bsum_dot(mins, y);
        let mut sumi = _mm256_setzero_si256();
        for h in 0..2 {
            let q = _mm256_loadu_si256(b.add(16 + 32 * h) as *const __m256i);
            for s in 0..4 {
                let v = _mm256_and_si256(srl16(q, 2 * s as i32), m3);
                let p = _mm256_maddubs_epi16(v, load(y.qs.as_ptr().add(h * 128 + s * 32)));
                let g = h * 8 + s * 2;
                let scales = scale_pair((*b.add(g) & 0xf) as i16, (*b.add(g + 1) & 0xf) as i16);
                sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(p, scales));
            }
        }
        let d = f16_at(b.add(80)) * y.d;
        let dmin = f16_at(b.add(82)) * y.d;
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
        accm = _mm256_fmadd_ps(_mm256_set1_ps(dmin), _mm256_cvtepi32_ps(msum), accm);
    }
    hsum(acc) - hsum(accm)
}
safe_wrapper!(dot_q2_k, dot_q2_k_impl, BlockQ8K);

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot_q3_k_impl(w: &[u8], _s: &[u8], x: &[BlockQ8K]) -> f32 {
    let nb = (w.len() / 110).min(x.len());
    let m3 = _mm256_set1_epi8(3);
    let m1 = _mm256_set1_epi8(1);
    let mut acc = _mm256_setzero_ps();
    for i in 0..nb {
        let b = w.as_ptr().add(i * 110);
        let y = &*x.as_ptr().add(i);
        let sc = q3k_scales(std::slice::from_raw_parts(b.add(96), 12));
        let scv = _mm256_cvtepi8_epi16(_mm_loadu_si128(sc.as_ptr() as *const __m128i));
        // codes are stored as q + 4 with the "+4" bit in hmask: dot(q, y) = dot(q + 4, y) - 4 * sum(y)
        let corr = _mm256_slli_epi32(bsum_dot(scv, y), 2);
        let mut sumi = _mm256_sub_epi32(_mm256_setzero_si256(), corr);
        let hm = _mm256_loadu_si256(b as *const __m256i);
        for h in 0..2 {
            let q = _mm256_loadu_si256(b.add(32 + 32 * h) as *const __m256i);
            for s in 0..4 {
                let j = (h * 4 + s) as i32;
                let lo = _mm256_and_si256(srl16(q, 2 * s as i32), m3);
                let hb = _mm256_slli_epi16(_mm256_and_si256(srl16(hm, j), m1), 2);
                let v = _mm256_or_si256(lo, hb);
                let p = _mm256_maddubs_epi16(v, load(y.qs.as_ptr().add(h * 128 + s * 32)));
                let g = h * 8 + s * 2;
                let scales = scale_pair(sc[g] as i16, sc[g + 1] as i16);
                sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(p, scales));
            }
        }
        acc = _mm256_fmadd_ps(
            _mm256_set1_ps(f16_at(b.add(108)) * y.d),
            _mm256_cvtepi32_ps(sumi),
            acc,
        );
    }
    hsum(acc)
}
safe_wrapper!(dot_q3_k, dot_q3_k_impl, BlockQ8K);
