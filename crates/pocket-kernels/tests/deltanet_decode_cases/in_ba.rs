//! The in_ba projection inside the fused decode op (`BaInputs::Weights`): the op gets the layer
//! input `x` and the 16-bit `[b | a]` weight rows instead of the projection's output (part of
//! cuda_deltanet_decode.rs, whose scaffolding it uses).

use super::*;

/// A layer's in_ba weights on one device: one stacked `[b | a]` weight or two.
pub(super) enum BaWeights {
    Stacked(Weight),
    Separate(Weight, Weight),
}

/// 16-bit in_ba weights `[2 v_heads, hidden]` (`b` rows then `a` rows) as host bytes, scaled so
/// that b and a come out of the order of the projected-input tests' (|.| ~ 2).
pub(super) fn ba_weight_bytes(fmt: GgmlType, rows: usize, hidden: usize, rng: &mut Rng) -> Vec<u8> {
    let c = 6.0 / (hidden as f32).sqrt();
    rng.vec(rows * hidden)
        .iter()
        .flat_map(|v| match fmt {
            GgmlType::BF16 => half::bf16::from_f32(c * v).to_le_bytes(),
            _ => half::f16::from_f32(c * v).to_le_bytes(),
        })
        .collect()
}

pub(super) fn ba_weights(
    d: &Device,
    fmt: GgmlType,
    bytes: &[u8],
    h: usize,
    hidden: usize,
    stacked: bool,
) -> BaWeights {
    let up = |rows: usize, b: &[u8]| {
        d.upload_weight(
            QuantFormat::Ggml(fmt),
            rows,
            hidden,
            HostBytes::from_vec(b.to_vec()),
            None,
            None,
        )
        .unwrap()
    };
    if stacked {
        BaWeights::Stacked(up(2 * h, bytes))
    } else {
        let half_len = h * hidden * 2;
        BaWeights::Separate(up(h, &bytes[..half_len]), up(h, &bytes[half_len..]))
    }
}

/// The `b` and `a` rows of `w`.
pub(super) fn ba_rows(w: &BaWeights, h: usize) -> (WeightRows<'_>, WeightRows<'_>) {
    let r = |weight, row| WeightRows { weight, row };
    match w {
        BaWeights::Stacked(w) => (r(w, 0), r(w, h)),
        BaWeights::Separate(b, a) => (r(b, 0), r(a, 0)),
    }
}

/// The projection case: each step's `x` rows and the in_ba weights go into the op, which
/// projects them itself; the reference is the CPU's matmul of `x` with the stacked weight
/// (f32 activations, `pocket_quant`'s BF16/F16 dot) followed by the unfused ops on its output.
/// Bound: the projected-input bound of `assert_close`. The kernel's b and a are f32 dots of
/// the same 16-bit weights with the same f32 x as the CPU's, summed in another order: for
/// `hidden` terms of |w x| <= 6/sqrt(hidden) the sums differ by ~1e-6, and the gates (sigmoid,
/// exp(a_neg softplus), slopes of order 1 here) pass that on about undiminished to the state,
/// far inside 2e-4.
fn case_proj(p: DeltaRuleParams, hidden: usize, fmt: GgmlType, seed: u64) {
    case_proj_with(p, hidden, fmt, seed, steps);
}

