//! The cases, inputs and f64 reference of tests/ops_qkv_rope.rs (split off to keep that file
//! to its test bodies).
#![allow(dead_code, clippy::needless_range_loop)]

use crate::ops_support::{up, up_u32, Rng};
use pocket_kernels::rope::{RopeConfig, RopeLayout, RopeScaling};
use pocket_kernels::{AttentionMeta, DType, Device, QkvRopeParams, RopeTable, Tensor};

pub const BLOCKS: usize = 4;
pub const BLOCK_SIZE: usize = 4;
pub const MAX_POS: usize = 64;

/// One configuration of the op.
#[derive(Debug, Clone, Copy)]
pub struct Case {
    pub n: usize,
    pub heads: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
    pub rot_dim: usize,
    pub layout: RopeLayout,
    pub bias: bool,
    /// Read three separate tensors instead of the stacked row.
    pub separate: bool,
    /// Query rows `[query | gate]` per head (Qwen3.5), gates skipped.
    pub gated: bool,
    pub cache: DType,
    /// Per-head RMSNorm of q and k before RoPE (Qwen3, Qwen3.5).
    pub qk_norm: bool,
    /// Gated rows whose gates the op writes out (Qwen3.5's output gate).
    pub gate_out: bool,
}

/// Tolerance of CUDA's QK-normed q and k against the CPU's: the head's sum of squares is summed
/// in another order (relative error <= head_dim * 2^-24, here <= 64 terms: 4e-6, halved by the
/// square root), then each value takes a few more rounded products through the norm and RoPE, on
/// values of magnitude <= ~4 (normed rows times weights in [0.5, 1.5]).
pub const NORM_TOL: f64 = 2e-5;

pub fn cases() -> Vec<Case> {
    use RopeLayout::{Interleaved, NeoX};
    let c = |n, heads, kv_heads, head_dim, rot_dim, layout, bias, separate, gated, cache| Case {
        n,
        heads,
        kv_heads,
        head_dim,
        rot_dim,
        layout,
        bias,
        separate,
        gated,
        cache,
        qk_norm: false,
        gate_out: false,
    };
    // Qwen3 (QK-norm) and Qwen3.5 (QK-norm, gate output, partial rotary) shapes.
    let normed =
        |n, heads, kv_heads, head_dim, rot_dim, layout, bias, separate, gate, cache| Case {
            qk_norm: true,
            gate_out: gate,
            ..c(
                n, heads, kv_heads, head_dim, rot_dim, layout, bias, separate, gate, cache,
            )
        };
    let mut all = vec![
        // SmolLM2-like decode, one token, f32 cache.
        c(1, 9, 3, 64, 64, NeoX, false, false, false, DType::F32),
        // Qwen2.5-like with bias, decode, stacked.
        c(1, 14, 2, 64, 64, NeoX, true, false, false, DType::F32),
        // GGUF Llama (interleaved pairs), bf16 cache, two decode rows.
        c(
            2,
            8,
            2,
            32,
            32,
            Interleaved,
            false,
            false,
            false,
            DType::BF16,
        ),
        // Partial rotary, both layouts.
        c(5, 4, 2, 16, 8, NeoX, true, false, false, DType::F32),
        c(3, 4, 4, 16, 10, Interleaved, false, true, false, DType::F16),
        // Gated query rows, stacked.
        c(3, 4, 2, 16, 8, NeoX, true, false, true, DType::F32),
    ];
    // Qwen2.5-0.5B's Q4_K_M layers with unstacked Q/K/V and biases (14/2 heads of 64): separate
    // projections plus bias, both layouts, decode and prefill, f32 and f16 caches.
    for layout in [NeoX, Interleaved] {
        for n in [1, 7] {
            for cache in [DType::F32, DType::F16] {
                all.push(c(n, 14, 2, 64, 64, layout, true, true, false, cache));
            }
        }
    }
    all.extend([
        // Qwen3-like: full rotary, stacked and separate, decode and prefill.
        normed(1, 8, 2, 64, 64, NeoX, false, false, false, DType::F32),
        normed(6, 8, 2, 64, 64, NeoX, false, true, false, DType::BF16),
        // Qwen3.5-like: gated rows, gate written out, partial rotary (a quarter), f16/bf16/f32
        // caches, one and several tokens, with and without bias, stacked and separate.
        normed(1, 6, 1, 64, 16, NeoX, false, false, true, DType::BF16),
        normed(5, 6, 2, 64, 16, NeoX, true, false, true, DType::F16),
        normed(4, 4, 2, 32, 8, Interleaved, true, true, true, DType::F32),
        normed(3, 4, 4, 16, 10, NeoX, false, true, true, DType::F32),
    ]);
    all
}

