//! K-quant quantizers (Q2_K .. Q6_K): ggml's reference quantizers (`quantize_row_qN_K_ref` and
//! their helpers `make_qkx2_quants`, `make_q3_quants`, `make_qx_quants` in ggml-quants.c).
//!
//! gguf-py 0.19.0 only dequantizes the K-quants, so the reference is llama.cpp itself: every f32
//! operation below is in the C source's order (no fused multiply-add; the C library is built
//! without FMA), `nearest_int` uses the same `+ 1.5 * 2^23` bit trick, and f16 conversions round to
//! nearest even as ggml's do. The fixtures in tests/data/ggml_index.json (made by calling the C
//! functions through ctypes) check that the bytes are equal.

use crate::formats::kquants::{
    get_scale_min_k4, Q2K_BYTES, Q3K_BYTES, Q4K_BYTES, Q5K_BYTES, Q6K_BYTES, QK_K,
};
use crate::util::{f16_at, put_f16};

/// ggml's `GROUP_MAX_EPS`: a group whose largest magnitude is below this is all zero.
const GROUP_MAX_EPS: f32 = 1e-15;

/// ggml's `nearest_int`: round to nearest (ties to even) through the f32 mantissa.
#[inline(always)]
fn nearest_int(v: f32) -> i32 {
    let bits = (v + 12582912.0f32).to_bits() as i32;
    (bits & 0x007f_ffff) - 0x0040_0000
}

