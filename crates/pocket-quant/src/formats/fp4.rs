//! FP4 (E2M1) formats: MXFP4 and NVFP4, in their GGUF layouts (gguf-py 0.19.0) and their
//! safetensors layouts (`_blocks`/`_scales` for MXFP4 as in gpt-oss; ModelOpt's packed weight,
//! `weight_scale` (E4M3 per 16) and `weight_scale_2` (f32 tensor scale) for NVFP4).
//!
//! Values use gguf-py's convention: the E2M1 code maps to twice its value (`KVALUES_FP4`) and the
//! block scale decoders return half the scale, so products are exact small integers times powers
//! of two. GGUF layouts put the low nibbles first (elements 0..n/2) and the high nibbles after;
//! safetensors layouts interleave (element 2i in the low nibble of byte i, 2i+1 in the high one).

use crate::act::BlockQ8;
use crate::formats::fp8::e4m3_to_f32;
use crate::util::amax;

/// E2M1 code to twice its value (gguf-py `MXFP4.kvalues`).
pub(crate) const KVALUES_FP4: [i8; 16] = [0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12];

/// E8M0 scale to half its value (ggml `ggml_e8m0_to_fp32_half`, gguf-py `e8m0_to_fp32_half`).
#[inline(always)]
pub(crate) fn e8m0_half(e: u8) -> f32 {
    let bits = if e < 2 {
        0x0020_0000u32 << e
    } else {
        ((e as u32) - 1) << 23
    };
    f32::from_bits(bits)
}

/// Unsigned E4M3 (bias 7; bit 7 ignored; 0 and 0x7F decode to 0) to half its value
/// (gguf-py `NVFP4.ue4m3_to_fp32`).
#[inline(always)]
pub(crate) const fn ue4m3_half(x: u8) -> f32 {
    if x == 0 || x == 0x7f {
        return 0.0;
    }
    let exp = ((x >> 3) & 0xf) as i32;
    let man = (x & 7) as f32;
    let raw = if exp == 0 {
        man * (1.0 / 512.0)
    } else {
        (1.0 + man / 8.0) * f32::from_bits(((exp - 7 + 127) as u32) << 23)
    };
    raw * 0.5
}

/// [`ue4m3_half`] of every byte, for kernels that decode scales per 16 elements.
pub(crate) static UE4M3_HALF: [f32; 256] = {
    let mut t = [0.0f32; 256];
    let mut i = 0;
    while i < 256 {
        t[i] = ue4m3_half(i as u8);
        i += 1;
    }
    t
};

/// MXFP4 (GGUF) block bytes: e, qs[16].
pub(crate) const MXFP4_BYTES: usize = 17;
/// NVFP4 (GGUF) block bytes: 4 UE4M3 scales, qs[32].
pub(crate) const NVFP4_BYTES: usize = 36;

/// MXFP4 (GGUF) blocks to f32: `e8m0_half(e) * kvalue`.
pub(crate) fn dequant_mxfp4(data: &[u8], _s: &[u8], out: &mut [f32]) {
    for (b, o) in data.chunks_exact(MXFP4_BYTES).zip(out.chunks_exact_mut(32)) {
        let d = e8m0_half(b[0]);
        for j in 0..16 {
            o[j] = d * KVALUES_FP4[(b[1 + j] & 0xf) as usize] as f32;
            o[j + 16] = d * KVALUES_FP4[(b[1 + j] >> 4) as usize] as f32;
        }
    }
}

/// Index of the code whose value `d * kvalue` is nearest `v` (first on ties, as numpy argmin).
#[inline(always)]
fn nearest_fp4(d: f32, v: f32) -> u8 {
    let mut best = 0u8;
    let mut be = f32::INFINITY;
    for (i, &k) in KVALUES_FP4.iter().enumerate() {
        let e = (d * k as f32 - v).abs();
        if e < be {
            be = e;
            best = i as u8;
        }
    }
    best
}

