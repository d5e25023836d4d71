//! One test body per recurrent (Gated DeltaNet) op, run on every device `Device::all_for_tests()`
//! opens, against plain f64 references written here. Every backend implements them (the CPU in
//! `cpu/deltanet.rs` and `cpu/delta_rule.rs`, CUDA in `kernels/deltanet.cu`), so any error fails.
#![allow(clippy::needless_range_loop)]

use pocket_kernels::{DeltaRuleParams, Device, HeadGrouping, KernelError, Result};

mod ops_support;
use ops_support::{meta, read, up, Rng};

/// Fails the test, naming the device, when an op returns an error.
fn ran(d: &Device, r: Result<()>) {
    if let Err(e) = r {
        panic!("{}: {e}", d.name());
    }
}

fn assert_close(what: &str, got: &[f32], want: &[f64], atol: f64) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g as f64 - w).abs() <= atol * (1.0 + w.abs()),
            "{what}[{i}]: got {g}, want {w}"
        );
    }
}

fn silu(x: f64) -> f64 {
    x / (1.0 + (-x).exp())
}

#[test]
fn causal_conv1d_silu() {
    let (c, k, slots) = (5, 4, 3);
    let lens = [6usize, 1];
    let n: usize = lens.iter().sum();
    let mut rng = Rng::new(1);
    let x = rng.vec(n * c);
    let w = rng.vec(c * k);
    let st0 = rng.vec(slots * (k - 1) * c);
    // Sequence 0 is fresh in slot 2; sequence 1 continues from slot 0.
    let (sl, has) = ([2u32, 0], [0u32, 1]);
    for d in Device::all_for_tests() {
        let xt = up(&d, &x, &[n, c]);
        let wt = up(&d, &w, &[c, k]);
        let mut st = up(&d, &st0, &[slots, k - 1, c]);
        let mut out = d.alloc(pocket_kernels::DType::F32, &[n, c]).unwrap();
        let m = meta(&d, &lens, &sl, &has);
        ran(&d, d.causal_conv1d_silu(&xt, &wt, &mut st, &m, &mut out));
        let mut want = vec![0f64; n * c];
        let mut want_st: Vec<f64> = st0.iter().map(|&v| v as f64).collect();
        let mut r0 = 0;
        for (s, &len) in lens.iter().enumerate() {
            let slot = sl[s] as usize;
            let mut win: Vec<Vec<f64>> = (0..k - 1)
                .map(|j| {
                    (0..c)
                        .map(|ch| {
                            if has[s] == 1 {
                                st0[(slot * (k - 1) + j) * c + ch] as f64
                            } else {
                                0.0
                            }
                        })
                        .collect()
                })
                .collect();
            for t in 0..len {
                win.push((0..c).map(|ch| x[(r0 + t) * c + ch] as f64).collect());
            }
            for t in 0..len {
                for ch in 0..c {
                    let acc: f64 = (0..k).map(|j| w[ch * k + j] as f64 * win[t + j][ch]).sum();
                    want[(r0 + t) * c + ch] = silu(acc);
                }
            }
            for j in 0..k - 1 {
                for ch in 0..c {
                    want_st[(slot * (k - 1) + j) * c + ch] = win[len + j][ch];
                }
            }
            r0 += len;
        }
        assert_close("conv out", &read(&d, &out), &want, 1e-5);
        assert_close("conv state", &read(&d, &st), &want_st, 1e-6);
    }
}

#[test]
fn delta_gates() {
    let (n, h) = (3, 4);
    let mut rng = Rng::new(2);
    let alpha: Vec<f32> = rng.vec(n * h).iter().map(|v| v * 30.0).collect(); // crosses softplus's threshold
    let b = rng.vec(n * h);
    let a_neg: Vec<f32> = rng.vec(h).iter().map(|v| -v.abs() - 0.1).collect();
    let dt = rng.vec(h);
    for d in Device::all_for_tests() {
        let mut g = d.alloc(pocket_kernels::DType::F32, &[n, h]).unwrap();
        let mut beta = d.alloc(pocket_kernels::DType::F32, &[n, h]).unwrap();
        let r = d.delta_gates(
            &up(&d, &alpha, &[n, h]),
            &up(&d, &b, &[n, h]),
            &up(&d, &a_neg, &[h]),
            &up(&d, &dt, &[h]),
            &mut g,
            &mut beta,
        );
        ran(&d, r);
        let sp = |x: f64| if x > 20.0 { x } else { x.exp().ln_1p() };
        let wg: Vec<f64> = (0..n * h)
            .map(|i| a_neg[i % h] as f64 * sp(alpha[i] as f64 + dt[i % h] as f64))
            .collect();
        let wb: Vec<f64> = b
            .iter()
            .map(|&v| 1.0 / (1.0 + (-(v as f64)).exp()))
            .collect();
        assert_close("g", &read(&d, &g), &wg, 1e-5);
        assert_close("beta", &read(&d, &beta), &wb, 1e-6);
    }
}

