//! The fused Gated DeltaNet decode step (`Backend::gated_deltanet_decode`) against the unfused
//! ops on the CPU (the reference): split of the stacked projections, `causal_conv1d_silu`,
//! `delta_gates`, `gated_delta_rule_recurrent`, `gated_rms_norm`, as the layer runs them. Random
//! inputs over several decode steps carrying conv and delta state, several sequences in different
//! state slots (fresh and continuing, one step with a sequence that has no row, one that drops and
//! reorders sequences), the stacked `[q|k|v|z]`, `[b|a]` layout and the separate one, at the
//! Qwen3.5-27B layer dims and at small ones. On the CPU the op is the composition itself (checked
//! equal); with a GPU its one kernel is checked against the CPU, eagerly and replayed from a CUDA
//! graph. Without a GPU the CUDA half is skipped with a message.
//!
//! The CUDA op picks its block layout by batch size (kernels/deltanet_decode.cu and its
//! cluster variant): at the 27B dims 4 and 8 sequences run a block per key head, 2 and 3 a block
//! per value head, 1 (`few_steps`) clusters of 2 blocks per value head on an H200; the tiny
//! shapes run clusters up to 3 sequences. `cluster_variants_*` force each variant at every batch
//! size.

use pocket_kernels::recurrent::{BaInputs, ColumnRange, DeltaNetDecodeInputs, WeightRows};
use pocket_kernels::{DType, DeltaRuleParams, Device, HeadGrouping, HostBytes, Tensor, Weight};
use pocket_quant::{GgmlType, QuantFormat};

#[path = "deltanet_decode_cases/in_ba.rs"]
mod in_ba;
use in_ba::{ba_rows, ba_weight_bytes, ba_weights, BaWeights};

mod deltanet_common;
use deltanet_common::{assert_close, meta, Layer, Rng};

const KERNEL: usize = 4;
const SLOTS: usize = 9;
const NORM_EPS: f32 = 1e-6;

/// Host inputs of one step: the stacked projection rows `[q|k|v|z]` and `[b|a]`.
struct Step {
    lens: Vec<usize>,
    slots: Vec<u32>,
    has: Vec<u32>,
    qkvz: Vec<f32>,
    ba: Vec<f32>,
}

/// A step's projection outputs on one device, stacked or as four tensors.
enum Proj {
    Stacked {
        qkvz: Tensor,
        ba: Tensor,
    },
    Separate {
        qkv: Tensor,
        z: Tensor,
        b: Tensor,
        a: Tensor,
    },
}

fn upload(d: &Device, s: &Step, p: &DeltaRuleParams, stacked: bool) -> Proj {
    let n: usize = s.lens.iter().sum();
    let (w, vw, h) = (p.qkv_width(), p.v_heads * p.v_dim, p.v_heads);
    if stacked {
        return Proj::Stacked {
            qkvz: d.upload_f32(&s.qkvz, &[n, w + vw]).unwrap(),
            ba: d.upload_f32(&s.ba, &[n, 2 * h]).unwrap(),
        };
    }
    let cols = |src: &[f32], width: usize, from: usize, to: usize| -> Tensor {
        let v: Vec<f32> = src
            .chunks(width)
            .flat_map(|r| r[from..to].to_vec())
            .collect();
        d.upload_f32(&v, &[n, to - from]).unwrap()
    };
    Proj::Separate {
        qkv: cols(&s.qkvz, w + vw, 0, w),
        z: cols(&s.qkvz, w + vw, w, w + vw),
        b: cols(&s.ba, 2 * h, 0, h),
        a: cols(&s.ba, 2 * h, h, 2 * h),
    }
}

/// The op's column ranges for `proj`.
fn inputs<'a>(l: &'a Layer, proj: &'a Proj, p: &DeltaRuleParams) -> DeltaNetDecodeInputs<'a> {
    let r = |tensor, col| ColumnRange { tensor, col };
    let (qkv, z, b, a) = match proj {
        Proj::Stacked { qkvz, ba } => (
            r(qkvz, 0),
            r(qkvz, p.qkv_width()),
            r(ba, 0),
            r(ba, p.v_heads),
        ),
        Proj::Separate { qkv, z, b, a } => (r(qkv, 0), r(z, 0), r(b, 0), r(a, 0)),
    };
    DeltaNetDecodeInputs {
        qkv,
        z,
        ba: BaInputs::Projected { b, a },
        conv_weight: &l.conv_w,
        a_neg: &l.a_neg,
        dt_bias: &l.dt_bias,
        norm_weight: &l.norm_w,
        norm_eps: NORM_EPS,
        params: *p,
    }
}

