//! Decode attention benchmarks at the engine's model shapes (ignored by default; the device run
//! script runs every `cuda_bench*` binary with `--ignored`, `BENCH_FILTER` picks some): context
//! length sweeps with the exact and the graph-bucket split bound, and heads per block at short
//! contexts. Moved out of `cuda_bench_decode.rs` (which grew past 600 lines) unchanged; timing:
//! `bench::time_ms` (CUDA events, warm-up, median).
#![cfg(feature = "cuda")]

use pocket_kernels::cuda::CudaBackend;
use pocket_kernels::{AttentionParams, Backend, DType, Tensor};

#[path = "cuda_common/bench.rs"]
mod bench;

use bench::{backend_or_skip, time_ms};

/// Decode attention at the engine's shapes (f16 and f32 caches, one sequence) from a 1-token
/// context to 32k, with the cluster merge of the splits (sm_90, groups up to 4, bounds up to
/// 1024 keys) and without it (`set_attn_cluster`; the 27B and Qwen2.5 groups of 6 and 7 never
/// take it, so their lines show the split kernel): Llama-3-8B (32/8 heads, head_dim 128), Qwen2.5-0.5B (14/2, group 7, head_dim 64) and
/// Qwen3.5-27B (24/4, group 6, head_dim 256). Two times per case: `max_seq_len` exact (eager
/// steps) and the decode graph's context bucket (next power of two, at least 256), for which the
/// split count is sized. Bandwidth counts the K and V bytes of the context once; up to ~4k keys
/// they stay in the 60 MB L2 between calls, so those GB/s are not HBM figures. Run once per
/// `POCKET_ATTN` (unset: the decode kernel; `generic`: the per-head kernel) to compare.
/// One decode row's attention inputs over a paged cache of `nblocks` blocks of `bs` keys:
/// the caches, an identity block table, the parameters, q (all 0.01) and the output.
struct Decode1 {
    kc: Tensor,
    vc: Tensor,
    tables: Vec<u32>,
    p: AttentionParams,
    q: Tensor,
    out: Tensor,
}

impl Decode1 {
    fn new(
        be: &CudaBackend,
        heads: usize,
        kvh: usize,
        hd: usize,
        nblocks: usize,
        bs: usize,
        cache: DType,
    ) -> Self {
        Decode1 {
            kc: be.alloc(cache, &[nblocks, bs, kvh, hd]).unwrap(),
            vc: be.alloc(cache, &[nblocks, bs, kvh, hd]).unwrap(),
            tables: (0..nblocks as u32).collect(),
            p: AttentionParams {
                num_heads: heads,
                num_kv_heads: kvh,
                head_dim: hd,
                scale: 1.0 / (hd as f32).sqrt(),
                sliding_window: None,
                softcap: None,
            },
            q: be
                .upload_f32(&vec![0.01; heads * hd], &[1, heads, hd])
                .unwrap(),
            out: be.alloc(DType::F32, &[1, heads, hd]).unwrap(),
        }
    }
}

#[test]
#[ignore = "GPU benchmark: run with --ignored on the device machine"]
fn bench_attention_decode_shapes() {
    use pocket_kernels::AttentionMeta;
    let Some(be) = backend_or_skip() else {
        return;
    };
    let mode = std::env::var("POCKET_ATTN").unwrap_or_else(|_| "current".into());
    let bs = 16usize;
    let ctxs = [1usize, 16, 128, 640, 1024, 2048, 4096, 32768];
    let max_ctx = *ctxs.iter().max().unwrap();
    let mut lines = Vec::new();
    for (name, heads, kvh, hd, cache, cluster) in [
        ("8B", 32usize, 8usize, 128usize, DType::F16, true),
        ("8B", 32, 8, 128, DType::F16, false),
        ("8B", 32, 8, 128, DType::F32, true),
        ("8B", 32, 8, 128, DType::F32, false),
        ("SmolLM2", 9, 3, 64, DType::F16, true),
        ("SmolLM2", 9, 3, 64, DType::F16, false),
        ("Qwen2.5-0.5B", 14, 2, 64, DType::F16, true),
        ("Qwen3.5-27B", 24, 4, 256, DType::F16, true),
    ] {
        be.set_attn_cluster(Some(cluster));
        let nblocks = max_ctx / bs;
        let Decode1 {
            kc,
            vc,
            tables,
            p,
            q,
            mut out,
        } = Decode1::new(&be, heads, kvh, hd, nblocks, bs, cache);
        for &ctx in &ctxs {
            let mut us = [0.0f64; 2];
            let bucket = ctx.next_power_of_two().max(256);
            for (t, bound) in [ctx, bucket].into_iter().enumerate() {
                let meta = AttentionMeta {
                    query_start: be.upload_u32(&[0, 1], &[2]).unwrap(),
                    seq_lens: be.upload_u32(&[ctx as u32], &[1]).unwrap(),
                    block_tables: be.upload_u32(&tables, &[1, nblocks]).unwrap(),
                    slot_mapping: be.upload_u32(&[0], &[1]).unwrap(),
                    num_seqs: 1,
                    max_seq_len: bound,
                };
                us[t] = 1e3
                    * time_ms(&be, 3, 50, |_| {
                        be.attention(&q, &kc, &vc, &meta, &p, &mut out).unwrap()
                    });
            }
            let gb = (2 * ctx * kvh * hd * cache.size()) as f64 / 1e9;
            let c = if cluster { "cluster" } else { "split" };
            let line = format!(
                "attn decode {cache:?} {name:12} {heads:2}/{kvh} hd {hd:3} ctx {ctx:5} {mode:7} {c:7}: exact {:7.1} us ({:7.1} GB/s), bucket {bucket:5} {:7.1} us ({:7.1} GB/s)",
                us[0],
                gb / (us[0] * 1e-6),
                us[1],
                gb / (us[1] * 1e-6)
            );
            println!("{line}");
            lines.push(line);
        }
    }
    be.set_attn_cluster(None);
    println!("\n==== summary: decode attention shapes ({mode}) ====");
    for l in lines {
        println!("{l}");
    }
}

