//! Scalar reference dots of the codebook (IQ1/IQ2/IQ3) and ternary (TQ) formats against Q8_K,
//! following ggml's `ggml_vec_dot_*_q8_K_generic`: integer sums per 32 elements times the odd
//! 4-bit (or 3-bit) sub-block scale `2s + 1`, one f32 multiply per super-block.

use crate::act::BlockQ8K;
use crate::formats::ternary::{tq1_values, TQ1_BYTES, TQ2_BYTES};
use crate::grids::{IQ1S_GRID, IQ2S_GRID, IQ2XS_GRID, IQ2XXS_GRID, IQ3S_GRID, IQ3XXS_GRID, KSIGNS};
use crate::util::{f16_at, u16_at, u32_at};

/// 8 grid magnitudes (bytes of `entry`) with signs (`signs` bit k set = negative) · 8 int8.
#[inline(always)]
fn grid8_dot(entry: u64, signs: u8, y: &[i8]) -> i32 {
    let mut s = 0i32;
    for k in 0..8 {
        let v = ((entry >> (8 * k)) as u8) as i32 * y[k] as i32;
        s += if signs >> k & 1 == 1 { -v } else { v };
    }
    s
}

/// 4 grid magnitudes (bytes of `entry`) with signs in bits `shift..shift + 4` · 4 int8.
#[inline(always)]
fn grid4_dot(entry: u32, signs: u8, shift: usize, y: &[i8]) -> i32 {
    let mut s = 0i32;
    for k in 0..4 {
        let v = ((entry >> (8 * k)) as u8) as i32 * y[k] as i32;
        s += if signs >> (shift + k) & 1 == 1 { -v } else { v };
    }
    s
}

/// IQ2_XXS · Q8_K: value = d * (2s + 1) / 8 * grid * sign.
pub(crate) fn dot_iq2_xxs(w: &[u8], _s: &[u8], x: &[BlockQ8K]) -> f32 {
    let mut sumf = 0.0f32;
    for (b, y) in w.chunks_exact(66).zip(x) {
        let mut bsum = 0i32;
        for ib in 0..8 {
            let aux1 = u32_at(b, 2 + ib * 8 + 4);
            let mut sumi = 0i32;
            for l in 0..4 {
                let g = IQ2XXS_GRID[b[2 + ib * 8 + l] as usize];
                let signs = KSIGNS[((aux1 >> (7 * l)) & 127) as usize];
                sumi += grid8_dot(g, signs, &y.qs[ib * 32 + l * 8..]);
            }
            bsum += sumi * (2 * (aux1 >> 28) as i32 + 1);
        }
        sumf += f16_at(b, 0) * y.d * bsum as f32;
    }
    0.125 * sumf
}

/// IQ2_XS · Q8_K: 16-bit codes (9-bit grid index, 7-bit sign index), a 4-bit scale per 16.
pub(crate) fn dot_iq2_xs(w: &[u8], _s: &[u8], x: &[BlockQ8K]) -> f32 {
    let mut sumf = 0.0f32;
    for (b, y) in w.chunks_exact(74).zip(x) {
        let mut bsum = 0i32;
        for g in 0..32 {
            let qv = u16_at(b, 2 + 2 * g);
            let t = grid8_dot(
                IQ2XS_GRID[(qv & 511) as usize],
                KSIGNS[(qv >> 9) as usize],
                &y.qs[g * 8..],
            );
            let sc = (b[66 + g / 4] >> (4 * ((g / 2) % 2))) & 0xf;
            bsum += t * (2 * sc as i32 + 1);
        }
        sumf += f16_at(b, 0) * y.d * bsum as f32;
    }
    0.125 * sumf
}