/// The step through `gated_deltanet_decode`; returns the normed rows.
fn fused(l: &mut Layer, s: &Step, p: &DeltaRuleParams, stacked: bool) -> Vec<f32> {
    let d = l.d.clone();
    let n: usize = s.lens.iter().sum();
    let m = meta(&d, &s.lens, &s.slots, &s.has);
    let proj = upload(&d, s, p, stacked);
    let mut out = d.alloc(DType::F32, &[n, p.v_heads * p.v_dim]).unwrap();
    let (mut cs, mut st) = (
        std::mem::replace(&mut l.conv_state, d.alloc(DType::F32, &[1]).unwrap()),
        std::mem::replace(&mut l.state, d.alloc(DType::F32, &[1]).unwrap()),
    );
    d.gated_deltanet_decode(&inputs(l, &proj, p), &mut cs, &mut st, &m, &mut out)
        .unwrap();
    (l.conv_state, l.state) = (cs, st);
    d.read_f32(&out).unwrap()
}

/// The step through the unfused ops, as the layer's unfused path runs them.
fn unfused(l: &mut Layer, s: &Step, p: &DeltaRuleParams) -> Vec<f32> {
    let d = l.d.clone();
    let n: usize = s.lens.iter().sum();
    let (w, vw, h) = (p.qkv_width(), p.v_heads * p.v_dim, p.v_heads);
    let m = meta(&d, &s.lens, &s.slots, &s.has);
    let Proj::Stacked { qkvz, ba } = upload(&d, s, p, true) else {
        unreachable!()
    };
    let alloc = |c: usize| d.alloc(DType::F32, &[n, c]).unwrap();
    let (mut qkv, mut z, mut b, mut a) = (alloc(w), alloc(vw), alloc(h), alloc(h));
    d.split_columns(&qkvz, &mut [&mut qkv, &mut z]).unwrap();
    d.split_columns(&ba, &mut [&mut b, &mut a]).unwrap();
    let mut conv = alloc(w);
    d.causal_conv1d_silu(&qkv, &l.conv_w, &mut l.conv_state, &m, &mut conv)
        .unwrap();
    let (mut g, mut beta) = (alloc(h), alloc(h));
    d.delta_gates(&a, &b, &l.a_neg, &l.dt_bias, &mut g, &mut beta)
        .unwrap();
    let mut core = alloc(vw);
    d.gated_delta_rule_recurrent(&conv, &g, &beta, &mut l.state, &m, p, &mut core)
        .unwrap();
    let mut normed = alloc(vw);
    d.gated_rms_norm(&core, &z, &l.norm_w, NORM_EPS, &mut normed)
        .unwrap();
    d.read_f32(&normed).unwrap()
}

fn layer(d: Device, p: &DeltaRuleParams, rng: &mut Rng) -> Layer {
    let (w, hv) = (p.qkv_width(), p.v_heads);
    let conv_w = rng.vec(w * KERNEL);
    let a_neg: Vec<f32> = rng.vec(hv).iter().map(|v| -v.abs() - 0.05).collect();
    let dt_bias = rng.vec(hv);
    let norm_w = rng.vec(p.v_dim);
    // Random pools: a fresh sequence must read zeros, not these.
    let conv0 = rng.vec(SLOTS * (KERNEL - 1) * w);
    let state0: Vec<f32> = rng
        .vec(SLOTS * hv * p.k_dim * p.v_dim)
        .iter()
        .map(|v| 0.1 * v)
        .collect();
    Layer {
        conv_w: d.upload_f32(&conv_w, &[w, KERNEL]).unwrap(),
        a_neg: d.upload_f32(&a_neg, &[hv]).unwrap(),
        dt_bias: d.upload_f32(&dt_bias, &[hv]).unwrap(),
        norm_w: d.upload_f32(&norm_w, &[p.v_dim]).unwrap(),
        conv_state: d.upload_f32(&conv0, &[SLOTS, KERNEL - 1, w]).unwrap(),
        state: d
            .upload_f32(&state0, &[SLOTS, hv, p.k_dim, p.v_dim])
            .unwrap(),
        d,
    }
}

