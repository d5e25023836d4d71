//! One test body per op, run on every device `Device::all_for_tests()` opens, against plain
//! f64 references written here (quantized weights: against pocket-quant's reference dequantizer).
#![allow(clippy::needless_range_loop)]

use pocket_kernels::rope::{RopeConfig, RopeLayout, RopeScaling};
use pocket_kernels::{
    AttentionMeta, AttentionParams, DType, Device, HostBytes, RopeTable, Tensor, Weight,
};
use pocket_quant::{GgmlType, QuantFormat, QuantMatrix};

/// A small deterministic generator (xorshift64*), so tests need no extra crates.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    /// Uniform in [-1, 1).
    fn f32(&mut self) -> f32 {
        ((self.next_u64() >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    }
    fn vec(&mut self, n: usize) -> Vec<f32> {
        (0..n).map(|_| self.f32()).collect()
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }
}

fn up(d: &Device, data: &[f32], shape: &[usize]) -> Tensor {
    d.upload_f32(data, shape).unwrap()
}

fn up_u32(d: &Device, data: &[u32], shape: &[usize]) -> Tensor {
    d.upload_u32(data, shape).unwrap()
}

fn read(d: &Device, t: &Tensor) -> Vec<f32> {
    d.read_f32(t).unwrap()
}

/// Asserts `|got - want| <= atol + rtol * |want|` elementwise, naming the worst element.
fn assert_close(what: &str, got: &[f32], want: &[f64], atol: f64, rtol: f64) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    let mut worst = (0usize, 0.0f64);
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        let err = (g as f64 - w).abs() - (atol + rtol * w.abs());
        if err > worst.1 || g.is_nan() {
            worst = (i, if g.is_nan() { f64::INFINITY } else { err });
        }
    }
    let i = worst.0;
    assert!(
        worst.1 <= 0.0,
        "{what}: element {i}: got {}, want {} (atol {atol}, rtol {rtol})",
        got[i],
        want[i]
    );
}

/// A `[rows, cols]` weight in `format` from f32 values, and its dequantized values.
fn make_weight(
    d: &Device,
    format: QuantFormat,
    rows: usize,
    cols: usize,
    w: &[f32],
) -> (Weight, Vec<f32>) {
    let bytes = if format.has_quantizer() {
        pocket_quant::quantize(format, w).unwrap()
    } else {
        random_blocks(format, rows * cols, w)
    };
    let m = QuantMatrix {
        format,
        rows,
        cols,
        data: &bytes,
        scales: None,
        tensor_scale: None,
    };
    let mut deq = vec![0.0f32; rows * cols];
    pocket_quant::dequantize_matrix(&m, &mut deq).unwrap();
    let weight = d
        .upload_weight(format, rows, cols, HostBytes::from_vec(bytes), None, None)
        .unwrap();
    (weight, deq)
}

/// Random blocks of a format without a quantizer (K-quants): random quants and sub-scales,
/// with the f16 super-scales overwritten by small finite values drawn from `seed`.
fn random_blocks(format: QuantFormat, n: usize, seed: &[f32]) -> Vec<u8> {
    let nb = n / format.block_size();
    let bb = format.block_bytes();
    let mut rng = Rng::new(seed.len() as u64 + (seed[0].to_bits() as u64));
    let mut out: Vec<u8> = (0..nb * bb).map(|_| rng.next_u64() as u8).collect();
    // Offsets of the f16 super-block scales, from ggml's block layouts.
    let scale_offsets: &[usize] = match format.ggml_type() {
        Some(GgmlType::Q4_K) | Some(GgmlType::Q5_K) => &[0, 2],
        Some(GgmlType::Q6_K) => &[208],
        Some(GgmlType::Q2_K) => &[80, 82],
        Some(GgmlType::Q3_K) => &[108],
        other => panic!("no random-block layout for {other:?}"),
    };
    for b in out.chunks_exact_mut(bb) {
        for &o in scale_offsets {
            let v = half::f16::from_f32(0.002 + 0.01 * rng.f32().abs());
            b[o..o + 2].copy_from_slice(&v.to_le_bytes());
        }
    }
    out
}

/// The largest error int8 activation blocks of `block` elements can add to `Σ w·x`.
fn act_quant_bound(w_row: &[f32], x: &[f32], block: usize) -> f64 {
    w_row
        .chunks(block)
        .zip(x.chunks(block))
        .map(|(w, x)| {
            let amax = x.iter().fold(0.0f64, |m, v| m.max(v.abs() as f64));
            let half_step = amax / 127.0 / 2.0;
            w.iter().map(|v| v.abs() as f64).sum::<f64>() * half_step
        })
        .sum()
}

