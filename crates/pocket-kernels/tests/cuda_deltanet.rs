//! The CUDA Gated DeltaNet ops against the CPU backend on the same random data, as a layer runs
//! them: a varlen prefill (several sequences of different lengths, one longer than two 64-token
//! chunks, some continuing from stored state) through conv, gates and the chunked delta rule,
//! then decode steps through the recurrent form, comparing outputs and every state slot after each
//! step. This checks that the GPU's prefill leaves exactly the state its decode continues from, at
//! the real head shape (128 x 128) and at a shape with a partial 32-column slab. Skipped without a
//! GPU.
#![cfg(feature = "cuda")]

use pocket_kernels::{
    DType, DeltaRuleParams, Device, DeviceKind, HeadGrouping, RecurrentMeta, Tensor,
};

/// A small deterministic generator (xorshift64*), values in [-1, 1).
struct Rng(u64);

impl Rng {
    fn f32(&mut self) -> f32 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        let u = self.0.wrapping_mul(0x2545_F491_4F6C_DD1D);
        ((u >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    }
    fn vec(&mut self, n: usize) -> Vec<f32> {
        (0..n).map(|_| self.f32()).collect()
    }
}

fn meta(d: &Device, lens: &[usize], slots: &[u32], has: &[u32]) -> RecurrentMeta {
    let mut qs = vec![0u32];
    for l in lens {
        qs.push(qs.last().unwrap() + *l as u32);
    }
    RecurrentMeta {
        query_start: d.upload_u32(&qs, &[qs.len()]).unwrap(),
        state_slots: d.upload_u32(slots, &[slots.len()]).unwrap(),
        has_state: d.upload_u32(has, &[has.len()]).unwrap(),
        num_seqs: lens.len(),
        max_rows: lens.iter().copied().max().unwrap_or(0),
    }
}

/// One device's copy of a layer's weights and state pools.
struct Layer {
    d: Device,
    conv_w: Tensor,
    a_neg: Tensor,
    dt_bias: Tensor,
    norm_w: Tensor,
    conv_state: Tensor,
    state: Tensor,
}

/// Host inputs of one step: the mixed qkv rows (pre-conv), alpha, b and the norm gate.
struct Step {
    lens: Vec<usize>,
    slots: Vec<u32>,
    has: Vec<u32>,
    qkv: Vec<f32>,
    alpha: Vec<f32>,
    b: Vec<f32>,
    z: Vec<f32>,
}

/// Runs one step on `l`; returns the normalised layer output.
fn step(l: &mut Layer, s: &Step, p: &DeltaRuleParams, chunked: bool) -> Vec<f32> {
    let d = l.d.clone();
    let n: usize = s.lens.iter().sum();
    let (w, hv) = (p.qkv_width(), p.v_heads);
    let m = meta(&d, &s.lens, &s.slots, &s.has);
    let x = d.upload_f32(&s.qkv, &[n, w]).unwrap();
    let mut conv = d.alloc(DType::F32, &[n, w]).unwrap();
    d.causal_conv1d_silu(&x, &l.conv_w, &mut l.conv_state, &m, &mut conv)
        .unwrap();
    let mut g = d.alloc(DType::F32, &[n, hv]).unwrap();
    let mut beta = d.alloc(DType::F32, &[n, hv]).unwrap();
    d.delta_gates(
        &d.upload_f32(&s.alpha, &[n, hv]).unwrap(),
        &d.upload_f32(&s.b, &[n, hv]).unwrap(),
        &l.a_neg,
        &l.dt_bias,
        &mut g,
        &mut beta,
    )
    .unwrap();
    let mut out = d.alloc(DType::F32, &[n, hv * p.v_dim]).unwrap();
    if chunked {
        d.gated_delta_rule_chunked(&conv, &g, &beta, &mut l.state, &m, p, &mut out)
    } else {
        d.gated_delta_rule_recurrent(&conv, &g, &beta, &mut l.state, &m, p, &mut out)
    }
    .unwrap();
    let z = d.upload_f32(&s.z, &[n * hv, p.v_dim]).unwrap();
    let mut normed = d.alloc(DType::F32, &[n * hv, p.v_dim]).unwrap();
    d.gated_rms_norm(&out, &z, &l.norm_w, 1e-6, &mut normed)
        .unwrap();
    d.read_f32(&normed).unwrap()
}

/// Both sides are f32 evaluations of the same maths in different orders (the CPU's chunked form
/// is the WY/UT transform; the GPU scans tokens); each stays within 1e-4 of the f64 reference in
/// tests/ops_deltanet.rs, so they may differ by twice that.
fn assert_close(what: &str, got: &[f32], want: &[f32]) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g - w).abs() <= 2e-4 * (1.0 + w.abs()),
            "{what}[{i}]: cuda {g}, cpu {w}"
        );
    }
}

