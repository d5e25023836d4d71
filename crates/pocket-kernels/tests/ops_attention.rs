//! The paged-attention ops (kv_write, attention), one test body per op run on every device
//! `Device::all_for_tests()` opens, against plain f64 references written here.
#![allow(clippy::needless_range_loop)]

mod ops_support;

use ops_support::{assert_close, read, up, up_u32, Rng};
use pocket_kernels::{AttentionMeta, AttentionParams, DType, Device};

/// A batch of sequences over a paged cache, with its reference K/V per sequence.
struct PagedBatch {
    /// New tokens per sequence.
    new: Vec<usize>,
    /// Total length per sequence (cached + new).
    lens: Vec<usize>,
    /// Block table rows, `max_blocks` wide.
    tables: Vec<u32>,
    max_blocks: usize,
    block_size: usize,
    num_blocks: usize,
}

impl PagedBatch {
    /// Lays sequences of `lens` into shuffled blocks of `block_size`.
    fn new(lens: &[usize], new: &[usize], block_size: usize, rng: &mut Rng) -> Self {
        let max_blocks = lens.iter().map(|l| l.div_ceil(block_size)).max().unwrap() + 1;
        let num_blocks = lens.iter().map(|l| l.div_ceil(block_size)).sum::<usize>() + 3;
        let mut free: Vec<u32> = (0..num_blocks as u32).collect();
        for i in (1..free.len()).rev() {
            free.swap(i, rng.below(i + 1));
        }
        let mut tables = vec![0u32; lens.len() * max_blocks];
        for (s, &l) in lens.iter().enumerate() {
            for b in 0..l.div_ceil(block_size) {
                tables[s * max_blocks + b] = free.pop().unwrap();
            }
        }
        PagedBatch {
            new: new.to_vec(),
            lens: lens.to_vec(),
            tables,
            max_blocks,
            block_size,
            num_blocks,
        }
    }

    fn slot(&self, s: usize, t: usize) -> u32 {
        self.tables[s * self.max_blocks + t / self.block_size] * self.block_size as u32
            + (t % self.block_size) as u32
    }

    /// Metadata for writing tokens `from[s]..lens[s]` of each sequence and attending with the
    /// last `new[s]` of them as queries.
    fn meta(&self, dev: &Device, from: &[usize]) -> AttentionMeta {
        let s = self.lens.len();
        let mut qs = vec![0u32];
        for &n in &self.new {
            qs.push(qs.last().unwrap() + n as u32);
        }
        let slots: Vec<u32> = (0..s)
            .flat_map(|i| (from[i]..self.lens[i]).map(move |t| (i, t)))
            .map(|(i, t)| self.slot(i, t))
            .collect();
        AttentionMeta {
            query_start: up_u32(dev, &qs, &[s + 1]),
            seq_lens: up_u32(
                dev,
                &self.lens.iter().map(|&l| l as u32).collect::<Vec<_>>(),
                &[s],
            ),
            block_tables: up_u32(dev, &self.tables, &[s, self.max_blocks]),
            slot_mapping: up_u32(dev, &slots, &[slots.len()]),
            num_seqs: s,
            max_seq_len: *self.lens.iter().max().unwrap(),
        }
    }
}

/// f32 -> cache dtype -> f64, as the cache stores it.
fn through(dtype: DType, v: f32) -> f64 {
    match dtype {
        DType::F16 => half::f16::from_f32(v).to_f64(),
        DType::BF16 => half::bf16::from_f32(v).to_f64(),
        _ => v as f64,
    }
}

#[test]
fn kv_write() {
    for dev in Device::all_for_tests() {
        for dtype in [DType::F32, DType::F16, DType::BF16] {
            let mut rng = Rng::new(13);
            let (kvh, hd, bs) = (2, 8, 4);
            let pb = PagedBatch::new(&[5, 9], &[5, 9], bs, &mut rng);
            let n = 14;
            let (k, v) = (rng.vec(n * kvh * hd), rng.vec(n * kvh * hd));
            let shape = [pb.num_blocks, bs, kvh, hd];
            let mut kc = dev.alloc(dtype, &shape).unwrap();
            let mut vc = dev.alloc(dtype, &shape).unwrap();
            let meta = pb.meta(&dev, &[0, 0]);
            dev.kv_write(
                &up(&dev, &k, &[n, kvh, hd]),
                &up(&dev, &v, &[n, kvh, hd]),
                &mut kc,
                &mut vc,
                &meta,
            )
            .unwrap();
            let (kr, vr) = (read(&dev, &kc), read(&dev, &vc));
            let slots = dev.read_u32(&meta.slot_mapping).unwrap();
            let row = kvh * hd;
            for (t, &s) in slots.iter().enumerate() {
                let s = s as usize;
                let wk: Vec<f64> = k[t * row..(t + 1) * row]
                    .iter()
                    .map(|&x| through(dtype, x))
                    .collect();
                let wv: Vec<f64> = v[t * row..(t + 1) * row]
                    .iter()
                    .map(|&x| through(dtype, x))
                    .collect();
                assert_close("kv_write k", &kr[s * row..(s + 1) * row], &wk, 0.0, 0.0);
                assert_close("kv_write v", &vr[s * row..(s + 1) * row], &wv, 0.0, 0.0);
            }
        }
    }
}

