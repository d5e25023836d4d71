//! GPU microbenchmarks (ignored by default; the device run script runs them with `--ignored`):
//! decode GEMV bandwidth per format at 8B-model shapes, and the cuBLAS prefill GEMM.
//!
//! Timing: `bench::time_ms` (warm-up calls, then batches of 10 back-to-back calls between CUDA
//! events; the median batch time per call). The weight rotates among enough copies to exceed
//! three times the 60 MB L2, so every launch reads its weight from HBM. Bandwidth counts the
//! weight bytes read (the activation and output are tiny).
#![cfg(feature = "cuda")]

use pocket_kernels::{Backend, DType, HostBytes};
use pocket_quant::{GgmlType, QuantFormat};

#[path = "cuda_common/bench.rs"]
mod bench;

use bench::{
    backend_or_skip, bench_x, capture, random_bytes, random_fp8, time_ms, variant_label,
    weight_copies, ROOF_TBPS,
};

#[test]
#[ignore = "GPU benchmark: run with --ignored on the device machine"]
fn bench_gemv_and_gemm() {
    let Some(be) = backend_or_skip() else {
        return;
    };
    println!("device: {}", be.name());
    let formats = [
        GgmlType::Q4_0,
        GgmlType::Q4_1,
        GgmlType::Q8_0,
        GgmlType::Q4_K,
        GgmlType::Q6_K,
        GgmlType::Q5_0,
        GgmlType::Q5_K,
        GgmlType::Q3_K,
        GgmlType::IQ4_XS,
        GgmlType::F16,
        GgmlType::BF16,
    ];
    let shapes = [(4096usize, 4096usize), (14336, 4096), (4096, 14336)];
    // Issue 7's formats also get the Llama-3 lm_head shape (128256 x 4096).
    let issue7 = [
        GgmlType::Q4_0,
        GgmlType::Q4_K,
        GgmlType::Q8_0,
        GgmlType::Q4_1,
        GgmlType::Q5_0,
        GgmlType::Q6_K,
    ];
    let mut rows_out = Vec::new();
    for &t in &formats {
        let lm_head: &[(usize, usize)] = if issue7.contains(&t) {
            &[(128256, 4096)]
        } else {
            &[]
        };
        for &(rows, cols) in shapes.iter().chain(lm_head) {
            let f = QuantFormat::Ggml(t);
            let bytes = random_bytes(t, rows, cols, 7 + rows as u64);
            let wbytes = bytes.len();
            let ws = weight_copies(&be, f, rows, cols, bytes, None);
            let copies = ws.len();
            let x = bench_x(1, cols);
            let xt = be.upload_f32(&x, &[1, cols]).unwrap();
            let mut out = be.alloc(DType::F32, &[1, rows]).unwrap();
            // The backend's default decode GEMV; `POCKET_GEMV` (warp, fused) picks another and
            // labels the lines.
            let label = variant_label();
            let modes: &[(bool, &str)] = &[(variant_label() == "fused", label)];
            for &(fused, label) in modes {
                be.set_fused_gemv(fused);
                let ms = time_ms(&be, 5, 60, |i| {
                    be.matmul(&xt, &ws[i % copies], &mut out).unwrap()
                });
                let tbps = wbytes as f64 / (ms * 1e-3) / 1e12;
                let line = format!(
                    "gemv {:6} {rows:5}x{cols:5} n=1 {label:5} {:8.1} us  {:6.3} TB/s  {:5.1}% of {ROOF_TBPS} TB/s",
                    f.name(),
                    ms * 1e3,
                    tbps,
                    100.0 * tbps / ROOF_TBPS
                );
                println!("{line}");
                rows_out.push(line);
            }
            be.set_fused_gemv(false);
        }
    }
    // Prefill: 512 tokens through the dequantize-to-f16 + cuBLAS path.
    for &t in &issue7 {
        for &(rows, cols) in &[(4096usize, 4096usize), (14336, 4096), (4096, 14336)] {
            let f = QuantFormat::Ggml(t);
            let n = 512;
            let w = be
                .upload_weight(
                    f,
                    rows,
                    cols,
                    HostBytes::from_vec(random_bytes(t, rows, cols, 3)),
                    None,
                    None,
                )
                .unwrap();
            let x: Vec<f32> = (0..n * cols)
                .map(|i| ((i * 7919) % 1000) as f32 / 1000.0 - 0.5)
                .collect();
            let xt = be.upload_f32(&x, &[n, cols]).unwrap();
            let mut out = be.alloc(DType::F32, &[n, rows]).unwrap();
            let ms = time_ms(&be, 3, 20, |_| be.matmul(&xt, &w, &mut out).unwrap());
            let tflops = 2.0 * (n * rows * cols) as f64 / (ms * 1e-3) / 1e12;
            let line = format!(
                "gemm {:6} {rows:5}x{cols:5} n={n} {:8.1} us  {:6.1} TFLOP/s (dequant f16 + cuBLAS)",
                f.name(),
                ms * 1e3,
                tflops
            );
            println!("{line}");
            rows_out.push(line);
        }
    }
    println!("\n==== summary: kernel microbenchmarks (median of events) ====");
    for l in rows_out {
        println!("{l}");
    }
}

