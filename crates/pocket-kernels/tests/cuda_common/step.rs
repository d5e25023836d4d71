//! A synthetic decode step of a dense GQA transformer, written against the `Backend` ops (the
//! same sequence the llama model runs per token), for graph and speed tests of the CUDA backend.
//! Weights are random blocks: they move the same bytes as a real checkpoint of the same shape.
//! Like the models on CUDA, Q/K/V and gate/up are stacked into one weight each (one GEMV, then
//! `split_columns` / `silu_mul_halves`); `POCKET_FUSED_PROJ=0` (the models' switch too) runs the
//! separate projections instead, for A/B runs.
#![allow(dead_code)]

use pocket_kernels::rope::{RopeConfig, RopeLayout, RopeScaling};
use pocket_kernels::{
    AttentionMeta, AttentionParams, Backend, DType, HostBytes, RopeTable, Tensor, Weight,
};
use pocket_quant::{GgmlType, QuantFormat};

/// Model shape.
#[derive(Clone, Copy)]
pub struct Shape {
    pub hidden: usize,
    pub heads: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
    pub ff: usize,
    pub vocab: usize,
    pub layers: usize,
}

/// Llama-3-8B.
pub const LLAMA3_8B: Shape = Shape {
    hidden: 4096,
    heads: 32,
    kv_heads: 8,
    head_dim: 128,
    ff: 14336,
    vocab: 128256,
    layers: 32,
};

/// Random blocks with small finite f16 scales at the format's scale offsets.
pub fn random_blocks(t: GgmlType, rows: usize, cols: usize, seed: u64) -> Vec<u8> {
    let f = QuantFormat::Ggml(t);
    let nb = rows * cols / f.block_size();
    let bb = f.block_bytes();
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut out = vec![0u8; nb * bb];
    for c in out.chunks_mut(8) {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        c.copy_from_slice(&s.to_le_bytes()[..c.len()]);
    }
    let small =
        |v: u64| half::f16::from_f32(0.002 + 0.01 * ((v % 1000) as f32 / 1000.0)).to_le_bytes();
    let offs: &[usize] = match t {
        GgmlType::Q4_0 | GgmlType::Q5_0 | GgmlType::Q8_0 | GgmlType::IQ4_NL | GgmlType::IQ4_XS => {
            &[0]
        }
        GgmlType::Q4_1 | GgmlType::Q5_1 | GgmlType::Q4_K | GgmlType::Q5_K => &[0, 2],
        GgmlType::Q2_K => &[80, 82],
        GgmlType::Q3_K => &[108],
        GgmlType::Q6_K => &[208],
        GgmlType::F16 => {
            for (i, c) in out.chunks_exact_mut(2).enumerate() {
                c.copy_from_slice(&small(i as u64));
            }
            &[]
        }
        _ => panic!("no random layout for {t:?}"),
    };
    for (i, b) in out.chunks_exact_mut(bb).enumerate() {
        for &o in offs {
            b[o..o + 2].copy_from_slice(&small(i as u64 * 31 + o as u64));
        }
    }
    out
}

/// Q/K/V and gate/up as the step runs them.
// One per layer, built once: the size of the separate variant costs nothing worth a box.
#[allow(clippy::large_enum_variant)]
enum Proj {
    /// `[q; k; v]` rows in one weight and `[gate; up]` in another.
    Stacked { wqkv: Weight, gate_up: Weight },
    /// One weight each.
    Separate {
        wq: Weight,
        wk: Weight,
        wv: Weight,
        gate: Weight,
        up: Weight,
    },
}

/// Whether steps stack their projections (`POCKET_FUSED_PROJ`, on unless `0`).
pub fn stacked() -> bool {
    std::env::var("POCKET_FUSED_PROJ").map_or(true, |v| v != "0")
}

struct Layer {
    proj: Proj,
    wo: Weight,
    down: Weight,
    n1: Tensor,
    n2: Tensor,
    kc: Tensor,
    vc: Tensor,
}

