//! The legacy 32-element block formats: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1.
//!
//! Layouts and the quantizers follow gguf-py 0.19.0 (`gguf/quants.py`), which is bit-exact with
//! ggml's reference quantizers; Q8_1 (absent from gguf-py) follows ggml's `quantize_row_q8_1_ref`.

use crate::util::{amax, argmax_abs, f16_at, put_f16, roundf, u32_at};

/// Elements per legacy block.
pub(crate) const QK: usize = 32;

/// Q4_0 blocks to f32: `d * (q - 8)`.
pub(crate) fn dequant_q4_0(data: &[u8], _s: &[u8], out: &mut [f32]) {
    for (b, o) in data.chunks_exact(18).zip(out.chunks_exact_mut(QK)) {
        let d = f16_at(b, 0);
        for j in 0..16 {
            let q = b[2 + j];
            o[j] = d * ((q & 0xf) as i32 - 8) as f32;
            o[j + 16] = d * ((q >> 4) as i32 - 8) as f32;
        }
    }
}

/// f32 to Q4_0 blocks (gguf-py `Q4_0.quantize_blocks`).
pub(crate) fn quant_q4_0(src: &[f32], out: &mut [u8]) {
    for (x, b) in src.chunks_exact(QK).zip(out.chunks_exact_mut(18)) {
        let max = x[argmax_abs(x)];
        let d = max / -8.0;
        let id = if d == 0.0 { 0.0 } else { 1.0 / d };
        let q = |v: f32| ((v * id + 8.5).trunc() as u8).min(15);
        put_f16(b, 0, d);
        for j in 0..16 {
            b[2 + j] = q(x[j]) | (q(x[j + 16]) << 4);
        }
    }
}

/// Q4_1 blocks to f32: `d * q + m`.
pub(crate) fn dequant_q4_1(data: &[u8], _s: &[u8], out: &mut [f32]) {
    for (b, o) in data.chunks_exact(20).zip(out.chunks_exact_mut(QK)) {
        let d = f16_at(b, 0);
        let m = f16_at(b, 2);
        for j in 0..16 {
            let q = b[4 + j];
            o[j] = d * (q & 0xf) as f32 + m;
            o[j + 16] = d * (q >> 4) as f32 + m;
        }
    }
}

fn min_max(x: &[f32]) -> (f32, f32) {
    let mut mn = x[0];
    let mut mx = x[0];
    for &v in x {
        mn = mn.min(v);
        mx = mx.max(v);
    }
    (mn, mx)
}

/// f32 to Q4_1 blocks (gguf-py `Q4_1.quantize_blocks`).
pub(crate) fn quant_q4_1(src: &[f32], out: &mut [u8]) {
    for (x, b) in src.chunks_exact(QK).zip(out.chunks_exact_mut(20)) {
        let (mn, mx) = min_max(x);
        let d = (mx - mn) / 15.0;
        let id = if d == 0.0 { 0.0 } else { 1.0 / d };
        let q = |v: f32| (((v - mn) * id + 0.5).trunc() as u8).min(15);
        put_f16(b, 0, d);
        put_f16(b, 2, mn);
        for j in 0..16 {
            b[4 + j] = q(x[j]) | (q(x[j + 16]) << 4);
        }
    }
}

/// Q5_0 blocks to f32: `d * (q - 16)`.
pub(crate) fn dequant_q5_0(data: &[u8], _s: &[u8], out: &mut [f32]) {
    for (b, o) in data.chunks_exact(22).zip(out.chunks_exact_mut(QK)) {
        let d = f16_at(b, 0);
        let qh = u32_at(b, 2);
        for j in 0..16 {
            let q = b[6 + j];
            let h0 = ((qh >> j) & 1) << 4;
            let h1 = ((qh >> (j + 16)) & 1) << 4;
            o[j] = d * (((q & 0xf) as u32 | h0) as i32 - 16) as f32;
            o[j + 16] = d * (((q >> 4) as u32 | h1) as i32 - 16) as f32;
        }
    }
}

fn pack5(q: &[u8; QK], b: &mut [u8]) {
    let mut qh = 0u32;
    for (j, &v) in q.iter().enumerate() {
        qh |= ((v >> 4) as u32 & 1) << j;
    }
    b[..4].copy_from_slice(&qh.to_le_bytes());
    for j in 0..16 {
        b[4 + j] = (q[j] & 0xf) | (q[j + 16] << 4);
    }
}

