//! The tiled flash-attention prefill kernel (kernels/attention_prefill.cu) against the CPU backend
//! on the same data: the GQA shapes of SmolLM2-135M (9/3 x 64), Qwen2.5-0.5B (14/2 x 64),
//! Llama-3-8B (32/8 x 128) and Qwen3.5 (24/4 x 256), plus a group of 1 with a soft cap; f32, f16
//! and bf16 caches; a single prompt, a varlen batch (a prompt continuing a cached prefix, a short
//! prompt, and a decode row), a sliding window, and a short chunk. The kernel is forced for every
//! batch (`force_prefill_kernel`), so batches below its default row threshold test it too; the
//! default choice is checked to give the same result; the TF32 tensor-core variant is compared
//! with the f32 kernel on TF32-exact inputs. Skipped without a GPU.
#![cfg(feature = "cuda")]

use std::sync::Mutex;

use pocket_kernels::cuda::attn_prefill::{force_prefill_kernel, PrefillKernel};
use pocket_kernels::{AttentionParams, DType, Device};

#[path = "cuda_common/attn.rs"]
mod attn;

use attn::{attend, gpu_or_skip, xorshift, Paged};

/// One batch: total lengths, new rows per sequence, sliding window.
type Batch = (Vec<usize>, Vec<usize>, Option<usize>);

/// The kernel choice is process-wide: tests that force it run one at a time.
static FORCE: Mutex<()> = Mutex::new(());

#[test]
fn tiled_prefill_matches_cpu() {
    let _one = FORCE.lock().unwrap_or_else(|e| e.into_inner());
    let Some(gpu) = gpu_or_skip() else {
        return;
    };
    let cpu = Device::cpu();
    let mut rnd = xorshift(0x9e37_79b9_7f4a_7c15);
    // (heads, kv_heads, head_dim, softcap, q gain): the gain of 4 makes the softmax peaked
    // (scores up to ~10), so the online max and rescaling are exercised, not just averaging.
    let configs = [
        (9usize, 3usize, 64usize, None, 1.0f32),
        (14, 2, 64, None, 4.0),
        (32, 8, 128, None, 1.0),
        (24, 4, 256, None, 4.0),
        (4, 4, 64, Some(5.0f32), 4.0),
    ];
    let batches: [Batch; 4] = [
        (vec![300], vec![300], None),
        // A prompt after a cached prefix of 50, a fresh prompt of 37, a decode row.
        (vec![250, 37, 90], vec![200, 37, 1], None),
        (vec![300, 140], vec![300, 100], Some(64)),
        (vec![70], vec![5], None),
    ];
    for (heads, kvh, hd, softcap, gain) in configs {
        for dtype in [DType::F32, DType::F16, DType::BF16] {
            for (lens, new, window) in &batches {
                let paged = Paged::new(lens, new);
                let row = kvh * hd;
                let kv: Vec<f32> = (0..paged.slots() * row).map(|_| rnd()).collect();
                let vv: Vec<f32> = (0..paged.slots() * row).map(|_| rnd()).collect();
                let nq = paged.queries();
                let q: Vec<f32> = (0..nq * heads * hd).map(|_| gain * rnd()).collect();
                let p = AttentionParams {
                    num_heads: heads,
                    num_kv_heads: kvh,
                    head_dim: hd,
                    scale: 1.0 / (hd as f32).sqrt(),
                    sliding_window: *window,
                    softcap,
                };
                let mut outs = Vec::new();
                for (d, force) in [
                    (&cpu, None),
                    (&gpu, Some(PrefillKernel::Tiled)),
                    (&gpu, None),
                ] {
                    force_prefill_kernel(force);
                    let bound = paged.max_len();
                    let (kc, vc) = paged.caches(d, dtype, (kvh, hd), (&kv, &vv), bound);
                    let m = paged.meta(d, bound);
                    let qt = d.upload_f32(&q, &[nq, heads, hd]).unwrap();
                    outs.push(attend(d, &qt, &kc, &vc, &m, &p, nq));
                    force_prefill_kernel(None);
                }
                let label = format!(
                    "{heads}/{kvh}x{hd} softcap {softcap:?} {dtype:?} lens {lens:?} new {new:?} window {window:?}"
                );
                let mut worst = 0.0f32;
                for (which, got) in [("tiled", &outs[1]), ("default", &outs[2])] {
                    for (i, (c, g)) in outs[0].iter().zip(got).enumerate() {
                        let err = (c - g).abs();
                        assert!(
                            err <= 2e-5 + 1e-4 * c.abs(),
                            "{label} {which}: out[{i}] (row {}, head {}) cuda {g} vs cpu {c}",
                            i / (heads * hd),
                            i / hd % heads
                        );
                        worst = worst.max(err);
                    }
                }
                eprintln!("{label}: max |cuda - cpu| = {worst:e}");
            }
        }
    }
}