/// Weights, caches and workspaces of a decode step for one sequence.
pub struct Step {
    pub shape: Shape,
    layers: Vec<Layer>,
    embd: Weight,
    out_norm: Tensor,
    output: Weight,
    rope: pocket_kernels::rope::DeviceRope,
    pub ids: Tensor,
    pos: Tensor,
    meta: AttentionMeta,
    params: AttentionParams,
    residual: Tensor,
    delta: Tensor,
    normed: Tensor,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    att: Tensor,
    g: Tensor,
    u: Tensor,
    h: Tensor,
    /// Output rows of the stacked projections: `[q | k | v]` and `[gate | up]`.
    qkv: Tensor,
    gu: Tensor,
    pub logits: Tensor,
    pub next: Tensor,
    /// Weight bytes read per step.
    pub weight_bytes: usize,
}

const BLOCK: usize = 16;

impl Step {
    /// Builds a step at context position `pos` (the cache holds `pos` earlier tokens, random).
    pub fn new(
        be: &dyn Backend,
        s: Shape,
        layer_fmt: GgmlType,
        out_fmt: GgmlType,
        pos: usize,
    ) -> Step {
        let up_w = |t: GgmlType, r: usize, c: usize, bytes: &[u8]| {
            be.upload_weight(
                QuantFormat::Ggml(t),
                r,
                c,
                HostBytes::from_vec(bytes.to_vec()),
                None,
                None,
            )
            .unwrap()
        };
        let (h, kvw) = (s.hidden, s.kv_heads * s.head_dim);
        let bq = random_blocks(layer_fmt, s.heads * s.head_dim, h, 1);
        let bk = random_blocks(layer_fmt, kvw, h, 2);
        let bo = random_blocks(layer_fmt, h, s.heads * s.head_dim, 3);
        let bg = random_blocks(layer_fmt, s.ff, h, 4);
        let bd = random_blocks(layer_fmt, h, s.ff, 5);
        // The stacked weights are the parts' blocks one after another (every GGML format stores
        // rows independently), as the model loaders stack them.
        let stack = stacked();
        static SAID: std::sync::Once = std::sync::Once::new();
        SAID.call_once(|| {
            println!(
                "decode step: {} Q/K/V and gate/up projections (POCKET_FUSED_PROJ=0: separate, the default: stacked)",
                if stack { "stacked" } else { "separate" }
            )
        });
        let bqkv = [bq.as_slice(), &bk, &bk].concat();
        let bgu = [bg.as_slice(), &bg].concat();
        let qw = s.heads * s.head_dim;
        let blocks_per_seq = (pos + 1).div_ceil(BLOCK);
        let norm: Vec<f32> = (0..h).map(|i| 1.0 + (i % 7) as f32 * 0.01).collect();
        let mut weight_bytes = 0;
        let mut layers = Vec::new();
        for _ in 0..s.layers {
            let kc = be
                .alloc(DType::F16, &[blocks_per_seq, BLOCK, s.kv_heads, s.head_dim])
                .unwrap();
            let vc = be
                .alloc(DType::F16, &[blocks_per_seq, BLOCK, s.kv_heads, s.head_dim])
                .unwrap();
            let proj = if stack {
                Proj::Stacked {
                    wqkv: up_w(layer_fmt, qw + 2 * kvw, h, &bqkv),
                    gate_up: up_w(layer_fmt, 2 * s.ff, h, &bgu),
                }
            } else {
                Proj::Separate {
                    wq: up_w(layer_fmt, qw, h, &bq),
                    wk: up_w(layer_fmt, kvw, h, &bk),
                    wv: up_w(layer_fmt, kvw, h, &bk),
                    gate: up_w(layer_fmt, s.ff, h, &bg),
                    up: up_w(layer_fmt, s.ff, h, &bg),
                }
            };
            let l = Layer {
                proj,
                wo: up_w(layer_fmt, h, s.heads * s.head_dim, &bo),
                down: up_w(layer_fmt, h, s.ff, &bd),
                n1: be.upload_f32(&norm, &[h]).unwrap(),
                n2: be.upload_f32(&norm, &[h]).unwrap(),
                kc,
                vc,
            };
            weight_bytes += bq.len() + 2 * bk.len() + bo.len() + 2 * bg.len() + bd.len();
            layers.push(l);
        }
        // Fill the caches with finite values: a prefill-sized kv_write of random rows.
        let fill: Vec<f32> = (0..blocks_per_seq * BLOCK * kvw)
            .map(|i| ((i * 7919) % 2001) as f32 / 1000.0 - 1.0)
            .collect();
        let ft = be
            .upload_f32(&fill, &[blocks_per_seq * BLOCK, s.kv_heads, s.head_dim])
            .unwrap();
        let all_slots: Vec<u32> = (0..(blocks_per_seq * BLOCK) as u32).collect();
        let fill_meta = meta(be, blocks_per_seq, pos + 1, &all_slots);
        for l in &mut layers {
            be.kv_write(&ft, &ft, &mut l.kc, &mut l.vc, &fill_meta)
                .unwrap();
        }
        let be_out = random_blocks(out_fmt, s.vocab, h, 6);
        weight_bytes += be_out.len();
        let embd = up_w(
            layer_fmt,
            s.vocab,
            h,
            &random_blocks(layer_fmt, s.vocab, h, 7),
        );
        let table = RopeTable::new(
            RopeConfig {
                theta: 500000.0,
                rot_dim: s.head_dim,
                layout: RopeLayout::NeoX,
                scaling: RopeScaling::None,
            },
            pos + 64,
        );
        let half = s.head_dim / 2;
        let rope = pocket_kernels::rope::DeviceRope {
            config: table.config,
            cos: be.upload_f32(&table.cos, &[table.max_pos, half]).unwrap(),
            sin: be.upload_f32(&table.sin, &[table.max_pos, half]).unwrap(),
        };
        let slot = [(pos) as u32];
        let a = |shape: &[usize]| be.alloc(DType::F32, shape).unwrap();
        Step {
            shape: s,
            embd,
            out_norm: be.upload_f32(&norm, &[h]).unwrap(),
            output: up_w(out_fmt, s.vocab, h, &be_out),
            rope,
            ids: be.upload_u32(&[1], &[1]).unwrap(),
            pos: be.upload_u32(&[pos as u32], &[1]).unwrap(),
            meta: meta(be, blocks_per_seq, pos + 1, &slot),
            params: AttentionParams {
                num_heads: s.heads,
                num_kv_heads: s.kv_heads,
                head_dim: s.head_dim,
                scale: 1.0 / (s.head_dim as f32).sqrt(),
                sliding_window: None,
                softcap: None,
            },
            residual: a(&[1, h]),
            delta: a(&[1, h]),
            normed: a(&[1, h]),
            q: a(&[1, s.heads, s.head_dim]),
            k: a(&[1, s.kv_heads, s.head_dim]),
            v: a(&[1, s.kv_heads, s.head_dim]),
            att: a(&[1, s.heads * s.head_dim]),
            g: a(&[1, s.ff]),
            u: a(&[1, s.ff]),
            h: a(&[1, s.ff]),
            qkv: a(&[1, qw + 2 * kvw]),
            gu: a(&[1, 2 * s.ff]),
            logits: a(&[1, s.vocab]),
            next: be.alloc(DType::U32, &[1]).unwrap(),
            layers,
            weight_bytes,
        }
    }