/// Inputs of one case, on the host.
pub struct Inputs {
    /// `[n, q_width + 2 * kv_width]` stacked rows.
    pub x: Vec<f32>,
    /// Stacked bias (empty without bias).
    pub bias: Vec<f32>,
    pub positions: Vec<u32>,
    pub slots: Vec<u32>,
    /// Initial contents of every cache slot (K then V), so stray writes show.
    pub init_k: Vec<f32>,
    pub init_v: Vec<f32>,
    pub table: RopeTable,
    /// QK-norm weights `[head_dim]` (empty without QK-norm).
    pub q_norm: Vec<f32>,
    pub k_norm: Vec<f32>,
}

/// The eps of both QK-norms in the tests.
pub const EPS: f32 = 1e-6;

pub fn params(c: &Case) -> QkvRopeParams {
    QkvRopeParams {
        q_head_stride: if c.gated { 2 * c.head_dim } else { c.head_dim },
        ..QkvRopeParams::new(c.heads, c.kv_heads, c.head_dim)
    }
}

pub fn inputs(c: &Case, rng: &mut Rng) -> Inputs {
    let p = params(c);
    let w = p.q_width() + 2 * p.kv_width();
    let slots_total = BLOCKS * BLOCK_SIZE;
    // Distinct slots in a scrambled order.
    let mut all: Vec<u32> = (0..slots_total as u32).collect();
    for i in (1..all.len()).rev() {
        all.swap(i, rng.below(i + 1));
    }
    let table = RopeTable::new(
        RopeConfig {
            theta: 10000.0,
            rot_dim: c.rot_dim,
            layout: c.layout,
            scaling: RopeScaling::None,
        },
        MAX_POS,
    );
    Inputs {
        x: rng.vec(c.n * w).iter().map(|v| 3.0 * v).collect(),
        bias: if c.bias { rng.vec(w) } else { Vec::new() },
        positions: (0..c.n).map(|_| rng.below(MAX_POS) as u32).collect(),
        slots: all[..c.n].to_vec(),
        init_k: rng.vec(slots_total * p.kv_width()),
        init_v: rng.vec(slots_total * p.kv_width()),
        table,
        q_norm: weights(c, rng),
        k_norm: weights(c, rng),
    }
}

/// Norm weights in [0.5, 1.5) (empty without QK-norm).
pub fn weights(c: &Case, rng: &mut Rng) -> Vec<f32> {
    if !c.qk_norm {
        return Vec::new();
    }
    rng.vec(c.head_dim).iter().map(|v| 1.0 + 0.5 * v).collect()
}

pub fn meta(d: &Device, slots: &[u32]) -> AttentionMeta {
    AttentionMeta {
        query_start: up_u32(d, &[0, slots.len() as u32], &[2]),
        seq_lens: up_u32(d, &[slots.len() as u32], &[1]),
        block_tables: up_u32(d, &[0], &[1, 1]),
        slot_mapping: up_u32(d, slots, &[slots.len()]),
        num_seqs: 1,
        max_seq_len: slots.len(),
    }
}

