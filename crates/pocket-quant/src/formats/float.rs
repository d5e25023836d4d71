//! Plain element types: F32, F16, BF16 (quantizable) and the integer/F64 types (decode only).

use half::f16;

/// F32 little-endian bytes to f32.
pub(crate) fn dequant_f32(data: &[u8], _s: &[u8], out: &mut [f32]) {
    for (o, c) in out.iter_mut().zip(data.chunks_exact(4)) {
        *o = f32::from_le_bytes([c[0], c[1], c[2], c[3]]);
    }
}

/// f32 to F32 bytes.
pub(crate) fn quant_f32(src: &[f32], out: &mut [u8]) {
    for (c, v) in out.chunks_exact_mut(4).zip(src) {
        c.copy_from_slice(&v.to_le_bytes());
    }
}

/// F16 bytes to f32 (exact).
pub(crate) fn dequant_f16(data: &[u8], _s: &[u8], out: &mut [f32]) {
    for (o, c) in out.iter_mut().zip(data.chunks_exact(2)) {
        *o = f16::from_le_bytes([c[0], c[1]]).to_f32();
    }
}

/// f32 to F16 bytes, round to nearest even (numpy `astype(float16)`).
pub(crate) fn quant_f16(src: &[f32], out: &mut [u8]) {
    for (c, v) in out.chunks_exact_mut(2).zip(src) {
        c.copy_from_slice(&f16::from_f32(*v).to_le_bytes());
    }
}

/// BF16 bytes to f32 (exact: the bits shifted up).
pub(crate) fn dequant_bf16(data: &[u8], _s: &[u8], out: &mut [f32]) {
    for (o, c) in out.iter_mut().zip(data.chunks_exact(2)) {
        *o = f32::from_bits((u16::from_le_bytes([c[0], c[1]]) as u32) << 16);
    }
}

/// One f32 to BF16 bits as ggml/gguf-py do it: NaN forced quiet, then round to nearest even.
pub(crate) fn f32_to_bf16_bits(v: f32) -> u16 {
    let mut n = v.to_bits();
    if n & 0x7fff_ffff > 0x7f80_0000 {
        n = (n & 0xffff_0000) | (64 << 16);
    }
    ((n as u64 + 0x7fff + ((n >> 16) & 1) as u64) >> 16) as u16
}

/// f32 to BF16 bytes.
pub(crate) fn quant_bf16(src: &[f32], out: &mut [u8]) {
    for (c, v) in out.chunks_exact_mut(2).zip(src) {
        c.copy_from_slice(&f32_to_bf16_bits(*v).to_le_bytes());
    }
}

/// F64 bytes to f32 (rounded).
pub(crate) fn dequant_f64(data: &[u8], _s: &[u8], out: &mut [f32]) {
    for (o, c) in out.iter_mut().zip(data.chunks_exact(8)) {
        let mut b = [0u8; 8];
        b.copy_from_slice(c);
        *o = f64::from_le_bytes(b) as f32;
    }
}

/// I8 bytes to f32.
pub(crate) fn dequant_i8(data: &[u8], _s: &[u8], out: &mut [f32]) {
    for (o, &b) in out.iter_mut().zip(data) {
        *o = b as i8 as f32;
    }
}

/// I16 bytes to f32.
pub(crate) fn dequant_i16(data: &[u8], _s: &[u8], out: &mut [f32]) {
    for (o, c) in out.iter_mut().zip(data.chunks_exact(2)) {
        *o = i16::from_le_bytes([c[0], c[1]]) as f32;
    }
}

/// I32 bytes to f32 (rounded).
pub(crate) fn dequant_i32(data: &[u8], _s: &[u8], out: &mut [f32]) {
    for (o, c) in out.iter_mut().zip(data.chunks_exact(4)) {
        *o = i32::from_le_bytes([c[0], c[1], c[2], c[3]]) as f32;
    }
}

/// I64 bytes to f32 (rounded).
pub(crate) fn dequant_i64(data: &[u8], _s: &[u8], out: &mut [f32]) {
    for (o, c) in out.iter_mut().zip(data.chunks_exact(8)) {
        let mut b = [0u8; 8];
        b.copy_from_slice(c);
        *o = i64::from_le_bytes(b) as f32;
    }
}
