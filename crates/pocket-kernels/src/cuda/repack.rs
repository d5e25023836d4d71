//! Upload-time repacking of the weight formats the GPU reads in another layout than GGML's
//! (kernels/common.cuh, "Repacked layouts"):
//! * Q4_0, Q8_0, Q6_K ([`DevFormat::split_scales`] names the two byte ranges of a block): the
//!   quant bytes of every block of the matrix first, row-major by block and 16-byte aligned per
//!   block, then the companion bytes of every block.
//! * Q4_K: GGML's 144-byte blocks with each block's 128 quant bytes reordered so that each
//!   16-byte chunk holds one 32-element sub-block (low nibbles = elements 0..15, high = 16..31, as
//!   Q4_0): the GEMV's work item reads one activation block's weights with one 16-byte load and
//!   decodes one scale and min instead of two of each.

use super::kernels::DevFormat;
use super::memory::WeightLayout;

/// Bytes of one Q4_K block: f16 d, f16 dmin, 12 scale bytes, then 128 quant bytes.
const Q4K_BLOCK: usize = 144;
/// Offset of the quants in a Q4_K block.
const Q4K_QS: usize = 16;

/// The device image of `bytes` (whole GGML blocks of `block_bytes`) and its layout, for a format
/// the GPU reads repacked; `None` where it reads GGML's blocks as they are.
pub(crate) fn repack(
    dev: DevFormat,
    block_bytes: usize,
    bytes: &[u8],
) -> Option<(Vec<u8>, WeightLayout)> {
    if dev == DevFormat::Q4_K {
        let mut out = bytes.to_vec();
        for blk in out.chunks_exact_mut(Q4K_BLOCK) {
            let mut qs = [0u8; 128];
            q4k_by_sub_block(&blk[Q4K_QS..], &mut qs);
            blk[Q4K_QS..].copy_from_slice(&qs);
        }
        return Some((out, WeightLayout::SubBlockOrder));
    }
    let (qr, ar) = dev.split_scales()?;
    let (qb, ab) = (qr.len(), ar.len());
    let nblocks = bytes.len() / block_bytes;
    let mut packed = vec![0u8; nblocks * (qb + ab)];
    let (q, d) = packed.split_at_mut(nblocks * qb);
    for (i, blk) in bytes.chunks_exact(block_bytes).enumerate() {
        d[ab * i..ab * (i + 1)].copy_from_slice(&blk[ar.clone()]);
        q[qb * i..qb * (i + 1)].copy_from_slice(&blk[qr.clone()]);
    }
    Some((packed, WeightLayout::SplitScales))
}

/// Q4_K quants from GGML's order (sub-blocks 2c and 2c+1 in the low and high nibbles of
/// `qs[32c..32c+32]`) to one 16-byte chunk per sub-block s: byte j holds element j of s in its
/// low nibble and element j + 16 in its high nibble.
fn q4k_by_sub_block(qs: &[u8], out: &mut [u8; 128]) {
    for s in 0..8 {
        let (src, sh) = (&qs[32 * (s / 2)..32 * (s / 2) + 32], 4 * (s % 2));
        for j in 0..16 {
            let lo = (src[j] >> sh) & 15;
            let hi = (src[j + 16] >> sh) & 15;
            out[16 * s + j] = lo | (hi << 4);
        }
    }
}

