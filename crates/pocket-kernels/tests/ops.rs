//! One test body per op, run on every device `Device::all_for_tests()` opens, against plain
//! f64 references written here (quantized weights: against pocket-quant's reference dequantizer).
//! The paged-attention ops (kv_write, attention) are in `ops_attention.rs`.
#![allow(clippy::needless_range_loop)]

mod ops_support;

use ops_support::{assert_close, read, up, up_u32, Rng};
use pocket_kernels::rope::{RopeConfig, RopeLayout, RopeScaling};
use pocket_kernels::{DType, Device, HostBytes, RopeTable, Weight};
use pocket_quant::{GgmlType, QuantFormat, QuantMatrix};

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