fn case(p: DeltaRuleParams, seed: u64) {
    let gpu = match Device::open(DeviceKind::Cuda(0)) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("skipped: {e}");
            return;
        }
    };
    let (k, slots) = (4usize, 6usize);
    let (w, hv) = (p.qkv_width(), p.v_heads);
    let mut rng = Rng(seed | 1);
    let conv_w = rng.vec(w * k);
    let a_neg: Vec<f32> = rng.vec(hv).iter().map(|v| -v.abs() - 0.05).collect();
    let dt_bias = rng.vec(hv);
    let norm_w = rng.vec(p.v_dim);
    let conv0 = rng.vec(slots * (k - 1) * w);
    let state0: Vec<f32> = rng
        .vec(slots * hv * p.k_dim * p.v_dim)
        .iter()
        .map(|v| 0.1 * v)
        .collect();
    let mut layers: Vec<Layer> = [Device::cpu(), gpu]
        .into_iter()
        .map(|d| Layer {
            conv_w: d.upload_f32(&conv_w, &[w, k]).unwrap(),
            a_neg: d.upload_f32(&a_neg, &[hv]).unwrap(),
            dt_bias: d.upload_f32(&dt_bias, &[hv]).unwrap(),
            norm_w: d.upload_f32(&norm_w, &[p.v_dim]).unwrap(),
            conv_state: d.upload_f32(&conv0, &[slots, k - 1, w]).unwrap(),
            state: d
                .upload_f32(&state0, &[slots, hv, p.k_dim, p.v_dim])
                .unwrap(),
            d,
        })
        .collect();
    let mut make = |lens: Vec<usize>, slots: Vec<u32>, has: Vec<u32>| {
        let n: usize = lens.iter().sum();
        Step {
            qkv: rng.vec(n * w),
            alpha: rng.vec(n * hv),
            b: rng.vec(n * hv).iter().map(|v| 2.0 * v).collect(),
            z: rng.vec(n * hv * p.v_dim),
            lens,
            slots,
            has,
        }
    };
    // Prefill: four sequences (130 rows crosses two chunk boundaries; 2 rows is shorter than the
    // conv window), two fresh and two continuing from the random state in their slots.
    let mut steps = vec![make(
        vec![130, 1, 37, 2],
        vec![4, 0, 2, 5],
        vec![0, 1, 0, 1],
    )];
    // Decode: every sequence continues; the last step drops one sequence and reorders the rest.
    for _ in 0..3 {
        steps.push(make(vec![1; 4], vec![4, 0, 2, 5], vec![1; 4]));
    }
    steps.push(make(vec![1; 3], vec![5, 2, 4], vec![1; 3]));
    for (i, s) in steps.iter().enumerate() {
        let chunked = i == 0;
        let want = step(&mut layers[0], s, &p, chunked);
        let got = step(&mut layers[1], s, &p, chunked);
        let what = format!("step {i} ({})", if chunked { "prefill" } else { "decode" });
        assert_close(&format!("{what} output"), &got, &want);
        for (name, pick) in [("conv state", 0), ("delta state", 1)] {
            let [c, g] = [&layers[0], &layers[1]].map(|l| {
                let t = if pick == 0 { &l.conv_state } else { &l.state };
                l.d.read_f32(t).unwrap()
            });
            assert_close(&format!("{what} {name}"), &g, &c);
        }
    }
}

