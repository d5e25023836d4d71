//! Register-blocked AVX2 matmul for the 32-element formats (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0,
//! IQ4_NL) against [`BlockQ8`] activations.
//!
//! Why: the per-row dot kernels decode every weight block once per activation row and pay a
//! scale broadcast, a float multiply and an FMA per 32-element block pair. Here:
//! - prefill (`n >= 4`): activation rows are interleaved 8 at a time ([`interleave`]); each
//!   weight block is decoded once per 8 rows, its 8 exact integer block dots are reduced into one
//!   vector and scaled by the 8 products `dw * dy` with one FMA ([`tile8`]);
//! - decode GEMV: the same reduction over 8 weight rows against one activation row, the rows'
//!   f16 scales converted together ([`gemv8`]); leftover rows go 4 or 1 at a time ([`tile`]).
//!
//! The integer block dots are the dot kernels' (`vpmaddubsw`), so results agree with them up to
//! f32 rounding of the scale products and the accumulation order. The per-format block decoders
//! are in `tile_legacy.rs`.

use crate::act::BlockQ8;
use crate::format::QuantFormat;
use crate::simd::avx2::hsum;
use pocket_formats::ggml_type::GgmlType as G;
use std::arch::x86_64::*;

use super::tile_legacy::{Iq4Nl, Legacy, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0};

/// `out[r][a] = dot(weight row r, activation row a)` over `nb` blocks for the `RW` weight rows at
/// `w[r]` and the `RA` activation rows at `x[a]`.
#[inline(always)]
unsafe fn tile<L: Legacy, const RW: usize, const RA: usize>(
    w: [*const u8; RW],
    x: [*const BlockQ8; RA],
    nb: usize,
) -> [[f32; RA]; RW] {
    let ones = _mm256_set1_epi16(1);
    let mut acc = [[_mm256_setzero_ps(); RA]; RW];
    let mut corr = [[0.0f32; RA]; RW];
    for k in 0..nb {
        let mut q = [_mm256_setzero_si256(); RW];
        let mut qa = [_mm256_setzero_si256(); RW];
        let mut dw = [_mm256_setzero_ps(); RW];
        let mut cw = [0.0f32; RW];
        for r in 0..RW {
            let (qr, d, c) = L::unpack(w[r].add(k * L::BB));
            q[r] = qr;
            if L::SIGNED {
                qa[r] = _mm256_sign_epi8(qr, qr);
            }
            dw[r] = _mm256_set1_ps(d);
            cw[r] = c;
        }
        for a in 0..RA {
            let y = &*x[a].add(k);
            let yq = _mm256_loadu_si256(y.qs.as_ptr() as *const __m256i);
            let yd = _mm256_set1_ps(y.d);
            for r in 0..RW {
                let p = if L::SIGNED {
                    _mm256_maddubs_epi16(qa[r], _mm256_sign_epi8(yq, q[r]))
                } else {
                    _mm256_maddubs_epi16(q[r], yq)
                };
                let p = _mm256_cvtepi32_ps(_mm256_madd_epi16(p, ones));
                acc[r][a] = _mm256_fmadd_ps(_mm256_mul_ps(p, yd), dw[r], acc[r][a]);
                if !L::SIGNED {
                    corr[r][a] += cw[r] * y.s;
                }
            }
        }
    }
    let mut out = [[0.0f32; RA]; RW];
    for r in 0..RW {
        for a in 0..RA {
            out[r][a] = hsum(acc[r][a]) + corr[r][a];
        }
    }
    out
}

/// Activation rows per interleaved tile.
pub(super) const TA: usize = 8;

/// Block `k` of [`TA`] activation rows, interleaved so one tile step reads one contiguous 320
/// bytes: the rows' int8 codes, scales and scaled sums (the same values as their [`BlockQ8`]s).
#[derive(Clone, Copy)]
#[repr(C, align(32))]
pub(super) struct TileBlock {
    /// Codes of each row's block.
    qs: [[i8; 32]; TA],
    /// Scale of each row's block.
    d: [f32; TA],
    /// `d * sum(qs)` of each row's block.
    s: [f32; TA],
}

