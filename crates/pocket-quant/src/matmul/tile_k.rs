//! Register-blocked AVX2 prefill matmul for Q4_K and Q6_K against [`BlockQ8K`] activations.
//!
//! Same scheme as `tile::tile8`: 8 activation rows are interleaved per 256-element super-block,
//! each weight super-block is decoded once for the 8 rows, the 8 rows' exact integer sums
//! (sub-block scales applied in `vpmaddwd`, the minimum / offset terms through the activation
//! block sums) are reduced into one vector and scaled by `d * dy[a]` with one FMA. The integer
//! arithmetic is the per-row AVX2 kernels' (`simd::avx2_k::dot_q4_k` / `dot_q6_k`), so results
//! agree with them up to f32 rounding of the scale products and the accumulation order.

use super::tile::{reduce8, TA};
use crate::act::BlockQ8K;
use crate::format::QuantFormat;
use crate::formats::kquants::QK_K;
use crate::simd::avx2::f16_at;
use crate::simd::avx2_k::{scale_k4, scales16_k4, scales_mins_k4};
use pocket_formats::ggml_type::GgmlType as G;
use std::arch::x86_64::*;

/// Super-block `k` of [`TA`] activation rows, interleaved (the values of their [`BlockQ8K`]s).
#[derive(Clone, Copy)]
#[repr(C, align(32))]
pub(super) struct TileBlockK {
    /// Codes of each row's super-block.
    qs: [[i8; QK_K]; TA],
    /// Scale of each row's super-block.
    d: [f32; TA],
    /// Sums of each 16 consecutive codes, per row.
    bsums: [[i16; 16]; TA],
}

/// Interleaves `n` rows of `nb` super-blocks into `n.div_ceil(TA)` tiles of `nb` steps; rows past
/// `n` in the last tile are zero (they add nothing and are not stored).
pub(super) fn interleave_k(x: &[BlockQ8K], n: usize, nb: usize, out: &mut Vec<TileBlockK>) {
    let zero = TileBlockK {
        qs: [[0; QK_K]; TA],
        d: [0.0; TA],
        bsums: [[0; 16]; TA],
    };
    out.clear();
    out.resize(n.div_ceil(TA) * nb, zero);
    for (j, row) in x.chunks_exact(nb).take(n).enumerate() {
        let (t, a) = (j / TA, j % TA);
        for (k, b) in row.iter().enumerate() {
            let tb = &mut out[t * nb + k];
            tb.qs[a] = b.qs;
            tb.d[a] = b.d;
            tb.bsums[a] = b.bsums;
        }
    }
}

#[inline(always)]
unsafe fn yload(tb: &TileBlockK, a: usize, off: usize) -> __m256i {
    _mm256_load_si256(tb.qs[a].as_ptr().add(off) as *const __m256i)
}

/// Q4_K super-block at `b` against the tile step `tb`: adds `d * sum` to `acc` and
/// `dmin * msum` to `accm`, lane `a` for activation row `a`.
#[inline(always)]
unsafe fn step_q4_k(b: *const u8, tb: &TileBlockK, acc: &mut __m256, accm: &mut __m256) {
    let m4 = _mm256_set1_epi8(0x0f);
    let sm = scales_mins_k4(b.add(4));
    let sc = scales16_k4(sm);
    let mut sumi = [_mm256_setzero_si256(); TA];
    for c in 0..4 {
        let q = _mm256_loadu_si256(b.add(16 + 32 * c) as *const __m256i);
        let lo = _mm256_and_si256(q, m4);
        let hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
        let (s0, s1) = (scale_k4(sc, 2 * c), scale_k4(sc, 2 * c + 1));
        for (a, s) in sumi.iter_mut().enumerate() {
            let plo = _mm256_madd_epi16(_mm256_maddubs_epi16(lo, yload(tb, a, 64 * c)), s0);
            let phi = _mm256_madd_epi16(_mm256_maddubs_epi16(hi, yload(tb, a, 64 * c + 32)), s1);
            *s = _mm256_add_epi32(*s, _mm256_add_epi32(plo, phi));
        }
    }
    // mins: sum_j mn[j] * (bsums[2j] + bsums[2j+1]), one vpmaddwd per row with each minimum
    // in both i16 lanes of its pair
    let mins = _mm_cvtepu8_epi16(_mm_srli_si128(sm, 8));
    let mv = _mm256_set_m128i(
        _mm_unpackhi_epi16(mins, mins),
        _mm_unpacklo_epi16(mins, mins),
    );
    let msum: [__m256i; TA] = std::array::from_fn(|a| {
        _mm256_madd_epi16(
            _mm256_load_si256(tb.bsums[a].as_ptr() as *const __m256i),
            mv,
        )
    });
    let yd = _mm256_load_ps(tb.d.as_ptr());
    let d = _mm256_mul_ps(_mm256_set1_ps(f16_at(b)), yd);
    let dmin = _mm256_mul_ps(_mm256_set1_ps(f16_at(b.add(2))), yd);
    *acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(reduce8(sumi)), d, *acc);
    *accm = _mm256_fmadd_ps(_mm256_cvtepi32_ps(reduce8(msum)), dmin, *accm);
}

