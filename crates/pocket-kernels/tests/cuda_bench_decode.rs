//! GPU microbenchmarks of the decode step's pieces at the shapes of the 2026-11-30 Nsight profile
//! (ignored by default; the device run script runs them with `--ignored`, `BENCH_FILTER` picks
//! some): split-column GEMVs, the chunked delta rule, the 8B step with and without programmatic
//! dependent launch, the fused attention-input op, and the small per-layer kernels (decode
//! attention per model shape is in `cuda_bench_attn_decode.rs`). Timing: `bench::time_ms`.
#![cfg(feature = "cuda")]

use pocket_kernels::{Backend, DType};
use pocket_quant::{GgmlType, QuantFormat};

#[path = "cuda_common/bench.rs"]
mod bench;

use bench::{backend_or_skip, bench_x, capture, random_bytes, time_ms, weight_copies, ROOF_TBPS};

#[path = "cuda_common/step.rs"]
mod step;

/// Decode GEMV (n = 1) at the Qwen3.5-27B and Llama-3-8B shapes of the 2026-11-30 Nsight
/// profile, old kernels (`set_split_gemv(false)`, as `POCKET_GEMV_SPLIT=0`) against the split
/// ones: BF16 (`gemv_f_bf16_n1` vs `gemv_h_bf16_r1` / `_r4`) and Q4_0 (`gemv_q8r_q4_0` vs
/// `gemv_q8r64_q4_0` at 4096 columns; FP8 has its own, `bench_fp8_gemv_27b` in cuda_bench_fp8.rs;
/// the PDL prefetch of both does not show in an isolated launch). Weights rotate over >= 200 MB of copies (HBM reads); TB/s
/// counts weight (and tile scale) bytes.
#[test]
#[ignore = "GPU benchmark: run with --ignored on the device machine"]
fn bench_gemv_split_shapes() {
    let Some(be) = backend_or_skip() else {
        return;
    };
    let mut lines = Vec::new();
    let mut run = |f: QuantFormat,
                   rows: usize,
                   cols: usize,
                   bytes: Vec<u8>,
                   sc: Option<Vec<u8>>| {
        let wbytes = bytes.len() + sc.as_ref().map_or(0, |s| s.len());
        let ws = weight_copies(&be, f, rows, cols, bytes, sc);
        let copies = ws.len();
        let x = bench_x(1, cols);
        let xt = be.upload_f32(&x, &[1, cols]).unwrap();
        let mut out = be.alloc(DType::F32, &[1, rows]).unwrap();
        let modes: &[(bool, &str)] = &[(false, "old"), (true, "split")];
        let mut first = None;
        for &(split, label) in modes {
            be.set_split_gemv(split);
            let ms = time_ms(&be, 5, 60, |i| {
                be.matmul(&xt, &ws[i % copies], &mut out).unwrap()
            });
            let base = *first.get_or_insert(ms);
            let tbps = wbytes as f64 / (ms * 1e-3) / 1e12;
            let line = format!(
                "gemv {:12} {rows:6}x{cols:5} n=1 {label:6} {:8.1} us  {:6.3} TB/s  {:5.1}% of {ROOF_TBPS} TB/s  ({:.2}x old)",
                f.name(),
                ms * 1e3,
                tbps,
                100.0 * tbps / ROOF_TBPS,
                base / ms
            );
            println!("{line}");
            lines.push(line);
        }
        be.set_split_gemv(true);
    };
    for &(rows, cols) in &[(48usize, 5120usize), (96, 5120), (248320, 5120)] {
        // 0.01 everywhere (random_bytes' BF16 fill), built by doubling: the LM head is 2.5 GB.
        let bytes = half::bf16::from_f32(0.01).to_le_bytes().repeat(rows * cols);
        run(QuantFormat::Ggml(GgmlType::BF16), rows, cols, bytes, None);
    }
    for &(rows, cols) in &[
        (28672usize, 4096usize),
        (4096, 4096),
        (4096, 14336),
        (6144, 4096),
    ] {
        let bytes = random_bytes(GgmlType::Q4_0, rows, cols, 13 + rows as u64);
        run(QuantFormat::Ggml(GgmlType::Q4_0), rows, cols, bytes, None);
    }
    println!("\n==== summary: decode GEMV, split vs old ====");
    for l in lines {
        println!("{l}");
    }
}