/// IQ2_S · Q8_K: 10-bit grid indices (qs + 2 bits of qh), explicit sign bytes, 4-bit scales per 16.
pub(crate) fn dot_iq2_s(w: &[u8], _s: &[u8], x: &[BlockQ8K]) -> f32 {
    let mut sumf = 0.0f32;
    for (b, y) in w.chunks_exact(82).zip(x) {
        let mut bsum = 0i32;
        for g in 0..32 {
            let hi = ((b[66 + g / 4] >> (2 * (g % 4))) & 3) as usize;
            let t = grid8_dot(
                IQ2S_GRID[b[2 + g] as usize | (hi << 8)],
                b[34 + g],
                &y.qs[g * 8..],
            );
            let sc = (b[74 + g / 4] >> (4 * ((g / 2) % 2))) & 0xf;
            bsum += t * (2 * sc as i32 + 1);
        }
        sumf += f16_at(b, 0) * y.d * bsum as f32;
    }
    0.125 * sumf
}

/// IQ3_XXS · Q8_K: value = d * (2s + 1) / 4 * grid * sign, grid entries of 4.
pub(crate) fn dot_iq3_xxs(w: &[u8], _s: &[u8], x: &[BlockQ8K]) -> f32 {
    let mut sumf = 0.0f32;
    for (b, y) in w.chunks_exact(98).zip(x) {
        let mut bsum = 0i32;
        for ib in 0..8 {
            let aux = u32_at(b, 66 + 4 * ib);
            let mut sumi = 0i32;
            for l in 0..4 {
                let signs = KSIGNS[((aux >> (7 * l)) & 127) as usize];
                for h in 0..2 {
                    let e = IQ3XXS_GRID[b[2 + ib * 8 + l * 2 + h] as usize];
                    sumi += grid4_dot(e, signs, 4 * h, &y.qs[ib * 32 + l * 8 + h * 4..]);
                }
            }
            bsum += sumi * (2 * (aux >> 28) as i32 + 1);
        }
        sumf += f16_at(b, 0) * y.d * bsum as f32;
    }
    0.25 * sumf
}

/// IQ3_S · Q8_K: 9-bit grid indices (qs + a bit of qh), sign bytes, value = d * (2s + 1) * grid.
pub(crate) fn dot_iq3_s(w: &[u8], _s: &[u8], x: &[BlockQ8K]) -> f32 {
    let mut sumf = 0.0f32;
    for (b, y) in w.chunks_exact(110).zip(x) {
        let mut bsum = 0i32;
        for ib in 0..8 {
            let mut sumi = 0i32;
            for l in 0..4 {
                let signs = b[74 + ib * 4 + l];
                for h in 0..2 {
                    let g = ib * 8 + l * 2 + h;
                    let hi = ((b[66 + g / 8] >> (g % 8)) & 1) as usize;
                    let e = IQ3S_GRID[b[2 + g] as usize | (hi << 8)];
                    sumi += grid4_dot(e, signs, 4 * h, &y.qs[g * 4..]);
                }
            }
            let sc = (b[106 + ib / 2] >> (4 * (ib % 2))) & 0xf;
            bsum += sumi * (2 * sc as i32 + 1);
        }
        sumf += f16_at(b, 0) * y.d * bsum as f32;
    }
    sumf
}

/// IQ1 grid entry (8 values in {-1, 0, 1}) · 8 int8.
#[inline(always)]
fn iq1_dot(entry: u64, y: &[i8]) -> i32 {
    (0..8)
        .map(|k| ((entry >> (8 * k)) as u8 as i8) as i32 * y[k] as i32)
        .sum()
}

/// The IQ1 delta (ggml `IQ1S_DELTA` = `IQ1M_DELTA`).
const IQ1_DELTA: f32 = 0.125;

/// IQ1_S · Q8_K: value = d * (2s + 1) * (grid ± 1/8); the delta term uses the activation sums.
pub(crate) fn dot_iq1_s(w: &[u8], _s: &[u8], x: &[BlockQ8K]) -> f32 {
    let mut sumf = 0.0f32;
    for (b, y) in w.chunks_exact(50).zip(x) {
        let (mut sumi, mut sumi1) = (0i32, 0i32);
        for ib in 0..8 {
            let qh = u16_at(b, 34 + 2 * ib);
            let ls = 2 * ((qh >> 12) & 7) as i32 + 1;
            let delta = if qh & 0x8000 != 0 { -1 } else { 1 };
            let mut lsum = 0i32;
            for l in 0..4 {
                let idx = b[2 + ib * 4 + l] as usize | ((((qh >> (3 * l)) & 7) as usize) << 8);
                lsum += iq1_dot(IQ1S_GRID[idx], &y.qs[ib * 32 + l * 8..]);
            }
            sumi += ls * lsum;
            sumi1 += ls * delta * (y.bsums[2 * ib] as i32 + y.bsums[2 * ib + 1] as i32);
        }
        sumf += f16_at(b, 0) * y.d * (sumi as f32 + IQ1_DELTA * sumi1 as f32);
    }
    sumf
}