/// Q6_K super-block at `b` against the tile step `tb`: adds `d * sum` to `acc` (the `-32`
/// code offset folded in through the block sums).
#[inline(always)]
unsafe fn step_q6_k(b: *const u8, tb: &TileBlockK, acc: &mut __m256) {
    let m4 = _mm256_set1_epi8(0x0f);
    let m3 = _mm256_set1_epi8(0x03);
    let sc8 = _mm_loadu_si128(b.add(192) as *const __m128i);
    let scv = _mm256_cvtepi8_epi16(sc8);
    // 32 * sum_g scale[g] * bsums[g], per row (subtracted before the reduction)
    let mut sumi: [__m256i; TA] = std::array::from_fn(|a| {
        let bs = _mm256_load_si256(tb.bsums[a].as_ptr() as *const __m256i);
        _mm256_sub_epi32(
            _mm256_setzero_si256(),
            _mm256_slli_epi32(_mm256_madd_epi16(scv, bs), 5),
        )
    });
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
            let hi = _mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(2 * s as i32)), m3);
            let q = _mm256_or_si256(lo, _mm256_slli_epi16(hi, 4));
            let g = h * 8 + s * 2;
            // scales g, g + 1 of the two 16-element halves: bytes [g x 8, g+1 x 8], widened
            let g8 = g as i64 * 0x0101_0101_0101_0101;
            let pick = _mm_set_epi64x(g8 + 0x0101_0101_0101_0101, g8);
            let scales = _mm256_cvtepi8_epi16(_mm_shuffle_epi8(sc8, pick));
            for (a, si) in sumi.iter_mut().enumerate() {
                let p = _mm256_maddubs_epi16(q, yload(tb, a, h * 128 + s * 32));
                *si = _mm256_add_epi32(*si, _mm256_madd_epi16(p, scales));
            }
        }
    }
    let d = _mm256_mul_ps(
        _mm256_set1_ps(f16_at(b.add(208))),
        _mm256_load_ps(tb.d.as_ptr()),
    );
    *acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(reduce8(sumi)), d, *acc);
}

/// The inputs of one weight-row range of a K-format prefill matmul.
pub(super) struct JobK<'a> {
    /// All weight rows, `rb` bytes each.
    pub w: &'a [u8],
    /// Bytes per weight row.
    pub rb: usize,
    /// The activations interleaved by [`interleave_k`].
    pub tiles: &'a [TileBlockK],
    /// Activation rows.
    pub n: usize,
    /// Super-blocks per row.
    pub nb: usize,
    /// Output row stride (the weight's row count): `y[j * ys + r]`.
    pub ys: usize,
    /// Tensor scale multiplying every output.
    pub ts: f32,
}

