//! The codebook ("i-quant") super-block formats: IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S, IQ1_M.
//!
//! Layouts follow gguf-py 0.19.0 (`gguf/quants.py`) and ggml's block structs. The f32 operation
//! order of gguf-py is kept (for example `((d * (0.5 + s)) * 0.25) * grid * sign`), so the output
//! is bit-exact with it.

use crate::grids::{IQ1S_GRID, IQ2S_GRID, IQ2XS_GRID, IQ2XXS_GRID, IQ3S_GRID, IQ3XXS_GRID, KSIGNS};
use crate::util::{f16_at, u16_at, u32_at};
use half::f16;

/// Byte `k` of a packed grid entry.
#[inline(always)]
fn gbyte(entry: u64, k: usize) -> u8 {
    (entry >> (8 * k)) as u8
}

/// Writes 8 values `db * grid[k] * sign(k)` where `signs` bit k set means negative.
#[inline(always)]
fn put8(o: &mut [f32], db: f32, entry: u64, signs: u8) {
    for (k, ok) in o.iter_mut().enumerate().take(8) {
        let v = db * gbyte(entry, k) as f32;
        *ok = if signs >> k & 1 == 1 { -v } else { v };
    }
}

/// IQ2_XXS: d, then 8 x (4 grid bytes, u32 of 4 x 7-bit sign indices and a 4-bit scale).
pub(crate) fn dequant_iq2_xxs(data: &[u8], _s: &[u8], out: &mut [f32]) {
    for (b, o) in data.chunks_exact(66).zip(out.chunks_exact_mut(256)) {
        let d = f16_at(b, 0);
        for ib in 0..8 {
            let aux1 = u32_at(b, 2 + ib * 8 + 4);
            let db = d * (0.5 + (aux1 >> 28) as f32) * 0.25;
            for l in 0..4 {
                let g = IQ2XXS_GRID[b[2 + ib * 8 + l] as usize];
                let signs = KSIGNS[((aux1 >> (7 * l)) & 127) as usize];
                put8(&mut o[ib * 32 + l * 8..], db, g, signs);
            }
        }
    }
}

/// IQ2_XS: d, 32 x u16 (9-bit grid index, 7-bit sign index), 8 bytes of 4-bit scales.
pub(crate) fn dequant_iq2_xs(data: &[u8], _s: &[u8], out: &mut [f32]) {
    for (b, o) in data.chunks_exact(74).zip(out.chunks_exact_mut(256)) {
        let d = f16_at(b, 0);
        for g in 0..32 {
            let sc = (b[66 + g / 4] >> (4 * ((g / 2) % 2))) & 0xf;
            let db = d * (0.5 + sc as f32) * 0.25;
            let qv = u16_at(b, 2 + 2 * g);
            let entry = IQ2XS_GRID[(qv & 511) as usize];
            put8(&mut o[g * 8..], db, entry, KSIGNS[(qv >> 9) as usize]);
        }
    }
}

/// IQ2_S: d, qs[32] (low 8 index bits), signs[32], qh[8] (2 high bits each), scales[8].
pub(crate) fn dequant_iq2_s(data: &[u8], _s: &[u8], out: &mut [f32]) {
    for (b, o) in data.chunks_exact(82).zip(out.chunks_exact_mut(256)) {
        let d = f16_at(b, 0);
        for g in 0..32 {
            let sc = (b[74 + g / 4] >> (4 * ((g / 2) % 2))) & 0xf;
            let db = d * (0.5 + sc as f32) * 0.25;
            let hi = ((b[66 + g / 4] >> (2 * (g % 4))) & 3) as usize;
            let entry = IQ2S_GRID[b[2 + g] as usize | (hi << 8)];
            put8(&mut o[g * 8..], db, entry, b[34 + g]);
        }
    }
}

/// Writes 4 values `db * grid[k] * sign(k)`, signs in bits `shift..shift+4`.
#[inline(always)]
fn put4(o: &mut [f32], db: f32, entry: u32, signs: u8, shift: usize) {
    for (k, ok) in o.iter_mut().enumerate().take(4) {
        let v = db * ((entry >> (8 * k)) as u8) as f32;
        *ok = if signs >> (shift + k) & 1 == 1 { -v } else { v };
    }
}