/// The delta rule in f64, token by token, for one batch; returns (out, final states).
#[allow(clippy::too_many_arguments)]
fn delta_reference(
    qkv: &[f32],
    g: &[f32],
    beta: &[f32],
    st0: &[f32],
    lens: &[usize],
    slots: &[u32],
    has: &[u32],
    p: &DeltaRuleParams,
) -> (Vec<f64>, Vec<f64>) {
    let (hk, hv, dk, dv) = (p.k_heads, p.v_heads, p.k_dim, p.v_dim);
    let width = p.qkv_width();
    let n: usize = lens.iter().sum();
    let mut out = vec![0f64; n * hv * dv];
    let mut st: Vec<f64> = st0.iter().map(|&v| v as f64).collect();
    let norm = |v: &[f32], scale: f64| -> Vec<f64> {
        let ss: f64 = v.iter().map(|&x| x as f64 * x as f64).sum();
        let inv = 1.0 / (ss + p.l2_eps as f64).sqrt();
        v.iter().map(|&x| x as f64 * inv * scale).collect()
    };
    let mut r0 = 0;
    for (s, &len) in lens.iter().enumerate() {
        for h in 0..hv {
            let kh = p.grouping.key_head(h, hk, hv);
            let off = (slots[s] as usize * hv + h) * dk * dv;
            let mut m: Vec<f64> = if has[s] == 1 {
                st[off..off + dk * dv].to_vec()
            } else {
                vec![0.0; dk * dv]
            };
            for t in 0..len {
                let row = &qkv[(r0 + t) * width..(r0 + t + 1) * width];
                let q = norm(&row[kh * dk..(kh + 1) * dk], p.scale as f64);
                let k = norm(&row[(hk + kh) * dk..(hk + kh + 1) * dk], 1.0);
                let v0 = 2 * hk * dk + h * dv;
                let v = &row[v0..v0 + dv];
                let decay = (g[(r0 + t) * hv + h] as f64).exp();
                m.iter_mut().for_each(|e| *e *= decay);
                let b = beta[(r0 + t) * hv + h] as f64;
                for j in 0..dv {
                    let kv: f64 = (0..dk).map(|i| m[i * dv + j] * k[i]).sum();
                    let delta = (v[j] as f64 - kv) * b;
                    for i in 0..dk {
                        m[i * dv + j] += k[i] * delta;
                    }
                }
                for j in 0..dv {
                    out[(r0 + t) * hv * dv + h * dv + j] =
                        (0..dk).map(|i| m[i * dv + j] * q[i]).sum();
                }
            }
            st[off..off + dk * dv].copy_from_slice(&m);
        }
        r0 += len;
    }
    (out, st)
}

fn delta_rule_case(chunked: bool, grouping: HeadGrouping) {
    let p = DeltaRuleParams {
        k_heads: 2,
        v_heads: 4,
        k_dim: 8,
        v_dim: 6,
        grouping,
        l2_eps: 1e-6,
        scale: 1.0 / (8f32).sqrt(),
    };
    // A prompt longer than one 64-token chunk, a short one continuing from a stored state.
    let lens = if chunked {
        vec![70usize, 3]
    } else {
        vec![1usize, 1]
    };
    let (sl, has) = ([1u32, 2], [0u32, 1]);
    let slots = 3;
    let n: usize = lens.iter().sum();
    let mut rng = Rng::new(if chunked { 3 } else { 4 });
    let qkv = rng.vec(n * p.qkv_width());
    let g: Vec<f32> = rng
        .vec(n * p.v_heads)
        .iter()
        .map(|v| -0.3 * v.abs())
        .collect();
    let beta: Vec<f32> = rng
        .vec(n * p.v_heads)
        .iter()
        .map(|v| 0.5 + 0.5 * v)
        .collect();
    let st0: Vec<f32> = rng.vec(slots * p.v_heads * p.k_dim * p.v_dim);
    let (want, want_st) = delta_reference(&qkv, &g, &beta, &st0, &lens, &sl, &has, &p);
    for d in Device::all_for_tests() {
        let mut st = up(&d, &st0, &[slots, p.v_heads, p.k_dim, p.v_dim]);
        let mut out = d
            .alloc(pocket_kernels::DType::F32, &[n, p.v_heads * p.v_dim])
            .unwrap();
        let m = meta(&d, &lens, &sl, &has);
        let (x, gt, bt) = (
            up(&d, &qkv, &[n, p.qkv_width()]),
            up(&d, &g, &[n, p.v_heads]),
            up(&d, &beta, &[n, p.v_heads]),
        );
        let r = if chunked {
            d.gated_delta_rule_chunked(&x, &gt, &bt, &mut st, &m, &p, &mut out)
        } else {
            d.gated_delta_rule_recurrent(&x, &gt, &bt, &mut st, &m, &p, &mut out)
        };
        ran(&d, r);
        assert_close("delta out", &read(&d, &out), &want, 1e-4);
        assert_close("delta state", &read(&d, &st), &want_st, 1e-4);
    }
}