/// The delta-rule prefill of one Qwen3.5-27B DeltaNet layer (16 key / 48 value heads, 128 x 128
/// state, one sequence continuing from stored state) at 512 and 4096 tokens: the token scan
/// (`POCKET_DELTA_PREFILL=scan`) against the chunked WY/UT kernels (`=chunked`).
#[test]
#[ignore = "GPU benchmark: run with --ignored on the device machine"]
fn bench_delta_rule_prefill() {
    use pocket_kernels::{DeltaRuleParams, HeadGrouping, RecurrentMeta};
    let Some(be) = backend_or_skip() else {
        return;
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
    let (w, hv) = (p.qkv_width(), p.v_heads);
    let mut lines = Vec::new();
    for n in [512usize, 4096] {
        let wave = |i: usize, a: f32| ((i * 7919) % 1000) as f32 / 1000.0 * a;
        let x: Vec<f32> = (0..n * w).map(|i| wave(i, 2.0) - 1.0).collect();
        let g: Vec<f32> = (0..n * hv).map(|i| -0.3 * wave(i, 1.0)).collect();
        let beta: Vec<f32> = (0..n * hv).map(|i| 0.1 + 0.8 * wave(i, 1.0)).collect();
        let st0: Vec<f32> = (0..hv * 128 * 128).map(|i| wave(i, 0.2) - 0.1).collect();
        let xt = be.upload_f32(&x, &[n, w]).unwrap();
        let gt = be.upload_f32(&g, &[n, hv]).unwrap();
        let bt = be.upload_f32(&beta, &[n, hv]).unwrap();
        let mut st = be.upload_f32(&st0, &[1, hv, 128, 128]).unwrap();
        let mut out = be.alloc(DType::F32, &[n, hv * 128]).unwrap();
        let m = RecurrentMeta {
            query_start: be.upload_u32(&[0, n as u32], &[2]).unwrap(),
            state_slots: be.upload_u32(&[0], &[1]).unwrap(),
            has_state: be.upload_u32(&[1], &[1]).unwrap(),
            num_seqs: 1,
            max_rows: n,
        };
        for form in ["scan", "chunked"] {
            std::env::set_var("POCKET_DELTA_PREFILL", form);
            let ms = time_ms(&be, 2, 10, |_| {
                be.gated_delta_rule_chunked(&xt, &gt, &bt, &mut st, &m, &p, &mut out)
                    .unwrap()
            });
            let line = format!(
                "delta rule prefill 27B layer {n:5} tokens {form:8} {:9.1} us  {:8.0} tokens/s",
                ms * 1e3,
                n as f64 / (ms * 1e-3)
            );
            println!("{line}");
            lines.push(line);
        }
        std::env::remove_var("POCKET_DELTA_PREFILL");
    }
    println!("\n==== summary: delta rule prefill, scan vs chunked ====");
    for l in lines {
        println!("{l}");
    }
}

/// Programmatic dependent launch A/B on the whole 8B decode step (Q4_0 layers, Q6_K output):
/// the same step with PDL off, on with the GEMVs triggering their dependents after the main loop
/// (`PdlEarly::None`), on with them triggering right after their wait (`All`; the dense default),
/// and early only where their grid fits in one wave (`Wave`), eager and as a graph, alternating the settings so clock drift hits all alike. Skipped where
/// PDL is unsupported.
#[test]
#[ignore = "GPU benchmark: run with --ignored on the device machine"]
fn bench_decode_step_8b_pdl() {
    let Some(be) = backend_or_skip() else {
        return;
    };
    if !be.pdl_supported() {
        eprintln!("skipped: PDL needs the sm_90 cubin");
        return;
    }
    use pocket_kernels::cuda::PdlEarly;
    // (PDL, early trigger, label).
    let settings = [
        (false, PdlEarly::None, "off"),
        (true, PdlEarly::None, "late"),
        (true, PdlEarly::All, "early"),
        (true, PdlEarly::Wave, "wave"),
    ];
    let set = |pdl: bool, early: PdlEarly| {
        be.set_pdl(pdl);
        be.set_pdl_early(early).unwrap();
    };
    let mut st = step::Step::new(&be, step::LLAMA3_8B, GgmlType::Q4_0, GgmlType::Q6_K, 128);
    let mut graphs = Vec::new();
    for (pdl, early, label) in settings {
        set(pdl, early);
        st.run(&be);
        let g = capture(&be, || st.run(&be));
        let (prog, edges) = g.edge_counts().unwrap();
        println!("pdl {label}: graph of {edges} edges, {prog} programmatic");
        graphs.push(g);
    }
    // (eager, graph) per setting, over three alternating rounds; the best round of each.
    let mut best = [[f64::MAX; 2]; 4];
    for _ in 0..3 {
        for (i, &(pdl, early, _)) in settings.iter().enumerate() {
            set(pdl, early);
            let eager = time_ms(&be, 2, 10, |_| st.run(&be));
            let graph = time_ms(&be, 3, 30, |_| graphs[i].replay().unwrap());
            best[i][0] = best[i][0].min(eager);
            best[i][1] = best[i][1].min(graph);
        }
    }
    be.synchronize().unwrap();
    be.set_pdl(true);
    be.set_pdl_early(PdlEarly::All).unwrap();
    println!("\n==== summary: decode step, PDL A/B ====");
    for (i, (_, _, label)) in settings.into_iter().enumerate() {
        println!(
            "step 8B Q4_0 PDL {label:5}: eager {:6.3} ms ({:6.1} tok/s), graph {:6.3} ms ({:6.1} tok/s)",
            best[i][0],
            1e3 / best[i][0],
            best[i][1],
            1e3 / best[i][1]
        );
    }
    for (i, j, label) in [
        (1, 0, "late/off"),
        (2, 1, "early/late"),
        (3, 2, "wave/early"),
    ] {
        println!(
            "step 8B Q4_0 PDL {label}: eager {:+.1}%, graph {:+.1}% time",
            100.0 * (best[i][0] / best[j][0] - 1.0),
            100.0 * (best[i][1] / best[j][1] - 1.0)
        );
    }
}

/// The attention-input op (`qkv_rope_kv_write`, one launch) against the unfused sequence it
/// replaces after a stacked QKV GEMV (`add_bias` with bias, `split_columns3`, `rope` x2,
/// `kv_write_f32`), at the SmolLM2-135M (9/3 heads, hd 64), Qwen2.5-0.5B (14/2, hd 64, bias)
/// and Llama-3-8B (32/8, hd 128) shapes, decode (1 token) and a 4-token batch.
#[test]
#[ignore = "GPU benchmark: run with --ignored on the device machine"]
fn bench_qkv_rope_kv_write() {
    use pocket_kernels::rope::{RopeConfig, RopeLayout, RopeScaling};
    use pocket_kernels::{AttentionMeta, QkvBias, QkvRopeParams, QkvSource, RopeTable};
    let Some(be) = backend_or_skip() else {
        return;
    };
    let mut lines = Vec::new();
    for &(name, h, kvh, hd, bias) in &[
        ("smollm2-135m", 9usize, 3usize, 64usize, false),
        ("qwen2.5-0.5b", 14, 2, 64, true),
        ("llama3-8b", 32, 8, 128, false),
    ] {
        for n in [1usize, 4] {
            let (qw, kw) = (h * hd, kvh * hd);
            let w = qw + 2 * kw;
            let table = RopeTable::new(
                RopeConfig {
                    theta: 500000.0,
                    rot_dim: hd,
                    layout: RopeLayout::NeoX,
                    scaling: RopeScaling::None,
                },
                4096,
            );
            let half = hd / 2;
            let rope = pocket_kernels::rope::DeviceRope {
                config: table.config,
                cos: be.upload_f32(&table.cos, &[4096, half]).unwrap(),
                sin: be.upload_f32(&table.sin, &[4096, half]).unwrap(),
            };
            let (bs, nblocks) = (16usize, 64usize);
            let mut kc = be.alloc(DType::F32, &[nblocks, bs, kvh, hd]).unwrap();
            let mut vc = be.alloc(DType::F32, &[nblocks, bs, kvh, hd]).unwrap();
            let slots: Vec<u32> = (0..n as u32).map(|i| 100 + i).collect();
            let meta = AttentionMeta {
                query_start: be.upload_u32(&[0, n as u32], &[2]).unwrap(),
                seq_lens: be.upload_u32(&[n as u32 + 100], &[1]).unwrap(),
                block_tables: be
                    .upload_u32(&(0..nblocks as u32).collect::<Vec<_>>(), &[1, nblocks])
                    .unwrap(),
                slot_mapping: be.upload_u32(&slots, &[n]).unwrap(),
                num_seqs: 1,
                max_seq_len: n + 100,
            };
            let pos = be.upload_u32(&slots, &[n]).unwrap();
            let mut x = be.upload_f32(&vec![0.01; n * w], &[n, w]).unwrap();
            let b = be.upload_f32(&vec![0.02; w], &[w]).unwrap();
            let mut q = be.alloc(DType::F32, &[n, h, hd]).unwrap();
            let mut k = be.alloc(DType::F32, &[n, kvh, hd]).unwrap();
            let mut v = be.alloc(DType::F32, &[n, kvh, hd]).unwrap();
            let p = QkvRopeParams::new(h, kvh, hd);
            let unfused = time_ms(&be, 5, 200, |_| {
                if bias {
                    be.add_bias(&mut x, &b).unwrap();
                }
                q.reshape(&[n, qw]).unwrap();
                k.reshape(&[n, kw]).unwrap();
                v.reshape(&[n, kw]).unwrap();
                be.split_columns(&x, &mut [&mut q, &mut k, &mut v]).unwrap();
                q.reshape(&[n, h, hd]).unwrap();
                k.reshape(&[n, kvh, hd]).unwrap();
                v.reshape(&[n, kvh, hd]).unwrap();
                be.rope(&mut q, &pos, &rope).unwrap();
                be.rope(&mut k, &pos, &rope).unwrap();
                be.kv_write(&k, &v, &mut kc, &mut vc, &meta).unwrap();
            });
            let fused = time_ms(&be, 5, 200, |_| {
                let bias = if bias {
                    QkvBias::Stacked(&b)
                } else {
                    QkvBias::None
                };
                be.qkv_rope_kv_write(
                    QkvSource::Stacked(&x),
                    bias,
                    &p,
                    &pos,
                    &rope,
                    &mut q,
                    &mut kc,
                    &mut vc,
                    &meta,
                )
                .unwrap();
            });
            let line = format!(
                "qkv_rope_kv_write {name:13} n={n}: unfused {:6.2} us  fused {:6.2} us  ({:.2}x)",
                unfused * 1e3,
                fused * 1e3,
                unfused / fused
            );
            println!("{line}");
            lines.push(line);
        }
    }
    println!("\n==== summary: attention-input op ====");
    for l in lines {
        println!("{l}");
    }
}

/// The small per-layer decode kernels (one row, as in a decode step): the fused norms with their
/// int8 quantization, silu_mul_halves_q8, and the greedy pick (argmax, argmax_logprob). Run once
/// as is and once with `POCKET_SMALL_KERNELS=old` (the previous launch shapes) for the A/B; the
/// label says which. Back-to-back launches, so each figure is at least the launch interval.
#[test]
#[ignore = "GPU benchmark: run with --ignored on the device machine"]
fn bench_small_decode_kernels() {
    let Some(be) = backend_or_skip() else {
        return;
    };
    let label = match std::env::var("POCKET_SMALL_KERNELS").as_deref() {
        Ok("old") => "old",
        _ => "new",
    };
    println!("device: {} (small kernels: {label})", be.name());
    let ramp = |n: usize, s: f32| -> Vec<f32> {
        (0..n)
            .map(|i| s * (((i * 2654435761) % 1000) as f32 / 500.0 - 1.0))
            .collect()
    };
    let mut lines = Vec::new();
    for d in [576usize, 896, 4096, 5120] {
        let w = be.upload_f32(&ramp(d, 0.5), &[d]).unwrap();
        let x = be.upload_f32(&ramp(d, 2.0), &[1, d]).unwrap();
        let delta = be.upload_f32(&vec![0.0f32; d], &[1, d]).unwrap();
        let mut res = be.upload_f32(&ramp(d, 1.0), &[1, d]).unwrap();
        let mut h = be.alloc(DType::F32, &[1, d]).unwrap();
        let t_norm = time_ms(&be, 50, 500, |_| {
            be.rms_norm(&x, &w, 1e-5, &mut h).unwrap();
        });
        let t_add = time_ms(&be, 50, 500, |_| {
            be.add_rms_norm(&mut res, &delta, &w, 1e-5, &mut h).unwrap();
        });
        lines.push(format!(
            "small {label} d={d:5}: rms_norm_q8 {:6.2} us  add_rms_norm_q8 {:6.2} us",
            t_norm * 1e3,
            t_add * 1e3
        ));
        println!("{}", lines.last().unwrap());
    }
    for d in [1536usize, 896, 4864, 14336, 17408] {
        let x = be.upload_f32(&ramp(2 * d, 3.0), &[1, 2 * d]).unwrap();
        let mut h = be.alloc(DType::F32, &[1, d]).unwrap();
        let t = time_ms(&be, 50, 500, |_| {
            be.silu_mul_halves(&x, &mut h).unwrap();
        });
        lines.push(format!(
            "small {label} d={d:5}: silu_mul_halves_q8 {:6.2} us",
            t * 1e3
        ));
        println!("{}", lines.last().unwrap());
    }
    for vocab in [49152usize, 128256, 151936, 248320] {
        let l = be.upload_f32(&ramp(vocab, 8.0), &[1, vocab]).unwrap();
        let mut ids = be.alloc(DType::U32, &[1]).unwrap();
        let mut lps = be.alloc(DType::F32, &[1]).unwrap();
        let t_lp = time_ms(&be, 20, 200, |_| {
            be.argmax_logprob(&l, &mut ids, &mut lps).unwrap();
        });
        let t_am = time_ms(&be, 20, 200, |_| {
            be.argmax(&l, &mut ids).unwrap();
        });
        lines.push(format!(
            "small {label} vocab={vocab:6}: greedy sample_rows {:6.2} us  argmax_rows {:6.2} us",
            t_lp * 1e3,
            t_am * 1e3
        ));
        println!("{}", lines.last().unwrap());
    }
    println!("\n==== summary: small decode kernels ({label}) ====");
    for l in lines {
        println!("{l}");
    }
}

/// The device sampler on one row with per-row parameters, as the engine's decode graphs call it:
/// greedy (temperature 0), temperature alone, and top-k / top-p draws, on logits shaped like a
/// language model's (a low bulk and a few dozen high tokens: the cut-offs run over a candidate
/// set in shared memory) and on a flat ramp (no set holds them: bisection over the whole row).
/// Back-to-back launches, so each figure is at least the launch interval.
#[test]
#[ignore = "GPU benchmark: run with --ignored on the device machine"]
fn bench_sampler() {
    let Some(be) = backend_or_skip() else {
        return;
    };
    println!("device: {}", be.name());
    let configs: [(&str, [f32; 4]); 5] = [
        ("greedy", [0.0, 0.0, 1.0, 0.0]),
        ("t=1", [1.0, 0.0, 1.0, 0.0]),
        ("t=0.7 p=0.9", [0.7, 0.0, 0.9, 0.0]),
        ("t=0.8 k=40 p=0.95", [0.8, 40.0, 0.95, 0.0]),
        ("t=1 k=50", [1.0, 50.0, 1.0, 0.0]),
    ];
    let mut lines = Vec::new();
    for vocab in [128256usize, 248320] {
        let flat: Vec<f32> = (0..vocab)
            .map(|i| ((i * 2654435761) % 1000) as f32 / 125.0 - 4.0)
            .collect();
        let mut peaked: Vec<f32> = flat.iter().map(|v| 0.4 * v - 6.0).collect();
        for j in 0..40 {
            peaked[(j * 7919 + 13) % vocab] = 12.0 - 0.15 * j as f32;
        }
        for (shape, row) in [("peaked", &peaked), ("flat", &flat)] {
            let l = be.upload_f32(row, &[1, vocab]).unwrap();
            let seeds = be.upload_u32(&[1, 0, 0, 0], &[1, 4]).unwrap();
            let mut ids = be.alloc(DType::U32, &[1]).unwrap();
            let mut lps = be.alloc(DType::F32, &[1]).unwrap();
            for (name, p) in configs {
                let params = be.upload_f32(&p, &[1, 4]).unwrap();
                let t = time_ms(&be, 10, 100, |_| {
                    be.sample_rows(&l, &params, &seeds, &mut ids, &mut lps)
                        .unwrap();
                });
                lines.push(format!(
                    "sampler vocab={vocab:6} {shape:6} {name:18} {:8.2} us",
                    t * 1e3
                ));
                println!("{}", lines.last().unwrap());
            }
        }
    }
    println!("\n==== summary: sampler ====");
    for l in lines {
        println!("{l}");
    }
}