/// Decode steps: four sequences in slots 4, 0, 2, 5 (two fresh, two continuing), then all
/// continuing, one step where the sequence in slot 2 has no row, and one that drops a sequence
/// and reorders the rest.
fn steps(p: &DeltaRuleParams, rng: &mut Rng) -> Vec<Step> {
    let (w, vw, h) = (p.qkv_width(), p.v_heads * p.v_dim, p.v_heads);
    let mut make = |lens: Vec<usize>, slots: Vec<u32>, has: Vec<u32>| {
        let n: usize = lens.iter().sum();
        let mut ba = rng.vec(n * 2 * h);
        ba.iter_mut().for_each(|v| *v *= 2.0);
        Step {
            qkvz: rng.vec(n * (w + vw)),
            ba,
            lens,
            slots,
            has,
        }
    };
    vec![
        make(vec![1; 4], vec![4, 0, 2, 5], vec![0, 1, 0, 1]),
        make(vec![1; 4], vec![4, 0, 2, 5], vec![1; 4]),
        make(vec![1, 1, 0, 1], vec![4, 0, 2, 5], vec![1; 4]),
        make(vec![1; 4], vec![4, 0, 2, 5], vec![1; 4]),
        make(vec![1; 3], vec![5, 2, 4], vec![1; 3]),
    ]
}

fn case(p: DeltaRuleParams, seed: u64) {
    case_with(p, seed, steps);
}

/// Steps of one and two sequences: one fresh, then continuing, then a second sequence joining,
/// the two swapped, and one with no row in a fresh slot (written back as zeros). At the 27B dims
/// one sequence runs the cluster kernel on an H200 (96 blocks in one wave), two the value-head
/// kernel.
fn few_steps(p: &DeltaRuleParams, rng: &mut Rng) -> Vec<Step> {
    let (w, vw, h) = (p.qkv_width(), p.v_heads * p.v_dim, p.v_heads);
    let mut make = |lens: Vec<usize>, slots: Vec<u32>, has: Vec<u32>| {
        let n: usize = lens.iter().sum();
        let mut ba = rng.vec(n * 2 * h);
        ba.iter_mut().for_each(|v| *v *= 2.0);
        Step {
            qkvz: rng.vec(n * (w + vw)),
            ba,
            lens,
            slots,
            has,
        }
    };
    vec![
        make(vec![1], vec![3], vec![0]),
        make(vec![1], vec![3], vec![1]),
        make(vec![1, 1], vec![3, 6], vec![1, 0]),
        make(vec![1, 1], vec![6, 3], vec![1, 1]),
        make(vec![1, 0], vec![3, 7], vec![1, 0]),
        make(vec![1], vec![6], vec![1]),
    ]
}

/// Eight sequences in shuffled slots over four steps (fresh and continuing, then reordered): at
/// the 27B dims 8 x 48 = 384 blocks of one value head, about three waves on a 132-SM GPU, so the
/// blocks of a key-head group sharing the q/k conv window run in different waves, and each launch
/// must leave the arrival counters zero for the next.
fn wide_steps(p: &DeltaRuleParams, rng: &mut Rng) -> Vec<Step> {
    let (w, vw, h) = (p.qkv_width(), p.v_heads * p.v_dim, p.v_heads);
    let mut make = |slots: Vec<u32>, has: Vec<u32>| {
        let n = slots.len();
        let mut ba = rng.vec(n * 2 * h);
        ba.iter_mut().for_each(|v| *v *= 2.0);
        Step {
            qkvz: rng.vec(n * (w + vw)),
            ba,
            lens: vec![1; n],
            slots,
            has,
        }
    };
    vec![
        make(vec![7, 1, 4, 0, 8, 2, 6, 3], vec![0, 1, 0, 1, 1, 0, 1, 0]),
        make(vec![7, 1, 4, 0, 8, 2, 6, 3], vec![1; 8]),
        make(vec![3, 6, 2, 8, 0, 4, 1, 7], vec![1; 8]),
        make(vec![5, 6, 2, 8, 0, 4, 1, 7], vec![0, 1, 1, 1, 1, 1, 1, 1]),
    ]
}

