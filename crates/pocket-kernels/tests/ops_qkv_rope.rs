//! The attention-input op (`qkv_rope_kv_write`, and `qkv_norm_rope_kv_write` with QK-norm and the
//! gate output), one test body run on every device `Device::all_for_tests()` opens (CUDA skipped
//! without a GPU): against the unfused ops on the same device (`split_columns` + `add_bias` +
//! `split_halves` + `rms_norm` x2 + `rope` x2 + `kv_write`), which it must match bit for bit,
//! against a plain f64 reference (qkv_rope_cases/), and CUDA against the CPU backend (also bit for
//! bit without QK-norm: both round every RoPE product and sum, so CUDA `rope` equals the CPU's
//! too). With QK-norm, CUDA sums each head's squares in a tree, the CPU sequentially: there the
//! CUDA results are compared within a few f32 ulps (see `NORM_TOL`).
#![allow(clippy::needless_range_loop)]

mod ops_support;
mod qkv_rope_cases;

use ops_support::{assert_close, read, up, up_u32, Rng};
use pocket_kernels::qkv_rope::QkNorm;
use pocket_kernels::rope::DeviceRope;
use pocket_kernels::{
    AttentionMeta, DType, Device, DeviceKind, QkvBias, QkvRopeParams, QkvSource, Tensor,
};
use qkv_rope_cases::{
    bits, caches, cases, inputs, meta, params, reference, rows_at, Case, Inputs, Outputs, BLOCKS,
    BLOCK_SIZE, EPS, MAX_POS, NORM_TOL,
};

/// The case's QK-norm weights on `d` (`None` without QK-norm).
fn norm_weights(d: &Device, c: &Case, inp: &Inputs) -> Option<(Tensor, Tensor)> {
    let hd = [c.head_dim];
    c.qk_norm
        .then(|| (up(d, &inp.q_norm, &hd), up(d, &inp.k_norm, &hd)))
}

/// The op under test on `d`.
fn fused(d: &Device, c: &Case, inp: &Inputs) -> Outputs {
    let p = params(c);
    let (qw, kw) = (p.q_width(), p.kv_width());
    let (n, w) = (c.n, qw + 2 * kw);
    let rope = d.upload_rope(&inp.table).unwrap();
    let pos = up_u32(d, &inp.positions, &[n]);
    let m = meta(d, &inp.slots);
    let (mut kc, mut vc) = caches(d, c, inp);
    let mut q = d.alloc(DType::F32, &[n, c.heads, c.head_dim]).unwrap();
    let x = up(d, &inp.x, &[n, w]);
    let cols = |v: &[f32], rows: usize, a: usize, b: usize| -> Vec<f32> {
        (0..rows)
            .flat_map(|r| v[r * w + a..r * w + b].to_vec())
            .collect()
    };
    let sep = [
        up(d, &cols(&inp.x, n, 0, qw), &[n, qw]),
        up(d, &cols(&inp.x, n, qw, qw + kw), &[n, kw]),
        up(d, &cols(&inp.x, n, qw + kw, w), &[n, kw]),
    ];
    let bias_st = c.bias.then(|| up(d, &inp.bias, &[w]));
    let bias_sep: Vec<Tensor> = if c.bias {
        vec![
            up(d, &inp.bias[..qw], &[qw]),
            up(d, &inp.bias[qw..qw + kw], &[kw]),
            up(d, &inp.bias[qw + kw..], &[kw]),
        ]
    } else {
        Vec::new()
    };
    let (src, bias) = if c.separate {
        let bias = match bias_sep.as_slice() {
            [bq, bk, bv] => QkvBias::Separate {
                q: Some(bq),
                k: Some(bk),
                v: Some(bv),
            },
            _ => QkvBias::None,
        };
        let [q, k, v] = &sep;
        (QkvSource::Separate { q, k, v }, bias)
    } else {
        let bias = bias_st.as_ref().map_or(QkvBias::None, QkvBias::Stacked);
        (QkvSource::Stacked(&x), bias)
    };
    let res = if c.qk_norm || c.gate_out {
        let norms = norm_weights(d, c, inp);
        let norm = QkNorm {
            q: norms.as_ref().map(|(q, _)| (q, EPS)),
            k: norms.as_ref().map(|(_, k)| (k, EPS)),
        };
        let mut gate = d.alloc(DType::F32, &[n, c.heads * c.head_dim]).unwrap();
        let gate_out = c.gate_out.then_some(&mut gate);
        let r = d.qkv_norm_rope_kv_write(
            src, bias, &p, norm, &pos, &rope, &mut q, gate_out, &mut kc, &mut vc, &m,
        );
        r.map(|()| {
            if c.gate_out {
                read(d, &gate)
            } else {
                Vec::new()
            }
        })
    } else {
        d.qkv_rope_kv_write(src, bias, &p, &pos, &rope, &mut q, &mut kc, &mut vc, &m)
            .map(|()| Vec::new())
    };
    match res {
        Ok(gate) => (read(d, &q), read(d, &kc), read(d, &vc), gate),
        Err(e) => panic!("{}: {c:?}: {e}", d.name()),
    }
}

