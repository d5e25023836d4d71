//! Prefill attention benchmark (ignored by default; the device run script runs it with
//! `--ignored`): one layer's causal attention over a fresh prompt, the row kernel (`attn_<cache>`,
//! one block per query row and head) against the tiled flash-attention kernel
//! (kernels/attention_prefill.cu), in one process via `force_prefill_kernel`. Shapes: SmolLM2-135M
//! (9/3 x 64), Qwen2.5-0.5B (14/2 x 64), Llama-3-8B (32/8 x 128), Qwen3.5 (24/4 x 256), at 512
//! tokens (the profiled prefill) and 2048; f32 caches (what the profiled runs use) and f16. On f32
//! caches at head_dim 64/128 the TF32 tensor-core variant (`POCKET_ATTN_PREFILL=tc`) is timed too.
//! CUDA-event timing (`bench::time_ms`); GFLOP/s counts the causal QK^T and PV multiply-adds.
#![cfg(feature = "cuda")]

use pocket_kernels::cuda::attn_prefill::{force_prefill_kernel, PrefillKernel};
use pocket_kernels::{AttentionMeta, AttentionParams, Backend, DType};

#[path = "cuda_common/bench.rs"]
mod bench;

use bench::{backend_or_skip, time_ms};

#[test]
#[ignore = "GPU benchmark: run with --ignored on the device machine"]
fn bench_attn_prefill() {
    let Some(be) = backend_or_skip() else {
        return;
    };
    let bs = 16usize;
    let shapes = [
        ("smollm2-135m", 9usize, 3usize, 64usize),
        ("qwen2.5-0.5b", 14, 2, 64),
        ("llama3-8b", 32, 8, 128),
        ("qwen3.5", 24, 4, 256),
    ];
    let mut lines = Vec::new();
    for (name, heads, kvh, hd) in shapes {
        for dtype in [DType::F32, DType::F16] {
            for t in [512usize, 2048] {
                let nblocks = t.div_ceil(bs);
                let row = kvh * hd;
                let mut kc = be.alloc(dtype, &[nblocks, bs, kvh, hd]).unwrap();
                let mut vc = be.alloc(dtype, &[nblocks, bs, kvh, hd]).unwrap();
                let tables: Vec<u32> = (0..nblocks as u32).collect();
                let slots: Vec<u32> = (0..t as u32).collect();
                let meta = AttentionMeta {
                    query_start: be.upload_u32(&[0, t as u32], &[2]).unwrap(),
                    seq_lens: be.upload_u32(&[t as u32], &[1]).unwrap(),
                    block_tables: be.upload_u32(&tables, &[1, nblocks]).unwrap(),
                    slot_mapping: be.upload_u32(&slots, &[t]).unwrap(),
                    num_seqs: 1,
                    max_seq_len: t,
                };
                let vals: Vec<f32> = (0..t * row)
                    .map(|i| ((i % 97) as f32 - 48.0) * 0.01)
                    .collect();
                let kt = be.upload_f32(&vals, &[t, kvh, hd]).unwrap();
                be.kv_write(&kt, &kt, &mut kc, &mut vc, &meta).unwrap();
                let p = AttentionParams {
                    num_heads: heads,
                    num_kv_heads: kvh,
                    head_dim: hd,
                    scale: 1.0 / (hd as f32).sqrt(),
                    sliding_window: None,
                    softcap: None,
                };
                let qv: Vec<f32> = (0..t * heads * hd)
                    .map(|i| ((i % 89) as f32 - 44.0) * 0.01)
                    .collect();
                let q = be.upload_f32(&qv, &[t, heads, hd]).unwrap();
                let mut out = be.alloc(DType::F32, &[t, heads, hd]).unwrap();
                // The TF32 variant exists for f32 caches at head_dim 64 and 128.
                let tc = dtype == DType::F32 && hd <= 128;
                let mut us = [0.0f64; 3];
                let kinds = [
                    PrefillKernel::Rows,
                    PrefillKernel::Tiled,
                    PrefillKernel::TensorCore,
                ];
                for (i, k) in kinds.into_iter().enumerate().take(if tc { 3 } else { 2 }) {
                    force_prefill_kernel(Some(k));
                    us[i] = 1e3
                        * time_ms(&be, 3, 20, |_| {
                            be.attention(&q, &kc, &vc, &meta, &p, &mut out).unwrap()
                        });
                }
                force_prefill_kernel(None);
                // Causal pairs x heads x head_dim, twice (scores and P.V), 2 flops per FMA.
                let flops = (t * (t + 1) / 2 * heads * hd * 4) as f64;
                let tc_part = if tc {
                    format!("  tc {:7.1} us  x{:5.1}", us[2], us[0] / us[2])
                } else {
                    String::new()
                };
                let line = format!(
                    "attn prefill {name:13} {dtype:?} T={t:4}: rows {:8.1} us  tiled {:7.1} us  x{:5.1}  ({:6.0} GFLOP/s tiled){tc_part}",
                    us[0],
                    us[1],
                    us[0] / us[1],
                    flops / (us[1] * 1e-6) / 1e9
                );
                println!("{line}");
                lines.push(line);
            }
        }
    }
    println!("\n==== summary: prefill attention (per layer) ====");
    for l in lines {
        println!("{l}");
    }
}
