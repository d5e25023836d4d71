//! Scalar reference dot products. Each SIMD kernel is tested against these.

use crate::act::{BlockQ8, BlockQ8K};
use crate::formats::fp4::{e8m0_half, ue4m3_half, KVALUES_FP4};
use crate::formats::iq4::{iq4xs_scales, KVALUES_IQ4NL};
use crate::formats::kquants::{get_scale_min_k4, q3k_scales};
use crate::util::{f16_at, u32_at};

/// F32 weights · f32.
pub(crate) fn dot_f32(w: &[u8], _s: &[u8], x: &[f32]) -> f32 {
    w.chunks_exact(4)
        .zip(x)
        .map(|(c, &v)| f32::from_le_bytes([c[0], c[1], c[2], c[3]]) * v)
        .sum()
}

/// F16 weights · f32.
pub(crate) fn dot_f16(w: &[u8], _s: &[u8], x: &[f32]) -> f32 {
    w.chunks_exact(2)
        .zip(x)
        .map(|(c, &v)| f16_at(c, 0) * v)
        .sum()
}

/// BF16 weights · f32.
pub(crate) fn dot_bf16(w: &[u8], _s: &[u8], x: &[f32]) -> f32 {
    w.chunks_exact(2)
        .zip(x)
        .map(|(c, &v)| f32::from_bits((u16::from_le_bytes([c[0], c[1]]) as u32) << 16) * v)
        .sum()
}

/// Integer dot of 16 low nibbles + 16 high nibbles (each minus `off`) with 32 int8.
#[inline(always)]
fn nib_dot(qs: &[u8], y: &[i8; 32], off: i32) -> i32 {
    let mut s = 0i32;
    for j in 0..16 {
        s += ((qs[j] & 0xf) as i32 - off) * y[j] as i32;
        s += ((qs[j] >> 4) as i32 - off) * y[j + 16] as i32;
    }
    s
}

/// Q4_0 · Q8.
pub(crate) fn dot_q4_0(w: &[u8], _s: &[u8], x: &[BlockQ8]) -> f32 {
    w.chunks_exact(18)
        .zip(x)
        .map(|(b, y)| f16_at(b, 0) * y.d * nib_dot(&b[2..], &y.qs, 8) as f32)
        .sum()
}

/// Q4_1 · Q8 (uses the activation sum for the minimum).
pub(crate) fn dot_q4_1(w: &[u8], _s: &[u8], x: &[BlockQ8]) -> f32 {
    w.chunks_exact(20)
        .zip(x)
        .map(|(b, y)| f16_at(b, 0) * y.d * nib_dot(&b[4..], &y.qs, 0) as f32 + f16_at(b, 2) * y.s)
        .sum()
}

#[inline(always)]
fn q5_dot(qh: u32, qs: &[u8], y: &[i8; 32], off: i32) -> i32 {
    let mut s = 0i32;
    for j in 0..16 {
        let h0 = (((qh >> j) & 1) << 4) as i32;
        let h1 = (((qh >> (j + 16)) & 1) << 4) as i32;
        s += (((qs[j] & 0xf) as i32 | h0) - off) * y[j] as i32;
        s += (((qs[j] >> 4) as i32 | h1) - off) * y[j + 16] as i32;
    }
    s
}

/// Q5_0 · Q8.
pub(crate) fn dot_q5_0(w: &[u8], _s: &[u8], x: &[BlockQ8]) -> f32 {
    w.chunks_exact(22)
        .zip(x)
        .map(|(b, y)| f16_at(b, 0) * y.d * q5_dot(u32_at(b, 2), &b[6..], &y.qs, 16) as f32)
        .sum()
}

/// Q5_1 · Q8.
pub(crate) fn dot_q5_1(w: &[u8], _s: &[u8], x: &[BlockQ8]) -> f32 {
    w.chunks_exact(24)
        .zip(x)
        .map(|(b, y)| {
            f16_at(b, 0) * y.d * q5_dot(u32_at(b, 4), &b[8..], &y.qs, 0) as f32 + f16_at(b, 2) * y.s
        })
        .sum()
}

/// Q8_0 · Q8.
pub(crate) fn dot_q8_0(w: &[u8], _s: &[u8], x: &[BlockQ8]) -> f32 {
    w.chunks_exact(34)
        .zip(x)
        .map(|(b, y)| {
            let s: i32 = (0..32)
                .map(|j| (b[2 + j] as i8) as i32 * y.qs[j] as i32)
                .sum();
            f16_at(b, 0) * y.d * s as f32
        })
        .sum()
}

/// IQ4_NL · Q8.
pub(crate) fn dot_iq4_nl(w: &[u8], _s: &[u8], x: &[BlockQ8]) -> f32 {
    w.chunks_exact(18)
        .zip(x)
        .map(|(b, y)| {
            let mut s = 0i32;
            for j in 0..16 {
                s += KVALUES_IQ4NL[(b[2 + j] & 0xf) as usize] as i32 * y.qs[j] as i32;
                s += KVALUES_IQ4NL[(b[2 + j] >> 4) as usize] as i32 * y.qs[j + 16] as i32;
            }
            f16_at(b, 0) * y.d * s as f32
        })
        .sum()
}