/// IQ3_XXS: d, qs[64] (grid indices of 4 values), 8 x u32 (4 x 7-bit sign index, 4-bit scale).
pub(crate) fn dequant_iq3_xxs(data: &[u8], _s: &[u8], out: &mut [f32]) {
    for (b, o) in data.chunks_exact(98).zip(out.chunks_exact_mut(256)) {
        let d = f16_at(b, 0);
        for ib in 0..8 {
            let aux = u32_at(b, 66 + 4 * ib);
            let db = d * (0.5 + (aux >> 28) as f32) * 0.5;
            for l in 0..4 {
                let signs = KSIGNS[((aux >> (7 * l)) & 127) as usize];
                for h in 0..2 {
                    let entry = IQ3XXS_GRID[b[2 + ib * 8 + l * 2 + h] as usize];
                    put4(&mut o[ib * 32 + l * 8 + h * 4..], db, entry, signs, 4 * h);
                }
            }
        }
    }
}

/// IQ3_S: d, qs[64], qh[8] (9th index bit), signs[32], scales[4] (4-bit, `1 + 2s`).
pub(crate) fn dequant_iq3_s(data: &[u8], _s: &[u8], out: &mut [f32]) {
    for (b, o) in data.chunks_exact(110).zip(out.chunks_exact_mut(256)) {
        let d = f16_at(b, 0);
        for ib in 0..8 {
            let sc = (b[106 + ib / 2] >> (4 * (ib % 2))) & 0xf;
            let db = d * (1 + 2 * sc as u32) as f32;
            for l in 0..4 {
                let signs = b[74 + ib * 4 + l];
                for h in 0..2 {
                    let g = ib * 8 + l * 2 + h;
                    let hi = ((b[66 + g / 8] >> (g % 8)) & 1) as usize;
                    let entry = IQ3S_GRID[b[2 + g] as usize | (hi << 8)];
                    put4(&mut o[g * 4..], db, entry, signs, 4 * h);
                }
            }
        }
    }
}

/// The IQ1 delta (gguf-py `IQ1_S.delta`).
const IQ1_DELTA: f32 = 0.125;

/// Writes 8 values `dl * (grid[k] + delta)` of an IQ1 grid entry (bytes are i8 in {-1, 0, 1}).
#[inline(always)]
fn put_iq1(o: &mut [f32], dl: f32, entry: u64, delta: f32) {
    for (k, ok) in o.iter_mut().enumerate().take(8) {
        *ok = dl * (gbyte(entry, k) as i8 as f32 + delta);
    }
}

/// IQ1_S: d, qs[32] (low 8 index bits), 8 x u16 qh (4 x 3 high bits, 3-bit scale, delta sign).
pub(crate) fn dequant_iq1_s(data: &[u8], _s: &[u8], out: &mut [f32]) {
    for (b, o) in data.chunks_exact(50).zip(out.chunks_exact_mut(256)) {
        let d = f16_at(b, 0);
        for ib in 0..8 {
            let qh = u16_at(b, 34 + 2 * ib);
            let dl = d * (2 * ((qh >> 12) & 7) + 1) as f32;
            let delta = if qh & 0x8000 == 0 {
                IQ1_DELTA
            } else {
                -IQ1_DELTA
            };
            for l in 0..4 {
                let idx = b[2 + ib * 4 + l] as usize | ((((qh >> (3 * l)) & 7) as usize) << 8);
                put_iq1(&mut o[ib * 32 + l * 8..], dl, IQ1S_GRID[idx], delta);
            }
        }
    }
}

/// IQ1_M: qs[32], qh[16] (3 index bits + delta sign per nibble), 4 x u16 scales (3-bit scales
/// and, in their top nibbles, the f16 super-block scale).
pub(crate) fn dequant_iq1_m(data: &[u8], _s: &[u8], out: &mut [f32]) {
    for (b, o) in data.chunks_exact(56).zip(out.chunks_exact_mut(256)) {
        let sc = [u16_at(b, 48), u16_at(b, 50), u16_at(b, 52), u16_at(b, 54)];
        let dbits =
            (sc[0] >> 12) | ((sc[1] >> 8) & 0x00f0) | ((sc[2] >> 4) & 0x0f00) | (sc[3] & 0xf000);
        let d = f16::from_bits(dbits).to_f32();
        for g in 0..32 {
            let s = g / 2;
            let s3 = (sc[s / 4] >> (3 * (s % 4))) & 7;
            let dl = d * (2 * s3 + 1) as f32;
            let nib = (b[32 + g / 2] >> (4 * (g % 2))) & 0xf;
            let idx = b[g] as usize | (((nib & 7) as usize) << 8);
            let delta = if nib & 8 == 0 { IQ1_DELTA } else { -IQ1_DELTA };
            put_iq1(&mut o[g * 8..], dl, IQ1S_GRID[idx], delta);
        }
    }
}