/// The f16 bits of an IQ1_M block's super-block scale (top nibbles of its four scale words).
#[inline(always)]
pub(crate) fn iq1m_d_bits(b: &[u8]) -> u16 {
    let sc = [u16_at(b, 48), u16_at(b, 50), u16_at(b, 52), u16_at(b, 54)];
    (sc[0] >> 12) | ((sc[1] >> 8) & 0x00f0) | ((sc[2] >> 4) & 0x0f00) | (sc[3] & 0xf000)
}

/// The f16 super-block scale of an IQ1_M block.
#[inline(always)]
fn iq1m_d(b: &[u8]) -> f32 {
    half::f16::from_bits(iq1m_d_bits(b)).to_f32()
}

/// IQ1_M · Q8_K: 3-bit scales per 16, a delta sign per 8 (sums of 8 activations).
pub(crate) fn dot_iq1_m(w: &[u8], _s: &[u8], x: &[BlockQ8K]) -> f32 {
    let mut sumf = 0.0f32;
    for (b, y) in w.chunks_exact(56).zip(x) {
        let (mut sumi1, mut sumi2) = (0i32, 0i32);
        for s in 0..16 {
            let ls = 2 * ((u16_at(b, 48 + 2 * (s / 4)) >> (3 * (s % 4))) & 7) as i32 + 1;
            let (mut s1, mut s2) = (0i32, 0i32);
            for h in 0..2 {
                let g = 2 * s + h;
                let nib = (b[32 + g / 2] >> (4 * (g % 2))) & 0xf;
                let idx = b[g] as usize | (((nib & 7) as usize) << 8);
                let ys = &y.qs[g * 8..g * 8 + 8];
                s1 += iq1_dot(IQ1S_GRID[idx], ys);
                let ysum: i32 = ys.iter().map(|&q| q as i32).sum();
                s2 += if nib & 8 != 0 { -ysum } else { ysum };
            }
            sumi1 += ls * s1;
            sumi2 += ls * s2;
        }
        sumf += iq1m_d(b) * y.d * (sumi1 as f32 + IQ1_DELTA * sumi2 as f32);
    }
    sumf
}

/// TQ1_0 · Q8_K: base-3 packed ternary values.
pub(crate) fn dot_tq1_0(w: &[u8], _s: &[u8], x: &[BlockQ8K]) -> f32 {
    let mut t = [0i8; 256];
    let mut sumf = 0.0f32;
    for (b, y) in w.chunks_exact(TQ1_BYTES).zip(x) {
        tq1_values(b, &mut t);
        let sum: i32 = t
            .iter()
            .zip(&y.qs)
            .map(|(&a, &q)| a as i32 * q as i32)
            .sum();
        sumf += sum as f32 * (f16_at(b, 52) * y.d);
    }
    sumf
}

/// TQ2_0 · Q8_K: 2-bit codes minus 1.
pub(crate) fn dot_tq2_0(w: &[u8], _s: &[u8], x: &[BlockQ8K]) -> f32 {
    let mut sumf = 0.0f32;
    for (b, y) in w.chunks_exact(TQ2_BYTES).zip(x) {
        let mut sum = 0i32;
        for (e, &q) in y.qs.iter().enumerate() {
            let (g, s, j) = (e / 128, (e / 32) % 4, e % 32);
            sum += (((b[g * 32 + j] >> (2 * s)) & 3) as i32 - 1) * q as i32;
        }
        sumf += sum as f32 * (y.d * f16_at(b, 64));
    }
    sumf
}