/// The unfused sequence the layers run with `POCKET_FUSED_QKV=0`: stacked, bias then split;
/// separate (as `Linear::forward` of each projection), a bias add per projection. Then the gate
/// split, the QK-norms, rope x2 and kv_write.
fn unfused(d: &Device, c: &Case, inp: &Inputs, rope: &DeviceRope) -> Outputs {
    let p = params(c);
    let (qw, kw) = (p.q_width(), p.kv_width());
    let (n, w, hd) = (c.n, qw + 2 * kw, c.head_dim);
    let (mut qg, mut k, mut v) = if c.separate {
        let cols = |a: usize, b: usize| -> Vec<f32> {
            (0..n)
                .flat_map(|r| inp.x[r * w + a..r * w + b].to_vec())
                .collect()
        };
        let mut parts = [
            up(d, &cols(0, qw), &[n, qw]),
            up(d, &cols(qw, qw + kw), &[n, kw]),
            up(d, &cols(qw + kw, w), &[n, kw]),
        ];
        if c.bias {
            for (t, (a, b)) in parts.iter_mut().zip([(0, qw), (qw, qw + kw), (qw + kw, w)]) {
                d.add_bias(t, &up(d, &inp.bias[a..b], &[b - a])).unwrap();
            }
        }
        let [q, k, v] = parts;
        (q, k, v)
    } else {
        let mut x = up(d, &inp.x, &[n, w]);
        if c.bias {
            d.add_bias(&mut x, &up(d, &inp.bias, &[w])).unwrap();
        }
        let mut qg = d.alloc(DType::F32, &[n, qw]).unwrap();
        let mut k = d.alloc(DType::F32, &[n, kw]).unwrap();
        let mut v = d.alloc(DType::F32, &[n, kw]).unwrap();
        d.split_columns(&x, &mut [&mut qg, &mut k, &mut v]).unwrap();
        (qg, k, v)
    };
    let (mut q, gate) = if c.gated {
        let mut q = d.alloc(DType::F32, &[n * c.heads, hd]).unwrap();
        let mut gate = d.alloc(DType::F32, &[n * c.heads, hd]).unwrap();
        qg.reshape(&[n * c.heads, 2 * hd]).unwrap();
        d.split_halves(&qg, &mut q, &mut gate).unwrap();
        (
            q,
            if c.gate_out {
                read(d, &gate)
            } else {
                Vec::new()
            },
        )
    } else {
        (qg, Vec::new())
    };
    if c.qk_norm {
        for (t, w, heads) in [
            (&mut q, &inp.q_norm, c.heads),
            (&mut k, &inp.k_norm, c.kv_heads),
        ] {
            t.reshape(&[n * heads, hd]).unwrap();
            let mut normed = d.alloc(DType::F32, &[n * heads, hd]).unwrap();
            d.rms_norm(t, &up(d, w, &[hd]), EPS, &mut normed).unwrap();
            *t = normed;
        }
    }
    q.reshape(&[n, c.heads, hd]).unwrap();
    k.reshape(&[n, c.kv_heads, hd]).unwrap();
    v.reshape(&[n, c.kv_heads, hd]).unwrap();
    let pos = up_u32(d, &inp.positions, &[n]);
    d.rope(&mut q, &pos, rope).unwrap();
    d.rope(&mut k, &pos, rope).unwrap();
    let (mut kc, mut vc) = caches(d, c, inp);
    d.kv_write(&k, &v, &mut kc, &mut vc, &meta(d, &inp.slots))
        .unwrap();
    (read(d, &q), read(d, &kc), read(d, &vc), gate)
}