/// MXFP4 (GGUF) · Q8: per block `e8m0_half(e) * d_y * sum(kvalue * q)`.
pub(crate) fn dot_mxfp4(w: &[u8], _s: &[u8], x: &[BlockQ8]) -> f32 {
    w.chunks_exact(17)
        .zip(x)
        .map(|(b, y)| {
            let mut s = 0i32;
            for j in 0..16 {
                s += KVALUES_FP4[(b[1 + j] & 0xf) as usize] as i32 * y.qs[j] as i32;
                s += KVALUES_FP4[(b[1 + j] >> 4) as usize] as i32 * y.qs[j + 16] as i32;
            }
            e8m0_half(b[0]) * y.d * s as f32
        })
        .sum()
}

/// NVFP4 (GGUF, 64-element blocks of four 16-element sub-blocks) · Q8.
pub(crate) fn dot_nvfp4(w: &[u8], _s: &[u8], x: &[BlockQ8]) -> f32 {
    let mut acc = 0.0f32;
    for (b, y2) in w.chunks_exact(36).zip(x.chunks_exact(2)) {
        for sb in 0..4 {
            let y = &y2[sb / 2];
            let off = (sb % 2) * 16;
            let qs = &b[4 + sb * 8..4 + sb * 8 + 8];
            let mut s = 0i32;
            for j in 0..8 {
                s += KVALUES_FP4[(qs[j] & 0xf) as usize] as i32 * y.qs[off + j] as i32;
                s += KVALUES_FP4[(qs[j] >> 4) as usize] as i32 * y.qs[off + 8 + j] as i32;
            }
            acc += ue4m3_half(b[sb]) * y.d * s as f32;
        }
    }
    acc
}

/// Q2_K · Q8_K.
pub(crate) fn dot_q2_k(w: &[u8], _s: &[u8], x: &[BlockQ8K]) -> f32 {
    let mut acc = 0.0f32;
    for (b, y) in w.chunks_exact(84).zip(x) {
        let d = f16_at(b, 80) * y.d;
        let dmin = f16_at(b, 82) * y.d;
        let mut isum = 0i32;
        let mut msum = 0i32;
        for g in 0..16 {
            msum += (b[g] >> 4) as i32 * y.bsums[g] as i32;
        }
        for h in 0..2 {
            for s in 0..4 {
                for half in 0..2 {
                    let g = h * 8 + s * 2 + half;
                    let mut t = 0i32;
                    for l in half * 16..half * 16 + 16 {
                        let q = ((b[16 + h * 32 + l] >> (2 * s)) & 3) as i32;
                        t += q * y.qs[h * 128 + s * 32 + l] as i32;
                    }
                    isum += (b[g] & 0xf) as i32 * t;
                }
            }
        }
        acc += d * isum as f32 - dmin * msum as f32;
    }
    acc
}

/// Q3_K · Q8_K.
pub(crate) fn dot_q3_k(w: &[u8], _s: &[u8], x: &[BlockQ8K]) -> f32 {
    let mut acc = 0.0f32;
    for (b, y) in w.chunks_exact(110).zip(x) {
        let scales = q3k_scales(&b[96..108]);
        let mut isum = 0i32;
        for g in 0..16 {
            let mut t = 0i32;
            for e in g * 16..g * 16 + 16 {
                let (h, s, l) = (e / 128, (e / 32) % 4, e % 32);
                let ql = ((b[32 + h * 32 + l] >> (2 * s)) & 3) as i32;
                let hb = ((b[l] >> (e / 32)) & 1) as i32;
                t += (ql - 4 * (1 - hb)) * y.qs[e] as i32;
            }
            isum += scales[g] as i32 * t;
        }
        acc += f16_at(b, 108) * y.d * isum as f32;
    }
    acc
}

/// Q4_K · Q8_K.
pub(crate) fn dot_q4_k(w: &[u8], _s: &[u8], x: &[BlockQ8K]) -> f32 {
    let mut acc = 0.0f32;
    for (b, y) in w.chunks_exact(144).zip(x) {
        let (sc, mn) = get_scale_min_k4(&b[4..16]);
        let qs = &b[16..];
        let mut isum = 0i32;
        let mut msum = 0i32;
        for sb in 0..8 {
            let (c, k) = (sb / 2, sb % 2);
            let mut t = 0i32;
            for l in 0..32 {
                t += ((qs[c * 32 + l] >> (4 * k)) & 0xf) as i32 * y.qs[sb * 32 + l] as i32;
            }
            isum += sc[sb] as i32 * t;
            msum += mn[sb] as i32 * (y.bsums[2 * sb] as i32 + y.bsums[2 * sb + 1] as i32);
        }
        acc += f16_at(b, 0) * y.d * isum as f32 - f16_at(b, 2) * y.d * msum as f32;
    }
    acc
}