/// One-row dp4a GEMV kernels side by side (`set_q8_gemv_variant`, as `POCKET_GEMV_Q8` =
/// legacy, r, r64, p, w, r1, auto) at the decode shapes of Llama-3-8B (Q4_0, Q4_K, Q8_0: QKV
/// 6144x4096, O 4096x4096, gate/up 28672x4096, down 4096x14336; the Q6_K LM head 128256x4096),
/// Qwen2.5-0.5B (896 hidden, 4864 FFN) and SmolLM2-135M (576 hidden, 1536 FFN). A variant that
/// launches the same kernel as an earlier one is not timed again. Per line: the kernel, then
/// `eager` (back-to-back `matmul` calls: host launch cost included, about 4.5 us is that floor
/// on the H200) and `graph` (20 calls captured in one CUDA graph, launched as the backend
/// launches them, PDL included: replay time / 20, one activation quantize per graph included),
/// each in us, GB/s and % of 4.26 TB/s of the weight bytes, and the graph speed-up over
/// `legacy` (the session-3 choice). Weights rotate over >= 200 MB of copies (HBM reads).
#[test]
#[ignore = "GPU benchmark: run with --ignored on the device machine"]
fn bench_gemv_q8_variants() {
    use pocket_kernels::cuda::kernels::Q8Variant;
    let Some(be) = backend_or_skip() else {
        return;
    };
    // The variant in force (POCKET_GEMV_Q8 or auto), restored after the A/B.
    let before = be.q8_gemv_variant();
    println!("device: {} ({} SMs)", be.name(), be.sm_count());
    use GgmlType as G;
    let mut cases: Vec<(&str, &str, GgmlType, usize, usize)> = Vec::new();
    for t in [G::Q4_0, G::Q4_K, G::Q8_0] {
        for (what, rows, cols) in [
            ("qkv", 6144, 4096),
            ("o", 4096, 4096),
            ("gate_up", 28672, 4096),
            ("down", 4096, 14336),
        ] {
            cases.push(("8B", what, t, rows, cols));
        }
    }
    cases.push(("8B", "lm_head", G::Q6_K, 128256, 4096));
    for t in [G::Q5_0, G::Q8_0] {
        for (what, rows, cols) in [("qkv", 1152, 896), ("o", 896, 896), ("gate_up", 9728, 896)] {
            cases.push(("Qw0.5B", what, t, rows, cols));
        }
    }
    for t in [G::Q4_K, G::Q6_K, G::Q5_0, G::Q8_0] {
        cases.push(("Qw0.5B", "down", t, 896, 4864));
    }
    cases.push(("Qw0.5B", "lm_head", G::Q8_0, 151936, 896));
    for (what, rows, cols) in [
        ("qkv", 960, 576),
        ("o", 576, 576),
        ("gate_up", 3072, 576),
        ("down", 576, 1536),
    ] {
        cases.push(("Smol135M", what, G::Q4_1, rows, cols));
    }
    cases.push(("Smol135M", "lm_head", G::Q8_0, 49152, 576));
    let variants = [
        Q8Variant::Legacy,
        Q8Variant::Rows,
        Q8Variant::Rows64,
        Q8Variant::Warp,
        Q8Variant::Row1,
        Q8Variant::Auto,
    ];
    let per_graph = 20;
    let gbps = |bytes: usize, ms: f64| bytes as f64 / (ms * 1e-3) / 1e9;
    let mut lines = Vec::new();
    for (model, what, t, rows, cols) in cases {
        let f = QuantFormat::Ggml(t);
        let bytes = random_bytes(t, rows, cols, 11 + rows as u64);
        let wbytes = bytes.len();
        let ws = weight_copies(&be, f, rows, cols, bytes, None);
        let copies = ws.len();
        let x = bench_x(1, cols);
        let xt = be.upload_f32(&x, &[1, cols]).unwrap();
        let mut out = be.alloc(DType::F32, &[1, rows]).unwrap();
        // (symbol, eager ms, graph ms) of each kernel timed so far for this case.
        let mut timed: Vec<(&str, f64, f64)> = Vec::new();
        let mut legacy_graph = None;
        for v in variants {
            be.set_q8_gemv_variant(v);
            let sym = be.one_row_q8_gemv_symbol(f, rows, cols).unwrap_or("?");
            let known = timed.iter().find(|e| e.0 == sym).copied();
            if known.is_some() && !matches!(v, Q8Variant::Legacy | Q8Variant::Auto) {
                continue;
            }
            let (_, eager, graph) = known.unwrap_or_else(|| {
                let eager = time_ms(&be, 5, 60, |i| {
                    be.matmul(&xt, &ws[i % copies], &mut out).unwrap()
                });
                let g = capture(&be, || {
                    for i in 0..per_graph {
                        be.matmul(&xt, &ws[i % copies], &mut out).unwrap();
                    }
                });
                let graph = time_ms(&be, 2, 10, |_| g.replay().unwrap()) / per_graph as f64;
                timed.push((sym, eager, graph));
                (sym, eager, graph)
            });
            let base = *legacy_graph.get_or_insert(graph);
            let line = format!(
                "gemv8 {model:8} {what:7} {:6} {rows:6}x{cols:5} {:6} {sym:18} eager {:7.1} us {:6.0} GB/s {:5.1}%  graph {:7.1} us {:6.0} GB/s {:5.1}%  ({:.2}x legacy)",
                f.name(),
                v.name(),
                eager * 1e3,
                gbps(wbytes, eager),
                gbps(wbytes, eager) / (10.0 * ROOF_TBPS),
                graph * 1e3,
                gbps(wbytes, graph),
                gbps(wbytes, graph) / (10.0 * ROOF_TBPS),
                base / graph
            );
            println!("{line}");
            lines.push(line);
        }
    }
    be.set_q8_gemv_variant(before);
    println!("\n==== summary: one-row dp4a GEMV variants (graph column: in-step cost) ====");
    for l in lines {
        println!("{l}");
    }
}