/// Caches of the case's dtype holding `inp.init_*` in every slot (written by `kv_write`).
pub fn caches(d: &Device, c: &Case, inp: &Inputs) -> (Tensor, Tensor) {
    let shape = [BLOCKS, BLOCK_SIZE, c.kv_heads, c.head_dim];
    let mut kc = d.alloc(c.cache, &shape).unwrap();
    let mut vc = d.alloc(c.cache, &shape).unwrap();
    let all: Vec<u32> = (0..(BLOCKS * BLOCK_SIZE) as u32).collect();
    let row = [all.len(), c.kv_heads, c.head_dim];
    let (k, v) = (up(d, &inp.init_k, &row), up(d, &inp.init_v, &row));
    d.kv_write(&k, &v, &mut kc, &mut vc, &meta(d, &all))
        .unwrap();
    (kc, vc)
}

/// Outputs: q `[n, heads, head_dim]`, then the whole K and V caches as f32, then the gates
/// `[n, heads, head_dim]` (empty without a gate output).
pub type Outputs = (Vec<f32>, Vec<f32>, Vec<f32>, Vec<f32>);

/// A plain f64 reference of q and of the K/V rows at the written slots (before the cache's
/// rounding) and of the gates: `(q, k rows, v rows, gates)`, each `[n, heads, head_dim]`.
pub fn reference(c: &Case, inp: &Inputs) -> (Vec<f64>, Vec<f64>, Vec<f64>, Vec<f64>) {
    let p = params(c);
    let (qw, kw) = (p.q_width(), p.kv_width());
    let (w, hd, half) = (qw + 2 * kw, c.head_dim, c.rot_dim / 2);
    let val = |t: usize, col: usize| {
        inp.x[t * w + col] as f64 + inp.bias.get(col).map_or(0.0, |&b| b as f64)
    };
    let head = |t: usize, col: usize, rotate: bool, norm: &[f32]| -> Vec<f64> {
        let mut h: Vec<f64> = (0..hd).map(|e| val(t, col + e)).collect();
        if !norm.is_empty() {
            let ms = h.iter().map(|v| v * v).sum::<f64>() / hd as f64;
            let inv = 1.0 / (ms + EPS as f64).sqrt();
            for (v, &w) in h.iter_mut().zip(norm) {
                *v *= inv * w as f64;
            }
        }
        if rotate {
            let pos = inp.positions[t] as usize;
            for i in 0..half {
                let (a, b) = match c.layout {
                    RopeLayout::NeoX => (i, i + half),
                    RopeLayout::Interleaved => (2 * i, 2 * i + 1),
                };
                let (co, si) = (
                    inp.table.cos[pos * half + i] as f64,
                    inp.table.sin[pos * half + i] as f64,
                );
                let (x0, x1) = (h[a], h[b]);
                h[a] = x0 * co - x1 * si;
                h[b] = x0 * si + x1 * co;
            }
        }
        h
    };
    let (mut q, mut k, mut v, mut g) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for t in 0..c.n {
        for h in 0..c.heads {
            q.extend(head(t, h * p.q_head_stride, true, &inp.q_norm));
            if c.gate_out {
                g.extend(head(t, h * p.q_head_stride + hd, false, &[]));
            }
        }
        for h in 0..c.kv_heads {
            k.extend(head(t, qw + h * hd, true, &inp.k_norm));
            v.extend(head(t, qw + kw + h * hd, false, &[]));
        }
    }
    (q, k, v, g)
}

/// The rows of a cache read back as f32 at `slots`.
pub fn rows_at(cache: &[f32], slots: &[u32], row: usize) -> Vec<f32> {
    slots
        .iter()
        .flat_map(|&s| cache[s as usize * row..(s as usize + 1) * row].to_vec())
        .collect()
}

/// Bits of a float vector (bit-for-bit comparisons that treat equal NaNs as equal).
pub fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}