/// Q5_K · Q8_K.
pub(crate) fn dot_q5_k(w: &[u8], _s: &[u8], x: &[BlockQ8K]) -> f32 {
    let mut acc = 0.0f32;
    for (b, y) in w.chunks_exact(176).zip(x) {
        let (sc, mn) = get_scale_min_k4(&b[4..16]);
        let qh = &b[16..48];
        let qs = &b[48..];
        let mut isum = 0i32;
        let mut msum = 0i32;
        for sb in 0..8 {
            let (c, k) = (sb / 2, sb % 2);
            let mut t = 0i32;
            for l in 0..32 {
                let q = ((qs[c * 32 + l] >> (4 * k)) & 0xf) | (((qh[l] >> sb) & 1) << 4);
                t += q as i32 * y.qs[sb * 32 + l] as i32;
            }
            isum += sc[sb] as i32 * t;
            msum += mn[sb] as i32 * (y.bsums[2 * sb] as i32 + y.bsums[2 * sb + 1] as i32);
        }
        acc += f16_at(b, 0) * y.d * isum as f32 - f16_at(b, 2) * y.d * msum as f32;
    }
    acc
}

/// Q6_K · Q8_K.
pub(crate) fn dot_q6_k(w: &[u8], _s: &[u8], x: &[BlockQ8K]) -> f32 {
    let mut acc = 0.0f32;
    for (b, y) in w.chunks_exact(210).zip(x) {
        let (ql, qh, sc) = (&b[..128], &b[128..192], &b[192..208]);
        let mut isum = 0i32;
        for g in 0..16 {
            let mut t = 0i32;
            for e in g * 16..g * 16 + 16 {
                let (h, r) = (e / 128, e % 128);
                let lo = (ql[h * 64 + r % 64] >> (4 * (r / 64))) & 0xf;
                let hi = (qh[h * 32 + r % 32] >> (2 * (r / 32))) & 3;
                t += ((lo | (hi << 4)) as i32 - 32) * y.qs[e] as i32;
            }
            isum += (sc[g] as i8) as i32 * t;
        }
        acc += f16_at(b, 208) * y.d * isum as f32;
    }
    acc
}

/// IQ4_XS · Q8_K.
pub(crate) fn dot_iq4_xs(w: &[u8], _s: &[u8], x: &[BlockQ8K]) -> f32 {
    let mut acc = 0.0f32;
    for (b, y) in w.chunks_exact(136).zip(x) {
        let scales = iq4xs_scales(b);
        let qs = &b[8..];
        let mut isum = 0i32;
        for ib in 0..8 {
            let mut t = 0i32;
            for j in 0..16 {
                let q = qs[ib * 16 + j];
                t += KVALUES_IQ4NL[(q & 0xf) as usize] as i32 * y.qs[ib * 32 + j] as i32;
                t += KVALUES_IQ4NL[(q >> 4) as usize] as i32 * y.qs[ib * 32 + 16 + j] as i32;
            }
            isum += scales[ib] * t;
        }
        acc += f16_at(b, 0) * y.d * isum as f32;
    }
    acc
}

/// Any self-contained format · Q8: a dequantized weight block against the int8 activations.
pub(crate) fn dot_dequant_q8(
    dq: crate::format::DequantFn,
    bs: usize,
    bb: usize,
    w: &[u8],
    x: &[BlockQ8],
    tmp: &mut [f32],
) -> f32 {
    let tmp = &mut tmp[..bs];
    let mut acc = 0.0f32;
    let per = bs / 32;
    for (b, ys) in w.chunks_exact(bb).zip(x.chunks_exact(per)) {
        dq(b, &[], tmp);
        for (t, y) in tmp.chunks_exact(32).zip(ys) {
            let s: f32 = t.iter().zip(&y.qs).map(|(&a, &q)| a * q as f32).sum();
            acc += s * y.d;
        }
    }
    acc
}

/// Any self-contained 256-element format · Q8_K: a dequantized block against the int8 activations.
pub(crate) fn dot_dequant_q8k(
    dq: crate::format::DequantFn,
    bb: usize,
    w: &[u8],
    x: &[BlockQ8K],
    tmp: &mut [f32],
) -> f32 {
    let tmp = &mut tmp[..256];
    let mut acc = 0.0f32;
    for (b, y) in w.chunks_exact(bb).zip(x) {
        dq(b, &[], tmp);
        let s: f32 = tmp.iter().zip(&y.qs).map(|(&a, &q)| a * q as f32).sum();
        acc += s * y.d;
    }
    acc
}

/// Any format · f32: dequantize the row in chunks and dot.
pub(crate) fn dot_dequant_f32(
    dq: crate::format::DequantFn,
    bs: usize,
    bb: usize,
    w: &[u8],
    x: &[f32],
    tmp: &mut [f32],
) -> f32 {
    let per = (tmp.len() / bs).max(1);
    let mut acc = 0.0f32;
    for (b, xs) in w.chunks(per * bb).zip(x.chunks(per * bs)) {
        let t = &mut tmp[..xs.len()];
        dq(b, &[], t);
        acc += t.iter().zip(xs).map(|(a, b)| a * b).sum::<f32>();
    }
    acc
}