#[path = "cuda_common/step.rs"]
mod step;

/// Whole synthetic decode steps with the one-row dp4a GEMV choice A/B (`legacy`, the session-3
/// kernels, against `auto`, the per-shape choice; as `POCKET_GEMV_Q8`), as CUDA graph replays:
/// Llama-3-8B Q4_0 (Q6_K output) and Q8_0, Qwen2.5-0.5B-like Q5_0 (Q8_0 output) and
/// SmolLM2-135M-like Q4_1 (Q8_0 output), context position 128.
#[test]
#[ignore = "GPU benchmark: run with --ignored on the device machine"]
fn bench_decode_step_q8_variants() {
    use pocket_kernels::cuda::kernels::Q8Variant;
    let Some(be) = backend_or_skip() else {
        return;
    };
    // The variant in force (POCKET_GEMV_Q8 or auto), restored after the A/B.
    let before = be.q8_gemv_variant();
    let qwen05 = step::Shape {
        hidden: 896,
        heads: 14,
        kv_heads: 2,
        head_dim: 64,
        ff: 4864,
        vocab: 151936,
        layers: 24,
    };
    let smol = step::Shape {
        hidden: 576,
        heads: 9,
        kv_heads: 3,
        head_dim: 64,
        ff: 1536,
        vocab: 49152,
        layers: 30,
    };
    let mut lines = Vec::new();
    for (name, shape, lf, of) in [
        ("8B Q4_0", step::LLAMA3_8B, GgmlType::Q4_0, GgmlType::Q6_K),
        ("8B Q8_0", step::LLAMA3_8B, GgmlType::Q8_0, GgmlType::Q8_0),
        ("Qw0.5B Q5_0", qwen05, GgmlType::Q5_0, GgmlType::Q8_0),
        ("Smol135M Q4_1", smol, GgmlType::Q4_1, GgmlType::Q8_0),
    ] {
        let mut st = step::Step::new(&be, shape, lf, of, 128);
        let mut base = None;
        for v in [Q8Variant::Legacy, Q8Variant::Auto] {
            be.set_q8_gemv_variant(v);
            let g = capture(&be, || st.run(&be));
            let graph = time_ms(&be, 3, 20, |_| g.replay().unwrap());
            let b = *base.get_or_insert(graph);
            let line = format!(
                "step {name:14} gemv {:6}: graph {:7.3} ms ({:7.1} tok/s)  ({:.3}x legacy)",
                v.name(),
                graph,
                1e3 / graph,
                b / graph
            );
            println!("{line}");
            lines.push(line);
        }
    }
    be.set_q8_gemv_variant(before);
    println!("\n==== summary: decode step, one-row dp4a GEMV legacy vs auto ====");
    for l in lines {
        println!("{l}");
    }
}

