//! GPU benchmark of the Gated DeltaNet decode step between its projections at the Qwen3.5-27B
//! layer dims (16 key / 48 value heads, 128 x 128 state, conv kernel 4): the fused
//! `gated_deltanet_decode` kernel against the six unfused launches it replaces (two
//! `split_columns`, `causal_conv1d_silu`, `delta_gates`, `gated_delta_rule_recurrent`,
//! `gated_rms_norm`), each as a CUDA graph of 48 layers with their own state pools (48 x 3 MB per
//! sequence: beyond the 50 MB L2, as in a real step), timed with `bench::time_ms`; per-layer times
//! are the graph's over 48. Ignored by default; the device run script runs it with `--ignored`.
//! Look for: fused well below unfused (the Nsight profile had ~19 us of the six per layer); at 1
//! sequence the cluster variants (`cluster2`, `cluster4`: a value head's columns over 2 or 4
//! blocks; `cluster1`: the same kernel in one block) below the block per value head
//! (`value-head`, 8.68 us in session 5) and `auto` equal to the best of them; at 4 sequences `auto` equal to `key-head` (15.37 us vs 18.49 us for
//! `value-head` in session 5, the threshold's source).
//! Second part: the in_ba projection (BF16 `[96, 5120]` per layer) as its own GEMV before the
//! fused kernel against inside it (`BaInputs::Weights`), both with the default layout; look for
//! the in-kernel variant saving most of the GEMV's ~3.2 us per layer.
#![cfg(feature = "cuda")]

use pocket_kernels::cuda::CudaBackend;
use pocket_kernels::recurrent::{BaInputs, ColumnRange, DeltaNetDecodeInputs, WeightRows};
use pocket_kernels::{
    Backend, DType, DeltaRuleParams, HeadGrouping, HostBytes, RecurrentMeta, Tensor, Weight,
};
use pocket_quant::{GgmlType, QuantFormat};

#[path = "cuda_common/bench.rs"]
mod bench;

use bench::{backend_or_skip, capture, time_ms};

const LAYERS: usize = 48;
const KERNEL: usize = 4;

/// The fused layouts timed (name, `set_deltanet_split`, `set_deltanet_cluster`): a block per key
/// head, per value head (the session-5 kernel), the cluster kernel's one-block form (`cluster1`:
/// its shorter chain alone), clusters of 2 and 4 blocks per value head (sm_90 cubin; elsewhere
/// they run the value-head kernel), and the default choice by batch size (`auto`: clusters of 2
/// at 1 sequence, key heads at 4).
const FUSED_VARIANTS: &[(&str, Option<bool>, Option<u8>)] = &[
    ("key-head", Some(false), Some(0)),
    ("value-head", Some(true), Some(0)),
    ("cluster1", Some(true), Some(1)),
    ("cluster2", Some(true), Some(2)),
    ("cluster4", Some(true), Some(4)),
    ("auto", None, None),
];

/// One layer's weights and state pools (`seqs` slots).
struct Layer {
    conv_w: Tensor,
    a_neg: Tensor,
    dt_bias: Tensor,
    norm_w: Tensor,
    conv_state: Tensor,
    state: Tensor,
}

/// The unfused path's intermediates (shared by the layers, as the layer scratch is).
struct Scratch {
    qkv: Tensor,
    z: Tensor,
    b: Tensor,
    a: Tensor,
    conv: Tensor,
    g: Tensor,
    beta: Tensor,
    core: Tensor,
}

fn ramp(n: usize, s: f32, k: usize) -> Vec<f32> {
    (0..n)
        .map(|i| s * ((((i + k) * 2654435761) % 1000) as f32 / 500.0 - 1.0))
        .collect()
}

#[allow(clippy::too_many_arguments)]
fn unfused(
    be: &CudaBackend,
    l: &mut Layer,
    qkvz: &Tensor,
    ba: &Tensor,
    m: &RecurrentMeta,
    p: &DeltaRuleParams,
    s: &mut Scratch,
    out: &mut Tensor,
) {
    be.split_columns(qkvz, &mut [&mut s.qkv, &mut s.z]).unwrap();
    be.split_columns(ba, &mut [&mut s.b, &mut s.a]).unwrap();
    be.causal_conv1d_silu(&s.qkv, &l.conv_w, &mut l.conv_state, m, &mut s.conv)
        .unwrap();
    be.delta_gates(&s.a, &s.b, &l.a_neg, &l.dt_bias, &mut s.g, &mut s.beta)
        .unwrap();
    be.gated_delta_rule_recurrent(&s.conv, &s.g, &s.beta, &mut l.state, m, p, &mut s.core)
        .unwrap();
    be.gated_rms_norm(&s.core, &s.z, &l.norm_w, 1e-6, out)
        .unwrap();
}