fn case_with(p: DeltaRuleParams, seed: u64, steps: fn(&DeltaRuleParams, &mut Rng) -> Vec<Step>) {
    for stacked in [true, false] {
        for dev in Device::all_for_tests() {
            let mut rng = Rng::from_state(seed | 1);
            let mut reference = layer(Device::cpu(), &p, &mut rng);
            let mut rng = Rng::from_state(seed | 1);
            let mut l = layer(dev.clone(), &p, &mut rng);
            let layout = if stacked { "stacked" } else { "separate" };
            for (i, s) in steps(&p, &mut rng).iter().enumerate() {
                let want = unfused(&mut reference, s, &p);
                let got = fused(&mut l, s, &p, stacked);
                let what = format!("{} {layout} step {i}", dev.name());
                check_step(&what, &dev, &got, &want, &l, &reference);
            }
            if dev.name() == Device::cpu().name() {
                eprintln!("{layout}: {} fused == composed", dev.name());
            } else {
                eprintln!("{layout}: {} fused matches the CPU", dev.name());
            }
        }
    }
    if Device::all_for_tests().len() == 1 {
        eprintln!("skipped the CUDA half: no GPU");
    }
}

/// Qwen3.5-27B's DeltaNet layer: 16 key heads, 48 value heads (3 per key head), 128 x 128 state,
/// GGUF's tiled head order.
fn params_27b(grouping: HeadGrouping) -> DeltaRuleParams {
    DeltaRuleParams {
        k_heads: 16,
        v_heads: 48,
        k_dim: 128,
        v_dim: 128,
        grouping,
        l2_eps: 1e-6,
        scale: 1.0 / (128f32).sqrt(),
    }
}

#[test]
fn fused_decode_matches_unfused_at_27b_dims_tiled() {
    case(params_27b(HeadGrouping::Tiled), 0x27b);
}

#[test]
fn fused_decode_matches_unfused_at_27b_dims_grouped() {
    case(params_27b(HeadGrouping::Grouped), 0x27c);
}

#[test]
fn fused_decode_matches_unfused_at_27b_dims_eight_sequences() {
    case_with(params_27b(HeadGrouping::Tiled), 0x27d, wide_steps);
}

#[test]
fn fused_decode_matches_unfused_at_27b_dims_one_and_two_sequences() {
    case_with(params_27b(HeadGrouping::Tiled), 0x27f, few_steps);
    case_with(params_27b(HeadGrouping::Grouped), 0x280, few_steps);
}

/// One warp per block: 2 key heads with 2 value heads each, k_dim 16, v_dim 8 (a cluster
/// block of 2 owns 4 columns: one float4 column group, all 32 lanes on its rows).
fn params_tiny() -> DeltaRuleParams {
    DeltaRuleParams {
        k_heads: 2,
        v_heads: 4,
        k_dim: 16,
        v_dim: 8,
        grouping: HeadGrouping::Grouped,
        l2_eps: 1e-6,
        scale: 0.25,
    }
}

#[test]
fn fused_decode_matches_unfused_tiny() {
    case(params_tiny(), 5);
    case_with(params_tiny(), 6, few_steps);
}

/// Held by the tests that force a layout (process-wide) and by those that need one layout for
/// their whole run (graph replay against eager calls, bit for bit).
#[cfg(feature = "cuda")]
static LAYOUT_LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Runs `f` with the value-head layout and clusters of `cs` blocks forced at every batch size
/// (2 and 4 on the sm_90 cubin only, elsewhere the op falls back to the value-head kernel; 1,
/// the cluster kernel's one-block form, on any GPU).
#[cfg(feature = "cuda")]
fn with_cluster(cs: u8, f: impl FnOnce()) {
    let be = match pocket_kernels::cuda::CudaBackend::new(0) {
        Ok(be) => be,
        Err(e) => {
            eprintln!("skipped the forced cluster-{cs} run: {e}");
            return;
        }
    };
    let _g = LAYOUT_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    be.set_deltanet_split(Some(true));
    be.set_deltanet_cluster(Some(cs));
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
    be.set_deltanet_cluster(None);
    be.set_deltanet_split(None);
    eprintln!("ran with clusters of {cs} forced (2 and 4: sm_90 cubin only)");
    if let Err(e) = r {
        std::panic::resume_unwind(e);
    }
}