/// f64 attention of one query row of sequence `s` at `pos` against the reference K/V.
#[allow(clippy::too_many_arguments)]
fn ref_attention_row(
    q: &[f32],
    keys: &[Vec<f64>],
    vals: &[Vec<f64>],
    pos: usize,
    p: &AttentionParams,
) -> Vec<f64> {
    let hd = p.head_dim;
    let group = p.num_heads / p.num_kv_heads;
    let mut out = vec![0.0; p.num_heads * hd];
    for h in 0..p.num_heads {
        let kh = h / group;
        let first = p.sliding_window.map_or(0, |w| (pos + 1).saturating_sub(w));
        let scores: Vec<f64> = (first..=pos)
            .map(|t| {
                let k = &keys[t][kh * hd..(kh + 1) * hd];
                let dot: f64 = q[h * hd..(h + 1) * hd]
                    .iter()
                    .zip(k)
                    .map(|(a, b)| *a as f64 * b)
                    .sum();
                let s = dot * p.scale as f64;
                match p.softcap {
                    Some(c) => c as f64 * (s / c as f64).tanh(),
                    None => s,
                }
            })
            .collect();
        let m = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let e: Vec<f64> = scores.iter().map(|s| (s - m).exp()).collect();
        let z: f64 = e.iter().sum();
        for (j, t) in (first..=pos).enumerate() {
            for d in 0..hd {
                out[h * hd + d] += e[j] / z * vals[t][kh * hd + d];
            }
        }
    }
    out
}

#[test]
fn attention() {
    let variants: [(Option<usize>, Option<f32>); 3] =
        [(None, None), (Some(5), None), (None, Some(2.0))];
    for dev in Device::all_for_tests() {
        for dtype in [DType::F32, DType::F16, DType::BF16] {
            for (window, softcap) in variants {
                let mut rng = Rng::new(14);
                let (heads, kvh, hd, bs) = (6, 2, 16, 4);
                let p = AttentionParams {
                    num_heads: heads,
                    num_kv_heads: kvh,
                    head_dim: hd,
                    scale: 1.0 / (hd as f32).sqrt(),
                    sliding_window: window,
                    softcap,
                };
                // A mixed batch: a prefill of 7, a decode at length 13, a chunk of 3 at length 10.
                let lens = [7usize, 13, 10];
                let new = [7usize, 1, 3];
                let pb = PagedBatch::new(&lens, &new, bs, &mut rng);
                let row = kvh * hd;
                let keys: Vec<Vec<Vec<f32>>> = lens
                    .iter()
                    .map(|&l| (0..l).map(|_| rng.vec(row)).collect())
                    .collect();
                let vals: Vec<Vec<Vec<f32>>> = lens
                    .iter()
                    .map(|&l| (0..l).map(|_| rng.vec(row)).collect())
                    .collect();
                let shape = [pb.num_blocks, bs, kvh, hd];
                let mut kc = dev.alloc(dtype, &shape).unwrap();
                let mut vc = dev.alloc(dtype, &shape).unwrap();
                // Write every token (history included) through kv_write, then attend.
                let all = pb.meta(&dev, &[0, 0, 0]);
                let flat = |x: &Vec<Vec<Vec<f32>>>| -> Vec<f32> {
                    x.iter().flatten().flatten().copied().collect()
                };
                let ntok: usize = lens.iter().sum();
                dev.kv_write(
                    &up(&dev, &flat(&keys), &[ntok, kvh, hd]),
                    &up(&dev, &flat(&vals), &[ntok, kvh, hd]),
                    &mut kc,
                    &mut vc,
                    &all,
                )
                .unwrap();
                let from: Vec<usize> = lens.iter().zip(&new).map(|(l, n)| l - n).collect();
                let meta = pb.meta(&dev, &from);
                let nq: usize = new.iter().sum();
                let q = rng.vec(nq * heads * hd);
                let mut out = dev.alloc(DType::F32, &[nq, heads, hd]).unwrap();
                dev.attention(
                    &up(&dev, &q, &[nq, heads, hd]),
                    &kc,
                    &vc,
                    &meta,
                    &p,
                    &mut out,
                )
                .unwrap();
                let mut want = Vec::new();
                let mut qi = 0;
                for s in 0..lens.len() {
                    let kd: Vec<Vec<f64>> = keys[s]
                        .iter()
                        .map(|r| r.iter().map(|&x| through(dtype, x)).collect())
                        .collect();
                    let vd: Vec<Vec<f64>> = vals[s]
                        .iter()
                        .map(|r| r.iter().map(|&x| through(dtype, x)).collect())
                        .collect();
                    for pos in from[s]..lens[s] {
                        want.extend(ref_attention_row(
                            &q[qi * heads * hd..(qi + 1) * heads * hd],
                            &kd,
                            &vd,
                            pos,
                            &p,
                        ));
                        qi += 1;
                    }
                }
                assert_close(
                    &format!("attention {dtype:?} window {window:?} softcap {softcap:?}"),
                    &read(&dev, &out),
                    &want,
                    2e-5,
                    1e-4,
                );
            }
        }
    }
}

#[test]
fn attention_rejects_bad_meta() {
    for dev in Device::all_for_tests() {
        let mut rng = Rng::new(15);
        let pb = PagedBatch::new(&[4], &[4], 4, &mut rng);
        let p = AttentionParams {
            num_heads: 2,
            num_kv_heads: 1,
            head_dim: 8,
            scale: 0.3,
            sliding_window: None,
            softcap: None,
        };
        let kc = dev.alloc(DType::F32, &[pb.num_blocks, 4, 1, 8]).unwrap();
        let vc = dev.alloc(DType::F32, &[pb.num_blocks, 4, 1, 8]).unwrap();
        let mut meta = pb.meta(&dev, &[0]);
        // Claims a length beyond the block table.
        meta.seq_lens = up_u32(&dev, &[400], &[1]);
        let q = up(&dev, &rng.vec(4 * 16), &[4, 2, 8]);
        let mut out = dev.alloc(DType::F32, &[4, 2, 8]).unwrap();
        assert!(dev.attention(&q, &kc, &vc, &meta, &p, &mut out).is_err());
    }
}