/// Computes weight rows `r0..r1` for every activation row, writing `y[j * job.ys + r]`.
///
/// # Safety
/// As `tile::RangeFn`: AVX2/FMA/F16C present, `y` holds `n * ys` floats whose columns `r0..r1`
/// no other thread writes, and `job` is consistent.
pub(super) type RangeFnK = unsafe fn(&JobK<'_>, usize, usize, *mut f32);

/// The tiled kernel for `f`, if there is one.
pub(super) fn range_fn_k(f: QuantFormat) -> Option<RangeFnK> {
    Some(match f {
        QuantFormat::Ggml(G::Q4_K) => range_q4_k,
        QuantFormat::Ggml(G::Q6_K) => range_q6_k,
        _ => return None,
    })
}

/// Stores tile `t`'s 8 results for weight row `r`.
#[inline(always)]
unsafe fn store(job: &JobK<'_>, y: *mut f32, t: usize, r: usize, v: __m256) {
    let mut o = [0.0f32; TA];
    _mm256_storeu_ps(o.as_mut_ptr(), v);
    for (a, x) in o.iter().take((job.n - t * TA).min(TA)).enumerate() {
        *y.add((t * TA + a) * job.ys + r) = x * job.ts;
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn range_q4_k(job: &JobK<'_>, r0: usize, r1: usize, y: *mut f32) {
    for (t, tile) in job.tiles.chunks_exact(job.nb).enumerate() {
        for r in r0..r1 {
            let w = job.w.as_ptr().add(r * job.rb);
            let (mut acc, mut accm) = (_mm256_setzero_ps(), _mm256_setzero_ps());
            for (k, tb) in tile.iter().enumerate() {
                step_q4_k(w.add(k * 144), tb, &mut acc, &mut accm);
            }
            store(job, y, t, r, _mm256_sub_ps(acc, accm));
        }
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn range_q6_k(job: &JobK<'_>, r0: usize, r1: usize, y: *mut f32) {
    for (t, tile) in job.tiles.chunks_exact(job.nb).enumerate() {
        for r in r0..r1 {
            let w = job.w.as_ptr().add(r * job.rb);
            let mut acc = _mm256_setzero_ps();
            for (k, tb) in tile.iter().enumerate() {
                step_q6_k(w.add(k * 210), tb, &mut acc);
            }
            store(job, y, t, r, acc);
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::{dequantize_matrix, matmul_with, simd_level, QuantFormat, QuantMatrix, SimdLevel};
    use pocket_formats::ggml_type::GgmlType as G;
    use proptest::prelude::*;

    /// Random blocks with finite f16 scales at the format's scale fields.
    fn weights(t: G, rows: usize, cols: usize, seed: u64) -> Vec<u8> {
        let f = QuantFormat::Ggml(t);
        let mut s = seed | 1;
        let mut next = move || {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            s
        };
        let fields: &[usize] = match t {
            G::Q4_K => &[0, 2],
            _ => &[208],
        };
        let mut d: Vec<u8> = (0..rows * f.row_bytes(cols).unwrap())
            .map(|_| next() as u8)
            .collect();
        for b in d.chunks_exact_mut(f.block_bytes()) {
            for &o in fields {
                let mag =
                    2f32.powi(-((next() % 12) as i32)) * (1.0 + (next() % 100) as f32 / 100.0);
                let v = if next() % 2 == 0 { mag } else { -mag };
                b[o..o + 2].copy_from_slice(&half::f16::from_f32(v).to_le_bytes());
            }
        }
        d
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]
        /// The tiled K path (n from 4: partial and full tiles, serial and parallel) against the
        /// scalar reference, within a few f32 ulps of `sum |w x|`.
        #[test]
        fn tiled_k_matches_scalar(q6 in any::<bool>(), rows in 1usize..10, kb in 1usize..4,
                                  n in 4usize..20, par in any::<bool>(), seed in any::<u64>()) {
            if simd_level() < SimdLevel::Avx2 {
                return Ok(());
            }
            let t = if q6 { G::Q6_K } else { G::Q4_K };
            let cols = 256 * kb;
            let data = weights(t, rows, cols, seed);
            let m = QuantMatrix { format: QuantFormat::Ggml(t), rows, cols, data: &data, scales: None, tensor_scale: None };
            let mut s = seed.rotate_left(17) | 1;
            let x: Vec<f32> = (0..n * cols).map(|_| {
                s = s.wrapping_mul(6364136223846793005).wrapping_add(1);
                ((s >> 33) % 2001) as f32 / 500.0 - 2.0
            }).collect();
            let mut ys = vec![0.0f32; n * rows];
            let mut yv = vec![f32::NAN; n * rows];
            matmul_with(&m, &x, n, &mut ys, SimdLevel::Scalar, false).unwrap();
            matmul_with(&m, &x, n, &mut yv, SimdLevel::Avx2, par).unwrap();
            let mut w = vec![0.0f32; rows * cols];
            dequantize_matrix(&m, &mut w).unwrap();
            for j in 0..n {
                for r in 0..rows {
                    let mag: f64 = (0..cols).map(|c| (w[r * cols + c] as f64 * x[j * cols + c] as f64).abs()).sum();
                    let (a, b) = (ys[j * rows + r] as f64, yv[j * rows + r] as f64);
                    prop_assert!((a - b).abs() <= 2e-5 * mag + 1e-30, "{t:?}: row {r} batch {j}: scalar {a} tiled {b} mag {mag}");
                }
            }
        }
    }
}