/// A whole synthetic decode step of the Llama-3-8B shape (32 layers, separate Q/K/V and gate/up
/// GEMVs, f16 KV cache at position 128, greedy argmax), eager and as a CUDA graph replay.
#[test]
#[ignore = "GPU benchmark: run with --ignored on the device machine"]
fn bench_decode_step_8b() {
    let Some(be) = backend_or_skip() else {
        return;
    };
    let mut lines = Vec::new();
    for (name, lf, of) in [
        ("Q4_0", GgmlType::Q4_0, GgmlType::Q6_K),
        ("Q4_K", GgmlType::Q4_K, GgmlType::Q6_K),
        ("Q8_0", GgmlType::Q8_0, GgmlType::Q8_0),
        ("Q4_1", GgmlType::Q4_1, GgmlType::Q6_K),
        ("Q5_0", GgmlType::Q5_0, GgmlType::Q6_K),
        ("Q6_K", GgmlType::Q6_K, GgmlType::Q6_K),
    ] {
        let mut st = step::Step::new(&be, step::LLAMA3_8B, lf, of, 128);
        let (fused, mode) = (variant_label() == "fused", variant_label());
        be.set_fused_gemv(fused);
        let eager = time_ms(&be, 2, 10, |_| st.run(&be));
        let g = capture(&be, || st.run(&be));
        let graph = time_ms(&be, 3, 20, |_| g.replay().unwrap());
        let gb = st.weight_bytes as f64 / 1e9;
        let roof_ms = st.weight_bytes as f64 / (ROOF_TBPS * 1e12) * 1e3;
        let line = format!(
            "step 8B {name:4} (out {:4}) {mode:5} weights {gb:5.2} GB: eager {eager:6.2} ms ({:6.1} tok/s), graph {graph:6.2} ms ({:6.1} tok/s) = {:5.1}% of roofline {:.0} tok/s",
            QuantFormat::Ggml(of).name(),
            1e3 / eager,
            1e3 / graph,
            100.0 * roof_ms / graph,
            1e3 / roof_ms
        );
        println!("{line}");
        lines.push(line);
    }
    println!("\n==== summary: decode step ====");
    for l in lines {
        println!("{l}");
    }
}

