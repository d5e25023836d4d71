//! The K-quant super-block formats (256 elements): Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, Q8_K.
//!
//! Dequantizers follow gguf-py 0.19.0 operation for operation (same f32 rounding sequence), so they
//! are bit-exact with it. Q8_K (not in gguf-py) follows ggml's `quantize_row_q8_K_ref`.

use crate::util::{f16_at, f32_at};

/// Elements per super-block.
pub(crate) const QK_K: usize = 256;

/// Q2_K block bytes: scales[16], qs[64], d, dmin.
pub(crate) const Q2K_BYTES: usize = 84;
/// Q3_K block bytes: hmask[32], qs[64], scales[12], d.
pub(crate) const Q3K_BYTES: usize = 110;
/// Q4_K block bytes: d, dmin, scales[12], qs[128].
pub(crate) const Q4K_BYTES: usize = 144;
/// Q5_K block bytes: d, dmin, scales[12], qh[32], qs[128].
pub(crate) const Q5K_BYTES: usize = 176;
/// Q6_K block bytes: ql[128], qh[64], scales[16], d.
pub(crate) const Q6K_BYTES: usize = 210;
/// Q8_K block bytes: d (f32), qs[256], bsums[16] (i16).
pub(crate) const Q8K_BYTES: usize = 292;

/// Q2_K blocks to f32: `(d * sc) * q - dmin * m` per 16 elements.
pub(crate) fn dequant_q2_k(data: &[u8], _s: &[u8], out: &mut [f32]) {
    for (b, o) in data.chunks_exact(Q2K_BYTES).zip(out.chunks_exact_mut(QK_K)) {
        let d = f16_at(b, 80);
        let dmin = f16_at(b, 82);
        for h in 0..2 {
            for s in 0..4 {
                for l in 0..32 {
                    let e = h * 128 + s * 32 + l;
                    let sc = b[e / 16];
                    let dl = d * (sc & 0xf) as f32;
                    let ml = dmin * (sc >> 4) as f32;
                    let q = (b[16 + h * 32 + l] >> (2 * s)) & 3;
                    o[e] = dl * q as f32 - ml;
                }
            }
        }
    }
}

/// The sixteen signed 6-bit scales of a Q3_K block (already minus 32).
#[inline(always)]
pub(crate) fn q3k_scales(sc: &[u8]) -> [i8; 16] {
    let mut out = [0i8; 16];
    for (i, o) in out.iter_mut().enumerate() {
        let lo = (sc[i % 8] >> (4 * (i / 8))) & 0xf;
        let hi = (sc[8 + i % 4] >> (2 * (i / 4))) & 3;
        *o = ((lo | (hi << 4)) as i8).wrapping_sub(32);
    }
    out
}

/// Q3_K blocks to f32: `(d * scale) * (ql - 4 * !hbit)`.
pub(crate) fn dequant_q3_k(data: &[u8], _s: &[u8], out: &mut [f32]) {
    for (b, o) in data.chunks_exact(Q3K_BYTES).zip(out.chunks_exact_mut(QK_K)) {
        let hmask = &b[..32];
        let qs = &b[32..96];
        let scales = q3k_scales(&b[96..108]);
        let d = f16_at(b, 108);
        for (e, oe) in o.iter_mut().enumerate() {
            let (h, s, l) = (e / 128, (e / 32) % 4, e % 32);
            let ql = ((qs[h * 32 + l] >> (2 * s)) & 3) as i8;
            let hb = (hmask[l] >> (e / 32)) & 1;
            let q = ql - (((hb ^ 1) << 2) as i8);
            let dl = d * scales[e / 16] as f32;
            *oe = dl * q as f32;
        }
    }
}

/// The eight 6-bit (scale, min) pairs of a Q4_K/Q5_K block.
#[inline(always)]
pub(crate) fn get_scale_min_k4(s: &[u8]) -> ([u8; 8], [u8; 8]) {
    let mut sc = [0u8; 8];
    let mut mn = [0u8; 8];
    for j in 0..4 {
        sc[j] = s[j] & 63;
        mn[j] = s[j + 4] & 63;
    }
    for j in 4..8 {
        sc[j] = (s[j + 4] & 0xf) | ((s[j - 4] >> 2) & 0x30);
        mn[j] = (s[j + 4] >> 4) | ((s[j] >> 2) & 0x30);
    }
    (sc, mn)
}

