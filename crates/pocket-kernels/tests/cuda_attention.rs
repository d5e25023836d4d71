//! CUDA paged attention on long decode contexts (the split-K flash-decoding path, which the
//! shared ops test's short sequences never reach) against the CPU backend on the same data.
//! Each case also runs with `max_seq_len` far above the real lengths, as a captured decode graph
//! passes its context bucket: the split count is then sized for the bound and the kernels must
//! size their work from the lengths on the device. On the H200 (sm_90) the exact bounds up to
//! 1024 keys of groups up to 4 run the cluster kernel (splits merged in the cluster) and the
//! 16384 bound the split kernel with `attn_combine`, so both merges are checked. The decode runs
//! repeat with no keys staged before the kernel's wait (`set_attn_stage(Some(0))`) and must give
//! the same bits. Skipped without a GPU.
#![cfg(feature = "cuda")]

#[path = "cuda_common/attn.rs"]
mod attn;

use attn::{attend, gpu_or_skip, xorshift, Paged};
use pocket_kernels::cuda::CudaBackend;
use pocket_kernels::{AttentionParams, DType, Device};

#[test]
fn split_k_decode_matches_cpu() {
    let Some(gpu) = gpu_or_skip() else {
        return;
    };
    let cpu = Device::cpu();
    // The process-wide attention switches (the staging of early keys) live on the backend type.
    let switch = CudaBackend::new(0).unwrap();
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
                let big = exact.max(16384);
                // The GPU runs with its default key staging, then with none (the same bits).
                let runs = [(&cpu, exact, None), (&gpu, exact, None), (&gpu, big, None)];
                let unstaged = [(&gpu, exact, Some(0)), (&gpu, big, Some(0))];
                for (d, bound, stage) in runs.into_iter().chain(unstaged) {
                    switch.set_attn_stage(stage);
                    let (kc, vc) = paged.caches(d, dtype, (kvh, hd), (&kv, &vv), bound);
                    let m = paged.meta(d, bound);
                    let qt = d.upload_f32(&q, &[nq, heads, hd]).unwrap();
                    outs.push(attend(d, &qt, &kc, &vc, &m, &p, nq));
                }
                switch.set_attn_stage(None);
                for (staged, plain) in [(1, 3), (2, 4)] {
                    let same = outs[staged]
                        .iter()
                        .zip(&outs[plain])
                        .all(|(a, b)| a.to_bits() == b.to_bits());
                    assert!(
                        same,
                        "{heads}/{kvh}x{hd} {dtype:?} lens {lens:?} window {window:?}: staged keys change the output"
                    );
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

/// Gated attention (Qwen3.5's output gate applied in the attention kernels' epilogue) against the
/// CPU's attention followed by `sigmoid_mul`, over decode batches (unsplit, split with the
/// combine applying the gate, head-split), a windowed batch, a prefill-shaped batch (the tiled
/// kernel, then `sigmoid_mul`) and the generic kernel (head_dim 96), each also under a large context bound.
/// Tolerance: the ungated test's bound; multiplying by sigmoid(g) <= 1 scales the attention's
/// error down, and CUDA's `expf` (<= 2 ulp) adds < 1e-6 relative. On the GPU itself the fused
/// epilogue must equal its unfused pair (attention, then the `sigmoid_mul` kernel) bit for bit:
/// both compute `v * (1 / (1 + expf(-g)))` on the same `v`. Where the decode kernel also writes
/// the Q8 copy of its output for the output projection (rows not a multiple of 256), a Q8_0
/// matmul of the gated output must equal the one of the unfused output, which quantizes inside
/// the GEMV: the Q8 copy is of the gated values.
#[test]
fn gated_attention_matches_cpu_attention_then_sigmoid_mul() {
    use pocket_kernels::HostBytes;
    use pocket_quant::{GgmlType, QuantFormat};
    let Some(gpu) = gpu_or_skip() else {
        return;
    };
    let cpu = Device::cpu();
    let mut rnd = xorshift(0x0ddb_a11c_afe5_eed5);
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    for (heads, kvh, hd) in [
        (24usize, 4usize, 256usize),
        (14, 2, 64),
        (32, 8, 128),
        (8, 2, 96),
    ] {
        let row = heads * hd;
        // The output projection of the Q8 check: `[64, row]` Q8_0.
        let wq: Vec<f32> = (0..64 * row).map(|_| rnd()).collect();
        let blocks = pocket_quant::quantize(QuantFormat::Ggml(GgmlType::Q8_0), &wq).unwrap();
        let w = gpu
            .upload_weight(
                QuantFormat::Ggml(GgmlType::Q8_0),
                64,
                row,
                HostBytes::from_vec(blocks),
                None,
                None,
            )
            .unwrap();
        for dtype in [DType::BF16, DType::F16, DType::F32] {
            for (lens, new, window) in [
                (vec![1usize], vec![1usize], None),
                (vec![90, 37, 200], vec![1, 1, 1], None),
                (vec![2049], vec![1], None),
                (vec![700, 5], vec![1, 1], Some(100usize)),
                (vec![300], vec![40], None),
            ] {
                let paged = Paged::new(&lens, &new);
                let kvrow = kvh * hd;
                let kv: Vec<f32> = (0..paged.slots() * kvrow).map(|_| rnd()).collect();
                let vv: Vec<f32> = (0..paged.slots() * kvrow).map(|_| rnd()).collect();
                let nq = paged.queries();
                let q: Vec<f32> = (0..nq * row).map(|_| rnd()).collect();
                let g: Vec<f32> = (0..nq * row).map(|_| 4.0 * rnd()).collect();
                let p = AttentionParams {
                    num_heads: heads,
                    num_kv_heads: kvh,
                    head_dim: hd,
                    scale: 1.0 / (hd as f32).sqrt(),
                    sliding_window: window,
                    softcap: None,
                };
                let shape = [nq, heads, hd];
                // On `d` under context bound `bound`, gated by the op (`fused`) or by attention +
                // sigmoid_mul: the output and its Q8_0 matmul (GPU only).
                let run = |d: &Device, bound: usize, fused: bool| {
                    let (kc, vc) = paged.caches(d, dtype, (kvh, hd), (&kv, &vv), bound);
                    let m = paged.meta(d, bound);
                    let qt = d.upload_f32(&q, &shape).unwrap();
                    let gt = d.upload_f32(&g, &[nq, row]).unwrap();
                    let mut out = d.alloc(DType::F32, &shape).unwrap();
                    d.write_f32(&mut out, &vec![f32::NAN; nq * row], &shape)
                        .unwrap();
                    if fused {
                        d.attention_gated(&qt, &gt, &kc, &vc, &m, &p, &mut out)
                            .unwrap();
                    } else {
                        d.attention(&qt, &kc, &vc, &m, &p, &mut out).unwrap();
                        d.sigmoid_mul(&mut out, &gt).unwrap();
                    }
                    out.reshape(&[nq, row]).unwrap();
                    let mut y = d.alloc(DType::F32, &[nq, 64]).unwrap();
                    if d.kind() != cpu.kind() {
                        d.matmul(&out, &w, &mut y).unwrap();
                    }
                    (d.read_f32(&out).unwrap(), d.read_f32(&y).unwrap())
                };
                let exact = paged.max_len();
                let want = run(&cpu, exact, true).0;
                let tag = format!("{heads}/{kvh}x{hd} {dtype:?} lens {lens:?} new {new:?}");
                for bound in [exact, exact.max(16384)] {
                    let (got, y) = run(&gpu, bound, true);
                    let (plain, y_plain) = run(&gpu, bound, false);
                    for (i, (c, x)) in want.iter().zip(&got).enumerate() {
                        assert!(
                            (c - x).abs() <= 2e-5 + 1e-4 * c.abs(),
                            "{tag} bound {bound}: out[{i}] cuda {x} vs cpu {c}"
                        );
                    }
                    assert_eq!(bits(&got), bits(&plain), "{tag} bound {bound}: vs unfused");
                    assert_eq!(bits(&y), bits(&y_plain), "{tag} bound {bound}: Q8 matmul");
                }
            }
        }
    }
}