#[test]
fn matmul() {
    let formats = [
        GgmlType::F32,
        GgmlType::F16,
        GgmlType::BF16,
        GgmlType::Q8_0,
        GgmlType::Q4_0,
        GgmlType::Q4_1,
        GgmlType::Q5_0,
        GgmlType::Q4_K,
        GgmlType::Q6_K,
    ];
    for dev in Device::all_for_tests() {
        for (fi, &t) in formats.iter().enumerate() {
            let format = QuantFormat::Ggml(t);
            let mut rng = Rng::new(10 + fi as u64);
            let (rows, cols) = (48, 512);
            for n in [1usize, 3, 17] {
                let w = rng.vec(rows * cols);
                let x = rng.vec(n * cols);
                let (weight, deq) = make_weight(&dev, format, rows, cols, &w);
                let xt = up(&dev, &x, &[n, cols]);
                let mut out = dev.alloc(DType::F32, &[n, rows]).unwrap();
                dev.matmul(&xt, &weight, &mut out).unwrap();
                let got = read(&dev, &out);
                let act_block = match format.activation_format() {
                    pocket_quant::ActFormat::F32 => 0,
                    pocket_quant::ActFormat::Q8_K => 256,
                    _ => 32,
                };
                for i in 0..n {
                    for r in 0..rows {
                        let wr = &deq[r * cols..(r + 1) * cols];
                        let xr = &x[i * cols..(i + 1) * cols];
                        let want: f64 = wr.iter().zip(xr).map(|(a, b)| *a as f64 * *b as f64).sum();
                        // f32 accumulation over 512 terms of magnitude <= 1, plus the exact bound
                        // of rounding the activations to int8 where the format dots against int8.
                        let mut tol = 1e-4;
                        if act_block > 0 {
                            tol += act_quant_bound(wr, xr, act_block);
                        }
                        let g = got[i * rows + r] as f64;
                        assert!(
                            (g - want).abs() <= tol,
                            "{} on {dev:?}, n={n}: out[{i},{r}] = {g}, want {want} ± {tol}",
                            format.name()
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn matmul_rejects_bad_shapes() {
    for dev in Device::all_for_tests() {
        let (w, _) = make_weight(&dev, QuantFormat::Ggml(GgmlType::F32), 4, 32, &[0.5; 128]);
        let x = up(&dev, &[1.0; 64], &[2, 32]);
        let mut out = dev.alloc(DType::F32, &[2, 5]).unwrap();
        assert!(dev.matmul(&x, &w, &mut out).is_err());
        let x_bad = up(&dev, &[1.0; 62], &[2, 31]);
        let mut out = dev.alloc(DType::F32, &[2, 4]).unwrap();
        assert!(dev.matmul(&x_bad, &w, &mut out).is_err());
    }
}

#[test]
fn embedding() {
    for dev in Device::all_for_tests() {
        for t in [GgmlType::F32, GgmlType::F16, GgmlType::Q8_0, GgmlType::Q4_K] {
            let format = QuantFormat::Ggml(t);
            let mut rng = Rng::new(3);
            let (rows, cols) = (10, 256);
            let (table, deq) = make_weight(&dev, format, rows, cols, &rng.vec(rows * cols));
            let ids = [7u32, 0, 9, 7];
            let idt = up_u32(&dev, &ids, &[4]);
            let mut out = dev.alloc(DType::F32, &[4, cols]).unwrap();
            dev.embedding(&table, &idt, &mut out).unwrap();
            let want: Vec<f64> = ids
                .iter()
                .flat_map(|&i| {
                    deq[i as usize * cols..(i as usize + 1) * cols]
                        .iter()
                        .map(|&v| v as f64)
                })
                .collect();
            assert_close("embedding", &read(&dev, &out), &want, 0.0, 0.0);
            let bad = up_u32(&dev, &[10], &[1]);
            let mut out1 = dev.alloc(DType::F32, &[1, cols]).unwrap();
            assert!(
                dev.embedding(&table, &bad, &mut out1).is_err(),
                "id out of range must fail"
            );
        }
    }
}

#[test]
fn add_bias() {
    for dev in Device::all_for_tests() {
        let mut rng = Rng::new(4);
        let (x, b) = (rng.vec(3 * 40), rng.vec(40));
        let mut xt = up(&dev, &x, &[3, 40]);
        dev.add_bias(&mut xt, &up(&dev, &b, &[40])).unwrap();
        let want: Vec<f64> = x
            .iter()
            .enumerate()
            .map(|(i, &v)| v as f64 + b[i % 40] as f64)
            .collect();
        assert_close("add_bias", &read(&dev, &xt), &want, 1e-6, 0.0);
        assert!(dev.add_bias(&mut xt, &up(&dev, &b[..39], &[39])).is_err());
    }
}

/// f64 RMSNorm of rows of `w.len()`.
fn ref_rms_norm(x: &[f64], w: &[f32], eps: f32) -> Vec<f64> {
    x.chunks(w.len())
        .flat_map(|r| {
            let ms = r.iter().map(|v| v * v).sum::<f64>() / r.len() as f64;
            let inv = 1.0 / (ms + eps as f64).sqrt();
            r.iter()
                .zip(w)
                .map(move |(v, w)| v * inv * *w as f64)
                .collect::<Vec<_>>()
        })
        .collect()
}

#[test]
fn rms_norm() {
    for dev in Device::all_for_tests() {
        let mut rng = Rng::new(5);
        // Per-head use: [tokens * heads, head_dim] rows against a head_dim weight.
        for (rows, d) in [(5usize, 576usize), (4 * 3, 64), (600, 64)] {
            let x = rng.vec(rows * d);
            let w = rng.vec(d);
            let xt = up(&dev, &x, &[rows, d]);
            let mut out = dev.alloc(DType::F32, &[rows, d]).unwrap();
            dev.rms_norm(&xt, &up(&dev, &w, &[d]), 1e-5, &mut out)
                .unwrap();
            let xd: Vec<f64> = x.iter().map(|&v| v as f64).collect();
            assert_close(
                "rms_norm",
                &read(&dev, &out),
                &ref_rms_norm(&xd, &w, 1e-5),
                1e-5,
                1e-5,
            );
        }
    }
}

#[test]
fn add_rms_norm() {
    for dev in Device::all_for_tests() {
        let mut rng = Rng::new(6);
        let (n, d) = (7, 576);
        let (r, dl, w) = (rng.vec(n * d), rng.vec(n * d), rng.vec(d));
        let mut rt = up(&dev, &r, &[n, d]);
        let mut out = dev.alloc(DType::F32, &[n, d]).unwrap();
        dev.add_rms_norm(
            &mut rt,
            &up(&dev, &dl, &[n, d]),
            &up(&dev, &w, &[d]),
            1e-6,
            &mut out,
        )
        .unwrap();
        let sum: Vec<f64> = r
            .iter()
            .zip(&dl)
            .map(|(a, b)| *a as f64 + *b as f64)
            .collect();
        assert_close("add_rms_norm residual", &read(&dev, &rt), &sum, 1e-6, 0.0);
        assert_close(
            "add_rms_norm out",
            &read(&dev, &out),
            &ref_rms_norm(&sum, &w, 1e-6),
            1e-5,
            1e-5,
        );
    }
}

#[test]
fn add_assign() {
    for dev in Device::all_for_tests() {
        let mut rng = Rng::new(7);
        let (a, b) = (rng.vec(100), rng.vec(100));
        let mut at = up(&dev, &a, &[4, 25]);
        dev.add_assign(&mut at, &up(&dev, &b, &[4, 25])).unwrap();
        let want: Vec<f64> = a
            .iter()
            .zip(&b)
            .map(|(x, y)| *x as f64 + *y as f64)
            .collect();
        assert_close("add_assign", &read(&dev, &at), &want, 1e-6, 0.0);
        assert!(dev.add_assign(&mut at, &up(&dev, &b[..99], &[99])).is_err());
    }
}

#[test]
fn silu_mul() {
    for dev in Device::all_for_tests() {
        let mut rng = Rng::new(8);
        let n = 3 * 1536;
        let g: Vec<f32> = rng.vec(n).iter().map(|v| v * 8.0).collect();
        let u = rng.vec(n);
        let mut out = dev.alloc(DType::F32, &[3, 1536]).unwrap();
        dev.silu_mul(
            &up(&dev, &g, &[3, 1536]),
            &up(&dev, &u, &[3, 1536]),
            &mut out,
        )
        .unwrap();
        let want: Vec<f64> = g
            .iter()
            .zip(&u)
            .map(|(&g, &u)| {
                let g = g as f64;
                g / (1.0 + (-g).exp()) * u as f64
            })
            .collect();
        assert_close("silu_mul", &read(&dev, &out), &want, 1e-6, 1e-5);
    }
}

/// f64 RoPE of one `[heads, head_dim]` token at `pos`, from the config's inverse frequencies.
fn ref_rope(x: &[f32], heads: usize, hd: usize, pos: usize, cfg: &RopeConfig) -> Vec<f64> {
    let (freqs, mscale) = cfg.inv_freqs();
    let half = cfg.rot_dim / 2;
    let mut out: Vec<f64> = x.iter().map(|&v| v as f64).collect();
    for h in 0..heads {
        let head = &mut out[h * hd..(h + 1) * hd];
        for i in 0..half {
            let (a, b) = match cfg.layout {
                RopeLayout::Interleaved => (2 * i, 2 * i + 1),
                RopeLayout::NeoX => (i, i + half),
            };
            let ang = pos as f64 * freqs[i] as f64;
            let (c, s) = (ang.cos() * mscale as f64, ang.sin() * mscale as f64);
            let (x0, x1) = (head[a], head[b]);
            head[a] = x0 * c - x1 * s;
            head[b] = x0 * s + x1 * c;
        }
    }
    out
}

#[test]
fn rope() {
    let scalings = [
        RopeScaling::None,
        RopeScaling::Linear { factor: 4.0 },
        RopeScaling::Llama3 {
            factor: 8.0,
            low_freq_factor: 1.0,
            high_freq_factor: 4.0,
            original_max_position: 64,
        },
        RopeScaling::Yarn {
            factor: 4.0,
            original_max_position: 64,
            beta_fast: 32.0,
            beta_slow: 1.0,
            attn_factor: None,
        },
    ];
    for dev in Device::all_for_tests() {
        let mut rng = Rng::new(9);
        for layout in [RopeLayout::Interleaved, RopeLayout::NeoX] {
            for scaling in scalings {
                for (hd, rot) in [(64usize, 64usize), (64, 32)] {
                    let cfg = RopeConfig {
                        theta: 10000.0,
                        rot_dim: rot,
                        layout,
                        scaling,
                    };
                    let table = dev.upload_rope(&RopeTable::new(cfg, 300)).unwrap();
                    let (n, heads) = (4, 3);
                    let x = rng.vec(n * heads * hd);
                    let pos = [0u32, 1, 77, 299];
                    let mut xt = up(&dev, &x, &[n, heads, hd]);
                    dev.rope(&mut xt, &up_u32(&dev, &pos, &[n]), &table)
                        .unwrap();
                    let want: Vec<f64> = (0..n)
                        .flat_map(|t| {
                            ref_rope(
                                &x[t * heads * hd..(t + 1) * heads * hd],
                                heads,
                                hd,
                                pos[t] as usize,
                                &cfg,
                            )
                        })
                        .collect();
                    assert_close(
                        &format!("rope {layout:?} {scaling:?} rot {rot}"),
                        &read(&dev, &xt),
                        &want,
                        2e-5,
                        1e-5,
                    );
                    let mut x1 = up(&dev, &x[..heads * hd], &[1, heads, hd]);
                    assert!(dev
                        .rope(&mut x1, &up_u32(&dev, &[300], &[1]), &table)
                        .is_err());
                }
            }
        }
    }
}

#[test]
fn argmax() {
    for dev in Device::all_for_tests() {
        let mut rng = Rng::new(11);
        let (n, v) = (5, 1000);
        let mut l = rng.vec(n * v);
        l[2 * v + 5] = 3.0;
        l[2 * v + 6] = 3.0; // ties pick the first
        let mut out = dev.alloc(DType::U32, &[n]).unwrap();
        dev.argmax(&up(&dev, &l, &[n, v]), &mut out).unwrap();
        let got = dev.read_u32(&out).unwrap();
        for r in 0..n {
            let row = &l[r * v..(r + 1) * v];
            let mut best = 0;
            for i in 0..v {
                if row[i] > row[best] {
                    best = i;
                }
            }
            assert_eq!(got[r], best as u32, "row {r}");
        }
        assert_eq!(got[2], 5, "ties pick the first index");
    }
}

#[test]
fn gather_rows() {
    for dev in Device::all_for_tests() {
        let mut rng = Rng::new(12);
        let src = rng.vec(6 * 9);
        let idx = [5u32, 0, 3];
        let mut out = dev.alloc(DType::F32, &[3, 9]).unwrap();
        dev.gather_rows(
            &up(&dev, &src, &[6, 9]),
            &up_u32(&dev, &idx, &[3]),
            &mut out,
        )
        .unwrap();
        let want: Vec<f64> = idx
            .iter()
            .flat_map(|&r| {
                src[r as usize * 9..(r as usize + 1) * 9]
                    .iter()
                    .map(|&v| v as f64)
            })
            .collect();
        assert_close("gather_rows", &read(&dev, &out), &want, 0.0, 0.0);
        assert!(dev
            .gather_rows(
                &up(&dev, &src, &[6, 9]),
                &up_u32(&dev, &[6], &[1]),
                &mut out
            )
            .is_err());
    }
}

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
