//! AVX2 dots of the FP8 and FP4 formats.
//!
//! FP8 x f32: an FP8 code widens exactly to f16 by bit placement (E5M2 *is* the top byte of an
//! f16; E4M3 fits with its exponent re-biased by a factor 2^8, applied once to the sum), then
//! F16C converts to f32 and FMA accumulates. E4M3's NaN code (S.1111.111) is mapped to an f16 NaN,
//! so NaN weights propagate exactly as in the table-based scalar reference.
//!
//! FP4 x Q8: the E2M1 codes, doubled to the integers of `KVALUES_FP4`, are looked up with
//! `vpshufb` and dotted with the int8 activations (sign trick); the halved block scales (E8M0 for
//! MXFP4, E4M3 for NVFP4) multiply the integer sums once per 16 or 32 elements.

use super::avx2::{dot_i8_i8, hsum, load, nibbles};
use crate::act::BlockQ8;
use crate::dot::Kernel;
use crate::format::QuantFormat;
use crate::formats::fp4::{e8m0_half, KVALUES_FP4, UE4M3_HALF};
use crate::formats::fp8::{e4m3_to_f32, E4M3_LUT, E5M2_LUT};
use pocket_formats::ggml_type::GgmlType as G;
use std::arch::x86_64::*;

/// The AVX2 kernel for `f`, if this module has one.
pub(super) fn kernel(f: QuantFormat) -> Option<Kernel> {
    Some(match f {
        QuantFormat::Fp8E4M3 => Kernel::F32(dot_e4m3),
        QuantFormat::Fp8E5M2 => Kernel::F32(dot_e5m2),
        QuantFormat::Fp8E4M3Block128 => Kernel::F32(dot_e4m3_tiles),
        QuantFormat::Fp8E5M2Block128 => Kernel::F32(dot_e5m2_tiles),
        QuantFormat::Ggml(G::MXFP4) => Kernel::Q8(dot_mxfp4),
        QuantFormat::Ggml(G::NVFP4) => Kernel::Q8(dot_nvfp4),
        QuantFormat::MxFp4Blocks => Kernel::Q8(dot_mxfp4_st),
        QuantFormat::NvFp4 => Kernel::Q8(dot_nvfp4_st),
        _ => return None,
    })
}

// ---------------------------------------------------------------- FP8 x f32

/// 16 FP8 codes at `p` as f16 bit patterns in 16-bit lanes (E4M3 values scaled by 2^-8).
#[inline(always)]
unsafe fn fp8_to_f16<const E4M3: bool>(p: *const u8) -> __m256i {
    let v = _mm256_cvtepu8_epi16(_mm_loadu_si128(p as *const __m128i));
    if E4M3 {
        let m7f = _mm256_set1_epi16(0x7f);
        let mag = _mm256_and_si256(v, m7f);
        let sign = _mm256_slli_epi16(_mm256_and_si256(v, _mm256_set1_epi16(0x80)), 8);
        let nan = _mm256_and_si256(_mm256_cmpeq_epi16(mag, m7f), _mm256_set1_epi16(0x7c00));
        _mm256_or_si256(_mm256_or_si256(sign, _mm256_slli_epi16(mag, 7)), nan)
    } else {
        _mm256_slli_epi16(v, 8)
    }
}