/// Q4_K blocks to f32: `(d * sc) * q - dmin * m` per 32 elements.
pub(crate) fn dequant_q4_k(data: &[u8], _s: &[u8], out: &mut [f32]) {
    for (b, o) in data.chunks_exact(Q4K_BYTES).zip(out.chunks_exact_mut(QK_K)) {
        let d = f16_at(b, 0);
        let dmin = f16_at(b, 2);
        let (sc, mn) = get_scale_min_k4(&b[4..16]);
        let qs = &b[16..];
        for sb in 0..8 {
            let dl = d * sc[sb] as f32;
            let ml = dmin * mn[sb] as f32;
            let (c, k) = (sb / 2, sb % 2);
            for l in 0..32 {
                let q = (qs[c * 32 + l] >> (4 * k)) & 0xf;
                o[sb * 32 + l] = dl * q as f32 - ml;
            }
        }
    }
}

/// Q5_K blocks to f32: `(d * sc) * q - dmin * m` per 32 elements, q with a fifth bit.
pub(crate) fn dequant_q5_k(data: &[u8], _s: &[u8], out: &mut [f32]) {
    for (b, o) in data.chunks_exact(Q5K_BYTES).zip(out.chunks_exact_mut(QK_K)) {
        let d = f16_at(b, 0);
        let dmin = f16_at(b, 2);
        let (sc, mn) = get_scale_min_k4(&b[4..16]);
        let qh = &b[16..48];
        let qs = &b[48..];
        for sb in 0..8 {
            let dl = d * sc[sb] as f32;
            let ml = dmin * mn[sb] as f32;
            let (c, k) = (sb / 2, sb % 2);
            for l in 0..32 {
                let q = ((qs[c * 32 + l] >> (4 * k)) & 0xf) | (((qh[l] >> sb) & 1) << 4);
                o[sb * 32 + l] = dl * q as f32 - ml;
            }
        }
    }
}

/// Q6_K blocks to f32: `(d * scale) * (q - 32)` per 16 elements.
pub(crate) fn dequant_q6_k(data: &[u8], _s: &[u8], out: &mut [f32]) {
    for (b, o) in data.chunks_exact(Q6K_BYTES).zip(out.chunks_exact_mut(QK_K)) {
        let ql = &b[..128];
        let qh = &b[128..192];
        let sc = &b[192..208];
        let d = f16_at(b, 208);
        for (e, oe) in o.iter_mut().enumerate() {
            let (h, r) = (e / 128, e % 128);
            let (k, m) = (r / 64, r % 64);
            let lo = (ql[h * 64 + m] >> (4 * k)) & 0xf;
            let (s, l) = (r / 32, r % 32);
            let hi = (qh[h * 32 + l] >> (2 * s)) & 3;
            let q = (lo | (hi << 4)) as i32 - 32;
            let dl = d * (sc[e / 16] as i8) as f32;
            *oe = dl * q as f32;
        }
    }
}

/// Q8_K blocks to f32: `d * q`.
pub(crate) fn dequant_q8_k(data: &[u8], _s: &[u8], out: &mut [f32]) {
    for (b, o) in data.chunks_exact(Q8K_BYTES).zip(out.chunks_exact_mut(QK_K)) {
        let d = f32_at(b, 0);
        for j in 0..QK_K {
            o[j] = d * (b[4 + j] as i8) as f32;
        }
    }
}

/// Quantizes 256 values the ggml Q8_K way: returns (d, qs, bsums).
pub(crate) fn q8k_block(x: &[f32]) -> (f32, [i8; QK_K], [i16; 16]) {
    let mut max = 0.0f32;
    let mut amax = 0.0f32;
    for &v in x {
        if v.abs() > amax {
            amax = v.abs();
            max = v;
        }
    }
    let mut qs = [0i8; QK_K];
    let mut bsums = [0i16; 16];
    if amax == 0.0 {
        return (0.0, qs, bsums);
    }
    let iscale = -127.0 / max;
    if !iscale.is_finite() {
        // |max| below ~3.7e-37: the block is zero to f32 precision; an infinite scale would
        // saturate the quants (the activation quantizers' rule, pocket-quant act.rs).
        return (0.0, qs, bsums);
    }
    for (q, &v) in qs.iter_mut().zip(x) {
        *q = ((iscale * v).round() as i32).min(127) as i8;
    }
    for (j, s) in bsums.iter_mut().enumerate() {
        *s = qs[j * 16..j * 16 + 16].iter().map(|&q| q as i16).sum();
    }
    (1.0 / iscale, qs, bsums)
}

/// f32 to Q8_K blocks (ggml `quantize_row_q8_K_ref`).
pub(crate) fn quant_q8_k(src: &[f32], out: &mut [u8]) {
    for (x, b) in src.chunks_exact(QK_K).zip(out.chunks_exact_mut(Q8K_BYTES)) {
        let (d, qs, bsums) = q8k_block(x);
        b[..4].copy_from_slice(&d.to_le_bytes());
        for j in 0..QK_K {
            b[4 + j] = qs[j] as u8;
        }
        for j in 0..16 {
            b[260 + 2 * j..262 + 2 * j].copy_from_slice(&bsums[j].to_le_bytes());
        }
    }
}
