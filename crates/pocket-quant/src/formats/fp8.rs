//! FP8 formats: E4M3 ("fn": no infinities, NaN = S.1111.111) and E5M2 (IEEE-like), each with a
//! per-tensor scale (applied by the caller from `QuantMatrix::tensor_scale`) or with f32 scales per
//! 128x128 tile (`weight_scale_inv` of DeepSeek-V3 style checkpoints; value = fp8 * scale).
//!
//! Decoding is exact (a 256-entry table). Encoding rounds to nearest even and saturates finite
//! values to the largest finite code (448 for E4M3, 57344 for E5M2); NaN stays NaN.

const fn pow2(e: i32) -> f32 {
    f32::from_bits(((e + 127) as u32) << 23)
}

const fn minifloat(code: u8, ebits: u32, mbits: u32, bias: i32, fn_nan: bool) -> f32 {
    let sign = if code & 0x80 != 0 { -1.0 } else { 1.0 };
    let e = ((code as u32 >> mbits) & ((1 << ebits) - 1)) as i32;
    let m = (code as u32 & ((1 << mbits) - 1)) as f32;
    let emax = (1 << ebits) - 1;
    if fn_nan && e == emax && m as u32 == (1 << mbits) - 1 {
        return f32::NAN;
    }
    if !fn_nan && e == emax {
        return if m as u32 == 0 {
            sign * f32::INFINITY
        } else {
            f32::NAN
        };
    }
    let scale = (1 << mbits) as f32;
    if e == 0 {
        sign * m / scale * pow2(1 - bias)
    } else {
        sign * (1.0 + m / scale) * pow2(e - bias)
    }
}

const fn table(ebits: u32, mbits: u32, bias: i32, fn_nan: bool) -> [f32; 256] {
    let mut t = [0.0f32; 256];
    let mut i = 0;
    while i < 256 {
        t[i] = minifloat(i as u8, ebits, mbits, bias, fn_nan);
        i += 1;
    }
    t
}

/// E4M3 code to f32.
pub(crate) static E4M3_LUT: [f32; 256] = table(4, 3, 7, true);
/// E5M2 code to f32.
pub(crate) static E5M2_LUT: [f32; 256] = table(5, 2, 15, false);

/// One E4M3 code to f32.
#[inline(always)]
pub(crate) fn e4m3_to_f32(c: u8) -> f32 {
    E4M3_LUT[c as usize]
}

/// Rounds |x| to a minifloat code (sign handled by the caller), nearest even, saturating.
fn encode_mag(a: f32, mbits: u32, bias: i32, max_code: u32) -> u32 {
    let fe = ((a.to_bits() >> 23) & 0xff) as i32 - 127;
    let min_normal_e = 1 - bias;
    let code = if fe < min_normal_e {
        (a / pow2(min_normal_e - mbits as i32)).round_ties_even() as u32
    } else {
        let m = (a / pow2(fe - mbits as i32)).round_ties_even() as u32;
        (((fe + bias) as u32) << mbits) + (m - (1 << mbits))
    };
    code.min(max_code)
}

/// f32 to E4M3 (nearest even, saturating to ±448, NaN to 0x7F).
pub(crate) fn f32_to_e4m3(x: f32) -> u8 {
    let s = if x.is_sign_negative() { 0x80 } else { 0 };
    if x.is_nan() {
        return 0x7f;
    }
    let a = x.abs();
    if a >= 448.0 {
        return s | 0x7e;
    }
    s | encode_mag(a, 3, 7, 0x7e) as u8
}

/// f32 to E5M2 (nearest even, saturating finite values to ±57344, ±inf kept, NaN to 0x7E).
pub(crate) fn f32_to_e5m2(x: f32) -> u8 {
    let s = if x.is_sign_negative() { 0x80 } else { 0 };
    if x.is_nan() {
        return 0x7e;
    }
    if x.is_infinite() {
        return s | 0x7c;
    }
    let a = x.abs();
    if a >= 57344.0 {
        return s | 0x7b;
    }
    s | encode_mag(a, 2, 15, 0x7b) as u8
}

/// E4M3 codes to f32 (unscaled).
pub(crate) fn dequant_e4m3(data: &[u8], _s: &[u8], out: &mut [f32]) {
    for (o, &c) in out.iter_mut().zip(data) {
        *o = E4M3_LUT[c as usize];
    }
}

/// E5M2 codes to f32 (unscaled).
pub(crate) fn dequant_e5m2(data: &[u8], _s: &[u8], out: &mut [f32]) {
    for (o, &c) in out.iter_mut().zip(data) {
        *o = E5M2_LUT[c as usize];
    }
}

/// f32 to E4M3 codes (scale 1).
pub(crate) fn quant_e4m3(src: &[f32], out: &mut [u8]) {
    for (o, &v) in out.iter_mut().zip(src) {
        *o = f32_to_e4m3(v);
    }
}

/// f32 to E5M2 codes (scale 1).
pub(crate) fn quant_e5m2(src: &[f32], out: &mut [u8]) {
    for (o, &v) in out.iter_mut().zip(src) {
        *o = f32_to_e5m2(v);
    }
}

fn tiles(lut: &[f32; 256], data: &[u8], scales: &[u8], out: &mut [f32]) {
    for ((d, o), s) in data
        .chunks(128)
        .zip(out.chunks_mut(128))
        .zip(scales.chunks_exact(4))
    {
        let s = f32::from_le_bytes([s[0], s[1], s[2], s[3]]);
        for (oj, &c) in o.iter_mut().zip(d) {
            *oj = lut[c as usize] * s;
        }
    }
}

/// An E4M3 row with its f32 scale per 128 columns.
pub(crate) fn dequant_e4m3_tiles(data: &[u8], scales: &[u8], out: &mut [f32]) {
    tiles(&E4M3_LUT, data, scales, out)
}

/// An E5M2 row with its f32 scale per 128 columns.
pub(crate) fn dequant_e5m2_tiles(data: &[u8], scales: &[u8], out: &mut [f32]) {
    tiles(&E5M2_LUT, data, scales, out)
}

fn dot_lut(lut: &[f32; 256], w: &[u8], x: &[f32]) -> f32 {
    w.iter().zip(x).map(|(&c, &v)| lut[c as usize] * v).sum()
}

/// E4M3 row · f32 (tensor scale applied by the caller).
pub(crate) fn dot_e4m3(w: &[u8], _s: &[u8], x: &[f32]) -> f32 {
    dot_lut(&E4M3_LUT, w, x)
}

/// E5M2 row · f32.
pub(crate) fn dot_e5m2(w: &[u8], _s: &[u8], x: &[f32]) -> f32 {
    dot_lut(&E5M2_LUT, w, x)
}

fn dot_tiles(lut: &[f32; 256], w: &[u8], scales: &[u8], x: &[f32]) -> f32 {
    w.chunks(128)
        .zip(x.chunks(128))
        .zip(scales.chunks_exact(4))
        .map(|((wc, xc), s)| dot_lut(lut, wc, xc) * f32::from_le_bytes([s[0], s[1], s[2], s[3]]))
        .sum()
}

/// E4M3 row with per-128 scales · f32.
pub(crate) fn dot_e4m3_tiles(w: &[u8], s: &[u8], x: &[f32]) -> f32 {
    dot_tiles(&E4M3_LUT, w, s, x)
}

/// E5M2 row with per-128 scales · f32.
pub(crate) fn dot_e5m2_tiles(w: &[u8], s: &[u8], x: &[f32]) -> f32 {
    dot_tiles(&E5M2_LUT, w, s, x)
}