/// Interleaves `n` rows of `nb` activation blocks into `n.div_ceil(TA)` tiles of `nb` steps;
/// the rows past `n` in the last tile are zero blocks (they add nothing and are not stored).
pub(super) fn interleave(x: &[BlockQ8], n: usize, nb: usize, out: &mut Vec<TileBlock>) {
    let zero = TileBlock {
        qs: [[0; 32]; TA],
        d: [0.0; TA],
        s: [0.0; TA],
    };
    out.clear();
    out.resize(n.div_ceil(TA) * nb, zero);
    for (j, row) in x.chunks_exact(nb).take(n).enumerate() {
        let (t, a) = (j / TA, j % TA);
        for (k, b) in row.iter().enumerate() {
            let tb = &mut out[t * nb + k];
            tb.qs[a] = b.qs;
            tb.d[a] = b.d;
            tb.s[a] = b.s;
        }
    }
}

/// Sums of the 8 i32 lanes of each of `p[0..8]`, as lanes 0..8 of one vector.
#[inline(always)]
pub(super) unsafe fn reduce8(p: [__m256i; TA]) -> __m256i {
    let h01 = _mm256_hadd_epi32(p[0], p[1]);
    let h23 = _mm256_hadd_epi32(p[2], p[3]);
    let h45 = _mm256_hadd_epi32(p[4], p[5]);
    let h67 = _mm256_hadd_epi32(p[6], p[7]);
    // per 128-bit half: [p0, p1, p2, p3] partial sums of that half's lanes
    let h0123 = _mm256_hadd_epi32(h01, h23);
    let h4567 = _mm256_hadd_epi32(h45, h67);
    _mm256_add_epi32(
        _mm256_permute2x128_si256(h0123, h4567, 0x20),
        _mm256_permute2x128_si256(h0123, h4567, 0x31),
    )
}

/// [`reduce8`] of `vpmaddwd(p[i], 1)` for `vpmaddubsw` outputs of [`Legacy::SMALL`] codes:
/// rows are paired with a 16-bit horizontal add first (a lane then sums 4 products, at most
/// 4 * 31 * 127 < 2^15, so nothing wraps), so 4 widening multiplies and 2 32-bit horizontal adds
/// replace 8 and 6 (hot 896x896 Q5_0 GEMV, 1 thread: 49 -> 44 us). The sums are exact.
#[inline(always)]
unsafe fn reduce8_small(p: [__m256i; TA]) -> __m256i {
    let ones = _mm256_set1_epi16(1);
    // per 128-bit half: [r, r, r+1, r+1] partial sums for rows r = 2i
    let h: [__m256i; 4] =
        std::array::from_fn(|i| _mm256_madd_epi16(_mm256_hadd_epi16(p[2 * i], p[2 * i + 1]), ones));
    // per half: [r0, r1, r2, r3] and [r4, r5, r6, r7]
    let h0123 = _mm256_hadd_epi32(h[0], h[1]);
    let h4567 = _mm256_hadd_epi32(h[2], h[3]);
    _mm256_add_epi32(
        _mm256_permute2x128_si256(h0123, h4567, 0x20),
        _mm256_permute2x128_si256(h0123, h4567, 0x31),
    )
}

/// `out[r][a] = dot(weight row r, activation row a of the tile)` for the `RW` weight rows at
/// `w[r]` over `nb` blocks of the interleaved tile at `x`.
///
/// Each step computes the 8 exact integer block dots of a weight block against the tile's 8
/// activation blocks, reduces them into one vector (lane a = activation row a), and applies the
/// 8 scale products `dw * dy[a]` with one FMA: one accumulator per weight row.
#[inline(always)]
unsafe fn tile8<L: Legacy, const RW: usize>(
    w: [*const u8; RW],
    x: *const TileBlock,
    nb: usize,
) -> [[f32; TA]; RW] {
    let ones = _mm256_set1_epi16(1);
    let mut acc = [_mm256_setzero_ps(); RW];
    let mut corr = [_mm256_setzero_ps(); RW];
    for k in 0..nb {
        let tb = &*x.add(k);
        let yd = _mm256_load_ps(tb.d.as_ptr());
        for r in 0..RW {
            let (q, d, c) = L::unpack(w[r].add(k * L::BB));
            let qa = if L::SIGNED { _mm256_sign_epi8(q, q) } else { q };
            let p: [__m256i; TA] = std::array::from_fn(|a| {
                let yq = _mm256_load_si256(tb.qs[a].as_ptr() as *const __m256i);
                let yq = if L::SIGNED {
                    _mm256_sign_epi8(yq, q)
                } else {
                    yq
                };
                _mm256_maddubs_epi16(qa, yq)
            });
            let sums = _mm256_cvtepi32_ps(if L::SMALL {
                reduce8_small(p)
            } else {
                reduce8(p.map(|v| _mm256_madd_epi16(v, ones)))
            });
            acc[r] = _mm256_fmadd_ps(sums, _mm256_mul_ps(_mm256_set1_ps(d), yd), acc[r]);
            if !L::SIGNED {
                corr[r] =
                    _mm256_fmadd_ps(_mm256_set1_ps(c), _mm256_load_ps(tb.s.as_ptr()), corr[r]);
            }
        }
    }
    let mut out = [[0.0f32; TA]; RW];
    for r in 0..RW {
        _mm256_storeu_ps(out[r].as_mut_ptr(), _mm256_add_ps(acc[r], corr[r]));
    }
    out
}