#[test]
fn gated_delta_rule_chunked() {
    delta_rule_case(true, HeadGrouping::Grouped);
    delta_rule_case(true, HeadGrouping::Tiled);
}

#[test]
fn gated_delta_rule_recurrent() {
    delta_rule_case(false, HeadGrouping::Grouped);
    delta_rule_case(false, HeadGrouping::Tiled);
}

#[test]
fn delta_rule_rejects_shared_slot_and_bad_shapes() {
    let p = DeltaRuleParams {
        k_heads: 1,
        v_heads: 2,
        k_dim: 4,
        v_dim: 4,
        grouping: HeadGrouping::Grouped,
        l2_eps: 1e-6,
        scale: 0.5,
    };
    for d in Device::all_for_tests() {
        let x = up(&d, &[0.1; 2 * 16], &[2, 16]);
        let g = up(&d, &[0.0; 4], &[2, 2]);
        let mut st = up(&d, &[0.0; 2 * 2 * 16], &[2, 2, 4, 4]);
        let mut out = d.alloc(pocket_kernels::DType::F32, &[2, 8]).unwrap();
        let m = meta(&d, &[1, 1], &[0, 0], &[0, 0]);
        match d.gated_delta_rule_recurrent(&x, &g, &g, &mut st, &m, &p, &mut out) {
            Err(KernelError::Shape { .. }) => {}
            other => panic!("{}: shared slot accepted: {other:?}", d.name()),
        }
        let m = meta(&d, &[1, 1], &[0, 1], &[0, 0]);
        let bad = up(&d, &[0.1; 2 * 15], &[2, 15]);
        assert!(d
            .gated_delta_rule_chunked(&bad, &g, &g, &mut st, &m, &p, &mut out)
            .is_err());
    }
}

#[test]
fn gated_rms_norm() {
    let (rows, dim) = (6, 8);
    let mut rng = Rng::new(5);
    let (x, gate, w) = (rng.vec(rows * dim), rng.vec(rows * dim), rng.vec(dim));
    for d in Device::all_for_tests() {
        let mut out = d.alloc(pocket_kernels::DType::F32, &[rows, dim]).unwrap();
        let r = d.gated_rms_norm(
            &up(&d, &x, &[rows, dim]),
            &up(&d, &gate, &[rows, dim]),
            &up(&d, &w, &[dim]),
            1e-6,
            &mut out,
        );
        ran(&d, r);
        let mut want = vec![0f64; rows * dim];
        for r in 0..rows {
            let row = &x[r * dim..(r + 1) * dim];
            let ms: f64 = row.iter().map(|&v| (v as f64).powi(2)).sum::<f64>() / dim as f64;
            let inv = 1.0 / (ms + 1e-6).sqrt();
            for i in 0..dim {
                want[r * dim + i] =
                    row[i] as f64 * inv * w[i] as f64 * silu(gate[r * dim + i] as f64);
            }
        }
        assert_close("gated_rms_norm", &read(&d, &out), &want, 1e-5);
    }
}

#[test]
fn split_halves_and_sigmoid_mul() {
    let (rows, half) = (5, 3);
    let mut rng = Rng::new(6);
    let x = rng.vec(rows * 2 * half);
    for d in Device::all_for_tests() {
        let xt = up(&d, &x, &[rows, 2 * half]);
        let mut a = d.alloc(pocket_kernels::DType::F32, &[rows, half]).unwrap();
        let mut b = d.alloc(pocket_kernels::DType::F32, &[rows, half]).unwrap();
        ran(&d, d.split_halves(&xt, &mut a, &mut b));
        let first: Vec<f64> = (0..rows * half)
            .map(|i| x[(i / half) * 2 * half + i % half] as f64)
            .collect();
        let second: Vec<f64> = (0..rows * half)
            .map(|i| x[(i / half) * 2 * half + half + i % half] as f64)
            .collect();
        assert_close("first", &read(&d, &a), &first, 0.0);
        assert_close("second", &read(&d, &b), &second, 0.0);
        ran(&d, d.sigmoid_mul(&mut a, &b));
        let want: Vec<f64> = first
            .iter()
            .zip(&second)
            .map(|(f, s)| f / (1.0 + (-s).exp()))
            .collect();
        assert_close("sigmoid_mul", &read(&d, &a), &want, 1e-6);
    }
}