/// The E8M0 exponent gguf-py picks for a block whose largest magnitude is `amax`.
fn mxfp4_exponent(amax: f32) -> u8 {
    if amax > 0.0 {
        (amax.log2().floor() - 2.0 + 127.0) as u8
    } else {
        0
    }
}

/// f32 to MXFP4 (GGUF) blocks (gguf-py `MXFP4.quantize_blocks`).
pub(crate) fn quant_mxfp4(src: &[f32], out: &mut [u8]) {
    for (x, b) in src.chunks_exact(32).zip(out.chunks_exact_mut(MXFP4_BYTES)) {
        let e = mxfp4_exponent(amax(x));
        let d = e8m0_half(e);
        b[0] = e;
        for j in 0..16 {
            b[1 + j] = nearest_fp4(d, x[j]) | (nearest_fp4(d, x[j + 16]) << 4);
        }
    }
}

/// NVFP4 (GGUF) blocks to f32: four 16-element sub-blocks, `ue4m3_half(s) * kvalue`.
pub(crate) fn dequant_nvfp4(data: &[u8], _s: &[u8], out: &mut [f32]) {
    for (b, o) in data.chunks_exact(NVFP4_BYTES).zip(out.chunks_exact_mut(64)) {
        for sb in 0..4 {
            let d = ue4m3_half(b[sb]);
            for j in 0..8 {
                let q = b[4 + sb * 8 + j];
                o[sb * 16 + j] = d * KVALUES_FP4[(q & 0xf) as usize] as f32;
                o[sb * 16 + 8 + j] = d * KVALUES_FP4[(q >> 4) as usize] as f32;
            }
        }
    }
}

/// f32 to unsigned E4M3, as gguf-py's `NVFP4.fp32_to_ue4m3` (ggml `ggml_fp32_to_ue4m3`).
pub(crate) fn f32_to_ue4m3(x: f32) -> u8 {
    let x = x.clamp(0.0, 448.0);
    if x.is_nan() || x <= 0.0 {
        return 0;
    }
    let bits = x.to_bits();
    let e = ((bits >> 23) & 0xff) as i32 - 127 + 7;
    if e <= 0 {
        let m = ((x * 512.0 + 0.5) as i32).clamp(0, 7);
        return m as u8;
    }
    if e >= 15 {
        return 0x7e;
    }
    let mut man = ((bits >> 20) & 7) as i32 + ((bits >> 19) & 1) as i32;
    let mut e = e;
    if man > 7 {
        man = 0;
        e += 1;
    }
    if e >= 15 {
        0x7e
    } else {
        ((e << 3) | man) as u8
    }
}

/// f32 to NVFP4 (GGUF) blocks: per 16 elements the scale `amax / 6` rounded to UE4M3, then the
/// nearest E2M1 code. gguf-py 0.19.0 has no NVFP4 quantizer; this is ours (round-trip tested).
pub(crate) fn quant_nvfp4(src: &[f32], out: &mut [u8]) {
    for (x, b) in src.chunks_exact(64).zip(out.chunks_exact_mut(NVFP4_BYTES)) {
        for sb in 0..4 {
            let xs = &x[sb * 16..sb * 16 + 16];
            let s = f32_to_ue4m3(amax(xs) / 6.0);
            let d = ue4m3_half(s);
            b[sb] = s;
            for j in 0..8 {
                b[4 + sb * 8 + j] = nearest_fp4(d, xs[j]) | (nearest_fp4(d, xs[8 + j]) << 4);
            }
        }
    }
}

/// Safetensors MXFP4 row (`_blocks`, interleaved nibbles) with its E8M0 `_scales` to f32.
pub(crate) fn dequant_mxfp4_st(data: &[u8], scales: &[u8], out: &mut [f32]) {
    for ((b, &e), o) in data
        .chunks_exact(16)
        .zip(scales)
        .zip(out.chunks_exact_mut(32))
    {
        let d = e8m0_half(e);
        for j in 0..16 {
            o[2 * j] = d * KVALUES_FP4[(b[j] & 0xf) as usize] as f32;
            o[2 * j + 1] = d * KVALUES_FP4[(b[j] >> 4) as usize] as f32;
        }
    }
}

