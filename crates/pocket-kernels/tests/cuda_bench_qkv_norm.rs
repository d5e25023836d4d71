//! GPU benchmark of the QK-normed (and gated) attention block after the QKV GEMV, one decode
//! token, as graphs (ignored by default; the device run script runs it with `--ignored`):
//! - Qwen3.5-27B full attention (24/4 heads of 256, partial rotary 64, `[query | gate]` rows,
//!   bf16 cache): `split_columns3` + `split_halves` + `rms_norm` x2 + `rope` x2 + `kv_write` +
//!   attention + `sigmoid_mul` (9 launches) against `qkv_norm_rope_kv_write` + `attention_gated`
//!   (2 launches);
//! - Qwen3-8B (32/8 heads of 128, full rotary): `split_columns3` + `rms_norm` x2 +
//!   `qkv_rope_kv_write` + attention (the previous fused path) against the one op + attention.
//!
//! Timing: `bench::time_ms` over graph replays (best of 3 rounds, alternating the variants).
#![cfg(feature = "cuda")]

use pocket_kernels::cuda::CudaBackend;
use pocket_kernels::qkv_rope::QkNorm;
use pocket_kernels::rope::{DeviceRope, RopeConfig, RopeLayout, RopeScaling};
use pocket_kernels::{
    AttentionMeta, AttentionParams, Backend, DType, QkvBias, QkvRopeParams, QkvSource, RopeTable,
    Tensor,
};

#[path = "cuda_common/bench.rs"]
mod bench;

use bench::{backend_or_skip, capture, time_ms};

/// Context length of the benchmarked token (its position is `LEN - 1`).
const LEN: usize = 1000;
/// Cache geometry: 64 blocks of 16 slots.
const BS: usize = 16;
const NBLOCKS: usize = 64;

/// One model's attention shape.
struct Shape {
    name: &'static str,
    heads: usize,
    kv_heads: usize,
    head_dim: usize,
    rot_dim: usize,
    gated: bool,
}

fn up(be: &CudaBackend, v: &[f32], shape: &[usize]) -> Tensor {
    be.upload_f32(v, shape).unwrap()
}

/// Values in [-1, 1) from a fixed xorshift sequence.
fn values(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s >> 40) as f32 / (1u64 << 23) as f32 - 1.0
        })
        .collect()
}