/// Split-K decode attention: one query row per sequence over an f16 paged cache, 8B shape.
#[test]
#[ignore = "GPU benchmark: run with --ignored on the device machine"]
fn bench_attention_decode() {
    use pocket_kernels::{AttentionMeta, AttentionParams};
    let Some(be) = backend_or_skip() else {
        return;
    };
    let (heads, kvh, hd, bs) = (32usize, 8usize, 128usize, 16usize);
    let mut lines = Vec::new();
    for &(seqs, ctx_len) in &[(1usize, 4096usize), (1, 32768), (16, 4096)] {
        let blocks_per = ctx_len.div_ceil(bs);
        let nblocks = blocks_per * seqs;
        let kc = be.alloc(DType::F16, &[nblocks, bs, kvh, hd]).unwrap();
        let vc = be.alloc(DType::F16, &[nblocks, bs, kvh, hd]).unwrap();
        let tables: Vec<u32> = (0..nblocks as u32).collect();
        let meta = AttentionMeta {
            query_start: be
                .upload_u32(&(0..=seqs as u32).collect::<Vec<_>>(), &[seqs + 1])
                .unwrap(),
            seq_lens: be.upload_u32(&vec![ctx_len as u32; seqs], &[seqs]).unwrap(),
            block_tables: be.upload_u32(&tables, &[seqs, blocks_per]).unwrap(),
            slot_mapping: be.upload_u32(&vec![0; seqs], &[seqs]).unwrap(),
            num_seqs: seqs,
            max_seq_len: ctx_len,
        };
        let p = AttentionParams {
            num_heads: heads,
            num_kv_heads: kvh,
            head_dim: hd,
            scale: 0.088,
            sliding_window: None,
            softcap: None,
        };
        let q = be
            .upload_f32(&vec![0.01; seqs * heads * hd], &[seqs, heads, hd])
            .unwrap();
        let mut out = be.alloc(DType::F32, &[seqs, heads, hd]).unwrap();
        let ms = time_ms(&be, 3, 30, |_| {
            be.attention(&q, &kc, &vc, &meta, &p, &mut out).unwrap()
        });
        let bytes = 2 * seqs * ctx_len * kvh * hd * 2;
        let line = format!(
            "attn decode f16 seqs={seqs:2} ctx={ctx_len:5}{}: {:8.1} us  {:6.3} TB/s of KV read",
            if std::env::var("POCKET_ATTN").is_ok_and(|v| v == "generic") {
                " generic"
            } else {
                ""
            },
            ms * 1e3,
            bytes as f64 / (ms * 1e-3) / 1e12
        );
        println!("{line}");
        lines.push(line);
    }
    println!("\n==== summary: attention ====");
    for l in lines {
        println!("{l}");
    }
}

/// FP8 E4M3 with 128x128 tile scales (Qwen3.5-27B FP8's layout) at its MLP shapes: the decode
/// GEMV (n = 1, 2, 4 and 8; bandwidth counts the weight and scale bytes, read once per launch)
/// and the prefill (512 tokens: dequantize to f16 + cuBLAS, and the exact f32 mode).
#[test]
#[ignore = "GPU benchmark: run with --ignored on the device machine"]
fn bench_fp8_gemv_and_gemm() {
    let Some(be) = backend_or_skip() else {
        return;
    };
    let f = QuantFormat::Fp8E4M3Block128;
    let mut lines = Vec::new();
    for &(rows, cols) in &[(17408usize, 5120usize), (5120, 17408), (5120, 5120)] {
        let (bytes, scales) = random_fp8(rows, cols);
        let wbytes = bytes.len() + scales.len();
        let ws = weight_copies(&be, f, rows, cols, bytes, Some(scales));
        let copies = ws.len();
        for n in [1usize, 2, 4, 8] {
            let x = bench_x(n, cols);
            let xt = be.upload_f32(&x, &[n, cols]).unwrap();
            let mut out = be.alloc(DType::F32, &[n, rows]).unwrap();
            let ms = time_ms(&be, 5, 60, |i| {
                be.matmul(&xt, &ws[i % copies], &mut out).unwrap()
            });
            let tbps = wbytes as f64 / (ms * 1e-3) / 1e12;
            let line = format!(
                "gemv {:12} {rows:5}x{cols:5} n={n} {:8.1} us  {:6.3} TB/s  {:5.1}% of {ROOF_TBPS} TB/s",
                f.name(),
                ms * 1e3,
                tbps,
                100.0 * tbps / ROOF_TBPS
            );
            println!("{line}");
            lines.push(line);
        }
        let n = 512;
        let x: Vec<f32> = (0..n * cols)
            .map(|i| ((i * 7919) % 1000) as f32 / 1000.0 - 0.5)
            .collect();
        let xt = be.upload_f32(&x, &[n, cols]).unwrap();
        let mut out = be.alloc(DType::F32, &[n, rows]).unwrap();
        for (exact, what) in [(false, "dequant f16 + cuBLAS"), (true, "exact: f32 SGEMM")] {
            be.set_exact_prefill(exact);
            let ms = time_ms(&be, 3, 20, |_| be.matmul(&xt, &ws[0], &mut out).unwrap());
            let tflops = 2.0 * (n * rows * cols) as f64 / (ms * 1e-3) / 1e12;
            let line = format!(
                "gemm {:12} {rows:5}x{cols:5} n={n} {:8.1} us  {:6.1} TFLOP/s ({what})",
                f.name(),
                ms * 1e3,
                tflops
            );
            println!("{line}");
            lines.push(line);
        }
        be.set_exact_prefill(false);
        // The FP8 path keeps no dequantized copy of a weight: what this process holds is the
        // FP8 copies, activations and the 64 MiB dequantization chunk (f16 or f32) plus x in f16.
        if let Some(m) = be.memory_info() {
            let line = format!(
                "mem  {:12} {rows:5}x{cols:5} process {:.0} MiB for {copies} FP8 copies of {:.0} MiB (peak {:.0} MiB)",
                f.name(),
                m.process_bytes.unwrap_or(0) as f64 / 1048576.0,
                wbytes as f64 / 1048576.0,
                m.process_peak_bytes.unwrap_or(0) as f64 / 1048576.0,
            );
            println!("{line}");
            lines.push(line);
        }
    }
    println!("\n==== summary: FP8 kernels ====");
    for l in lines {
        println!("{l}");
    }
}