#[test]
fn prefill_then_decode_matches_cpu_qwen35_heads() {
    // Qwen3.5's head shape: 128 x 128 state, value heads grouped over key heads.
    case(
        DeltaRuleParams {
            k_heads: 2,
            v_heads: 4,
            k_dim: 128,
            v_dim: 128,
            grouping: HeadGrouping::Grouped,
            l2_eps: 1e-6,
            scale: 1.0 / (128f32).sqrt(),
        },
        7,
    );
}

#[test]
fn prefill_then_decode_matches_cpu_partial_slab() {
    // v_dim 48: the second 32-column slab is half empty; k_dim 40 leaves the last row group short.
    case(
        DeltaRuleParams {
            k_heads: 1,
            v_heads: 3,
            k_dim: 40,
            v_dim: 48,
            grouping: HeadGrouping::Tiled,
            l2_eps: 1e-6,
            scale: 1.0 / (40f32).sqrt(),
        },
        11,
    );
}

/// One decode step of a Qwen3.5-27B DeltaNet layer (16 key / 48 value heads, 128 x 128 state) for
/// 1 and 8 sequences: checked against the CPU, then timed. The printed bandwidth counts the state
/// read and written once (what the kernel is designed to be bound by).
#[test]
fn decode_step_at_27b_shape_matches_cpu_and_reports_time() {
    let gpu = match Device::open(DeviceKind::Cuda(0)) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("skipped: {e}");
            return;
        }
    };
    let p = DeltaRuleParams {
        k_heads: 16,
        v_heads: 48,
        k_dim: 128,
        v_dim: 128,
        grouping: HeadGrouping::Tiled,
        l2_eps: 1e-6,
        scale: 1.0 / (128f32).sqrt(),
    };
    let mut rng = Rng(0x5eed);
    for seqs in [1usize, 8] {
        let (w, hv) = (p.qkv_width(), p.v_heads);
        let mat = hv * p.k_dim * p.v_dim;
        let qkv = rng.vec(seqs * w);
        let g: Vec<f32> = rng.vec(seqs * hv).iter().map(|v| -0.1 * v.abs()).collect();
        let beta: Vec<f32> = rng.vec(seqs * hv).iter().map(|v| 0.5 + 0.5 * v).collect();
        let st0: Vec<f32> = rng.vec(seqs * mat).iter().map(|v| 0.1 * v).collect();
        let slots: Vec<u32> = (0..seqs as u32).collect();
        let mut results = Vec::new();
        for d in [Device::cpu(), gpu.clone()] {
            let m = meta(&d, &vec![1; seqs], &slots, &vec![1; seqs]);
            let x = d.upload_f32(&qkv, &[seqs, w]).unwrap();
            let gt = d.upload_f32(&g, &[seqs, hv]).unwrap();
            let bt = d.upload_f32(&beta, &[seqs, hv]).unwrap();
            let mut st = d.upload_f32(&st0, &[seqs, hv, p.k_dim, p.v_dim]).unwrap();
            let mut out = d.alloc(DType::F32, &[seqs, hv * p.v_dim]).unwrap();
            d.gated_delta_rule_recurrent(&x, &gt, &bt, &mut st, &m, &p, &mut out)
                .unwrap();
            results.push((d.read_f32(&out).unwrap(), d.read_f32(&st).unwrap()));
            if d.name() == gpu.name() {
                let reps = 200;
                d.synchronize().unwrap();
                let t0 = std::time::Instant::now();
                for _ in 0..reps {
                    d.gated_delta_rule_recurrent(&x, &gt, &bt, &mut st, &m, &p, &mut out)
                        .unwrap();
                }
                d.synchronize().unwrap();
                let us = t0.elapsed().as_secs_f64() * 1e6 / reps as f64;
                let gbs = (2 * seqs * mat * 4) as f64 / (us * 1e3);
                eprintln!(
                    "deltanet decode step, 27B layer shape, {seqs} seq: {us:.1} us ({gbs:.0} GB/s of state)"
                );
            }
        }
        assert_close(&format!("{seqs} seqs out"), &results[1].0, &results[0].0);
        assert_close(&format!("{seqs} seqs state"), &results[1].1, &results[0].1);
    }
}