#[test]
fn fused_matches_unfused_bit_for_bit_and_the_reference() {
    let mut rng = Rng::new(7);
    let cpu = Device::cpu();
    if Device::all_for_tests().len() == 1 {
        eprintln!("no CUDA device: CPU only");
    }
    for c in cases() {
        let inp = inputs(&c, &mut rng);
        let cpu_out = fused(&cpu, &c, &inp);
        let (rq, rk, rv, rg) = reference(&c, &inp);
        let row = c.kv_heads * c.head_dim;
        // f32 rotation of O(3) values: a few f32 ulps; f16/bf16 caches round the stored K/V.
        let cache_tol = match c.cache {
            DType::F16 => 2e-3,
            DType::BF16 => 1.6e-2,
            _ => 1e-5,
        };
        for d in Device::all_for_tests() {
            let rope = d.upload_rope(&inp.table).unwrap();
            let got = fused(&d, &c, &inp);
            let want = unfused(&d, &c, &inp, &rope);
            let tag = format!("{} {c:?}", d.name());
            // The gates are copies (+ bias): bit for bit everywhere.
            assert_eq!(bits(&got.3), bits(&want.3), "{tag}: gates vs unfused");
            assert_eq!(bits(&got.3), bits(&cpu_out.3), "{tag}: gates vs cpu");
            assert_close(&format!("{tag}: gates"), &got.3, &rg, 1e-6, 1e-6);
            // V never passes the norm: bit for bit everywhere.
            assert_eq!(bits(&got.2), bits(&want.2), "{tag}: v cache vs unfused");
            assert_eq!(bits(&got.2), bits(&cpu_out.2), "{tag}: v cache vs cpu");
            // CUDA's QK-norm reduces in another order than its rms_norm kernels and the CPU.
            let exact = !c.qk_norm || d.kind() == DeviceKind::Cpu;
            if exact {
                assert_eq!(bits(&got.0), bits(&want.0), "{tag}: q vs unfused");
                assert_eq!(bits(&got.1), bits(&want.1), "{tag}: k cache vs unfused");
            } else {
                let f64s = |v: &[f32]| v.iter().map(|&x| x as f64).collect::<Vec<_>>();
                for (what, other) in [("cpu", &cpu_out), ("unfused", &want)] {
                    let q = f64s(&other.0);
                    assert_close(
                        &format!("{tag}: q vs {what}"),
                        &got.0,
                        &q,
                        NORM_TOL,
                        NORM_TOL,
                    );
                    // A K value a few f32 ulps from the other's may round to the neighbouring
                    // f16/bf16: one unit of the cache's precision.
                    let k = f64s(&other.1);
                    let what = format!("{tag}: k cache vs {what}");
                    assert_close(&what, &got.1, &k, cache_tol, cache_tol);
                }
            }
            assert_close(&format!("{tag}: q"), &got.0, &rq, NORM_TOL, 1e-5);
            let k = rows_at(&got.1, &inp.slots, row);
            let v = rows_at(&got.2, &inp.slots, row);
            assert_close(&format!("{tag}: k"), &k, &rk, cache_tol, cache_tol);
            assert_close(&format!("{tag}: v"), &v, &rv, cache_tol, cache_tol);
            // Untouched slots keep their contents.
            for s in 0..BLOCKS * BLOCK_SIZE {
                if !inp.slots.contains(&(s as u32)) {
                    let r = s * row..(s + 1) * row;
                    assert_eq!(
                        bits(&got.1[r.clone()]),
                        bits(&cpu_out.1[r.clone()]),
                        "{tag}"
                    );
                    assert_eq!(bits(&got.2[r.clone()]), bits(&cpu_out.2[r]), "{tag}");
                }
            }
            if exact {
                // Against the CPU backend, bit for bit: the kernels round every product and sum
                // (__fmul_rn/__fadd_rn/__fsub_rn, no FMA contraction) as the CPU's plain f32
                // mul/add do, and both backends round to the f16/bf16 cache to nearest even.
                assert_eq!(bits(&got.0), bits(&cpu_out.0), "{tag}: q vs cpu");
                assert_eq!(bits(&got.1), bits(&cpu_out.1), "{tag}: k cache vs cpu");
            }
        }
    }
}