/// `make_qkx2_quants`: an asymmetric (scale, min) fit of `x` to levels `0..=nmax` under `weights`,
/// searching `nstep + 1` candidate scales. Writes the levels to `l`; returns `(scale, -min)`.
#[allow(clippy::too_many_arguments)]
fn make_qkx2_quants(
    nmax: i32,
    x: &[f32],
    weights: &[f32],
    l: &mut [u8],
    rmin: f32,
    rdelta: f32,
    nstep: i32,
    use_mad: bool,
) -> (f32, f32) {
    let n = x.len();
    let mut min = x[0];
    let mut max = x[0];
    let mut sum_w = weights[0];
    let mut sum_x = sum_w * x[0];
    for i in 1..n {
        if x[i] < min {
            min = x[i];
        }
        if x[i] > max {
            max = x[i];
        }
        let w = weights[i];
        sum_w += w;
        sum_x += w * x[i];
    }
    if min > 0.0 {
        min = 0.0;
    }
    if max == min {
        l.iter_mut().for_each(|v| *v = 0);
        return (0.0, -min);
    }
    let err = |d: f32, w: f32| if use_mad { w * d.abs() } else { w * (d * d) };
    let mut iscale = nmax as f32 / (max - min);
    let mut scale = 1.0 / iscale;
    let mut best_error = 0.0f32;
    for i in 0..n {
        let q = nearest_int(iscale * (x[i] - min));
        l[i] = q.clamp(0, nmax) as u8;
        let diff = scale * l[i] as f32 + min - x[i];
        best_error += err(diff, weights[i]);
    }
    if nstep < 1 {
        return (scale, -min);
    }
    let mut laux = [0u8; 32];
    for is in 0..=nstep {
        iscale = (rmin + rdelta * is as f32 + nmax as f32) / (max - min);
        let (mut sum_l, mut sum_l2, mut sum_xl) = (0.0f32, 0.0f32, 0.0f32);
        for i in 0..n {
            let q = nearest_int(iscale * (x[i] - min)).clamp(0, nmax);
            laux[i] = q as u8;
            let w = weights[i];
            let lf = q as f32;
            sum_l += w * lf;
            sum_l2 += w * lf * lf;
            sum_xl += w * lf * x[i];
        }
        let d = sum_w * sum_l2 - sum_l * sum_l;
        if d > 0.0 {
            let mut this_scale = (sum_w * sum_xl - sum_x * sum_l) / d;
            let mut this_min = (sum_l2 * sum_x - sum_l * sum_xl) / d;
            if this_min > 0.0 {
                this_min = 0.0;
                this_scale = sum_xl / sum_l2;
            }
            let mut cur_error = 0.0f32;
            for i in 0..n {
                let diff = this_scale * laux[i] as f32 + this_min - x[i];
                cur_error += err(diff, weights[i]);
            }
            if cur_error < best_error {
                l[..n].copy_from_slice(&laux[..n]);
                best_error = cur_error;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    (scale, -min)
}

/// `make_q3_quants` with `do_rmse`: a symmetric fit to levels `-nmax..nmax-1` weighted by `x^2`,
/// refined coordinate-wise. Writes `level + nmax` to `l` (0 for an all-zero group); returns the
/// scale.
fn make_q3_quants(nmax: i32, x: &[f32], l: &mut [i8]) -> f32 {
    let n = x.len();
    let (mut max, mut amax) = (0.0f32, 0.0f32);
    for &v in x {
        if v.abs() > amax {
            amax = v.abs();
            max = v;
        }
    }
    if amax < GROUP_MAX_EPS {
        l[..n].iter_mut().for_each(|v| *v = 0);
        return 0.0;
    }
    let iscale = -(nmax as f32) / max;
    let (mut sumlx, mut suml2) = (0.0f32, 0.0f32);
    for i in 0..n {
        let q = nearest_int(iscale * x[i]).clamp(-nmax, nmax - 1);
        l[i] = q as i8;
        let w = x[i] * x[i];
        sumlx += w * x[i] * q as f32;
        suml2 += w * q as f32 * q as f32;
    }
    for _ in 0..5 {
        let mut changed = 0;
        for i in 0..n {
            let w = x[i] * x[i];
            let li = l[i] as f32;
            let mut slx = sumlx - w * x[i] * li;
            if slx > 0.0 {
                let mut sl2 = suml2 - w * li * li;
                let new_l = nearest_int(x[i] * sl2 / slx).clamp(-nmax, nmax - 1);
                if new_l != l[i] as i32 {
                    slx += w * x[i] * new_l as f32;
                    sl2 += w * new_l as f32 * new_l as f32;
                    if sl2 > 0.0 && slx * slx * suml2 > sumlx * sumlx * sl2 {
                        l[i] = new_l as i8;
                        sumlx = slx;
                        suml2 = sl2;
                        changed += 1;
                    }
                }
            }
        }
        if changed == 0 {
            break;
        }
    }
    for v in l[..n].iter_mut() {
        *v += nmax as i8;
    }
    if suml2 > 0.0 {
        sumlx / suml2
    } else {
        0.0
    }
}

/// `make_qx_quants` with `rmse_type = 1` and no importance weights: a symmetric fit to levels
/// `-nmax..nmax-1` weighted by `x^2`, trying 18 scales around `nmax / max`. Writes `level + nmax`
/// to `l`; returns the scale.
fn make_qx_quants(nmax: i32, x: &[f32], l: &mut [i8]) -> f32 {
    let n = x.len();
    let (mut max, mut amax) = (0.0f32, 0.0f32);
    for &v in x {
        if v.abs() > amax {
            amax = v.abs();
            max = v;
        }
    }
    if amax < GROUP_MAX_EPS {
        l[..n].iter_mut().for_each(|v| *v = 0);
        return 0.0;
    }
    let nm = nmax as f32;
    let sums = |iscale: f32| {
        let (mut sumlx, mut suml2) = (0.0f32, 0.0f32);
        for &v in x {
            let q = nearest_int(iscale * v).clamp(-nmax, nmax - 1) as f32;
            let w = v * v;
            sumlx += w * v * q;
            suml2 += w * q * q;
        }
        (sumlx, suml2)
    };
    let fill = |iscale: f32, l: &mut [i8]| {
        for (o, &v) in l.iter_mut().zip(x) {
            *o = (nmax + nearest_int(iscale * v).clamp(-nmax, nmax - 1)) as i8;
        }
    };
    let iscale = -nm / max;
    fill(iscale, l);
    let (sumlx, suml2) = sums(iscale);
    let mut scale = if suml2 != 0.0 { sumlx / suml2 } else { 0.0 };
    let mut best = scale * sumlx;
    for is in -9i32..=9 {
        if is == 0 {
            continue;
        }
        let iscale = -(nm + 0.1f32 * is as f32) / max;
        let (sumlx, suml2) = sums(iscale);
        if suml2 > 0.0 && sumlx * sumlx > best * suml2 {
            fill(iscale, l);
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    scale
}

/// The Q4_K/Q5_K sub-block fit: per 32 elements `make_qkx2_quants` with weights `rms + |x|`.
/// Returns (scales, mins) and fills `l` with the provisional levels.
fn fit_qkx2_32(x: &[f32], nmax: i32, rmin: f32, nstep: i32, l: &mut [u8]) -> ([f32; 8], [f32; 8]) {
    let mut scales = [0.0f32; 8];
    let mut mins = [0.0f32; 8];
    let mut weights = [0.0f32; 32];
    for j in 0..8 {
        let xs = &x[32 * j..32 * j + 32];
        let mut sum_x2 = 0.0f32;
        for &v in xs {
            sum_x2 += v * v;
        }
        let av_x = (sum_x2 / 32.0).sqrt();
        for (w, &v) in weights.iter_mut().zip(xs) {
            *w = av_x + v.abs();
        }
        let (s, m) = make_qkx2_quants(
            nmax,
            xs,
            &weights,
            &mut l[32 * j..32 * j + 32],
            rmin,
            0.1,
            nstep,
            false,
        );
        scales[j] = s;
        mins[j] = m;
    }
    (scales, mins)
}

/// Packs eight 6-bit (scale, min) pairs the Q4_K/Q5_K way, writes d/dmin at bytes 0 and 2 and the
/// 12 scale bytes at 4, then re-derives the final levels (0..=nmax) into `l`.
fn pack_scales_requant(
    x: &[f32],
    scales: &[f32; 8],
    mins: &[f32; 8],
    nmax: i32,
    b: &mut [u8],
    l: &mut [u8],
) {
    let max_scale = scales
        .iter()
        .fold(0.0f32, |m, &s| if s > m { s } else { m });
    let max_min = mins.iter().fold(0.0f32, |m, &s| if s > m { s } else { m });
    let inv_scale = if max_scale > 0.0 {
        63.0 / max_scale
    } else {
        0.0
    };
    let inv_min = if max_min > 0.0 { 63.0 / max_min } else { 0.0 };
    let sc = &mut b[4..16];
    for j in 0..8 {
        // C: `uint8_t ls = nearest_int(...)` truncates to 8 bits before the MIN.
        let ls = (nearest_int(inv_scale * scales[j]) as u8).min(63);
        let lm = (nearest_int(inv_min * mins[j]) as u8).min(63);
        if j < 4 {
            sc[j] = ls;
            sc[j + 4] = lm;
        } else {
            sc[j + 4] = (ls & 0xf) | ((lm & 0xf) << 4);
            sc[j - 4] |= (ls >> 4) << 6;
            sc[j] |= (lm >> 4) << 6;
        }
    }
    put_f16(b, 0, max_scale / 63.0);
    put_f16(b, 2, max_min / 63.0);
    let (d, dmin) = (f16_at(b, 0), f16_at(b, 2));
    let (sc, mn) = get_scale_min_k4(&b[4..16]);
    for j in 0..8 {
        let dl = d * sc[j] as f32;
        if dl == 0.0 {
            continue;
        }
        let dm = dmin * mn[j] as f32;
        for ii in 0..32 {
            let q = nearest_int((x[32 * j + ii] + dm) / dl);
            l[32 * j + ii] = q.clamp(0, nmax) as u8;
        }
    }
}

/// f32 to Q4_K blocks (`quantize_row_q4_K_ref`).
pub(crate) fn quant_q4_k(src: &[f32], out: &mut [u8]) {
    for (x, b) in src.chunks_exact(QK_K).zip(out.chunks_exact_mut(Q4K_BYTES)) {
        let mut l = [0u8; QK_K];
        let (scales, mins) = fit_qkx2_32(x, 15, -1.0, 20, &mut l);
        pack_scales_requant(x, &scales, &mins, 15, b, &mut l);
        let qs = &mut b[16..];
        for (c, j) in (0..QK_K).step_by(64).enumerate() {
            for i in 0..32 {
                qs[c * 32 + i] = l[j + i] | (l[j + i + 32] << 4);
            }
        }
    }
}

/// f32 to Q5_K blocks (`quantize_row_q5_K_ref`).
pub(crate) fn quant_q5_k(src: &[f32], out: &mut [u8]) {
    for (x, b) in src.chunks_exact(QK_K).zip(out.chunks_exact_mut(Q5K_BYTES)) {
        let mut l = [0u8; QK_K];
        let (scales, mins) = fit_qkx2_32(x, 31, -0.5, 15, &mut l);
        pack_scales_requant(x, &scales, &mins, 31, b, &mut l);
        let (qh, ql) = b[16..].split_at_mut(32);
        qh.fill(0);
        let (mut m1, mut m2) = (1u8, 2u8);
        for (c, n) in (0..QK_K).step_by(64).enumerate() {
            for j in 0..32 {
                let mut l1 = l[n + j];
                if l1 > 15 {
                    l1 -= 16;
                    qh[j] |= m1;
                }
                let mut l2 = l[n + j + 32];
                if l2 > 15 {
                    l2 -= 16;
                    qh[j] |= m2;
                }
                ql[c * 32 + j] = l1 | (l2 << 4);
            }
            m1 <<= 2;
            m2 <<= 2;
        }
    }
}

/// Packs 256 two-bit levels the Q2_K/Q3_K way (four 32-element groups per byte, per 128).
fn pack_2bit(l: &[u8; QK_K], qs: &mut [u8]) {
    for j in (0..QK_K).step_by(128) {
        for i in 0..32 {
            qs[j / 4 + i] =
                l[j + i] | (l[j + i + 32] << 2) | (l[j + i + 64] << 4) | (l[j + i + 96] << 6);
        }
    }
}

/// f32 to Q2_K blocks (`quantize_row_q2_K_ref`).
pub(crate) fn quant_q2_k(src: &[f32], out: &mut [u8]) {
    const Q4SCALE: f32 = 15.0;
    for (x, b) in src.chunks_exact(QK_K).zip(out.chunks_exact_mut(Q2K_BYTES)) {
        let mut l = [0u8; QK_K];
        let mut scales = [0.0f32; 16];
        let mut mins = [0.0f32; 16];
        let mut weights = [0.0f32; 16];
        let (mut max_scale, mut max_min) = (0.0f32, 0.0f32);
        for j in 0..16 {
            let xs = &x[16 * j..16 * j + 16];
            for (w, &v) in weights.iter_mut().zip(xs) {
                *w = v.abs();
            }
            let (s, m) = make_qkx2_quants(
                3,
                xs,
                &weights,
                &mut l[16 * j..16 * j + 16],
                -0.5,
                0.1,
                15,
                true,
            );
            scales[j] = s;
            mins[j] = m;
            if s > max_scale {
                max_scale = s;
            }
            if m > max_min {
                max_min = m;
            }
        }
        if max_scale > 0.0 {
            let iscale = Q4SCALE / max_scale;
            for j in 0..16 {
                b[j] = nearest_int(iscale * scales[j]) as u8;
            }
            put_f16(b, 80, max_scale / Q4SCALE);
        } else {
            b[..16].fill(0);
            put_f16(b, 80, 0.0);
        }
        if max_min > 0.0 {
            let iscale = Q4SCALE / max_min;
            for j in 0..16 {
                b[j] |= (nearest_int(iscale * mins[j]) << 4) as u8;
            }
            put_f16(b, 82, max_min / Q4SCALE);
        } else {
            put_f16(b, 82, 0.0);
        }
        let (d, dmin) = (f16_at(b, 80), f16_at(b, 82));
        for j in 0..16 {
            let dl = d * (b[j] & 0xf) as f32;
            if dl == 0.0 {
                continue;
            }
            let dm = dmin * (b[j] >> 4) as f32;
            for ii in 0..16 {
                let q = nearest_int((x[16 * j + ii] + dm) / dl);
                l[16 * j + ii] = q.clamp(0, 3) as u8;
            }
        }
        pack_2bit(&l, &mut b[16..80]);
    }
}

/// f32 to Q3_K blocks (`quantize_row_q3_K_ref`).
pub(crate) fn quant_q3_k(src: &[f32], out: &mut [u8]) {
    for (x, b) in src.chunks_exact(QK_K).zip(out.chunks_exact_mut(Q3K_BYTES)) {
        let mut l = [0i8; QK_K];
        let mut scales = [0.0f32; 16];
        let (mut max_scale, mut amax) = (0.0f32, 0.0f32);
        for j in 0..16 {
            scales[j] = make_q3_quants(4, &x[16 * j..16 * j + 16], &mut l[16 * j..16 * j + 16]);
            if scales[j].abs() > amax {
                amax = scales[j].abs();
                max_scale = scales[j];
            }
        }
        let sc = &mut b[96..108];
        sc.fill(0);
        if max_scale != 0.0 {
            let iscale = -32.0 / max_scale;
            for j in 0..16 {
                // C: `int8_t l = nearest_int(...)` truncates to 8 bits before the clamp.
                let q = (nearest_int(iscale * scales[j]) as i8).clamp(-32, 31) + 32;
                let q = q as u8;
                if j < 8 {
                    sc[j] = q & 0xf;
                } else {
                    sc[j - 8] |= (q & 0xf) << 4;
                }
                sc[j % 4 + 8] |= (q >> 4) << (2 * (j / 4));
            }
            put_f16(b, 108, 1.0 / iscale);
        } else {
            put_f16(b, 108, 0.0);
        }
        let d = f16_at(b, 108);
        let sc = &b[96..108];
        for j in 0..16 {
            let lo = if j < 8 { sc[j] & 0xf } else { sc[j - 8] >> 4 };
            let s = (lo | (((sc[8 + j % 4] >> (2 * (j / 4))) & 3) << 4)) as i32 - 32;
            let dl = d * s as f32;
            if dl == 0.0 {
                continue;
            }
            for ii in 0..16 {
                let q = nearest_int(x[16 * j + ii] / dl).clamp(-4, 3);
                l[16 * j + ii] = (q + 4) as i8;
            }
        }
        let (hmask, rest) = b.split_at_mut(32);
        hmask.fill(0);
        let mut lu = [0u8; QK_K];
        let (mut m, mut hm) = (0usize, 1u8);
        for j in 0..QK_K {
            let mut v = l[j] as u8;
            if v > 3 {
                hmask[m] |= hm;
                v -= 4;
            }
            lu[j] = v;
            m += 1;
            if m == QK_K / 8 {
                m = 0;
                hm <<= 1;
            }
        }
        pack_2bit(&lu, &mut rest[..64]);
    }
}

/// f32 to Q6_K blocks (`quantize_row_q6_K_ref`).
pub(crate) fn quant_q6_k(src: &[f32], out: &mut [u8]) {
    for (x, b) in src.chunks_exact(QK_K).zip(out.chunks_exact_mut(Q6K_BYTES)) {
        let mut l = [0i8; QK_K];
        let mut scales = [0.0f32; 16];
        let (mut max_scale, mut max_abs) = (0.0f32, 0.0f32);
        for ib in 0..16 {
            let s = make_qx_quants(32, &x[16 * ib..16 * ib + 16], &mut l[16 * ib..16 * ib + 16]);
            scales[ib] = s;
            if s.abs() > max_abs {
                max_abs = s.abs();
                max_scale = s;
            }
        }
        if max_abs < GROUP_MAX_EPS {
            b.fill(0);
            continue;
        }
        let iscale = -128.0 / max_scale;
        put_f16(b, 208, 1.0 / iscale);
        for ib in 0..16 {
            b[192 + ib] = nearest_int(iscale * scales[ib]).min(127) as i8 as u8;
        }
        let d = f16_at(b, 208);
        for j in 0..16 {
            let dl = d * (b[192 + j] as i8) as f32;
            if dl == 0.0 {
                continue;
            }
            for ii in 0..16 {
                let q = nearest_int(x[16 * j + ii] / dl).clamp(-32, 31);
                l[16 * j + ii] = (q + 32) as i8;
            }
        }
        let (ql, rest) = b.split_at_mut(128);
        let qh = &mut rest[..64];
        for (h, j) in (0..QK_K).step_by(128).enumerate() {
            for i in 0..32 {
                let lv = |k: usize| l[j + i + k] as u8;
                ql[h * 64 + i] = (lv(0) & 0xf) | ((lv(64) & 0xf) << 4);
                ql[h * 64 + 32 + i] = (lv(32) & 0xf) | ((lv(96) & 0xf) << 4);
                qh[h * 32 + i] = (lv(0) >> 4)
                    | ((lv(32) >> 4) << 2)
                    | ((lv(64) >> 4) << 4)
                    | ((lv(96) >> 4) << 6);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_int_rounds_ties_to_even() {
        assert_eq!(nearest_int(2.5), 2);
        assert_eq!(nearest_int(3.5), 4);
        assert_eq!(nearest_int(-2.5), -2);
        assert_eq!(nearest_int(-0.4), 0);
        assert_eq!(nearest_int(15.49), 15);
    }
}