fn fused(
    be: &CudaBackend,
    l: &mut Layer,
    qkvz: &Tensor,
    ba: BaInputs<'_>,
    m: &RecurrentMeta,
    p: &DeltaRuleParams,
    out: &mut Tensor,
) {
    let inputs = DeltaNetDecodeInputs {
        qkv: ColumnRange {
            tensor: qkvz,
            col: 0,
        },
        z: ColumnRange {
            tensor: qkvz,
            col: p.qkv_width(),
        },
        ba,
        conv_weight: &l.conv_w,
        a_neg: &l.a_neg,
        dt_bias: &l.dt_bias,
        norm_weight: &l.norm_w,
        norm_eps: 1e-6,
        params: *p,
    };
    be.gated_deltanet_decode(&inputs, &mut l.conv_state, &mut l.state, m, out)
        .unwrap();
}

/// The `[b | a]` columns of a stacked projection output.
fn projected(ba: &Tensor, h: usize) -> BaInputs<'_> {
    BaInputs::Projected {
        b: ColumnRange { tensor: ba, col: 0 },
        a: ColumnRange { tensor: ba, col: h },
    }
}

#[test]
#[ignore = "GPU benchmark: run with --ignored on the device machine"]
fn bench_deltanet_decode_fused_27b() {
    let Some(be) = backend_or_skip() else {
        return;
    };
    println!("device: {}", be.name());
    let p = DeltaRuleParams {
        k_heads: 16,
        v_heads: 48,
        k_dim: 128,
        v_dim: 128,
        grouping: HeadGrouping::Tiled,
        l2_eps: 1e-6,
        scale: 1.0 / (128f32).sqrt(),
    };
    let (w, vw, h) = (p.qkv_width(), p.v_heads * p.v_dim, p.v_heads);
    let mut lines = Vec::new();
    for seqs in [1usize, 4] {
        let mut layers: Vec<Layer> = (0..LAYERS)
            .map(|i| Layer {
                conv_w: be
                    .upload_f32(&ramp(w * KERNEL, 0.3, i), &[w, KERNEL])
                    .unwrap(),
                a_neg: be.upload_f32(&vec![-0.5; h], &[h]).unwrap(),
                dt_bias: be.upload_f32(&ramp(h, 0.5, i), &[h]).unwrap(),
                norm_w: be.upload_f32(&ramp(p.v_dim, 1.0, i), &[p.v_dim]).unwrap(),
                conv_state: be
                    .upload_f32(
                        &ramp(seqs * (KERNEL - 1) * w, 1.0, i),
                        &[seqs, KERNEL - 1, w],
                    )
                    .unwrap(),
                state: be
                    .upload_f32(
                        &ramp(seqs * h * p.k_dim * p.v_dim, 0.05, i),
                        &[seqs, h, p.k_dim, p.v_dim],
                    )
                    .unwrap(),
            })
            .collect();
        let qs: Vec<u32> = (0..=seqs as u32).collect();
        let slots: Vec<u32> = (0..seqs as u32).collect();
        let m = RecurrentMeta {
            query_start: be.upload_u32(&qs, &[seqs + 1]).unwrap(),
            state_slots: be.upload_u32(&slots, &[seqs]).unwrap(),
            has_state: be.upload_u32(&vec![1; seqs], &[seqs]).unwrap(),
            num_seqs: seqs,
            max_rows: 1,
        };
        let qkvz = be
            .upload_f32(&ramp(seqs * (w + vw), 1.0, 7), &[seqs, w + vw])
            .unwrap();
        let ba = be
            .upload_f32(&ramp(seqs * 2 * h, 2.0, 3), &[seqs, 2 * h])
            .unwrap();
        let alloc = |c: usize| be.alloc(DType::F32, &[seqs, c]).unwrap();
        let mut s = Scratch {
            qkv: alloc(w),
            z: alloc(vw),
            b: alloc(h),
            a: alloc(h),
            conv: alloc(w),
            g: alloc(h),
            beta: alloc(h),
            core: alloc(vw),
        };
        let mut out = alloc(vw);
        // One eager pass of each first (the graph then only replays launches).
        for l in layers.iter_mut() {
            unfused(&be, l, &qkvz, &ba, &m, &p, &mut s, &mut out);
            fused(&be, l, &qkvz, projected(&ba, h), &m, &p, &mut out);
        }
        let g_unfused = capture(&be, || {
            for l in layers.iter_mut() {
                unfused(&be, l, &qkvz, &ba, &m, &p, &mut s, &mut out);
            }
        });
        // The fused layouts, each captured with it forced (process-wide overrides), then the
        // default choice by batch size.
        let mut graphs = Vec::new();
        for &(name, split, cluster) in FUSED_VARIANTS {
            be.set_deltanet_split(split);
            be.set_deltanet_cluster(cluster);
            for l in layers.iter_mut() {
                fused(&be, l, &qkvz, projected(&ba, h), &m, &p, &mut out);
            }
            let g = capture(&be, || {
                for l in layers.iter_mut() {
                    fused(&be, l, &qkvz, projected(&ba, h), &m, &p, &mut out);
                }
            });
            graphs.push((name, g));
        }
        be.set_deltanet_split(None);
        be.set_deltanet_cluster(None);
        // Alternate them over three rounds and keep the best of each (shared machine noise).
        let mut t_u = f64::MAX;
        let mut t_f = vec![f64::MAX; graphs.len()];
        for _ in 0..3 {
            t_u = t_u.min(time_ms(&be, 3, 30, |_| g_unfused.replay().unwrap()));
            for (t, (_, g)) in t_f.iter_mut().zip(&graphs) {
                *t = t.min(time_ms(&be, 3, 30, |_| g.replay().unwrap()));
            }
        }
        let per = |t: f64| t * 1e3 / LAYERS as f64;
        let state_bytes = (2 * seqs * h * p.k_dim * p.v_dim * 4) as f64;
        let mut line = format!(
            "deltanet decode 27B {seqs} seq per layer: unfused (6 launches) {:6.2} us",
            per(t_u)
        );
        for ((name, _), t) in graphs.iter().zip(&t_f) {
            line += &format!(
                " | {name} {:6.2} us ({:.2}x unfused, state at {:.0} GB/s)",
                per(*t),
                t_u / t,
                state_bytes / (per(*t) * 1e3)
            );
        }
        lines.push(line);
        println!("{}", lines.last().unwrap());

        // The in_ba projection: a BF16 weight per layer, its GEMV + the fused kernel reading
        // its output, against the fused kernel computing it.
        let hidden = 5120;
        let weights: Vec<Weight> = (0..LAYERS)
            .map(|i| {
                let bytes: Vec<u8> = ramp(2 * h * hidden, 0.08, i)
                    .iter()
                    .flat_map(|v| half::bf16::from_f32(*v).to_le_bytes())
                    .collect();
                be.upload_weight(
                    QuantFormat::Ggml(GgmlType::BF16),
                    2 * h,
                    hidden,
                    HostBytes::from_vec(bytes),
                    None,
                    None,
                )
                .unwrap()
            })
            .collect();
        let x = be
            .upload_f32(&ramp(seqs * hidden, 1.0, 5), &[seqs, hidden])
            .unwrap();
        let mut ba_out = alloc(2 * h);
        let in_kernel = |w| BaInputs::Weights {
            x: &x,
            b: WeightRows { weight: w, row: 0 },
            a: WeightRows { weight: w, row: h },
        };
        for (l, w) in layers.iter_mut().zip(&weights) {
            be.matmul(&x, w, &mut ba_out).unwrap();
            fused(&be, l, &qkvz, projected(&ba_out, h), &m, &p, &mut out);
            fused(&be, l, &qkvz, in_kernel(w), &m, &p, &mut out);
        }
        let g_gemv = capture(&be, || {
            for (l, w) in layers.iter_mut().zip(&weights) {
                be.matmul(&x, w, &mut ba_out).unwrap();
                fused(&be, l, &qkvz, projected(&ba_out, h), &m, &p, &mut out);
            }
        });
        let g_in = capture(&be, || {
            for (l, w) in layers.iter_mut().zip(&weights) {
                fused(&be, l, &qkvz, in_kernel(w), &m, &p, &mut out);
            }
        });
        let (mut t_g, mut t_i) = (f64::MAX, f64::MAX);
        for _ in 0..3 {
            t_g = t_g.min(time_ms(&be, 3, 30, |_| g_gemv.replay().unwrap()));
            t_i = t_i.min(time_ms(&be, 3, 30, |_| g_in.replay().unwrap()));
        }
        lines.push(format!(
            "deltanet decode 27B {seqs} seq per layer: in_ba BF16 GEMV + fused {:6.2} us  in_ba in the fused kernel {:6.2} us  ({:.2}x)",
            per(t_g),
            per(t_i),
            t_g / t_i
        ));
        println!("{}", lines.last().unwrap());
    }
    println!("\n==== summary: deltanet decode, fused vs unfused ====");
    for l in lines {
        println!("{l}");
    }
}