#[test]
fn bad_arguments_are_errors() {
    let c = cases()[1];
    let mut rng = Rng::new(3);
    let inp = inputs(&c, &mut rng);
    let p = params(&c);
    let w = p.q_width() + 2 * p.kv_width();
    for d in Device::all_for_tests() {
        let rope = d.upload_rope(&inp.table).unwrap();
        let (mut kc, mut vc) = caches(&d, &c, &inp);
        let mut q = d.alloc(DType::F32, &[c.n, c.heads, c.head_dim]).unwrap();
        let pos = up_u32(&d, &inp.positions, &[c.n]);
        let m = meta(&d, &inp.slots);
        let x = up(&d, &inp.x, &[c.n, w]);
        let mut run = |x: &Tensor, pos: &Tensor, m: &AttentionMeta, p: &QkvRopeParams| {
            d.qkv_rope_kv_write(
                QkvSource::Stacked(x),
                QkvBias::None,
                p,
                pos,
                &rope,
                &mut q,
                &mut kc,
                &mut vc,
                m,
            )
        };
        assert!(run(&x, &pos, &m, &p).is_ok(), "{}", d.name());
        let narrow = up(&d, &inp.x[..c.n * (w - 1)], &[c.n, w - 1]);
        assert!(run(&narrow, &pos, &m, &p).is_err(), "width");
        let far = up_u32(&d, &[MAX_POS as u32], &[1]);
        assert!(run(&x, &far, &m, &p).is_err(), "position beyond the table");
        let bad_slot = meta(&d, &[(BLOCKS * BLOCK_SIZE) as u32]);
        assert!(
            run(&x, &pos, &bad_slot, &p).is_err(),
            "slot beyond the cache"
        );
        let odd = QkvRopeParams::new(c.heads, c.kv_heads, c.head_dim + 1);
        assert!(run(&x, &pos, &m, &odd).is_err(), "odd head_dim");
        // QK-norm weights must be [head_dim] with a sane eps; a gate output needs gated rows
        // and room for every gate.
        let short = up(&d, &vec![1.0; c.head_dim - 1], &[c.head_dim - 1]);
        let good = up(&d, &vec![1.0; c.head_dim], &[c.head_dim]);
        let mut gate = d.alloc(DType::F32, &[c.n, c.heads * c.head_dim]).unwrap();
        let mut extra = |norm: QkNorm<'_>, gate: Option<&mut Tensor>| {
            d.qkv_norm_rope_kv_write(
                QkvSource::Stacked(&x),
                QkvBias::None,
                &p,
                norm,
                &pos,
                &rope,
                &mut q,
                gate,
                &mut kc,
                &mut vc,
                &m,
            )
        };
        let norm = |t, eps| QkNorm {
            q: Some((t, eps)),
            k: None,
        };
        assert!(extra(norm(&good, EPS), None).is_ok(), "{}", d.name());
        assert!(extra(norm(&short, EPS), None).is_err(), "short norm");
        assert!(extra(norm(&good, f32::NAN), None).is_err(), "NaN eps");
        assert!(
            extra(QkNorm::default(), Some(&mut gate)).is_err(),
            "gate output of ungated rows"
        );
    }
}