/// The cluster kernels (and their one-block form) forced at 1-8 sequences (several waves of clusters at 8: the q/k window's
/// arrival counter across waves) at the 27B dims, the tiny dims and with in_ba inside.
#[cfg(feature = "cuda")]
#[test]
fn cluster_variants_match_unfused() {
    for cs in [1u8, 2, 4] {
        with_cluster(cs, || {
            case_with(params_27b(HeadGrouping::Tiled), 0x281, steps);
            case_with(params_27b(HeadGrouping::Grouped), 0x282, few_steps);
            case_with(params_27b(HeadGrouping::Tiled), 0x283, wide_steps);
            in_ba::case_proj_with(
                params_27b(HeadGrouping::Tiled),
                5120,
                GgmlType::BF16,
                0x284,
                few_steps,
            );
            in_ba::case_proj_with(
                params_27b(HeadGrouping::Grouped),
                5120,
                GgmlType::BF16,
                0x285,
                steps,
            );
        });
    }
    // v_dim 8 splits over 2 blocks at most (4 would leave 2 columns, not a float4).
    for cs in [1u8, 2] {
        with_cluster(cs, || {
            case_with(params_tiny(), 0x286, steps);
            in_ba::case_proj_with(params_tiny(), 272, GgmlType::BF16, 0x287, steps);
            in_ba::case_proj_with(params_tiny(), 64, GgmlType::F16, 0x288, few_steps);
        });
    }
}