/// The TF32 tensor-core variant (`POCKET_ATTN_PREFILL=tc`) against the f32 tiled kernel on f32
/// caches. Inputs are exact in TF32 and give exact f32 scores in both kernels: q on a 1/16 grid in
/// [-4, 4], K and V on a 1/64 grid in [-1, 1], scale 1/8 (every product is a multiple of 2^-13,
/// every score below 2^6, so 19 bits suffice). The scores, maxima and probabilities are then the
/// same in both kernels, and the one difference is P rounded to TF32 before P.V: each weight
/// moves by at most 2^-11 relative, so |tc - f32| <= 2^-11 max|v| = 4.9e-4, plus f32 summation
/// order (~1e-6). Tolerance 6e-4; a fragment-layout error moves outputs by ~1e-2 or more. On GPUs
/// without the sm_90 cubin the variant falls back to the f32 kernel and this compares it with
/// itself. Skipped without a GPU.
#[test]
fn tensor_core_prefill_matches_f32_kernel() {
    let _one = FORCE.lock().unwrap_or_else(|e| e.into_inner());
    let Some(gpu) = gpu_or_skip() else {
        return;
    };
    let mut rnd = xorshift(0x2545_f491_4f6c_dd1d);
    let configs = [
        (9usize, 3usize, 64usize, None),
        (14, 2, 64, Some(5.0f32)),
        (32, 8, 128, None),
    ];
    let batches: [Batch; 3] = [
        (vec![512], vec![512], None),
        (vec![250, 37, 90], vec![200, 37, 1], None),
        (vec![300, 140], vec![300, 100], Some(64)),
    ];
    for (heads, kvh, hd, softcap) in configs {
        for (lens, new, window) in &batches {
            let paged = Paged::new(lens, new);
            let row = kvh * hd;
            let grid64 = |x: f32| (x * 64.0).round() / 64.0;
            let kv: Vec<f32> = (0..paged.slots() * row).map(|_| grid64(rnd())).collect();
            let vv: Vec<f32> = (0..paged.slots() * row).map(|_| grid64(rnd())).collect();
            let nq = paged.queries();
            let q: Vec<f32> = (0..nq * heads * hd)
                .map(|_| (rnd() * 64.0).round() / 16.0)
                .collect();
            let p = AttentionParams {
                num_heads: heads,
                num_kv_heads: kvh,
                head_dim: hd,
                scale: 0.125,
                sliding_window: *window,
                softcap,
            };
            let bound = paged.max_len();
            let (kc, vc) = paged.caches(&gpu, DType::F32, (kvh, hd), (&kv, &vv), bound);
            let m = paged.meta(&gpu, bound);
            let qt = gpu.upload_f32(&q, &[nq, heads, hd]).unwrap();
            let mut outs = Vec::new();
            for k in [PrefillKernel::Tiled, PrefillKernel::TensorCore] {
                force_prefill_kernel(Some(k));
                outs.push(attend(&gpu, &qt, &kc, &vc, &m, &p, nq));
                force_prefill_kernel(None);
            }
            let label =
                format!("tc {heads}/{kvh}x{hd} softcap {softcap:?} lens {lens:?} new {new:?} window {window:?}");
            let mut worst = 0.0f32;
            for (i, (f, t)) in outs[0].iter().zip(&outs[1]).enumerate() {
                let err = (f - t).abs();
                assert!(
                    err <= 6e-4,
                    "{label}: out[{i}] (row {}, head {}) tc {t} vs f32 {f}",
                    i / (heads * hd),
                    i / hd % heads
                );
                worst = worst.max(err);
            }
            eprintln!("{label}: max |tc - f32| = {worst:e}");
        }
    }
}
