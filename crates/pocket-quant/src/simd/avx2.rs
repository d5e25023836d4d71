//! AVX2 dot kernels (x86-64; the K-quants' are in `avx2_k`). A kernel is only handed out by [`kernel`] after the caller checked
//! `avx2_available()` (AVX2 + FMA + F16C), which makes the `unsafe` calls below sound.
//!
//! Technique (the usual one for int8 dots on AVX2): 4-bit codes are unpacked to unsigned bytes and
//! multiplied with the signed int8 activations by `vpmaddubsw`; offsets such as Q4_0's `-8` are
//! folded in afterwards through the activation block sums. Signed x signed (Q8_0, IQ4) uses the
//! `abs`/`sign` trick. Several independent accumulators hide the FMA latency.

use crate::act::{BlockQ8, BlockQ8K};
use crate::dot::Kernel;
use crate::format::QuantFormat;
use crate::formats::iq4::KVALUES_IQ4NL;
use pocket_formats::ggml_type::GgmlType as G;
use std::arch::x86_64::*;

/// The AVX2 kernel for `f`, if one exists.
pub(crate) fn kernel(f: QuantFormat) -> Option<Kernel> {
    Some(match f {
        QuantFormat::Ggml(G::F32) => Kernel::F32(dot_f32),
        QuantFormat::Ggml(G::F16) => Kernel::F32(dot_f16),
        QuantFormat::Ggml(G::BF16) => Kernel::F32(dot_bf16),
        QuantFormat::Ggml(G::Q4_0) => Kernel::Q8(dot_q4_0),
        QuantFormat::Ggml(G::Q4_1) => Kernel::Q8(dot_q4_1),
        QuantFormat::Ggml(G::Q5_0) => Kernel::Q8(dot_q5_0),
        QuantFormat::Ggml(G::Q5_1) => Kernel::Q8(dot_q5_1),
        QuantFormat::Ggml(G::Q8_0) => Kernel::Q8(dot_q8_0),
        QuantFormat::Ggml(G::IQ4_NL) => Kernel::Q8(dot_iq4_nl),
        QuantFormat::Ggml(G::IQ4_XS) => Kernel::Q8K(dot_iq4_xs),
        _ => return None,
    })
}

#[inline(always)]
pub(crate) unsafe fn hsum(v: __m256) -> f32 {
    let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    let s = _mm_add_ss(s, _mm_movehdup_ps(s));
    _mm_cvtss_f32(s)
}

#[inline(always)]
pub(crate) unsafe fn f16_at(p: *const u8) -> f32 {
    let h = std::ptr::read_unaligned(p as *const u16);
    _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(h as i32)))
}

/// 16 bytes of packed nibbles to 32 bytes: low nibbles in lanes 0..16, high nibbles in 16..32.
#[inline(always)]
pub(crate) unsafe fn nibbles(p: *const u8) -> __m256i {
    let t = _mm_loadu_si128(p as *const __m128i);
    let v = _mm256_set_m128i(_mm_srli_epi16(t, 4), t);
    _mm256_and_si256(v, _mm256_set1_epi8(0x0f))
}

/// Sum of adjacent u8 x i8 products as 8 i32 lanes.
#[inline(always)]
pub(super) unsafe fn dot_u8_i8(a: __m256i, b: __m256i) -> __m256i {
    _mm256_madd_epi16(_mm256_maddubs_epi16(a, b), _mm256_set1_epi16(1))
}

/// Same for signed x signed (|a| < 128 and a != -128).
#[inline(always)]
pub(super) unsafe fn dot_i8_i8(a: __m256i, b: __m256i) -> __m256i {
    dot_u8_i8(_mm256_sign_epi8(a, a), _mm256_sign_epi8(b, a))
}

/// 32 bits to 32 bytes, 0xFF where the bit is set (bit j -> byte j).
#[inline(always)]
pub(crate) unsafe fn bits_to_bytes(bits: u32) -> __m256i {
    let shuf = _mm256_setr_epi64x(
        0,
        0x0101_0101_0101_0101,
        0x0202_0202_0202_0202,
        0x0303_0303_0303_0303,
    );
    let b = _mm256_shuffle_epi8(_mm256_set1_epi32(bits as i32), shuf);
    let b = _mm256_or_si256(b, _mm256_set1_epi64x(0x7fbf_dfef_f7fb_fdfe));
    _mm256_cmpeq_epi8(b, _mm256_set1_epi64x(-1))
}