/// The f16 at `off` of the 8 blocks at `p[r]`, as 8 f32 lanes.
#[inline(always)]
unsafe fn f16x8(p: &[*const u8; 8], off: usize) -> __m256 {
    let h = |r: usize| std::ptr::read_unaligned(p[r].add(off) as *const i16);
    _mm256_cvtph_ps(_mm_setr_epi16(
        h(0),
        h(1),
        h(2),
        h(3),
        h(4),
        h(5),
        h(6),
        h(7),
    ))
}

/// `out[r] = dot(weight row r, y)` for the 8 weight rows at `w[r]` and one activation row `y`
/// of `nb` blocks (decode GEMV).
///
/// Like [`tile8`] with the roles swapped: each step reduces the 8 rows' integer block dots into
/// one vector and scales it by the 8 rows' `d` (converted together) times `y.d`: one FMA per 8
/// blocks instead of a scale broadcast, multiply and FMA per block.
#[inline(always)]
unsafe fn gemv8<L: Legacy>(
    w: [*const u8; 8],
    y: *const BlockQ8,
    nb: usize,
    ahead: (*const u8, usize),
) -> [f32; 8] {
    let ones = _mm256_set1_epi16(1);
    let mut acc = _mm256_setzero_ps();
    let mut corr = _mm256_setzero_ps();
    // Software prefetch of the rows a later call reads (`ahead.1` bytes from `ahead.0`), spread
    // over this call's steps: a decode step's matrices are small and each is read once, so the
    // hardware prefetchers barely ramp up before a matrix ends.
    let lines = (ahead.1 / 64).div_ceil(nb.max(1));
    for k in 0..nb {
        for i in 0..lines {
            let p = ahead.0.wrapping_add((k * lines + i) * 64);
            _mm_prefetch(p as *const i8, _MM_HINT_T0);
        }
        let yb = &*y.add(k);
        let yq = _mm256_loadu_si256(yb.qs.as_ptr() as *const __m256i);
        let p: [*const u8; 8] = std::array::from_fn(|r| w[r].add(k * L::BB));
        let prods: [__m256i; TA] = std::array::from_fn(|r| {
            let q = L::codes(p[r]);
            let (qa, ys) = if L::SIGNED {
                (_mm256_sign_epi8(q, q), _mm256_sign_epi8(yq, q))
            } else {
                (q, yq)
            };
            _mm256_maddubs_epi16(qa, ys)
        });
        let d = f16x8(&p, L::D_AT);
        let sums = _mm256_cvtepi32_ps(if L::SMALL {
            reduce8_small(prods)
        } else {
            reduce8(prods.map(|v| _mm256_madd_epi16(v, ones)))
        });
        acc = _mm256_fmadd_ps(sums, _mm256_mul_ps(d, _mm256_set1_ps(yb.d)), acc);
        if !L::SIGNED {
            let c = match L::C_AT {
                Some(off) => f16x8(&p, off),
                None => _mm256_mul_ps(d, _mm256_set1_ps(L::C_D)),
            };
            corr = _mm256_fmadd_ps(c, _mm256_set1_ps(yb.s), corr);
        }
    }
    let mut out = [0.0f32; 8];
    _mm256_storeu_ps(out.as_mut_ptr(), _mm256_add_ps(acc, corr));
    out
}