/// The GGML blocks of a [`repack`]ed image (its inverse, for the tests).
#[cfg(test)]
fn unpack(dev: DevFormat, block_bytes: usize, packed: &[u8]) -> Vec<u8> {
    if dev == DevFormat::Q4_K {
        let mut out = packed.to_vec();
        for blk in out.chunks_exact_mut(Q4K_BLOCK) {
            let p = &blk[Q4K_QS..].to_vec();
            let elem = |s: usize, l: usize| (p[16 * s + l % 16] >> (4 * (l / 16))) & 15;
            for c in 0..4 {
                for l in 0..32 {
                    blk[Q4K_QS + 32 * c + l] = elem(2 * c, l) | (elem(2 * c + 1, l) << 4);
                }
            }
        }
        return out;
    }
    let (qr, ar) = dev.split_scales().expect("a repacked format");
    let (qb, ab) = (qr.len(), ar.len());
    let nblocks = packed.len() / (qb + ab);
    let (q, d) = packed.split_at(nblocks * qb);
    let mut out = vec![0u8; nblocks * block_bytes];
    for (i, blk) in out.chunks_exact_mut(block_bytes).enumerate() {
        blk[ar.clone()].copy_from_slice(&d[ab * i..ab * (i + 1)]);
        blk[qr.clone()].copy_from_slice(&q[qb * i..qb * (i + 1)]);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use pocket_quant::{GgmlType, QuantFormat};

    /// xorshift64*: deterministic bytes without a dependency.
    struct Rng(u64);
    impl Rng {
        fn byte(&mut self) -> u8 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            (self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 56) as u8
        }
    }

    /// Random GGML blocks of `t` whose f16 fields (at the given byte offsets of each block) are
    /// finite: random bytes everywhere else, so every scale and quant bit pattern occurs.
    fn random_blocks(t: GgmlType, nblocks: usize, f16_at: &[usize], rng: &mut Rng) -> Vec<u8> {
        let bb = QuantFormat::Ggml(t).block_bytes();
        let mut b: Vec<u8> = (0..nblocks * bb).map(|_| rng.byte()).collect();
        for blk in b.chunks_exact_mut(bb) {
            for &o in f16_at {
                // exponent 8..15 (2^-7 .. 1), random mantissa and sign: finite and normal.
                let h = 0x2000u16 | (u16::from(rng.byte() & 0x1f) << 8) | u16::from(rng.byte());
                let h = h | (u16::from(rng.byte() & 1) << 15);
                blk[o..o + 2].copy_from_slice(&h.to_le_bytes());
            }
        }
        b
    }

    fn f16_at(b: &[u8], o: usize) -> f32 {
        half::f16::from_bits(u16::from_le_bytes([b[o], b[o + 1]])).to_f32()
    }

    /// GGML's `get_scale_min_k4` (common.cuh `scale_min_k4`).
    fn scale_min_k4(j: usize, q: &[u8]) -> (u8, u8) {
        if j < 4 {
            (q[j] & 63, q[j + 4] & 63)
        } else {
            (
                (q[j + 4] & 0xf) | ((q[j - 4] >> 6) << 4),
                (q[j + 4] >> 4) | ((q[j] >> 6) << 4),
            )
        }
    }

    /// Every repacked format: the image has the GGML size and layout the kernels expect, and
    /// `unpack` gives the GGML blocks back byte for byte; other formats are not repacked.
    #[test]
    fn repack_round_trips_every_repacked_format() {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        for (t, dev, layout) in [
            (GgmlType::Q4_0, DevFormat::Q4_0, WeightLayout::SplitScales),
            (GgmlType::Q8_0, DevFormat::Q8_0, WeightLayout::SplitScales),
            (GgmlType::Q4_K, DevFormat::Q4_K, WeightLayout::SubBlockOrder),
            (GgmlType::Q6_K, DevFormat::Q6_K, WeightLayout::SplitScales),
        ] {
            let bb = QuantFormat::Ggml(t).block_bytes();
            let blocks = random_blocks(t, 37, &[], &mut rng);
            let (img, l) = repack(dev, bb, &blocks).expect("repacked format");
            assert_eq!(l, layout, "{t:?}: layout");
            assert_eq!(img.len(), blocks.len(), "{t:?}: image size");
            assert_ne!(img, blocks, "{t:?}: the image differs from GGML's blocks");
            assert_eq!(unpack(dev, bb, &img), blocks, "{t:?}: round trip");
        }
        for dev in [DevFormat::Q5_K, DevFormat::Q4_1, DevFormat::IQ4_XS] {
            assert!(repack(dev, 176, &[0u8; 176]).is_none(), "{dev:?}");
        }
    }

    /// The Q4_K image read as kernels/common.cuh `FmtQ4_K::decode16` reads it (chunk k of a
    /// block: quant bytes 16 + 16 * (k / 2), nibble k % 2; d, dmin and the packed scales from the
    /// block's first 16 bytes) equals pocket-quant's dequantization of the GGML blocks bit for
    /// bit, over 3 rows x 5 super-blocks of random bytes.
    #[test]
    fn q4_k_image_decodes_to_the_reference_dequantization() {
        let mut rng = Rng(0x1234_5678_9abc_def1);
        let (rows, nb) = (3usize, 5usize);
        let blocks = random_blocks(GgmlType::Q4_K, rows * nb, &[0, 2], &mut rng);
        let mut want = vec![0f32; rows * nb * 256];
        pocket_quant::dequantize(QuantFormat::Ggml(GgmlType::Q4_K), &blocks, &mut want).unwrap();
        let (img, _) = repack(DevFormat::Q4_K, Q4K_BLOCK, &blocks).unwrap();
        for (bi, b) in img.chunks_exact(Q4K_BLOCK).enumerate() {
            let (d, dmin) = (f16_at(b, 0), f16_at(b, 2));
            for chunk in 0..16 {
                let sub = chunk / 2;
                let (sc, m) = scale_min_k4(sub, &b[4..16]);
                let (dl, ml) = (d * sc as f32, dmin * m as f32);
                let q = &b[Q4K_QS + 16 * sub..][..16];
                for (j, &byte) in q.iter().enumerate() {
                    let v = dl * ((byte >> (4 * (chunk % 2))) & 15) as f32 - ml;
                    let e = bi * 256 + 16 * chunk + j;
                    assert_eq!(v.to_bits(), want[e].to_bits(), "block {bi} element {e}");
                }
            }
        }
    }

    /// kernels/dot_formats.cuh `DotQ4_K` emulated on the host over the reordered image (thread p
    /// of a super-block: 16 quant bytes at 16 + 16p, the header's scale and min of sub-block p,
    /// activation block 8 * blk + p of the Q8K activations as the GPU stores them: d and d *
    /// sum32(q) per 32) equals pocket-quant's CPU matmul of the GGML blocks within the rounding
    /// of f32 products and sums: 64 ulp of the sum of the terms' magnitudes.
    #[test]
    fn dot_q4_k_emulation_matches_the_cpu_matmul() {
        let mut rng = Rng(7);
        let (rows, nb) = (5usize, 4usize);
        let cols = nb * 256;
        let mut blocks = random_blocks(GgmlType::Q4_K, rows * nb, &[], &mut rng);
        for b in blocks.chunks_exact_mut(Q4K_BLOCK) {
            for o in [0, 2] {
                let v = 0.002 + 0.01 * f32::from(rng.byte()) / 255.0;
                b[o..o + 2].copy_from_slice(&half::f16::from_f32(v).to_le_bytes());
            }
        }
        let x: Vec<f32> = (0..cols)
            .map(|_| f32::from(rng.byte()) / 127.5 - 1.0)
            .collect();
        let mut act = Vec::new();
        pocket_quant::quantize_act_q8k(&x, &mut act);
        let aq: Vec<i32> = act
            .iter()
            .flat_map(|a| a.qs.iter().map(|&q| i32::from(q)))
            .collect();
        let ad: Vec<f32> = (0..cols / 32).map(|b| act[b / 8].d).collect();
        let asum: Vec<f32> = (0..cols / 32)
            .map(|b| act[b / 8].d * aq[32 * b..32 * b + 32].iter().sum::<i32>() as f32)
            .collect();
        let m = pocket_quant::QuantMatrix {
            format: QuantFormat::Ggml(GgmlType::Q4_K),
            rows,
            cols,
            data: &blocks,
            scales: None,
            tensor_scale: None,
        };
        let mut cpu = vec![0f32; rows];
        pocket_quant::matmul(&m, &x, 1, &mut cpu).unwrap();
        let (img, _) = repack(DevFormat::Q4_K, Q4K_BLOCK, &blocks).unwrap();
        let word = |b: &[u8], o: usize| u32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]]);
        for (r, &want) in cpu.iter().enumerate() {
            let (mut acc, mut mag) = (0f32, 0f32);
            for blk in 0..nb {
                let b = &img[(r * nb + blk) * Q4K_BLOCK..][..Q4K_BLOCK];
                let (y, z, w) = (word(b, 4), word(b, 8), word(b, 12));
                let (d, dmin) = (f16_at(b, 0), f16_at(b, 2));
                for p in 0..8 {
                    let sh = 8 * (p & 3);
                    let (yb, zb, wb) = (y >> sh, z >> sh, w >> sh);
                    let sc = if p < 4 {
                        yb & 63
                    } else {
                        (wb & 15) | ((yb >> 2) & 48)
                    } as i32;
                    let mn = if p < 4 {
                        zb & 63
                    } else {
                        ((wb >> 4) & 15) | ((zb >> 2) & 48)
                    };
                    let ab = blk * 8 + p;
                    let q = &b[Q4K_QS + 16 * p..][..16];
                    let a = &aq[32 * ab..32 * ab + 32];
                    let s: i32 = (0..16)
                        .map(|j| i32::from(q[j] & 15) * a[j] + i32::from(q[j] >> 4) * a[j + 16])
                        .sum();
                    let t0 = d * ad[ab] * (sc * s) as f32;
                    let t1 = dmin * mn as f32 * asum[ab];
                    acc += t0 - t1;
                    mag += t0.abs() + t1.abs();
                }
            }
            let bound = 64.0 * f32::EPSILON * mag;
            assert!(
                (acc - want).abs() <= bound,
                "row {r}: emulated {acc}, CPU {want}, bound {bound}"
            );
        }
    }

    /// The DotQ4_K work item's branch-free selection of sub-block p's 6-bit scale and min from
    /// the header words (kernels/dot_formats.cuh) equals GGML's `get_scale_min_k4` for every p,
    /// on random scale bytes.
    #[test]
    fn dot_q4_k_scale_selection_matches_ggml() {
        let mut rng = Rng(42);
        for _ in 0..500 {
            let s: Vec<u8> = (0..12).map(|_| rng.byte()).collect();
            let word =
                |i: usize| u32::from_le_bytes([s[4 * i], s[4 * i + 1], s[4 * i + 2], s[4 * i + 3]]);
            let (y, z, w) = (word(0), word(1), word(2));
            for p in 0..8 {
                let sh = 8 * (p & 3);
                let (yb, zb, wb) = (y >> sh, z >> sh, w >> sh);
                let sc = if p < 4 {
                    yb & 63
                } else {
                    (wb & 15) | ((yb >> 2) & 48)
                };
                let m = if p < 4 {
                    zb & 63
                } else {
                    ((wb >> 4) & 15) | ((zb >> 2) & 48)
                };
                assert_eq!(
                    (sc as u8, m as u8),
                    scale_min_k4(p, &s),
                    "p {p} scales {s:?}"
                );
            }
        }
    }
}
