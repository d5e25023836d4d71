//! The non-linear 4-bit formats IQ4_NL (32-element blocks) and IQ4_XS (256-element super-blocks).
//!
//! Layouts and the codebook follow gguf-py 0.19.0 (`IQ4_NL.kvalues`); dequantization is f32-exact.

use crate::util::{f16_at, u16_at};

/// The IQ4_NL/IQ4_XS codebook (`kvalues_iq4nl` in ggml, `IQ4_NL.kvalues` in gguf-py 0.19.0).
pub(crate) const KVALUES_IQ4NL: [i8; 16] = [
    -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113,
];

/// IQ4_NL block bytes: d, qs[16].
pub(crate) const IQ4NL_BYTES: usize = 18;
/// IQ4_XS block bytes: d, scales_h (u16), scales_l[4], qs[128].
pub(crate) const IQ4XS_BYTES: usize = 136;

/// IQ4_NL blocks to f32: `d * kvalues[q]`.
pub(crate) fn dequant_iq4_nl(data: &[u8], _s: &[u8], out: &mut [f32]) {
    for (b, o) in data.chunks_exact(IQ4NL_BYTES).zip(out.chunks_exact_mut(32)) {
        let d = f16_at(b, 0);
        for j in 0..16 {
            let q = b[2 + j];
            o[j] = d * KVALUES_IQ4NL[(q & 0xf) as usize] as f32;
            o[j + 16] = d * KVALUES_IQ4NL[(q >> 4) as usize] as f32;
        }
    }
}

/// The eight signed 6-bit sub-block scales of an IQ4_XS block.
#[inline(always)]
pub(crate) fn iq4xs_scales(b: &[u8]) -> [i32; 8] {
    let sh = u16_at(b, 2);
    let mut out = [0i32; 8];
    for (ib, o) in out.iter_mut().enumerate() {
        let lo = (b[4 + ib / 2] >> (4 * (ib % 2))) & 0xf;
        let hi = ((sh >> (2 * ib)) & 3) as u8;
        *o = (lo | (hi << 4)) as i32 - 32;
    }
    out
}

/// IQ4_XS blocks to f32: `(d * scale) * kvalues[q]` per 32 elements.
pub(crate) fn dequant_iq4_xs(data: &[u8], _s: &[u8], out: &mut [f32]) {
    for (b, o) in data
        .chunks_exact(IQ4XS_BYTES)
        .zip(out.chunks_exact_mut(256))
    {
        let d = f16_at(b, 0);
        let scales = iq4xs_scales(b);
        let qs = &b[8..];
        for ib in 0..8 {
            let dl = d * scales[ib] as f32;
            for j in 0..16 {
                let q = qs[ib * 16 + j];
                o[ib * 32 + j] = dl * KVALUES_IQ4NL[(q & 0xf) as usize] as f32;
                o[ib * 32 + j + 16] = dl * KVALUES_IQ4NL[(q >> 4) as usize] as f32;
            }
        }
    }
}