    /// Writes NaN over the logits, so a replay that does not write them fails the comparison.
    #[allow(dead_code)]
    pub fn poison_logits(&mut self, be: &dyn Backend) {
        let n = self.logits.numel();
        be.write_f32(&mut self.logits, &vec![f32::NAN; n], &[1, n])
            .unwrap();
    }

    /// Captures one step as a graph (after a synchronize).
    #[allow(dead_code)]
    pub fn capture(
        &mut self,
        be: &pocket_kernels::cuda::CudaBackend,
    ) -> pocket_kernels::cuda::graph::StepGraph {
        be.synchronize().unwrap();
        be.begin_capture().unwrap();
        self.run(be);
        be.end_capture().unwrap()
    }

    /// Enqueues one decode step (no host synchronization).
    pub fn run(&mut self, be: &dyn Backend) {
        let s = self.shape;
        be.embedding(&self.embd, &self.ids, &mut self.residual)
            .unwrap();
        let nl = self.layers.len();
        for i in 0..nl {
            // The next layer's input norm (the output norm after the last layer) runs with this
            // layer's down projection (`matmul_add_rms_norm`).
            let (cur, rest) = self.layers.split_at_mut(i + 1);
            let l = &mut cur[i];
            let next_norm = rest.first().map_or(&self.out_norm, |n| &n.n1);
            if i == 0 {
                be.rms_norm(&self.residual, &l.n1, 1e-5, &mut self.normed)
                    .unwrap();
            }
            // Projections write rows; RoPE, the cache and attention see them per head.
            self.q.reshape(&[1, s.heads * s.head_dim]).unwrap();
            self.k.reshape(&[1, s.kv_heads * s.head_dim]).unwrap();
            self.v.reshape(&[1, s.kv_heads * s.head_dim]).unwrap();
            match &l.proj {
                Proj::Stacked { wqkv, .. } => {
                    be.matmul(&self.normed, wqkv, &mut self.qkv).unwrap();
                    be.split_columns(&self.qkv, &mut [&mut self.q, &mut self.k, &mut self.v])
                        .unwrap();
                }
                Proj::Separate { wq, wk, wv, .. } => {
                    be.matmul(&self.normed, wq, &mut self.q).unwrap();
                    be.matmul(&self.normed, wk, &mut self.k).unwrap();
                    be.matmul(&self.normed, wv, &mut self.v).unwrap();
                }
            }
            self.q.reshape(&[1, s.heads, s.head_dim]).unwrap();
            self.k.reshape(&[1, s.kv_heads, s.head_dim]).unwrap();
            self.v.reshape(&[1, s.kv_heads, s.head_dim]).unwrap();
            be.rope(&mut self.q, &self.pos, &self.rope).unwrap();
            be.rope(&mut self.k, &self.pos, &self.rope).unwrap();
            be.kv_write(&self.k, &self.v, &mut l.kc, &mut l.vc, &self.meta)
                .unwrap();
            // The attention output is viewed per head, then as one row for the projection.
            self.att.reshape(&[1, s.heads, s.head_dim]).unwrap();
            be.attention(
                &self.q,
                &l.kc,
                &l.vc,
                &self.meta,
                &self.params,
                &mut self.att,
            )
            .unwrap();
            self.att.reshape(&[1, s.heads * s.head_dim]).unwrap();
            // The projections with the op after them, as the models call them: the backend may
            // fold the op into the GEMV (CUDA one-row FP8), else it runs the two ops.
            be.matmul_add_rms_norm(
                &self.att,
                &l.wo,
                &mut self.delta,
                &mut self.residual,
                &l.n2,
                1e-5,
                &mut self.normed,
            )
            .unwrap();
            match &l.proj {
                Proj::Stacked { gate_up, .. } => {
                    be.matmul_silu_halves(&self.normed, gate_up, &mut self.gu, &mut self.h)
                        .unwrap();
                }
                Proj::Separate { gate, up, .. } => {
                    be.matmul(&self.normed, gate, &mut self.g).unwrap();
                    be.matmul(&self.normed, up, &mut self.u).unwrap();
                    be.silu_mul(&self.g, &self.u, &mut self.h).unwrap();
                }
            }
            be.matmul_add_rms_norm(
                &self.h,
                &l.down,
                &mut self.delta,
                &mut self.residual,
                next_norm,
                1e-5,
                &mut self.normed,
            )
            .unwrap();
        }
        be.matmul(&self.normed, &self.output, &mut self.logits)
            .unwrap();
        be.argmax(&self.logits, &mut self.next).unwrap();
    }
}

fn meta(be: &dyn Backend, blocks: usize, len: usize, slots: &[u32]) -> AttentionMeta {
    let n = slots.len() as u32;
    AttentionMeta {
        query_start: be.upload_u32(&[0, n.min(len as u32)], &[2]).unwrap(),
        seq_lens: be.upload_u32(&[len as u32], &[1]).unwrap(),
        block_tables: be
            .upload_u32(&(0..blocks as u32).collect::<Vec<_>>(), &[1, blocks])
            .unwrap(),
        slot_mapping: be.upload_u32(slots, &[slots.len()]).unwrap(),
        num_seqs: 1,
        max_seq_len: len,
    }
}