/// f32 to Q5_0 blocks (gguf-py `Q5_0.quantize_blocks`).
pub(crate) fn quant_q5_0(src: &[f32], out: &mut [u8]) {
    for (x, b) in src.chunks_exact(QK).zip(out.chunks_exact_mut(22)) {
        let max = x[argmax_abs(x)];
        let d = max / -16.0;
        let id = if d == 0.0 { 0.0 } else { 1.0 / d };
        let mut q = [0u8; QK];
        for (qj, &v) in q.iter_mut().zip(x) {
            *qj = ((v * id + 16.5).trunc() as u8).min(31);
        }
        put_f16(b, 0, d);
        pack5(&q, &mut b[2..]);
    }
}

/// Q5_1 blocks to f32: `d * q + m`.
pub(crate) fn dequant_q5_1(data: &[u8], _s: &[u8], out: &mut [f32]) {
    for (b, o) in data.chunks_exact(24).zip(out.chunks_exact_mut(QK)) {
        let d = f16_at(b, 0);
        let m = f16_at(b, 2);
        let qh = u32_at(b, 4);
        for j in 0..16 {
            let q = b[8 + j];
            let h0 = ((qh >> j) & 1) << 4;
            let h1 = ((qh >> (j + 16)) & 1) << 4;
            o[j] = d * ((q & 0xf) as u32 | h0) as f32 + m;
            o[j + 16] = d * ((q >> 4) as u32 | h1) as f32 + m;
        }
    }
}

/// f32 to Q5_1 blocks (gguf-py `Q5_1.quantize_blocks`).
pub(crate) fn quant_q5_1(src: &[f32], out: &mut [u8]) {
    for (x, b) in src.chunks_exact(QK).zip(out.chunks_exact_mut(24)) {
        let (mn, mx) = min_max(x);
        let d = (mx - mn) / 31.0;
        let id = if d == 0.0 { 0.0 } else { 1.0 / d };
        let mut q = [0u8; QK];
        for (qj, &v) in q.iter_mut().zip(x) {
            *qj = (((v - mn) * id + 0.5).trunc() as u8).min(31);
        }
        put_f16(b, 0, d);
        put_f16(b, 2, mn);
        pack5(&q, &mut b[4..]);
    }
}

/// Q8_0 blocks to f32: `q * d`.
pub(crate) fn dequant_q8_0(data: &[u8], _s: &[u8], out: &mut [f32]) {
    for (b, o) in data.chunks_exact(34).zip(out.chunks_exact_mut(QK)) {
        let d = f16_at(b, 0);
        for j in 0..QK {
            o[j] = (b[2 + j] as i8) as f32 * d;
        }
    }
}

/// f32 to Q8_0 blocks (gguf-py `Q8_0.quantize_blocks`, bit-exact with ggml).
pub(crate) fn quant_q8_0(src: &[f32], out: &mut [u8]) {
    for (x, b) in src.chunks_exact(QK).zip(out.chunks_exact_mut(34)) {
        let d = amax(x) / 127.0;
        let id = if d == 0.0 { 0.0 } else { 1.0 / d };
        put_f16(b, 0, d);
        for j in 0..QK {
            b[2 + j] = roundf(x[j] * id) as i8 as u8;
        }
    }
}

/// Q8_1 blocks to f32: `q * d` (the stored sum `s` is only used by dot products).
pub(crate) fn dequant_q8_1(data: &[u8], _s: &[u8], out: &mut [f32]) {
    for (b, o) in data.chunks_exact(36).zip(out.chunks_exact_mut(QK)) {
        let d = f16_at(b, 0);
        for j in 0..QK {
            o[j] = (b[4 + j] as i8) as f32 * d;
        }
    }
}

/// f32 to Q8_1 blocks (ggml `quantize_row_q8_1_ref`: `s = d * sum(q)`).
pub(crate) fn quant_q8_1(src: &[f32], out: &mut [u8]) {
    for (x, b) in src.chunks_exact(QK).zip(out.chunks_exact_mut(36)) {
        let d = amax(x) / 127.0;
        let id = if d == 0.0 { 0.0 } else { 1.0 / d };
        let mut sum = 0i32;
        for j in 0..QK {
            let q = roundf(x[j] * id) as i8;
            sum += q as i32;
            b[4 + j] = q as u8;
        }
        put_f16(b, 0, d);
        put_f16(b, 2, sum as f32 * d);
    }
}
