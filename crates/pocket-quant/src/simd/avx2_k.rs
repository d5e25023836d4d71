//! AVX2 dots of the K-quants (Q2_K .. Q6_K) against Q8_K.
//!
//! Each unpacks its codes 32 bytes at a time with shifts and masks, multiplies the unsigned codes
//! with the int8 activations (`vpmaddubsw`) and weights each 16- or 32-element group with its
//! sub-block scale (`vpmaddwd` by a scale vector). Offsets (Q2_K / Q4_K / Q5_K minimums, Q3_K's
//! `-4` for a clear high bit, Q6_K's `-32`) are applied through the activation sums per 16,
//! `bsums`. All of it is exact integer arithmetic up to one f32 FMA per super-block.
//!
//! Q4_K, Q5_K and Q6_K carry the decode step's large K-quant matrices (a Q4_K_M file's down
//! projections), so they decode their sub-block scales with vector shuffles rather than one
//! scalar broadcast per group, and prefetch the weight bytes [`PREFETCH`] ahead of the block
//! they read.

use super::avx2::{f16_at, hsum, load, scale_pair, srl16};
use crate::act::BlockQ8K;
use crate::dot::Kernel;
use crate::format::QuantFormat;
use crate::formats::kquants::q3k_scales;
use pocket_formats::ggml_type::GgmlType as G;
use std::arch::x86_64::*;
use std::ptr::read_unaligned;