/// Decode attention at short contexts (1 to 256 keys, the graph's smallest context bucket of
/// 256 as the split bound), one block per KV head serving the whole GQA group (`old`,
/// `set_attn_heads_per_block(0)`, as `POCKET_ATTN_HEADS=0`) against one or two query heads per
/// block (`h1`, the default, and `h2`; at head_dim 64 these run unsplit, so no attn_combine
/// launch, while `old` splits by 32 keys), alternating per shape. Shapes of the session-4 profile:
/// SmolLM2-135M (9/3 heads, head_dim 64), Qwen2.5-0.5B (14/2, 64), Llama-3-8B (32/8, 128) and
/// Qwen3.5-27B (24/4, 256); f32 caches as the profiled runs. Back-to-back launches, so each
/// figure is at least the launch interval.
#[test]
#[ignore = "GPU benchmark: run with --ignored on the device machine"]
fn bench_attention_decode_head_split() {
    use pocket_kernels::AttentionMeta;
    let Some(be) = backend_or_skip() else {
        return;
    };
    let bs = 16usize;
    let bucket = 256usize;
    let mut lines = Vec::new();
    for (name, heads, kvh, hd) in [
        ("SmolLM2-135M", 9usize, 3usize, 64usize),
        ("Qwen2.5-0.5B", 14, 2, 64),
        ("8B", 32, 8, 128),
        ("Qwen3.5-27B", 24, 4, 256),
    ] {
        let nblocks = bucket / bs;
        let Decode1 {
            kc,
            vc,
            tables,
            p,
            q,
            mut out,
        } = Decode1::new(&be, heads, kvh, hd, nblocks, bs, DType::F32);
        for ctx in [1usize, 5, 16, 64, 256] {
            let meta = AttentionMeta {
                query_start: be.upload_u32(&[0, 1], &[2]).unwrap(),
                seq_lens: be.upload_u32(&[ctx as u32], &[1]).unwrap(),
                block_tables: be.upload_u32(&tables, &[1, nblocks]).unwrap(),
                slot_mapping: be.upload_u32(&[0], &[1]).unwrap(),
                num_seqs: 1,
                max_seq_len: bucket,
            };
            let mut us = [0.0f64; 3];
            for round in 0..2 {
                for (i, h) in [0usize, 1, 2].into_iter().enumerate() {
                    be.set_attn_heads_per_block(h);
                    let t = 1e3
                        * time_ms(&be, 3, 100, |_| {
                            be.attention(&q, &kc, &vc, &meta, &p, &mut out).unwrap()
                        });
                    // The better of two rounds, so clock drift hits all three alike.
                    us[i] = if round == 0 { t } else { us[i].min(t) };
                }
            }
            let line = format!(
                "attn heads/block {name:12} {heads:2}/{kvh} hd {hd:3} ctx {ctx:3} (bound {bucket}): old {:6.2} us  h1 {:6.2} us  h2 {:6.2} us",
                us[0], us[1], us[2]
            );
            println!("{line}");
            lines.push(line);
        }
    }
    be.set_attn_heads_per_block(1);
    println!("\n==== summary: decode attention heads per block ====");
    for l in lines {
        println!("{l}");
    }
}
