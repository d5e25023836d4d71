//! CUDA paged attention on long decode contexts (the split-K flash-decoding path, which the
//! shared ops test's short sequences never reach) against the CPU backend on the same data.
//! Each case also runs with `max_seq_len` far above the real lengths, as a captured decode graph
//! passes its context bucket: the split count is then sized for the bound and the kernels must
//! size their work from the lengths on the device. Skipped without a GPU.
#![cfg(feature = "cuda")]

#[path = "cuda_common/attn.rs"]
mod attn;

use attn::{attend, gpu_or_skip, xorshift, Paged};
use pocket_kernels::{AttentionParams, DType, Device};

#[test]
fn split_k_decode_matches_cpu() {
    let Some(gpu) = gpu_or_skip() else {
        return;
    };
    let cpu = Device::cpu();
    let mut rnd = xorshift(0x1234_5678_9abc_def1);
    // (heads, kv_heads, head_dim, softcap): GQA groups of 4 and 8 (the decode kernel's two
    // entries), 7 (a partial group), 6 with head_dim 256 (Qwen3.5-27B: the group-of-6
    // instantiation), 3 (SmolLM2), 1 with head_dim 256, and head_dim 96 (the generic kernel).
    let configs = [
        (32usize, 8usize, 128usize, None),
        (16, 2, 64, None),
        (14, 2, 64, Some(30.0f32)),
        (24, 4, 256, None),
        (9, 3, 64, None),
        (4, 4, 256, None),
        (8, 2, 96, None),
    ];
    for (heads, kvh, hd, softcap) in configs {
        for dtype in [DType::F16, DType::BF16, DType::F32] {
            for (lens, new, window) in [
                (vec![1000usize, 37, 300], vec![1usize, 1, 1], None),
                (vec![2049], vec![1], None),
                (vec![700, 5], vec![1, 1], Some(100usize)),
                (vec![400], vec![3], None),
                (vec![1], vec![1], None),
                (vec![640, 33, 5], vec![1, 1, 1], None),
            ] {
                let paged = Paged::new(&lens, &new);
                let row = kvh * hd;
                let kv: Vec<f32> = (0..paged.slots() * row).map(|_| rnd()).collect();
                let vv: Vec<f32> = (0..paged.slots() * row).map(|_| rnd()).collect();
                let nq = paged.queries();
                let q: Vec<f32> = (0..nq * heads * hd).map(|_| rnd()).collect();
                let p = AttentionParams {
                    num_heads: heads,
                    num_kv_heads: kvh,
                    head_dim: hd,
                    scale: 1.0 / (hd as f32).sqrt(),
                    sliding_window: window,
                    softcap,
                };
                let mut outs = Vec::new();
                let exact = paged.max_len();
                for (d, bound) in [(&cpu, exact), (&gpu, exact), (&gpu, exact.max(16384))] {
                    let (kc, vc) = paged.caches(d, dtype, (kvh, hd), (&kv, &vv), bound);
                    let m = paged.meta(d, bound);
                    let qt = d.upload_f32(&q, &[nq, heads, hd]).unwrap();
                    outs.push(attend(d, &qt, &kc, &vc, &m, &p, nq));
                }
                let mut worst = 0.0f32;
                for (gpu_out, bound) in [(&outs[1], exact), (&outs[2], exact.max(16384))] {
                    for (i, (c, g)) in outs[0].iter().zip(gpu_out).enumerate() {
                        let err = (c - g).abs();
                        assert!(
                            err <= 2e-5 + 1e-4 * c.abs(),
                            "{heads}/{kvh}x{hd} {dtype:?} lens {lens:?} window {window:?} bound {bound}: out[{i}] cuda {g} vs cpu {c}"
                        );
                        worst = worst.max(err);
                    }
                }
                eprintln!(
                "{heads}/{kvh}x{hd} softcap {softcap:?} {dtype:?} lens {lens:?} window {window:?}: max |cuda - cpu| = {worst:e}"
            );
            }
        }
    }
}