/// The AVX2 kernel for `f`, if this module has one.
pub(super) fn kernel(f: QuantFormat) -> Option<Kernel> {
    Some(match f {
        QuantFormat::Ggml(G::Q2_K) => Kernel::Q8K(dot_q2_k),
        QuantFormat::Ggml(G::Q3_K) => Kernel::Q8K(dot_q3_k),
        QuantFormat::Ggml(G::Q4_K) => Kernel::Q8K(dot_q4_k),
        QuantFormat::Ggml(G::Q5_K) => Kernel::Q8K(dot_q5_k),
        QuantFormat::Ggml(G::Q6_K) => Kernel::Q8K(dot_q6_k),
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

/// How far ahead of the super-block being read the Q4_K/Q5_K/Q6_K kernels prefetch, in bytes.
/// Weight rows are contiguous, so near a row's end this reaches into the next row (which the same
/// GEMV task usually reads next): a decode GEMV streams each matrix once, and the hardware
/// prefetchers alone left the streaming dot at about the sum of its compute and memory times.
/// Measured on the Qwen2.5-0.5B down projections (decode_step harness, 1 thread, interleaved
/// A/B, before the vector scale decoding): 1 KiB 1.02-1.10x, 2 KiB 1.10-1.17x, 4 KiB
/// 1.13-1.20x, 8 KiB 1.11-1.19x over no software prefetch.
const PREFETCH: usize = 4096;

/// Prefetches the `BYTES` weight bytes `PREFETCH` past the super-block at `b` (a prefetch never
/// faults, so reaching past the end of the matrix is harmless).
#[inline(always)]
unsafe fn prefetch_ahead<const BYTES: usize>(b: *const u8) {
    for l in 0..BYTES.div_ceil(64) {
        _mm_prefetch(b.wrapping_add(PREFETCH + 64 * l) as *const i8, _MM_HINT_T0);
    }
}

/// The 12 packed scale bytes of a Q4_K/Q5_K super-block (at `p`) as 16 bytes: the 8 6-bit
/// sub-block scales, then the 8 6-bit minimums (what `kquants::get_scale_min_k4` returns), by
/// word-wide masks instead of per-byte work.
#[inline(always)]
pub(crate) unsafe fn scales_mins_k4(p: *const u8) -> __m128i {
    const LOW6: u32 = 0x3f3f_3f3f;
    const LOW4: u32 = 0x0f0f_0f0f;
    const LOW2: u32 = 0x0303_0303;
    let a = read_unaligned(p as *const u32);
    let b = read_unaligned(p.add(4) as *const u32);
    let c = read_unaligned(p.add(8) as *const u32);
    // sub-blocks 0..4 keep 6 bits of their byte; 4..8 take a nibble of `c` and the top 2 bits of
    // the byte 4 or 8 places back
    let sc_lo = a & LOW6;
    let sc_hi = (c & LOW4) | (((a >> 6) & LOW2) << 4);
    let mn_lo = b & LOW6;
    let mn_hi = ((c >> 4) & LOW4) | (((b >> 6) & LOW2) << 4);
    _mm_set_epi32(mn_hi as i32, mn_lo as i32, sc_hi as i32, sc_lo as i32)
}

/// `sum_j mins[j] * (bsums[2j] + bsums[2j+1])` for the 8 minimums in bytes 8..16 of `sm`, exact.
#[inline(always)]
unsafe fn min_sum_k4(sm: __m128i, y: &BlockQ8K) -> i32 {
    let mins = _mm_cvtepu8_epi16(_mm_srli_si128(sm, 8));
    let bs = _mm256_loadu_si256(y.bsums.as_ptr() as *const __m256i);
    // pairs of 16-sums (|sum| <= 2 * 16 * 128 fits i16), in sub-block order
    let pairs = _mm_hadd_epi16(_mm256_castsi256_si128(bs), _mm256_extracti128_si256(bs, 1));
    let p = _mm_madd_epi16(mins, pairs);
    let p = _mm_add_epi32(p, _mm_shuffle_epi32(p, 0x4e));
    let p = _mm_add_epi32(p, _mm_shuffle_epi32(p, 0xb1));
    _mm_cvtsi128_si32(p)
}

/// Sub-block scale `j` (0..8) of the i16 scales in both halves of `sc`, in all 16 lanes.
#[inline(always)]
pub(crate) unsafe fn scale_k4(sc: __m256i, j: usize) -> __m256i {
    let pick = (2 * j) as i16 | (((2 * j + 1) as i16) << 8);
    _mm256_shuffle_epi8(sc, _mm256_set1_epi16(pick))
}

/// The 8 sub-block scales in bytes 0..8 of `sm` as i16, in both 128-bit halves.
#[inline(always)]
pub(crate) unsafe fn scales16_k4(sm: __m128i) -> __m256i {
    _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(sm))
}

/// The Q4_K and Q5_K dots: the same 4 + 12-byte header (d, dmin, packed scales and minimums) and
/// nibble layout, Q5_K with 32 bytes of fifth bits between the header and the nibbles (`HIGH`,
/// resolved at compile time). `BYTES` is the super-block size (144 or 176).
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot_q45_k<const HIGH: bool, const BYTES: usize>(w: &[u8], x: &[BlockQ8K]) -> f32 {
    let qs_at = if HIGH { 48 } else { 16 };
    let nb = (w.len() / BYTES).min(x.len());
    let m4 = _mm256_set1_epi8(0x0f);
    let m16 = _mm256_set1_epi8(0x10);
    let mut acc = _mm256_setzero_ps();
    let mut accm = 0.0f32;
    for i in 0..nb {
        let b = w.as_ptr().add(i * BYTES);
        prefetch_ahead::<BYTES>(b);
        let y = &*x.as_ptr().add(i);
        let sm = scales_mins_k4(b.add(4));
        let sc = scales16_k4(sm);
        let d = f16_at(b) * y.d;
        let dmin = f16_at(b.add(2)) * y.d;
        let msum = min_sum_k4(sm, y);
        let qh = if HIGH {
            _mm256_loadu_si256(b.add(16) as *const __m256i)
        } else {
            _mm256_setzero_si256()
        };
        let mut sumi = _mm256_setzero_si256();
        for c in 0..4 {
            let q = _mm256_loadu_si256(b.add(qs_at + 32 * c) as *const __m256i);
            let mut lo = _mm256_and_si256(q, m4);
            let mut hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
            if HIGH {
                let h0 = _mm256_and_si256(_mm256_slli_epi16(srl16(qh, 2 * c as i32), 4), m16);
                let h1 = _mm256_and_si256(_mm256_slli_epi16(srl16(qh, 2 * c as i32 + 1), 4), m16);
                lo = _mm256_or_si256(lo, h0);
                hi = _mm256_or_si256(hi, h1);
            }
            let plo = _mm256_maddubs_epi16(lo, load(y.qs.as_ptr().add(64 * c)));
            let phi = _mm256_maddubs_epi16(hi, load(y.qs.as_ptr().add(64 * c + 32)));
            sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(plo, scale_k4(sc, 2 * c)));
            sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(phi, scale_k4(sc, 2 * c + 1)));
        }
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
        accm += dmin * msum as f32;
    }
    hsum(acc) - accm
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot_q4_k_impl(w: &[u8], _s: &[u8], x: &[BlockQ8K]) -> f32 {
    dot_q45_k::<false, 144>(w, x)
}
safe_wrapper!(dot_q4_k, dot_q4_k_impl, BlockQ8K);

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot_q5_k_impl(w: &[u8], _s: &[u8], x: &[BlockQ8K]) -> f32 {
    dot_q45_k::<true, 176>(w, x)
}
safe_wrapper!(dot_q5_k, dot_q5_k_impl, BlockQ8K);

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot_q6_k_impl(w: &[u8], _s: &[u8], x: &[BlockQ8K]) -> f32 {
    let nb = (w.len() / 210).min(x.len());
    let m4 = _mm256_set1_epi8(0x0f);
    let m3 = _mm256_set1_epi8(0x03);
    let mut acc = _mm256_setzero_ps();
    for i in 0..nb {
        let b = w.as_ptr().add(i * 210);
        prefetch_ahead::<210>(b);
        let y = &*x.as_ptr().add(i);
        let sc8 = _mm_loadu_si128(b.add(192) as *const __m128i);
        // offset correction: 32 * sum_g scale[g] * bsums[g]
        let bs = _mm256_loadu_si256(y.bsums.as_ptr() as *const __m256i);
        let corr = _mm256_slli_epi32(_mm256_madd_epi16(_mm256_cvtepi8_epi16(sc8), bs), 5);
        let mut sumi = _mm256_sub_epi32(_mm256_setzero_si256(), corr);
        for h in 0..2 {
            let ql0 = _mm256_loadu_si256(b.add(h * 64) as *const __m256i);
            let ql1 = _mm256_loadu_si256(b.add(h * 64 + 32) as *const __m256i);
            let qh = _mm256_loadu_si256(b.add(128 + h * 32) as *const __m256i);
            let los = [
                _mm256_and_si256(ql0, m4),
                _mm256_and_si256(ql1, m4),
                _mm256_and_si256(_mm256_srli_epi16(ql0, 4), m4),
                _mm256_and_si256(_mm256_srli_epi16(ql1, 4), m4),
            ];
            for (s, lo) in los.into_iter().enumerate() {
                let hi = _mm256_and_si256(srl16(qh, 2 * s as i32), m3);
                let q = _mm256_or_si256(lo, _mm256_slli_epi16(hi, 4));
                let p = _mm256_maddubs_epi16(q, load(y.qs.as_ptr().add(h * 128 + s * 32)));
                // scales g, g + 1 of the two 16-element halves: bytes [g x 8, g+1 x 8], widened
                let g = (h * 8 + s * 2) as i64;
                let pick =
                    _mm_set_epi64x((g + 1) * 0x0101_0101_0101_0101, g * 0x0101_0101_0101_0101);
                let scales = _mm256_cvtepi8_epi16(_mm_shuffle_epi8(sc8, pick));
                sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(p, scales));
            }
        }
        acc = _mm256_fmadd_ps(
            _mm256_set1_ps(f16_at(b.add(208)) * y.d),
            _mm256_cvtepi32_ps(sumi),
            acc,
        );
    }
    hsum(acc)
}
safe_wrapper!(dot_q6_k, dot_q6_k_impl, BlockQ8K);
