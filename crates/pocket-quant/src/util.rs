//! Small byte helpers shared by the codecs.

use half::f16;

/// Reads a little-endian f16 at byte offset `i` as f32.
#[inline(always)]
pub(crate) fn f16_at(b: &[u8], i: usize) -> f32 {
    f16::from_bits(u16::from_le_bytes([b[i], b[i + 1]])).to_f32()
}

/// Writes `v` rounded to f16 (nearest even) at byte offset `i`.
#[inline(always)]
pub(crate) fn put_f16(b: &mut [u8], i: usize, v: f32) {
    b[i..i + 2].copy_from_slice(&f16::from_f32(v).to_bits().to_le_bytes());
}

/// Reads a little-endian u16 at byte offset `i`.
#[inline(always)]
pub(crate) fn u16_at(b: &[u8], i: usize) -> u16 {
    u16::from_le_bytes([b[i], b[i + 1]])
}

/// Reads a little-endian u32 at byte offset `i`.
#[inline(always)]
pub(crate) fn u32_at(b: &[u8], i: usize) -> u32 {
    u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]])
}

/// Reads a little-endian f32 at byte offset `i`.
#[inline(always)]
pub(crate) fn f32_at(b: &[u8], i: usize) -> f32 {
    f32::from_bits(u32_at(b, i))
}

/// Round half away from zero, as C `roundf` and gguf-py's `np_roundf`.
#[inline(always)]
pub(crate) fn roundf(v: f32) -> f32 {
    v.round()
}

/// Index of the first element with the largest magnitude (numpy `abs(x).argmax()`).
pub(crate) fn argmax_abs(x: &[f32]) -> usize {
    let mut best = 0;
    let mut bv = f32::NEG_INFINITY;
    for (i, v) in x.iter().enumerate() {
        let a = v.abs();
        if a > bv || (a.is_nan() && !bv.is_nan()) {
            bv = a;
            best = i;
            if a.is_nan() {
                break;
            }
        }
    }
    best
}

/// Largest magnitude of `x` (0 for an empty slice).
pub(crate) fn amax(x: &[f32]) -> f32 {
    x.iter().fold(0.0f32, |m, v| m.max(v.abs()))
}