/// [`case_proj`] over the given steps.
pub(super) fn case_proj_with(
    p: DeltaRuleParams,
    hidden: usize,
    fmt: GgmlType,
    seed: u64,
    steps: fn(&DeltaRuleParams, &mut Rng) -> Vec<Step>,
) {
    let h = p.v_heads;
    for stacked in [true, false] {
        for dev in Device::all_for_tests() {
            let mut rng = Rng::from_state(seed | 1);
            let mut reference = layer(Device::cpu(), &p, &mut rng);
            let mut rng = Rng::from_state(seed | 1);
            let mut l = layer(dev.clone(), &p, &mut rng);
            let bytes = ba_weight_bytes(fmt, 2 * h, hidden, &mut rng);
            let w_ref = ba_weights(&reference.d, fmt, &bytes, h, hidden, true);
            let w_dev = ba_weights(&dev, fmt, &bytes, h, hidden, stacked);
            let layout = if stacked { "stacked" } else { "separate" };
            let (b, a) = ba_rows(&w_dev, h);
            let in_kernel = dev.fused_deltanet_decode_ba(&p, KERNEL, b.weight, a.weight);
            for (i, mut s) in steps(&p, &mut rng).into_iter().enumerate() {
                let n: usize = s.lens.iter().sum();
                let xs = rng.vec(n * hidden);
                // The reference's [b | a]: the CPU matmul with the stacked weight.
                let BaWeights::Stacked(wr) = &w_ref else {
                    unreachable!()
                };
                let xr = reference.d.upload_f32(&xs, &[n, hidden]).unwrap();
                let mut ba = reference.d.alloc(DType::F32, &[n, 2 * h]).unwrap();
                reference.d.matmul(&xr, wr, &mut ba).unwrap();
                s.ba = reference.d.read_f32(&ba).unwrap();
                let want = unfused(&mut reference, &s, &p);
                // The op with the weights: qkvz as projected, x for in_ba.
                let d = l.d.clone();
                let m = meta(&d, &s.lens, &s.slots, &s.has);
                let proj = upload(&d, &s, &p, true);
                let x = d.upload_f32(&xs, &[n, hidden]).unwrap();
                let mut out = d.alloc(DType::F32, &[n, p.v_heads * p.v_dim]).unwrap();
                let (mut cs, mut st) = (
                    std::mem::replace(&mut l.conv_state, d.alloc(DType::F32, &[1]).unwrap()),
                    std::mem::replace(&mut l.state, d.alloc(DType::F32, &[1]).unwrap()),
                );
                let mut inp = inputs(&l, &proj, &p);
                inp.ba = BaInputs::Weights { x: &x, b, a };
                d.gated_deltanet_decode(&inp, &mut cs, &mut st, &m, &mut out)
                    .unwrap();
                (l.conv_state, l.state) = (cs, st);
                let got = d.read_f32(&out).unwrap();
                let what = format!("{} {fmt:?} {layout} in_ba step {i}", dev.name());
                check_step(&what, &dev, &got, &want, &l, &reference);
            }
            eprintln!(
                "{fmt:?} {layout} in_ba: {} matches the CPU (projection in the kernel: {in_kernel})",
                dev.name()
            );
        }
    }
}

#[test]
fn fused_decode_with_in_ba_at_27b_dims() {
    // hidden 5120: 6 rows of 640 chunks per block, one pass of 512 threads x 8 chunks.
    case_proj(params_27b(HeadGrouping::Tiled), 5120, GgmlType::BF16, 0x27d);
    case_proj(
        params_27b(HeadGrouping::Grouped),
        5120,
        GgmlType::BF16,
        0x27e,
    );
}

#[test]
fn fused_decode_with_in_ba_at_27b_dims_one_and_two_sequences() {
    // One sequence: the cluster kernel on an H200, each block dotting 1/2 of the 2 x 640
    // chunks, the partials summed across the cluster; two: the value-head kernel.
    case_proj_with(
        params_27b(HeadGrouping::Tiled),
        5120,
        GgmlType::BF16,
        0x289,
        few_steps,
    );
}

#[test]
fn fused_decode_with_in_ba_tiny() {
    // hidden 272 (GPU uploads need rows of whole 16-element chunks): rows of 34 chunks of 8, so
    // warps straddle two rows.
    let p = DeltaRuleParams {
        k_heads: 2,
        v_heads: 4,
        k_dim: 16,
        v_dim: 8,
        grouping: HeadGrouping::Grouped,
        l2_eps: 1e-6,
        scale: 0.25,
    };
    case_proj(p, 272, GgmlType::BF16, 7);
    case_proj(p, 256, GgmlType::F16, 8);
    // Rows of 16 and 8 chunks (the model fixtures' hidden 128): a warp's chunks span 2-5 rows.
    case_proj(p, 128, GgmlType::BF16, 9);
    case_proj(p, 64, GgmlType::BF16, 10);
}

#[test]
fn fused_decode_with_in_ba_several_passes() {
    // 40 value heads on one key head: 80 rows x 34 chunks, 11 passes of 256 chunks.
    case_proj(
        DeltaRuleParams {
            k_heads: 1,
            v_heads: 40,
            k_dim: 8,
            v_dim: 8,
            grouping: HeadGrouping::Grouped,
            l2_eps: 1e-6,
            scale: 1.0 / (8f32).sqrt(),
        },
        272,
        GgmlType::BF16,
        17,
    );
}
