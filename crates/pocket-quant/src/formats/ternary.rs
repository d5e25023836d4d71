//! The ternary formats TQ1_0 (base-3 packed, 1.6875 bpw) and TQ2_0 (2-bit packed), as gguf-py 0.19.0.

use crate::util::{amax, f16_at, put_f16, roundf};

/// TQ1_0 block bytes: qs[48], qh[4], d.
pub(crate) const TQ1_BYTES: usize = 54;
/// TQ2_0 block bytes: qs[64], d.
pub(crate) const TQ2_BYTES: usize = 66;

const POW3: [u8; 5] = [1, 3, 9, 27, 81];

/// Trit `k` (0..5) of a base-3 packed byte, as 0..2 (gguf-py: `((q * 3^k mod 256) * 3) >> 8`).
#[inline(always)]
pub(crate) fn trit(q: u8, k: usize) -> u8 {
    ((q.wrapping_mul(POW3[k]) as u16 * 3) >> 8) as u8
}

/// The 256 ternary values (-1, 0, 1) of a TQ1_0 block in element order.
#[inline(always)]
pub(crate) fn tq1_values(b: &[u8], out: &mut [i8; 256]) {
    for k in 0..5 {
        for j in 0..32 {
            out[k * 32 + j] = trit(b[j], k) as i8 - 1;
        }
        for j in 0..16 {
            out[160 + k * 16 + j] = trit(b[32 + j], k) as i8 - 1;
        }
    }
    for k in 0..4 {
        for j in 0..4 {
            out[240 + k * 4 + j] = trit(b[48 + j], k) as i8 - 1;
        }
    }
}

/// TQ1_0 blocks to f32: `d * t`.
pub(crate) fn dequant_tq1_0(data: &[u8], _s: &[u8], out: &mut [f32]) {
    let mut t = [0i8; 256];
    for (b, o) in data.chunks_exact(TQ1_BYTES).zip(out.chunks_exact_mut(256)) {
        let d = f16_at(b, 52);
        tq1_values(b, &mut t);
        for (oj, &tj) in o.iter_mut().zip(&t) {
            *oj = d * tj as f32;
        }
    }
}

fn ternarize(x: &[f32]) -> (f32, [u8; 256]) {
    let d = amax(x);
    let id = if d == 0.0 { 0.0 } else { 1.0 / d };
    let mut q = [0u8; 256];
    for (qj, &v) in q.iter_mut().zip(x) {
        *qj = (roundf(v * id) as i8 + 1) as u8;
    }
    (d, q)
}

/// Packs base-3 digits (most significant first) into a byte, rounding up as gguf-py does.
fn pack3(digits: impl Iterator<Item = (u8, u8)>) -> u8 {
    let v: u16 = digits.map(|(q, p)| q as u16 * p as u16).sum();
    (v * 256).div_ceil(243) as u8
}

/// f32 to TQ1_0 blocks (gguf-py `TQ1_0.quantize_blocks`).
pub(crate) fn quant_tq1_0(src: &[f32], out: &mut [u8]) {
    const P: [u8; 5] = [81, 27, 9, 3, 1];
    for (x, b) in src.chunks_exact(256).zip(out.chunks_exact_mut(TQ1_BYTES)) {
        let (d, q) = ternarize(x);
        for j in 0..32 {
            b[j] = pack3((0..5).map(|k| (q[k * 32 + j], P[k])));
        }
        for j in 0..16 {
            b[32 + j] = pack3((0..5).map(|k| (q[160 + k * 16 + j], P[k])));
        }
        for j in 0..4 {
            b[48 + j] = pack3((0..4).map(|k| (q[240 + k * 4 + j], P[k])));
        }
        put_f16(b, 52, d);
    }
}

/// TQ2_0 blocks to f32: `d * (q - 1)`.
pub(crate) fn dequant_tq2_0(data: &[u8], _s: &[u8], out: &mut [f32]) {
    for (b, o) in data.chunks_exact(TQ2_BYTES).zip(out.chunks_exact_mut(256)) {
        let d = f16_at(b, 64);
        for (e, oe) in o.iter_mut().enumerate() {
            let (g, s, j) = (e / 128, (e / 32) % 4, e % 32);
            let q = ((b[g * 32 + j] >> (2 * s)) & 3) as i32 - 1;
            *oe = d * q as f32;
        }
    }
}

/// f32 to TQ2_0 blocks (gguf-py `TQ2_0.quantize_blocks`).
pub(crate) fn quant_tq2_0(src: &[f32], out: &mut [u8]) {
    for (x, b) in src.chunks_exact(256).zip(out.chunks_exact_mut(TQ2_BYTES)) {
        let (d, q) = ternarize(x);
        for g in 0..2 {
            for j in 0..32 {
                let mut v = 0u8;
                for s in 0..4 {
                    v |= q[g * 128 + s * 32 + j] << (2 * s);
                }
                b[g * 32 + j] = v;
            }
        }
        put_f16(b, 64, d);
    }
}