/// `sum w * x` over `n` codes; E4M3 sums come back scaled by 2^-8 (see [`fp8_to_f16`]).
#[inline(always)]
unsafe fn fp8_dot<const E4M3: bool>(w: *const u8, x: *const f32, n: usize) -> f32 {
    let mut acc = [_mm256_setzero_ps(); 4];
    let mut i = 0;
    while i + 32 <= n {
        for h in 0..2 {
            let v = fp8_to_f16::<E4M3>(w.add(i + 16 * h));
            let a = _mm256_cvtph_ps(_mm256_castsi256_si128(v));
            let b = _mm256_cvtph_ps(_mm256_extracti128_si256(v, 1));
            let o = i + 16 * h;
            acc[2 * h] = _mm256_fmadd_ps(a, _mm256_loadu_ps(x.add(o)), acc[2 * h]);
            acc[2 * h + 1] = _mm256_fmadd_ps(b, _mm256_loadu_ps(x.add(o + 8)), acc[2 * h + 1]);
        }
        i += 32;
    }
    let mut t = hsum(_mm256_add_ps(
        _mm256_add_ps(acc[0], acc[1]),
        _mm256_add_ps(acc[2], acc[3]),
    ));
    let (lut, unscale) = if E4M3 {
        (&E4M3_LUT, 1.0 / 256.0)
    } else {
        (&E5M2_LUT, 1.0)
    };
    while i < n {
        t += lut[*w.add(i) as usize] * unscale * *x.add(i);
        i += 1;
    }
    t
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot_e4m3_impl(w: &[u8], _s: &[u8], x: &[f32]) -> f32 {
    256.0 * fp8_dot::<true>(w.as_ptr(), x.as_ptr(), w.len().min(x.len()))
}
safe_wrapper!(dot_e4m3, dot_e4m3_impl, f32);

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot_e5m2_impl(w: &[u8], _s: &[u8], x: &[f32]) -> f32 {
    fp8_dot::<false>(w.as_ptr(), x.as_ptr(), w.len().min(x.len()))
}
safe_wrapper!(dot_e5m2, dot_e5m2_impl, f32);

/// The products of one full 128-column tile, summed into 8 lanes (E4M3 scaled by 2^-8).
#[inline(always)]
unsafe fn fp8_tile128<const E4M3: bool>(w: *const u8, x: *const f32) -> __m256 {
    let mut acc = [_mm256_setzero_ps(); 2];
    for i in (0..128).step_by(16) {
        let v = fp8_to_f16::<E4M3>(w.add(i));
        let a = _mm256_cvtph_ps(_mm256_castsi256_si128(v));
        let b = _mm256_cvtph_ps(_mm256_extracti128_si256(v, 1));
        acc[0] = _mm256_fmadd_ps(a, _mm256_loadu_ps(x.add(i)), acc[0]);
        acc[1] = _mm256_fmadd_ps(b, _mm256_loadu_ps(x.add(i + 8)), acc[1]);
    }
    _mm256_add_ps(acc[0], acc[1])
}

/// Per 128 columns: the FP8 dot times that tile's f32 scale (full tiles stay in vector lanes,
/// one FMA by the scale each; a partial last tile goes through [`fp8_dot`]).
#[inline(always)]
unsafe fn fp8_tiles<const E4M3: bool>(w: &[u8], s: &[u8], x: &[f32]) -> f32 {
    let n = w.len().min(x.len());
    let mut accv = _mm256_setzero_ps();
    let mut t = 0.0f32;
    for (k, sc) in s.chunks_exact(4).enumerate().take(n.div_ceil(128)) {
        let o = 128 * k;
        let len = (n - o).min(128);
        let sc = f32::from_le_bytes([sc[0], sc[1], sc[2], sc[3]]);
        if len == 128 {
            let v = fp8_tile128::<E4M3>(w.as_ptr().add(o), x.as_ptr().add(o));
            accv = _mm256_fmadd_ps(v, _mm256_set1_ps(sc), accv);
        } else {
            t += fp8_dot::<E4M3>(w.as_ptr().add(o), x.as_ptr().add(o), len) * sc;
        }
    }
    t += hsum(accv);
    if E4M3 {
        256.0 * t
    } else {
        t
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot_e4m3_tiles_impl(w: &[u8], s: &[u8], x: &[f32]) -> f32 {
    fp8_tiles::<true>(w, s, x)
}
safe_wrapper!(dot_e4m3_tiles, dot_e4m3_tiles_impl, f32);

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot_e5m2_tiles_impl(w: &[u8], s: &[u8], x: &[f32]) -> f32 {
    fp8_tiles::<false>(w, s, x)
}
safe_wrapper!(dot_e5m2_tiles, dot_e5m2_tiles_impl, f32);

// ---------------------------------------------------------------- FP4 x Q8

#[inline(always)]
unsafe fn fp4_table() -> __m256i {
    _mm256_broadcastsi128_si256(_mm_loadu_si128(KVALUES_FP4.as_ptr() as *const __m128i))
}

/// 16 bytes of interleaved nibbles (element 2i low, 2i+1 high) to 32 codes in element order.
#[inline(always)]
unsafe fn interleaved_nibbles(p: *const u8) -> __m256i {
    let t = _mm_loadu_si128(p as *const __m128i);
    let m4 = _mm_set1_epi8(0x0f);
    let lo = _mm_and_si128(t, m4);
    let hi = _mm_and_si128(_mm_srli_epi16(t, 4), m4);
    _mm256_set_m128i(_mm_unpackhi_epi8(lo, hi), _mm_unpacklo_epi8(lo, hi))
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot_mxfp4_impl(w: &[u8], _s: &[u8], x: &[BlockQ8]) -> f32 {
    let nb = (w.len() / 17).min(x.len());
    let table = fp4_table();
    let mut acc = _mm256_setzero_ps();
    for i in 0..nb {
        let b = w.as_ptr().add(i * 17);
        let y = &*x.as_ptr().add(i);
        let q = _mm256_shuffle_epi8(table, nibbles(b.add(1)));
        let p = dot_i8_i8(q, load(y.qs.as_ptr()));
        acc = _mm256_fmadd_ps(
            _mm256_set1_ps(e8m0_half(*b) * y.d),
            _mm256_cvtepi32_ps(p),
            acc,
        );
    }
    hsum(acc)
}
safe_wrapper!(dot_mxfp4, dot_mxfp4_impl, BlockQ8);

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot_mxfp4_st_impl(w: &[u8], s: &[u8], x: &[BlockQ8]) -> f32 {
    let nb = (w.len() / 16).min(x.len()).min(s.len());
    let table = fp4_table();
    let mut acc = _mm256_setzero_ps();
    for i in 0..nb {
        let y = &*x.as_ptr().add(i);
        let q = _mm256_shuffle_epi8(table, interleaved_nibbles(w.as_ptr().add(16 * i)));
        let p = dot_i8_i8(q, load(y.qs.as_ptr()));
        acc = _mm256_fmadd_ps(
            _mm256_set1_ps(e8m0_half(s[i]) * y.d),
            _mm256_cvtepi32_ps(p),
            acc,
        );
    }
    hsum(acc)
}
safe_wrapper!(dot_mxfp4_st, dot_mxfp4_st_impl, BlockQ8);

/// Two 16-element scales as an 8-lane vector (lanes 0..4 = `a`, 4..8 = `b`), times `d`.
#[inline(always)]
unsafe fn half_scales(a: f32, b: f32, d: f32) -> __m256 {
    _mm256_set_m128(_mm_set1_ps(b * d), _mm_set1_ps(a * d))
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot_nvfp4_impl(w: &[u8], _s: &[u8], x: &[BlockQ8]) -> f32 {
    let nb = (w.len() / 36).min(x.len() / 2);
    let table = fp4_table();
    let m4 = _mm_set1_epi8(0x0f);
    let mut acc = _mm256_setzero_ps();
    for i in 0..nb {
        let b = w.as_ptr().add(i * 36);
        for k in 0..2 {
            let y = &*x.as_ptr().add(2 * i + k);
            // sub-blocks 2k and 2k+1: 8 bytes each, low nibbles = elements 0..8, high = 8..16
            let t = _mm_loadu_si128(b.add(4 + 16 * k) as *const __m128i);
            let lo = _mm_and_si128(t, m4);
            let hi = _mm_and_si128(_mm_srli_epi16(t, 4), m4);
            let codes = _mm256_set_m128i(_mm_unpackhi_epi64(lo, hi), _mm_unpacklo_epi64(lo, hi));
            let p = dot_i8_i8(_mm256_shuffle_epi8(table, codes), load(y.qs.as_ptr()));
            let sc = half_scales(
                UE4M3_HALF[*b.add(2 * k) as usize],
                UE4M3_HALF[*b.add(2 * k + 1) as usize],
                y.d,
            );
            acc = _mm256_fmadd_ps(sc, _mm256_cvtepi32_ps(p), acc);
        }
    }
    hsum(acc)
}
safe_wrapper!(dot_nvfp4, dot_nvfp4_impl, BlockQ8);

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot_nvfp4_st_impl(w: &[u8], s: &[u8], x: &[BlockQ8]) -> f32 {
    let nb = (w.len() / 16).min(x.len()).min(s.len() / 2);
    let table = fp4_table();
    let mut acc = _mm256_setzero_ps();
    for i in 0..nb {
        let y = &*x.as_ptr().add(i);
        let q = _mm256_shuffle_epi8(table, interleaved_nibbles(w.as_ptr().add(16 * i)));
        let p = dot_i8_i8(q, load(y.qs.as_ptr()));
        let sc = half_scales(e4m3_to_f32(s[2 * i]), e4m3_to_f32(s[2 * i + 1]), 0.5 * y.d);
        acc = _mm256_fmadd_ps(sc, _mm256_cvtepi32_ps(p), acc);
    }
    hsum(acc)
}
safe_wrapper!(dot_nvfp4_st, dot_nvfp4_st_impl, BlockQ8);