/// The MLP's stacked gate|up projection at one activation row with the SwiGLU, FP8 E4M3 with
/// tile scales: the fused kernel (`matmul_silu_halves`' CUDA path, `gemv_fp8_silu_*`, each
/// outputs-per-warp variant and the per-shape choice) against the stacked GEMV + silu_mul_halves
/// (two launches, what `POCKET_GATE_UP_FUSED=0` runs), each timed as 8 calls over rotating
/// weight copies (> 300 MB, so HBM) captured in one CUDA graph, per call. Shapes: Qwen3.5-27B
/// (2 x 17408 x 5120) and an 8B-class MLP (2 x 14336 x 4096). Bandwidth counts the weight and
/// scale bytes.
#[test]
#[ignore = "GPU benchmark: run with --ignored on the device machine"]
fn bench_fp8_gate_up_silu() {
    let Some(be) = backend_or_skip() else {
        return;
    };
    let f = QuantFormat::Fp8E4M3Block128;
    let per_graph = 8usize;
    let mut lines = Vec::new();
    for &(inter, cols) in &[(17408usize, 5120usize), (14336, 4096)] {
        let rows = 2 * inter;
        let (bytes, scales) = random_fp8(rows, cols);
        let wbytes = bytes.len() + scales.len();
        let ws = weight_copies(&be, f, rows, cols, bytes, Some(scales));
        let copies = ws.len();
        let xt = be.upload_f32(&bench_x(1, cols), &[1, cols]).unwrap();
        let mut gu = be.alloc(DType::F32, &[1, rows]).unwrap();
        let mut out = be.alloc(DType::F32, &[1, inter]).unwrap();
        let mut time = |what: &str, run: &mut dyn FnMut(usize)| {
            let g = capture(&be, || (0..per_graph).for_each(&mut *run));
            let us = time_ms(&be, 2, 20, |_| g.replay().unwrap()) / per_graph as f64 * 1e3;
            let tbps = wbytes as f64 / (us * 1e-6) / 1e12;
            let line = format!(
                "gate_up+silu {:12} {inter:5}x2 x{cols:5} {what:24} graph {us:7.1} us {tbps:6.3} TB/s {:5.1}% of {ROOF_TBPS} TB/s",
                f.name(),
                100.0 * tbps / ROOF_TBPS
            );
            println!("{line}");
            lines.push(line);
            us
        };
        let unfused = time("gemv + silu_mul_halves", &mut |i| {
            be.matmul(&xt, &ws[i % copies], &mut gu).unwrap();
            be.silu_mul_halves(&gu, &mut out).unwrap();
        });
        let fused = time("fused (per shape)", &mut |i| {
            be.fp8_gate_up_silu_row1(&xt, &ws[i % copies], &mut out, None)
                .unwrap()
        });
        for per in [1usize, 2, 4] {
            time(&format!("fused {per}/warp"), &mut |i| {
                be.fp8_gate_up_silu_row1(&xt, &ws[i % copies], &mut out, Some(per))
                    .unwrap()
            });
        }
        let line = format!(
            "gate_up+silu {inter:5}x2 x{cols:5}: fused saves {:.1} us per call ({:.3}x)",
            unfused - fused,
            unfused / fused
        );
        println!("{line}");
        lines.push(line);
    }
    println!("\n==== summary: FP8 gate|up + SwiGLU ====");
    for l in lines {
        println!("{l}");
    }
}