/// Safetensors NVFP4 row (interleaved nibbles) with its E4M3 scales per 16 to f32 (tensor scale
/// applied by the caller).
pub(crate) fn dequant_nvfp4_st(data: &[u8], scales: &[u8], out: &mut [f32]) {
    for ((b, &s), o) in data
        .chunks_exact(8)
        .zip(scales)
        .zip(out.chunks_exact_mut(16))
    {
        let d = e4m3_to_f32(s) * 0.5;
        for j in 0..8 {
            o[2 * j] = d * KVALUES_FP4[(b[j] & 0xf) as usize] as f32;
            o[2 * j + 1] = d * KVALUES_FP4[(b[j] >> 4) as usize] as f32;
        }
    }
}

/// Interleaved 16 nibbles (8 bytes) · 16 int8.
#[inline(always)]
fn il_dot(b: &[u8], y: &[i8]) -> i32 {
    let mut s = 0i32;
    for j in 0..8 {
        s += KVALUES_FP4[(b[j] & 0xf) as usize] as i32 * y[2 * j] as i32;
        s += KVALUES_FP4[(b[j] >> 4) as usize] as i32 * y[2 * j + 1] as i32;
    }
    s
}

/// Safetensors MXFP4 row · Q8.
pub(crate) fn dot_mxfp4_st(w: &[u8], scales: &[u8], x: &[BlockQ8]) -> f32 {
    w.chunks_exact(16)
        .zip(scales)
        .zip(x)
        .map(|((b, &e), y)| {
            e8m0_half(e)
                * y.d
                * (il_dot(&b[..8], &y.qs[..16]) + il_dot(&b[8..], &y.qs[16..])) as f32
        })
        .sum()
}

/// Safetensors NVFP4 row · Q8 (two 16-element sub-blocks per activation block).
pub(crate) fn dot_nvfp4_st(w: &[u8], scales: &[u8], x: &[BlockQ8]) -> f32 {
    let mut acc = 0.0f32;
    for ((b, s), y) in w.chunks_exact(16).zip(scales.chunks_exact(2)).zip(x) {
        let lo = e4m3_to_f32(s[0]) * il_dot(&b[..8], &y.qs[..16]) as f32;
        let hi = e4m3_to_f32(s[1]) * il_dot(&b[8..], &y.qs[16..]) as f32;
        acc += 0.5 * y.d * (lo + hi);
    }
    acc
}

/// f32 to a safetensors MXFP4 row: returns (blocks, scales) with gguf-py's MXFP4 rule per 32.
pub(crate) fn quant_mxfp4_st(src: &[f32], blocks: &mut [u8], scales: &mut [u8]) {
    for ((x, b), s) in src
        .chunks_exact(32)
        .zip(blocks.chunks_exact_mut(16))
        .zip(scales)
    {
        let e = mxfp4_exponent(amax(x));
        let d = e8m0_half(e);
        *s = e;
        for j in 0..16 {
            b[j] = nearest_fp4(d, x[2 * j]) | (nearest_fp4(d, x[2 * j + 1]) << 4);
        }
    }
}

/// f32 to a safetensors NVFP4 row: per 16 the scale `amax / 6 / tensor_scale` as E4M3.
pub(crate) fn quant_nvfp4_st(src: &[f32], tensor_scale: f32, blocks: &mut [u8], scales: &mut [u8]) {
    let inv = if tensor_scale == 0.0 {
        0.0
    } else {
        1.0 / tensor_scale
    };
    for ((x, b), s) in src
        .chunks_exact(16)
        .zip(blocks.chunks_exact_mut(8))
        .zip(scales)
    {
        let code = crate::formats::fp8::f32_to_e4m3(amax(x) / 6.0 * inv);
        *s = code;
        let d = e4m3_to_f32(code) * 0.5 * tensor_scale;
        for j in 0..8 {
            b[j] = nearest_fp4(d, x[2 * j]) | (nearest_fp4(d, x[2 * j + 1]) << 4);
        }
    }
}