#[test]
#[ignore = "GPU benchmark: run with --ignored on the device machine"]
fn bench_qkv_norm_gated_attention_block() {
    let Some(be) = backend_or_skip() else {
        return;
    };
    let shapes = [
        Shape {
            name: "qwen3.5-27b",
            heads: 24,
            kv_heads: 4,
            head_dim: 256,
            rot_dim: 64,
            gated: true,
        },
        Shape {
            name: "qwen3-8b",
            heads: 32,
            kv_heads: 8,
            head_dim: 128,
            rot_dim: 128,
            gated: false,
        },
    ];
    let mut lines = Vec::new();
    for s in &shapes {
        let (h, kvh, hd) = (s.heads, s.kv_heads, s.head_dim);
        let qs = if s.gated { 2 * hd } else { hd };
        let (qw, kw) = (h * qs, kvh * hd);
        let w = qw + 2 * kw;
        let table = RopeTable::new(
            RopeConfig {
                theta: 1e7,
                rot_dim: s.rot_dim,
                layout: RopeLayout::NeoX,
                scaling: RopeScaling::None,
            },
            4096,
        );
        let half = s.rot_dim / 2;
        let rope = DeviceRope {
            config: table.config,
            cos: up(&be, &table.cos, &[4096, half]),
            sin: up(&be, &table.sin, &[4096, half]),
        };
        let mut kc = be.alloc(DType::BF16, &[NBLOCKS, BS, kvh, hd]).unwrap();
        let mut vc = be.alloc(DType::BF16, &[NBLOCKS, BS, kvh, hd]).unwrap();
        let all: Vec<u32> = (0..(NBLOCKS * BS) as u32).collect();
        let meta = |slots: &[u32]| AttentionMeta {
            query_start: be.upload_u32(&[0, 1], &[2]).unwrap(),
            seq_lens: be.upload_u32(&[LEN as u32], &[1]).unwrap(),
            block_tables: be.upload_u32(&all[..NBLOCKS], &[1, NBLOCKS]).unwrap(),
            slot_mapping: be.upload_u32(slots, &[slots.len()]).unwrap(),
            num_seqs: 1,
            max_seq_len: LEN,
        };
        let fill = meta(&all);
        let kv = up(&be, &values(all.len() * kw, 3), &[all.len(), kvh, hd]);
        be.kv_write(&kv, &kv, &mut kc, &mut vc, &fill).unwrap();
        let m = meta(&[LEN as u32 - 1]);
        let pos = be.upload_u32(&[LEN as u32 - 1], &[1]).unwrap();
        let x = up(&be, &values(w, 5), &[1, w]);
        let (qn, kn) = (
            up(&be, &values(hd, 7), &[hd]),
            up(&be, &values(hd, 9), &[hd]),
        );
        let p = AttentionParams {
            num_heads: h,
            num_kv_heads: kvh,
            head_dim: hd,
            scale: 1.0 / (hd as f32).sqrt(),
            sliding_window: None,
            softcap: None,
        };
        let qp = QkvRopeParams {
            q_head_stride: qs,
            ..QkvRopeParams::new(h, kvh, hd)
        };
        let f32s = |shape: &[usize]| be.alloc(DType::F32, shape).unwrap();
        let (mut qg, mut q, mut qn_out, mut gate) = (
            f32s(&[1, qw]),
            f32s(&[1, h * hd]),
            f32s(&[1, h * hd]),
            f32s(&[1, h * hd]),
        );
        let (mut k, mut kn_out, mut v, mut out) = (
            f32s(&[1, kw]),
            f32s(&[1, kw]),
            f32s(&[1, kw]),
            f32s(&[1, h, hd]),
        );
        // Every tensor is reshaped where it is used, so each run starts from the same shapes.
        let mut unfused = || {
            for (t, shape) in [(&mut qg, [1, qw]), (&mut k, [1, kw]), (&mut v, [1, kw])] {
                t.reshape(&shape).unwrap();
            }
            be.split_columns(&x, &mut [&mut qg, &mut k, &mut v])
                .unwrap();
            let qrows = if s.gated {
                qg.reshape(&[h, 2 * hd]).unwrap();
                q.reshape(&[h, hd]).unwrap();
                gate.reshape(&[h, hd]).unwrap();
                be.split_halves(&qg, &mut q, &mut gate).unwrap();
                &mut q
            } else {
                &mut qg
            };
            qrows.reshape(&[h, hd]).unwrap();
            qn_out.reshape(&[h, hd]).unwrap();
            be.rms_norm(qrows, &qn, 1e-6, &mut qn_out).unwrap();
            k.reshape(&[kvh, hd]).unwrap();
            kn_out.reshape(&[kvh, hd]).unwrap();
            be.rms_norm(&k, &kn, 1e-6, &mut kn_out).unwrap();
            if s.gated {
                qn_out.reshape(&[1, h, hd]).unwrap();
                kn_out.reshape(&[1, kvh, hd]).unwrap();
                v.reshape(&[1, kvh, hd]).unwrap();
                be.rope(&mut qn_out, &pos, &rope).unwrap();
                be.rope(&mut kn_out, &pos, &rope).unwrap();
                be.kv_write(&kn_out, &v, &mut kc, &mut vc, &m).unwrap();
                be.attention(&qn_out, &kc, &vc, &m, &p, &mut out).unwrap();
                gate.reshape(&[1, h, hd]).unwrap();
                be.sigmoid_mul(&mut out, &gate).unwrap();
            } else {
                // The previous fused path: the op reads the normed rows.
                qn_out.reshape(&[1, h * hd]).unwrap();
                kn_out.reshape(&[1, kw]).unwrap();
                v.reshape(&[1, kw]).unwrap();
                q.reshape(&[1, h, hd]).unwrap();
                be.qkv_rope_kv_write(
                    QkvSource::Separate {
                        q: &qn_out,
                        k: &kn_out,
                        v: &v,
                    },
                    QkvBias::None,
                    &QkvRopeParams::new(h, kvh, hd),
                    &pos,
                    &rope,
                    &mut q,
                    &mut kc,
                    &mut vc,
                    &m,
                )
                .unwrap();
                be.attention(&q, &kc, &vc, &m, &p, &mut out).unwrap();
            }
        };
        unfused();
        let g_unfused = capture(&be, &mut unfused);
        let mut fused = || {
            let norm = QkNorm {
                q: Some((&qn, 1e-6)),
                k: Some((&kn, 1e-6)),
            };
            q.reshape(&[1, h, hd]).unwrap();
            gate.reshape(&[1, h * hd]).unwrap();
            be.qkv_norm_rope_kv_write(
                QkvSource::Stacked(&x),
                QkvBias::None,
                &qp,
                norm,
                &pos,
                &rope,
                &mut q,
                s.gated.then_some(&mut gate),
                &mut kc,
                &mut vc,
                &m,
            )
            .unwrap();
            if s.gated {
                be.attention_gated(&q, &gate, &kc, &vc, &m, &p, &mut out)
                    .unwrap();
            } else {
                be.attention(&q, &kc, &vc, &m, &p, &mut out).unwrap();
            }
        };
        fused();
        let g_fused = capture(&be, &mut fused);
        let mut best = [f64::MAX; 2];
        for _ in 0..3 {
            for (i, g) in [&g_unfused, &g_fused].iter().enumerate() {
                best[i] = best[i].min(time_ms(&be, 3, 200, |_| g.replay().unwrap()));
            }
        }
        be.synchronize().unwrap();
        let line = format!(
            "{:12} attention block after the QKV GEMV (graph, {LEN} keys): unfused {:6.2} us, fused {:6.2} us ({:+.2} us/layer)",
            s.name,
            best[0] * 1e3,
            best[1] * 1e3,
            (best[1] - best[0]) * 1e3
        );
        println!("{line}");
        lines.push(line);
    }
    println!("\n==== summary: QK-norm / gated attention block ====");
    for l in lines {
        println!("{l}");
    }
}