#[test]
fn fused_decode_matches_unfused_partial_row_group() {
    // k_dim 40: the last of 5 row groups of 8 is full but 40 is no multiple of 32; v_dim 48:
    // 12 float4 columns, 60 threads rounded up to 64 (4 idle in the state part).
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

/// The fused op captured in a CUDA graph and replayed: the same outputs and states as eager
/// calls on a twin layer (the op allocates nothing and reads the metadata it was captured with).
#[cfg(feature = "cuda")]
#[test]
fn fused_decode_replays_from_a_cuda_graph() {
    replays(false, 1);
    replays(false, 4);
}

/// As [`fused_decode_replays_from_a_cuda_graph`], with the in_ba projection (BF16, hidden 5120)
/// inside the op.
#[cfg(feature = "cuda")]
#[test]
fn fused_decode_with_in_ba_replays_from_a_cuda_graph() {
    replays(true, 1);
    replays(true, 4);
}

/// Step 1 of `few_steps` (one sequence: the cluster kernel on an H200) or of `steps` (four: a
/// block per key head) captured once and replayed three times beside eager calls.
#[cfg(feature = "cuda")]
fn replays(with_in_ba: bool, seqs: usize) {
    let gpu = match Device::open(pocket_kernels::DeviceKind::Cuda(0)) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("skipped: {e}");
            return;
        }
    };
    if !gpu.supports_graphs() {
        eprintln!("skipped: no graph support");
        return;
    }
    let p = params_27b(HeadGrouping::Tiled);
    let mut rng = Rng::from_state(99);
    let mut eager = layer(gpu.clone(), &p, &mut rng);
    let mut rng = Rng::from_state(99);
    let mut graphed = layer(gpu.clone(), &p, &mut rng);
    let s = if seqs == 1 {
        few_steps(&p, &mut rng).remove(1)
    } else {
        steps(&p, &mut rng).remove(1)
    };
    let _layout = LAYOUT_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let n: usize = s.lens.iter().sum();
    let m = meta(&gpu, &s.lens, &s.slots, &s.has);
    let proj = upload(&gpu, &s, &p, true);
    let hidden = 5120;
    let x = gpu.upload_f32(&rng.vec(n * hidden), &[n, hidden]).unwrap();
    let bytes = ba_weight_bytes(GgmlType::BF16, 2 * p.v_heads, hidden, &mut rng);
    let w = ba_weights(&gpu, GgmlType::BF16, &bytes, p.v_heads, hidden, true);
    fn op_inputs<'a>(
        l: &'a Layer,
        proj: &'a Proj,
        p: &DeltaRuleParams,
        in_ba: Option<(&'a Tensor, &'a BaWeights)>,
    ) -> DeltaNetDecodeInputs<'a> {
        let mut inp = inputs(l, proj, p);
        if let Some((x, w)) = in_ba {
            let (b, a) = ba_rows(w, p.v_heads);
            inp.ba = BaInputs::Weights { x, b, a };
        }
        inp
    }
    let in_ba = with_in_ba.then_some((&x, &w));
    let mut out_e = gpu.alloc(DType::F32, &[n, p.v_heads * p.v_dim]).unwrap();
    let mut out_g = gpu.alloc(DType::F32, &[n, p.v_heads * p.v_dim]).unwrap();
    let (mut cs, mut st) = (
        std::mem::replace(
            &mut graphed.conv_state,
            gpu.alloc(DType::F32, &[1]).unwrap(),
        ),
        std::mem::replace(&mut graphed.state, gpu.alloc(DType::F32, &[1]).unwrap()),
    );
    gpu.synchronize().unwrap();
    gpu.begin_graph_capture().unwrap();
    gpu.gated_deltanet_decode(
        &op_inputs(&graphed, &proj, &p, in_ba),
        &mut cs,
        &mut st,
        &m,
        &mut out_g,
    )
    .unwrap();
    let graph = gpu.end_graph_capture().unwrap();
    (graphed.conv_state, graphed.state) = (cs, st);
    for rep in 0..3 {
        let (mut cs, mut st) = (
            std::mem::replace(&mut eager.conv_state, gpu.alloc(DType::F32, &[1]).unwrap()),
            std::mem::replace(&mut eager.state, gpu.alloc(DType::F32, &[1]).unwrap()),
        );
        gpu.gated_deltanet_decode(
            &op_inputs(&eager, &proj, &p, in_ba),
            &mut cs,
            &mut st,
            &m,
            &mut out_e,
        )
        .unwrap();
        (eager.conv_state, eager.state) = (cs, st);
        graph.replay().unwrap();
        gpu.synchronize().unwrap();
        let what = format!("replay {rep}");
        // Same kernel, same inputs, same launch: bit for bit.
        assert_eq!(
            gpu.read_f32(&out_g).unwrap(),
            gpu.read_f32(&out_e).unwrap(),
            "{what}: output"
        );
        assert_eq!(
            gpu.read_f32(&graphed.state).unwrap(),
            gpu.read_f32(&eager.state).unwrap(),
            "{what}: state"
        );
        assert_eq!(
            gpu.read_f32(&graphed.conv_state).unwrap(),
            gpu.read_f32(&eager.conv_state).unwrap(),
            "{what}: conv state"
        );
    }
    eprintln!(
        "fused decode (in_ba inside: {with_in_ba}, {seqs} sequences): 3 graph replays equal eager calls"
    );
}

#[test]
fn fused_decode_matches_unfused_more_value_heads_than_threads() {
    // 40 value heads on one key head: a 32-thread block computes the gates of several heads per
    // thread, and walks 40 heads of state one after the other.
    case(
        DeltaRuleParams {
            k_heads: 1,
            v_heads: 40,
            k_dim: 8,
            v_dim: 8,
            grouping: HeadGrouping::Grouped,
            l2_eps: 1e-6,
            scale: 1.0 / (8f32).sqrt(),
        },
        13,
    );
}

/// One decode step's output and both states (`l`, after the op on `dev`) against the reference
/// layer's: equal on the CPU, whose default op is the composition of the same ops on the same
/// data (with in_ba inside: the same matmul, a row's dot not depending on the rows around it);
/// within [`assert_close`] on the GPU.
fn check_step(what: &str, dev: &Device, got: &[f32], want: &[f32], l: &Layer, reference: &Layer) {
    let states =
        [reference, l].map(|l| [&l.conv_state, &l.state].map(|t| l.d.read_f32(t).unwrap()));
    if dev.name() == Device::cpu().name() {
        assert_eq!(got, want, "{what}: output");
        assert_eq!(states[1], states[0], "{what}: state");
    } else {
        assert_close(&format!("{what} output"), got, want);
        assert_close(&format!("{what} conv state"), &states[1][0], &states[0][0]);
        assert_close(&format!("{what} delta state"), &states[1][1], &states[0][1]);
    }
}