/// Logical right shift of 16-bit lanes by a run-time count.
#[inline(always)]
pub(super) unsafe fn srl16(v: __m256i, n: i32) -> __m256i {
    _mm256_srl_epi16(v, _mm_cvtsi32_si128(n))
}

#[inline(always)]
pub(super) unsafe fn load(p: *const i8) -> __m256i {
    _mm256_loadu_si256(p as *const __m256i)
}

// ---------------------------------------------------------------- float weights x f32

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot_f32_impl(w: &[u8], _s: &[u8], x: &[f32]) -> f32 {
    let n = (w.len() / 4).min(x.len());
    let (wp, xp) = (w.as_ptr() as *const f32, x.as_ptr());
    let mut acc = [_mm256_setzero_ps(); 4];
    let mut i = 0;
    while i + 32 <= n {
        for (k, a) in acc.iter_mut().enumerate() {
            let o = i + 8 * k;
            *a = _mm256_fmadd_ps(_mm256_loadu_ps(wp.add(o)), _mm256_loadu_ps(xp.add(o)), *a);
        }
        i += 32;
    }
    let mut t = hsum(_mm256_add_ps(
        _mm256_add_ps(acc[0], acc[1]),
        _mm256_add_ps(acc[2], acc[3]),
    ));
    while i < n {
        t += std::ptr::read_unaligned(wp.add(i)) * *xp.add(i);
        i += 1;
    }
    t
}
safe_wrapper!(dot_f32, dot_f32_impl, f32);

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot_f16_impl(w: &[u8], _s: &[u8], x: &[f32]) -> f32 {
    let n = (w.len() / 2).min(x.len());
    let (wp, xp) = (w.as_ptr(), x.as_ptr());
    let mut acc = [_mm256_setzero_ps(); 4];
    let mut i = 0;
    while i + 32 <= n {
        for (k, a) in acc.iter_mut().enumerate() {
            let o = i + 8 * k;
            let wv = _mm256_cvtph_ps(_mm_loadu_si128(wp.add(2 * o) as *const __m128i));
            *a = _mm256_fmadd_ps(wv, _mm256_loadu_ps(xp.add(o)), *a);
        }
        i += 32;
    }
    let mut t = hsum(_mm256_add_ps(
        _mm256_add_ps(acc[0], acc[1]),
        _mm256_add_ps(acc[2], acc[3]),
    ));
    while i < n {
        t += f16_at(wp.add(2 * i)) * *xp.add(i);
        i += 1;
    }
    t
}
safe_wrapper!(dot_f16, dot_f16_impl, f32);

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot_bf16_impl(w: &[u8], _s: &[u8], x: &[f32]) -> f32 {
    let n = (w.len() / 2).min(x.len());
    let (wp, xp) = (w.as_ptr(), x.as_ptr());
    let mut acc = [_mm256_setzero_ps(); 4];
    let mut i = 0;
    while i + 32 <= n {
        for (k, a) in acc.iter_mut().enumerate() {
            let o = i + 8 * k;
            let h = _mm256_cvtepu16_epi32(_mm_loadu_si128(wp.add(2 * o) as *const __m128i));
            let wv = _mm256_castsi256_ps(_mm256_slli_epi32(h, 16));
            *a = _mm256_fmadd_ps(wv, _mm256_loadu_ps(xp.add(o)), *a);
        }
        i += 32;
    }
    let mut t = hsum(_mm256_add_ps(
        _mm256_add_ps(acc[0], acc[1]),
        _mm256_add_ps(acc[2], acc[3]),
    ));
    while i < n {
        let b = std::ptr::read_unaligned(wp.add(2 * i) as *const u16);
        t += f32::from_bits((b as u32) << 16) * *xp.add(i);
        i += 1;
    }
    t
}
safe_wrapper!(dot_bf16, dot_bf16_impl, f32);

