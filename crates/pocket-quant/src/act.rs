//! Quantized activations: the in-memory blocks that weight rows are dotted against.
//!
//! These are working buffers, not file formats, so the scales are kept as f32 (more precise and
//! cheaper to use than ggml's f16 scales).

use crate::formats::kquants::{q8k_block, QK_K};

/// 32 activations as int8 with an f32 scale and the scaled sum (pairs with the 32-element formats).
#[derive(Clone, Copy, Debug)]
#[repr(C, align(8))]
pub struct BlockQ8 {
    /// Scale: value = d * q.
    pub d: f32,
    /// d * sum(qs), for formats with a minimum (Q4_1, Q5_1).
    pub s: f32,
    /// Quantized values.
    pub qs: [i8; 32],
}

/// 256 activations as int8 with an f32 scale and per-16 sums (pairs with K and IQ formats).
#[derive(Clone, Copy, Debug)]
#[repr(C, align(32))]
pub struct BlockQ8K {
    /// Quantized values.
    pub qs: [i8; QK_K],
    /// Scale: value = d * q.
    pub d: f32,
    /// Sums of each 16 consecutive qs.
    pub bsums: [i16; 16],
}

/// Quantizes `x` (a multiple of 32 long) to [`BlockQ8`] blocks, round half away from zero.
pub fn quantize_act_q8(x: &[f32], out: &mut Vec<BlockQ8>) {
    out.clear();
    out.extend(x.chunks_exact(32).map(|c| {
        let amax = c.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        let d = amax / 127.0;
        let id = if d == 0.0 { 0.0 } else { 1.0 / d };
        let mut qs = [0i8; 32];
        let mut sum = 0i32;
        for (q, &v) in qs.iter_mut().zip(c) {
            *q = (v * id).round() as i8;
            sum += *q as i32;
        }
        BlockQ8 {
            d,
            s: d * sum as f32,
            qs,
        }
    }));
}

/// Quantizes `x` (a multiple of 256 long) to [`BlockQ8K`] blocks, as ggml's `quantize_row_q8_K`.
pub fn quantize_act_q8k(x: &[f32], out: &mut Vec<BlockQ8K>) {
    out.clear();
    out.extend(x.chunks_exact(QK_K).map(|c| {
        let (d, qs, bsums) = q8k_block(c);
        BlockQ8K { qs, d, bsums }
    }));
}