/// The inputs of one weight-row range of a matmul.
pub(super) struct Job<'a> {
    /// All weight rows, `rb` bytes each.
    pub w: &'a [u8],
    /// Bytes per weight row.
    pub rb: usize,
    /// Activations, `n` rows of `nb` blocks (used when `tiles` is empty).
    pub x: &'a [BlockQ8],
    /// The activations interleaved by [`interleave`], or empty for the row-at-a-time path.
    pub tiles: &'a [TileBlock],
    /// Activation rows.
    pub n: usize,
    /// Blocks per row.
    pub nb: usize,
    /// Output row stride (the weight's row count): `y[j * ys + r]`.
    pub ys: usize,
    /// Tensor scale multiplying every output.
    pub ts: f32,
}

/// Computes weight rows `r0..r1` for every activation row, writing `y[j * job.ys + r]`.
///
/// # Safety
/// The CPU must have AVX2, FMA and F16C; `y` must point at `n * ys` writable floats of which no
/// other thread writes the columns `r0..r1`; `job` must be consistent (`w` holds `rb`-byte rows of
/// `nb` blocks, `x` holds `n * nb` blocks, `tiles` is empty or `interleave` of `x`).
pub(super) type RangeFn = unsafe fn(&Job<'_>, usize, usize, *mut f32);

/// The tiled kernel for `f`, if it is one of the 32-element formats with a [`BlockQ8`] dot.
pub(super) fn range_fn(f: QuantFormat) -> Option<RangeFn> {
    Some(match f {
        QuantFormat::Ggml(G::Q4_0) => range::<Q4_0>,
        QuantFormat::Ggml(G::Q4_1) => range::<Q4_1>,
        QuantFormat::Ggml(G::Q5_0) => range::<Q5_0>,
        QuantFormat::Ggml(G::Q5_1) => range::<Q5_1>,
        QuantFormat::Ggml(G::Q8_0) => range::<Q8_0>,
        QuantFormat::Ggml(G::IQ4_NL) => range::<Iq4Nl>,
        _ => return None,
    })
}

/// Weight rows per interleaved-tile step.
const RW: usize = 2;
/// Weight rows per step for a single activation row (decode GEMV: more independent streams).
const RW1: usize = 4;
/// Rows between a GEMV group and the group it prefetches (beyond the next group).
const PF: usize = 24;

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn range<L: Legacy>(job: &Job<'_>, r0: usize, r1: usize, y: *mut f32) {
    let (wp, nb, rb, ys, ts) = (job.w.as_ptr(), job.nb, job.rb, job.ys, job.ts);
    let wrow = |r: usize| wp.add(r * rb);
    if !job.tiles.is_empty() {
        // Activation tiles outermost: a tile (320 bytes per block) stays in L1 while the
        // range's weight rows (sized by the caller to stay in L2) stream past it.
        for (t, tile) in job.tiles.chunks_exact(nb).enumerate() {
            let rows = (job.n - t * TA).min(TA);
            let store = |r: usize, o: &[f32; TA]| {
                for (a, v) in o.iter().take(rows).enumerate() {
                    *y.add((t * TA + a) * ys + r) = v * ts;
                }
            };
            let mut r = r0;
            while r + RW <= r1 {
                let o = tile8::<L, RW>(std::array::from_fn(|i| wrow(r + i)), tile.as_ptr(), nb);
                for (i, oi) in o.iter().enumerate() {
                    store(r + i, oi);
                }
                r += RW;
            }
            if r < r1 {
                store(r, &tile8::<L, 1>([wrow(r)], tile.as_ptr(), nb)[0]);
            }
        }
        return;
    }
    let xp = job.x.as_ptr();
    // Start the range's first rows loading together (the in-loop prefetch covers the rest).
    let head = wrow(r0);
    for i in 0..((r1 - r0).min(8 + PF) * rb).div_ceil(64) {
        _mm_prefetch(head.wrapping_add(64 * i) as *const i8, _MM_HINT_T0);
    }
    for j in 0..job.n {
        let xs = [xp.add(j * nb)];
        let mut r = r0;
        while r + 8 <= r1 {
            // prefetch the group PF rows ahead, inside this range
            let pf = r + 8 + PF;
            let ahead = if pf < r1 {
                (wrow(pf), (r1 - pf).min(8) * rb)
            } else {
                (wp, 0)
            };
            let o = gemv8::<L>(std::array::from_fn(|i| wrow(r + i)), xs[0], nb, ahead);
            for (i, v) in o.iter().enumerate() {
                *y.add(j * ys + r + i) = v * ts;
            }
            r += 8;
        }
        while r + RW1 <= r1 {
            let o = tile::<L, RW1, 1>(std::array::from_fn(|i| wrow(r + i)), xs, nb);
            for (i, v) in o.iter().enumerate() {
                *y.add(j * ys + r + i) = v[0] * ts;
            }
            r += RW1;
        }
        while r < r1 {
            *y.add(j * ys + r) = tile::<L, 1, 1>([wrow(r)], xs, nb)[0][0] * ts;
            r += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::{dequantize_matrix, matmul_with, simd_level, QuantFormat, QuantMatrix, SimdLevel};
    use pocket_formats::ggml_type::GgmlType as G;
    use proptest::prelude::*;

    const TYPES: [G; 6] = [G::Q4_0, G::Q4_1, G::Q5_0, G::Q5_1, G::Q8_0, G::IQ4_NL];

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
        let scales: &[usize] = match t {
            G::Q4_1 | G::Q5_1 => &[0, 2],
            _ => &[0],
        };
        let mut d: Vec<u8> = (0..rows * f.row_bytes(cols).unwrap())
            .map(|_| next() as u8)
            .collect();
        for b in d.chunks_exact_mut(f.block_bytes()) {
            for &o in scales {
                let mag =
                    2f32.powi(-((next() % 12) as i32)) * (1.0 + (next() % 100) as f32 / 100.0);
                let v = if next() % 2 == 0 { mag } else { -mag };
                b[o..o + 2].copy_from_slice(&half::f16::from_f32(v).to_le_bytes());
            }
        }
        d
    }

    /// Extreme codes (every 4- and 5-bit code at its maximum) against activations of ±127:
    /// the 16-bit pairing of `reduce8_small` is at its bound and must still be exact.
    #[test]
    fn small_code_reduction_at_its_bound() {
        if simd_level() < SimdLevel::Avx2 {
            return;
        }
        for t in [G::Q4_0, G::Q4_1, G::Q5_0, G::Q5_1] {
            let (rows, cols) = (16, 64);
            let f = QuantFormat::Ggml(t);
            let mut data = vec![0xffu8; rows * f.row_bytes(cols).unwrap()];
            for b in data.chunks_exact_mut(f.block_bytes()) {
                b[0..2].copy_from_slice(&half::f16::from_f32(1.0).to_le_bytes());
                if matches!(t, G::Q4_1 | G::Q5_1) {
                    b[2..4].copy_from_slice(&half::f16::from_f32(0.0).to_le_bytes());
                }
            }
            let m = QuantMatrix {
                format: f,
                rows,
                cols,
                data: &data,
                scales: None,
                tensor_scale: None,
            };
            for n in [1usize, 8] {
                for sign in [1.0f32, -1.0] {
                    let x = vec![sign; n * cols];
                    let (mut ys, mut yv) = (vec![0.0f32; n * rows], vec![0.0f32; n * rows]);
                    matmul_with(&m, &x, n, &mut ys, SimdLevel::Scalar, false).unwrap();
                    matmul_with(&m, &x, n, &mut yv, SimdLevel::Avx2, false).unwrap();
                    assert_eq!(ys, yv, "{t:?} n={n} sign {sign}");
                }
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        /// The tiled path (every tile shape: n up to 11, rows up to 13, serial and parallel)
        /// against the scalar reference kernels, within a few f32 ulps of `sum |w x|`.
        #[test]
        fn tiled_matches_scalar(ti in 0usize..TYPES.len(), rows in 1usize..14, kb in 1usize..6,
                                n in 1usize..12, par in any::<bool>(), ts in prop::option::of(0.5f32..2.0),
                                seed in any::<u64>()) {
            if simd_level() < SimdLevel::Avx2 {
                return Ok(());
            }
            let t = TYPES[ti];
            let cols = 32 * kb;
            let data = weights(t, rows, cols, seed);
            let m = QuantMatrix { format: QuantFormat::Ggml(t), rows, cols, data: &data, scales: None, tensor_scale: ts };
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
                    let mag: f64 = (0..cols).map(|c| (w[r * cols + c] as f64 * x[j * cols + c] as f64).abs()).sum::<f64>()
                        * ts.unwrap_or(1.0) as f64;
                    let (a, b) = (ys[j * rows + r] as f64, yv[j * rows + r] as f64);
                    prop_assert!((a - b).abs() <= 2e-5 * mag + 1e-30, "{t:?}: row {r} batch {j}: scalar {a} tiled {b} mag {mag}");
                }
            }
        }
    }
}