// ---------------------------------------------------------------- legacy x Q8

/// Shared loop of the 32-element formats: `acc += (dw * dy) * dot(q(w), y)`, `corr += cw(w) * y.s`.
/// `q` returns the unsigned (or, with `SIGNED`, signed) bytes of a block and its scale pair.
#[inline(always)]
unsafe fn legacy_loop<const BB: usize, const SIGNED: bool>(
    w: &[u8],
    x: &[BlockQ8],
    unpack: impl Fn(*const u8) -> (__m256i, f32, f32),
) -> f32 {
    let nb = (w.len() / BB).min(x.len());
    let (wp, xp) = (w.as_ptr(), x.as_ptr());
    let mut acc0 = _mm256_setzero_ps();
    let mut acc1 = _mm256_setzero_ps();
    let mut corr = 0.0f32;
    let mut i = 0;
    while i + 2 <= nb {
        let (q0, d0, c0) = unpack(wp.add(i * BB));
        let (q1, d1, c1) = unpack(wp.add((i + 1) * BB));
        let y0 = &*xp.add(i);
        let y1 = &*xp.add(i + 1);
        let (p0, p1) = if SIGNED {
            (
                dot_i8_i8(q0, load(y0.qs.as_ptr())),
                dot_i8_i8(q1, load(y1.qs.as_ptr())),
            )
        } else {
            (
                dot_u8_i8(q0, load(y0.qs.as_ptr())),
                dot_u8_i8(q1, load(y1.qs.as_ptr())),
            )
        };
        acc0 = _mm256_fmadd_ps(_mm256_set1_ps(d0 * y0.d), _mm256_cvtepi32_ps(p0), acc0);
        acc1 = _mm256_fmadd_ps(_mm256_set1_ps(d1 * y1.d), _mm256_cvtepi32_ps(p1), acc1);
        corr += c0 * y0.s + c1 * y1.s;
        i += 2;
    }
    if i < nb {
        let (q0, d0, c0) = unpack(wp.add(i * BB));
        let y0 = &*xp.add(i);
        let p0 = if SIGNED {
            dot_i8_i8(q0, load(y0.qs.as_ptr()))
        } else {
            dot_u8_i8(q0, load(y0.qs.as_ptr()))
        };
        acc0 = _mm256_fmadd_ps(_mm256_set1_ps(d0 * y0.d), _mm256_cvtepi32_ps(p0), acc0);
        corr += c0 * y0.s;
    }
    hsum(_mm256_add_ps(acc0, acc1)) + corr
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot_q4_0_impl(w: &[u8], _s: &[u8], x: &[BlockQ8]) -> f32 {
    legacy_loop::<18, false>(w, x, |p| {
        let d = f16_at(p);
        (nibbles(p.add(2)), d, -8.0 * d)
    })
}
safe_wrapper!(dot_q4_0, dot_q4_0_impl, BlockQ8);

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot_q4_1_impl(w: &[u8], _s: &[u8], x: &[BlockQ8]) -> f32 {
    legacy_loop::<20, false>(w, x, |p| (nibbles(p.add(4)), f16_at(p), f16_at(p.add(2))))
}
safe_wrapper!(dot_q4_1, dot_q4_1_impl, BlockQ8);

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot_q5_0_impl(w: &[u8], _s: &[u8], x: &[BlockQ8]) -> f32 {
    legacy_loop::<22, false>(w, x, |p| {
        let d = f16_at(p);
        let qh = std::ptr::read_unaligned(p.add(2) as *const u32);
        let hi = _mm256_and_si256(bits_to_bytes(qh), _mm256_set1_epi8(0x10));
        (_mm256_or_si256(nibbles(p.add(6)), hi), d, -16.0 * d)
    })
}
safe_wrapper!(dot_q5_0, dot_q5_0_impl, BlockQ8);

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot_q5_1_impl(w: &[u8], _s: &[u8], x: &[BlockQ8]) -> f32 {
    legacy_loop::<24, false>(w, x, |p| {
        let qh = std::ptr::read_unaligned(p.add(4) as *const u32);
        let hi = _mm256_and_si256(bits_to_bytes(qh), _mm256_set1_epi8(0x10));
        (
            _mm256_or_si256(nibbles(p.add(8)), hi),
            f16_at(p),
            f16_at(p.add(2)),
        )
    })
}
safe_wrapper!(dot_q5_1, dot_q5_1_impl, BlockQ8);

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot_q8_0_impl(w: &[u8], _s: &[u8], x: &[BlockQ8]) -> f32 {
    legacy_loop::<34, true>(w, x, |p| (load(p.add(2) as *const i8), f16_at(p), 0.0))
}
safe_wrapper!(dot_q8_0, dot_q8_0_impl, BlockQ8);

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot_iq4_nl_impl(w: &[u8], _s: &[u8], x: &[BlockQ8]) -> f32 {
    let table =
        _mm256_broadcastsi128_si256(_mm_loadu_si128(KVALUES_IQ4NL.as_ptr() as *const __m128i));
    legacy_loop::<18, true>(w, x, |p| {
        (
            _mm256_shuffle_epi8(table, nibbles(p.add(2))),
            f16_at(p),
            0.0,
        )
    })
}
safe_wrapper!(dot_iq4_nl, dot_iq4_nl_impl, BlockQ8);

// ---------------------------------------------------------------- K and IQ4_XS x Q8_K

/// Two 16-lane i16 scale broadcasts: low 128 bits `a`, high 128 bits `b`.
#[inline(always)]
pub(super) unsafe fn scale_pair(a: i16, b: i16) -> __m256i {
    _mm256_set_m128i(_mm_set1_epi16(b), _mm_set1_epi16(a))
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot_iq4_xs_impl(w: &[u8], _s: &[u8], x: &[BlockQ8K]) -> f32 {
    let nb = (w.len() / 136).min(x.len());
    let table =
        _mm256_broadcastsi128_si256(_mm_loadu_si128(KVALUES_IQ4NL.as_ptr() as *const __m128i));
    let m4 = _mm256_set1_epi8(0x0f);
    let mut acc = _mm256_setzero_ps();
    for i in 0..nb {
        let b = w.as_ptr().add(i * 136);
        let y = &*x.as_ptr().add(i);
        let sh = std::ptr::read_unaligned(b.add(2) as *const u16) as u32;
        let mut sumi = _mm256_setzero_si256();
        for k in 0..4 {
            // 32 bytes of qs = sub-blocks 2k and 2k+1, each 16 bytes (low nibbles first)
            let q = _mm256_loadu_si256(b.add(8 + 32 * k) as *const __m256i);
            let lo = _mm256_and_si256(q, m4);
            let hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
            // reorder to element order: sub-block 2k = [lo(0..16), hi(0..16)], 2k+1 = [lo(16..32), hi(16..32)]
            let a = _mm256_shuffle_epi8(table, _mm256_permute2x128_si256(lo, hi, 0x20));
            let c = _mm256_shuffle_epi8(table, _mm256_permute2x128_si256(lo, hi, 0x31));
            let sl = *b.add(4 + k);
            let s0 = ((sl & 0xf) as u32 | (((sh >> (4 * k)) & 3) << 4)) as i32 - 32;
            let s1 = ((sl >> 4) as u32 | (((sh >> (4 * k + 2)) & 3) << 4)) as i32 - 32;
            let pa = dot_i8_i8(a, load(y.qs.as_ptr().add(64 * k)));
            let pc = dot_i8_i8(c, load(y.qs.as_ptr().add(64 * k + 32)));
            sumi = _mm256_add_epi32(sumi, _mm256_mullo_epi32(pa, _mm256_set1_epi32(s0)));
            sumi = _mm256_add_epi32(sumi, _mm256_mullo_epi32(pc, _mm256_set1_epi32(s1)));
        }
        acc = _mm256_fmadd_ps(
            _mm256_set1_ps(f16_at(b) * y.d),
            _mm256_cvtepi32_ps(sumi),
            acc,
        );
    }
    hsum(acc)
}
safe_wrapper!(dot_iq4_xs, dot_iq4_xs_impl, BlockQ8K);