/// Runs the op twice over one set of buffers, the second time with new rows, positions and
/// slots written into the same tensors: recorded in a graph and replayed where the device
/// captures (CUDA), eagerly otherwise. Returns q, both caches and the gates after the second run.
fn twice(d: &Device, c: &Case, a: &Inputs, b: &Inputs, graph: bool) -> Outputs {
    let p = params(c);
    let w = p.q_width() + 2 * p.kv_width();
    let rope = d.upload_rope(&a.table).unwrap();
    let mut x = up(d, &a.x, &[c.n, w]);
    let bias = up(d, &a.bias, &[w]);
    let norms = norm_weights(d, c, a);
    let mut pos = up_u32(d, &a.positions, &[c.n]);
    let mut m = meta(d, &a.slots);
    let (mut kc, mut vc) = caches(d, c, a);
    let mut q = d.alloc(DType::F32, &[c.n, c.heads, c.head_dim]).unwrap();
    let mut gate = d.alloc(DType::F32, &[c.n, c.heads * c.head_dim]).unwrap();
    let mut run = |x: &Tensor, pos: &Tensor, m: &AttentionMeta, q: &mut Tensor| {
        let norm = QkNorm {
            q: norms.as_ref().map(|(q, _)| (q, EPS)),
            k: norms.as_ref().map(|(_, k)| (k, EPS)),
        };
        d.qkv_norm_rope_kv_write(
            QkvSource::Stacked(x),
            QkvBias::Stacked(&bias),
            &p,
            norm,
            pos,
            &rope,
            q,
            c.gate_out.then_some(&mut gate),
            &mut kc,
            &mut vc,
            m,
        )
    };
    let g = if graph {
        d.capture(|| run(&x, &pos, &m, &mut q)).unwrap().1
    } else {
        run(&x, &pos, &m, &mut q).unwrap();
        None
    };
    d.write_f32(&mut x, &b.x, &[c.n, w]).unwrap();
    d.write_u32(&mut pos, &b.positions, &[c.n]).unwrap();
    d.write_u32(&mut m.slot_mapping, &b.slots, &[c.n]).unwrap();
    match &g {
        Some(g) => g.replay().unwrap(),
        None => run(&x, &pos, &m, &mut q).unwrap(),
    }
    let gate = if c.gate_out {
        read(d, &gate)
    } else {
        Vec::new()
    };
    (read(d, &q), read(d, &kc), read(d, &vc), gate)
}

/// The plain op (bias, partial rotary) and the QK-normed one with the gate output (Qwen3.5).
#[test]
fn replays_in_a_graph_with_new_positions_and_slots() {
    let all = cases();
    let normed = *all
        .iter()
        .find(|c| c.gate_out && c.bias && !c.separate)
        .unwrap();
    for c in [all[3], normed] {
        assert!(c.bias && !c.separate);
        let mut rng = Rng::new(11);
        let (a, mut b) = (inputs(&c, &mut rng), inputs(&c, &mut rng));
        // The bias and norms are weights: the graph keeps the first ones.
        b.bias = a.bias.clone();
        (b.q_norm, b.k_norm) = (a.q_norm.clone(), a.k_norm.clone());
        for d in Device::all_for_tests() {
            let eager = twice(&d, &c, &a, &b, false);
            let replayed = twice(&d, &c, &a, &b, true);
            let tag = format!("{} {c:?}", d.name());
            assert_eq!(bits(&replayed.0), bits(&eager.0), "{tag}: q");
            assert_eq!(bits(&replayed.1), bits(&eager.1), "{tag}: k cache");
            assert_eq!(bits(&replayed.2), bits(&eager.2), "{tag}: v cache");
            assert_eq!(bits(&replayed.3), bits(&eager.3), "{tag}: gates");
            // The second run's slots hold the second rows (not the first run's).
            let single = fused(&d, &c, &b);
            assert_eq!(
                bits(&replayed.0),
                bits(&single.0),
                "{tag}: q of the second run"
            );
            assert_eq!(
                bits(&replayed.3),
                bits(&single.3),
                "{tag}: gates of the second run"
            );
        }
    }
}
