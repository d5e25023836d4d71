//! The attention-input op (`qkv_rope_kv_write`), one test body run on every device
//! `Device::all_for_tests()` opens (CUDA skipped without a GPU): against the unfused ops on the
//! same device (`split_columns` + `add_bias` + `rope` x2 + `kv_write`), which it must match bit
//! for bit, against a plain f64 reference written here, and CUDA against the CPU backend (also
//! bit for bit: both round every RoPE product and sum, so CUDA `rope` equals the CPU's too).
#![allow(clippy::needless_range_loop)]

mod ops_support;

use ops_support::{assert_close, read, up, up_u32, Rng};
use pocket_kernels::rope::{DeviceRope, RopeConfig, RopeLayout, RopeScaling};
use pocket_kernels::{
    AttentionMeta, DType, Device, QkvBias, QkvRopeParams, QkvSource, RopeTable, Tensor,
};

const BLOCKS: usize = 4;
const BLOCK_SIZE: usize = 4;
const MAX_POS: usize = 64;

/// One configuration of the op.
#[derive(Debug, Clone, Copy)]
struct Case {
    n: usize,
    heads: usize,
    kv_heads: usize,
    head_dim: usize,
    rot_dim: usize,
    layout: RopeLayout,
    bias: bool,
    /// Read three separate tensors instead of the stacked row.
    separate: bool,
    /// Query rows `[query | gate]` per head (Qwen3.5), gates skipped.
    gated: bool,
    cache: DType,
}

fn cases() -> Vec<Case> {
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
    all
}

/// Inputs of one case, on the host.
struct Inputs {
    /// `[n, q_width + 2 * kv_width]` stacked rows.
    x: Vec<f32>,
    /// Stacked bias (empty without bias).
    bias: Vec<f32>,
    positions: Vec<u32>,
    slots: Vec<u32>,
    /// Initial contents of every cache slot (K then V), so stray writes show.
    init_k: Vec<f32>,
    init_v: Vec<f32>,
    table: RopeTable,
}

fn params(c: &Case) -> QkvRopeParams {
    QkvRopeParams {
        q_head_stride: if c.gated { 2 * c.head_dim } else { c.head_dim },
        ..QkvRopeParams::new(c.heads, c.kv_heads, c.head_dim)
    }
}

fn inputs(c: &Case, rng: &mut Rng) -> Inputs {
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
    }
}

fn meta(d: &Device, slots: &[u32]) -> AttentionMeta {
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
fn caches(d: &Device, c: &Case, inp: &Inputs) -> (Tensor, Tensor) {
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

/// Outputs: q `[n, heads, head_dim]`, then the whole K and V caches as f32.
type Outputs = (Vec<f32>, Vec<f32>, Vec<f32>);

/// The op under test on `d`.
fn fused(d: &Device, c: &Case, inp: &Inputs) -> Outputs {
    let p = params(c);
    let (qw, kw) = (p.q_width(), p.kv_width());
    let (n, w) = (c.n, qw + 2 * kw);
    let rope = d.upload_rope(&inp.table).unwrap();
    let pos = up_u32(d, &inp.positions, &[n]);
    let m = meta(d, &inp.slots);
    let (mut kc, mut vc) = caches(d, c, inp);
    let mut q = d.alloc(DType::F32, &[n, c.heads, c.head_dim]).unwrap();
    let x = up(d, &inp.x, &[n, w]);
    let cols = |v: &[f32], rows: usize, a: usize, b: usize| -> Vec<f32> {
        (0..rows)
            .flat_map(|r| v[r * w + a..r * w + b].to_vec())
            .collect()
    };
    let sep = [
        up(d, &cols(&inp.x, n, 0, qw), &[n, qw]),
        up(d, &cols(&inp.x, n, qw, qw + kw), &[n, kw]),
        up(d, &cols(&inp.x, n, qw + kw, w), &[n, kw]),
    ];
    let bias_st = c.bias.then(|| up(d, &inp.bias, &[w]));
    let bias_sep: Vec<Tensor> = if c.bias {
        vec![
            up(d, &inp.bias[..qw], &[qw]),
            up(d, &inp.bias[qw..qw + kw], &[kw]),
            up(d, &inp.bias[qw + kw..], &[kw]),
        ]
    } else {
        Vec::new()
    };
    let (src, bias) = if c.separate {
        let bias = match bias_sep.as_slice() {
            [bq, bk, bv] => QkvBias::Separate {
                q: Some(bq),
                k: Some(bk),
                v: Some(bv),
            },
            _ => QkvBias::None,
        };
        let [q, k, v] = &sep;
        (QkvSource::Separate { q, k, v }, bias)
    } else {
        let bias = bias_st.as_ref().map_or(QkvBias::None, QkvBias::Stacked);
        (QkvSource::Stacked(&x), bias)
    };
    if let Err(e) = d.qkv_rope_kv_write(src, bias, &p, &pos, &rope, &mut q, &mut kc, &mut vc, &m) {
        panic!("{}: {c:?}: {e}", d.name());
    }
    (read(d, &q), read(d, &kc), read(d, &vc))
}

/// The unfused sequence the layers run with `POCKET_FUSED_QKV=0`: stacked, bias then split;
/// separate (as `Linear::forward` of each projection), a bias add per projection. Then the gate
/// split, rope x2 and kv_write.
fn unfused(d: &Device, c: &Case, inp: &Inputs, rope: &DeviceRope) -> Outputs {
    let p = params(c);
    let (qw, kw) = (p.q_width(), p.kv_width());
    let (n, w, hd) = (c.n, qw + 2 * kw, c.head_dim);
    let (mut qg, mut k, mut v) = if c.separate {
        let cols = |a: usize, b: usize| -> Vec<f32> {
            (0..n)
                .flat_map(|r| inp.x[r * w + a..r * w + b].to_vec())
                .collect()
        };
        let mut parts = [
            up(d, &cols(0, qw), &[n, qw]),
            up(d, &cols(qw, qw + kw), &[n, kw]),
            up(d, &cols(qw + kw, w), &[n, kw]),
        ];
        if c.bias {
            for (t, (a, b)) in parts.iter_mut().zip([(0, qw), (qw, qw + kw), (qw + kw, w)]) {
                d.add_bias(t, &up(d, &inp.bias[a..b], &[b - a])).unwrap();
            }
        }
        let [q, k, v] = parts;
        (q, k, v)
    } else {
        let mut x = up(d, &inp.x, &[n, w]);
        if c.bias {
            d.add_bias(&mut x, &up(d, &inp.bias, &[w])).unwrap();
        }
        let mut qg = d.alloc(DType::F32, &[n, qw]).unwrap();
        let mut k = d.alloc(DType::F32, &[n, kw]).unwrap();
        let mut v = d.alloc(DType::F32, &[n, kw]).unwrap();
        d.split_columns(&x, &mut [&mut qg, &mut k, &mut v]).unwrap();
        (qg, k, v)
    };
    let mut q = if c.gated {
        let mut q = d.alloc(DType::F32, &[n * c.heads, hd]).unwrap();
        let mut gate = d.alloc(DType::F32, &[n * c.heads, hd]).unwrap();
        qg.reshape(&[n * c.heads, 2 * hd]).unwrap();
        d.split_halves(&qg, &mut q, &mut gate).unwrap();
        q
    } else {
        qg
    };
    q.reshape(&[n, c.heads, hd]).unwrap();
    k.reshape(&[n, c.kv_heads, hd]).unwrap();
    v.reshape(&[n, c.kv_heads, hd]).unwrap();
    let pos = up_u32(d, &inp.positions, &[n]);
    d.rope(&mut q, &pos, rope).unwrap();
    d.rope(&mut k, &pos, rope).unwrap();
    let (mut kc, mut vc) = caches(d, c, inp);
    d.kv_write(&k, &v, &mut kc, &mut vc, &meta(d, &inp.slots))
        .unwrap();
    (read(d, &q), read(d, &kc), read(d, &vc))
}

/// A plain f64 reference of q and of the K/V rows at the written slots (before the cache's
/// rounding): `(q, k rows, v rows)`, each `[n, heads, head_dim]`.
fn reference(c: &Case, inp: &Inputs) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
    let p = params(c);
    let (qw, kw) = (p.q_width(), p.kv_width());
    let (w, hd, half) = (qw + 2 * kw, c.head_dim, c.rot_dim / 2);
    let val = |t: usize, col: usize| {
        inp.x[t * w + col] as f64 + inp.bias.get(col).map_or(0.0, |&b| b as f64)
    };
    let head = |t: usize, col: usize, rotate: bool| -> Vec<f64> {
        let mut h: Vec<f64> = (0..hd).map(|e| val(t, col + e)).collect();
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
    let (mut q, mut k, mut v) = (Vec::new(), Vec::new(), Vec::new());
    for t in 0..c.n {
        for h in 0..c.heads {
            q.extend(head(t, h * p.q_head_stride, true));
        }
        for h in 0..c.kv_heads {
            k.extend(head(t, qw + h * hd, true));
            v.extend(head(t, qw + kw + h * hd, false));
        }
    }
    (q, k, v)
}

/// The rows of a cache read back as f32 at `slots`.
fn rows_at(cache: &[f32], slots: &[u32], row: usize) -> Vec<f32> {
    slots
        .iter()
        .flat_map(|&s| cache[s as usize * row..(s as usize + 1) * row].to_vec())
        .collect()
}

/// Bits of a float vector (bit-for-bit comparisons that treat equal NaNs as equal).
fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

#[test]
fn fused_matches_unfused_bit_for_bit_and_the_reference() {
    let mut rng = Rng::new(7);
    let cpu = Device::cpu();
    if Device::all_for_tests().len() == 1 {
        eprintln!("no CUDA device: CPU only");
    }
    for c in cases() {
        let inp = inputs(&c, &mut rng);
        let cpu_out = fused(&cpu, &c, &inp);
        let (rq, rk, rv) = reference(&c, &inp);
        let row = c.kv_heads * c.head_dim;
        // f32 rotation of O(3) values: a few f32 ulps; f16/bf16 caches round the stored K/V.
        let cache_tol = match c.cache {
            DType::F16 => 2e-3,
            DType::BF16 => 1.6e-2,
            _ => 1e-5,
        };
        for d in Device::all_for_tests() {
            let rope = d.upload_rope(&inp.table).unwrap();
            let got = fused(&d, &c, &inp);
            let want = unfused(&d, &c, &inp, &rope);
            let tag = format!("{} {c:?}", d.name());
            assert_eq!(bits(&got.0), bits(&want.0), "{tag}: q vs unfused");
            assert_eq!(bits(&got.1), bits(&want.1), "{tag}: k cache vs unfused");
            assert_eq!(bits(&got.2), bits(&want.2), "{tag}: v cache vs unfused");
            assert_close(&format!("{tag}: q"), &got.0, &rq, 1e-5, 1e-5);
            let k = rows_at(&got.1, &inp.slots, row);
            let v = rows_at(&got.2, &inp.slots, row);
            assert_close(&format!("{tag}: k"), &k, &rk, cache_tol, cache_tol);
            assert_close(&format!("{tag}: v"), &v, &rv, cache_tol, cache_tol);
            // Untouched slots keep their contents.
            for s in 0..BLOCKS * BLOCK_SIZE {
                if !inp.slots.contains(&(s as u32)) {
                    let r = s * row..(s + 1) * row;
                    assert_eq!(
                        bits(&got.1[r.clone()]),
                        bits(&cpu_out.1[r.clone()]),
                        "{tag}"
                    );
                    assert_eq!(bits(&got.2[r.clone()]), bits(&cpu_out.2[r]), "{tag}");
                }
            }
            // Against the CPU backend, bit for bit: the kernels round every product and sum
            // (__fmul_rn/__fadd_rn/__fsub_rn, no FMA contraction) as the CPU's plain f32 mul/add
            // do, and both backends round to the f16/bf16 cache to nearest even.
            assert_eq!(bits(&got.0), bits(&cpu_out.0), "{tag}: q vs cpu");
            assert_eq!(bits(&got.1), bits(&cpu_out.1), "{tag}: k cache vs cpu");
            assert_eq!(bits(&got.2), bits(&cpu_out.2), "{tag}: v cache vs cpu");
        }
    }
}

#[test]
fn bad_arguments_are_errors() {
    let c = cases()[1];
    let mut rng = Rng::new(3);
    let inp = inputs(&c, &mut rng);
    let p = params(&c);
    let w = p.q_width() + 2 * p.kv_width();
    for d in Device::all_for_tests() {
        let rope = d.upload_rope(&inp.table).unwrap();
        let (mut kc, mut vc) = caches(&d, &c, &inp);
        let mut q = d.alloc(DType::F32, &[c.n, c.heads, c.head_dim]).unwrap();
        let pos = up_u32(&d, &inp.positions, &[c.n]);
        let m = meta(&d, &inp.slots);
        let x = up(&d, &inp.x, &[c.n, w]);
        let mut run = |x: &Tensor, pos: &Tensor, m: &AttentionMeta, p: &QkvRopeParams| {
            d.qkv_rope_kv_write(
                QkvSource::Stacked(x),
                QkvBias::None,
                p,
                pos,
                &rope,
                &mut q,
                &mut kc,
                &mut vc,
                m,
            )
        };
        assert!(run(&x, &pos, &m, &p).is_ok(), "{}", d.name());
        let narrow = up(&d, &inp.x[..c.n * (w - 1)], &[c.n, w - 1]);
        assert!(run(&narrow, &pos, &m, &p).is_err(), "width");
        let far = up_u32(&d, &[MAX_POS as u32], &[1]);
        assert!(run(&x, &far, &m, &p).is_err(), "position beyond the table");
        let bad_slot = meta(&d, &[(BLOCKS * BLOCK_SIZE) as u32]);
        assert!(
            run(&x, &pos, &bad_slot, &p).is_err(),
            "slot beyond the cache"
        );
        let odd = QkvRopeParams::new(c.heads, c.kv_heads, c.head_dim + 1);
        assert!(run(&x, &pos, &m, &odd).is_err(), "odd head_dim");
    }
}

/// Runs the op twice over one set of buffers, the second time with new rows, positions and
/// slots written into the same tensors: recorded in a graph and replayed where the device
/// captures (CUDA), eagerly otherwise. Returns q and both caches after the second run.
fn twice(d: &Device, c: &Case, a: &Inputs, b: &Inputs, graph: bool) -> Outputs {
    let p = params(c);
    let w = p.q_width() + 2 * p.kv_width();
    let rope = d.upload_rope(&a.table).unwrap();
    let mut x = up(d, &a.x, &[c.n, w]);
    let bias = up(d, &a.bias, &[w]);
    let mut pos = up_u32(d, &a.positions, &[c.n]);
    let mut m = meta(d, &a.slots);
    let (mut kc, mut vc) = caches(d, c, a);
    let mut q = d.alloc(DType::F32, &[c.n, c.heads, c.head_dim]).unwrap();
    let mut run = |x: &Tensor, pos: &Tensor, m: &AttentionMeta, q: &mut Tensor| {
        d.qkv_rope_kv_write(
            QkvSource::Stacked(x),
            QkvBias::Stacked(&bias),
            &p,
            pos,
            &rope,
            q,
            &mut kc,
            &mut vc,
            m,
        )
    };
    let g = if graph {
        d.capture(|| run(&x, &pos, &m, &mut q)).unwrap().1
    } else {
        run(&x, &pos, &m, &mut q).unwrap();
        None
    };
    d.write_f32(&mut x, &b.x, &[c.n, w]).unwrap();
    d.write_u32(&mut pos, &b.positions, &[c.n]).unwrap();
    d.write_u32(&mut m.slot_mapping, &b.slots, &[c.n]).unwrap();
    match &g {
        Some(g) => g.replay().unwrap(),
        None => run(&x, &pos, &m, &mut q).unwrap(),
    }
    (read(d, &q), read(d, &kc), read(d, &vc))
}

#[test]
fn replays_in_a_graph_with_new_positions_and_slots() {
    let c = cases()[3];
    assert!(c.bias && !c.separate);
    let mut rng = Rng::new(11);
    let (a, mut b) = (inputs(&c, &mut rng), inputs(&c, &mut rng));
    b.bias = a.bias.clone(); // the bias is a weight: the graph keeps the first one
    for d in Device::all_for_tests() {
        let eager = twice(&d, &c, &a, &b, false);
        let replayed = twice(&d, &c, &a, &b, true);
        let tag = d.name();
        assert_eq!(bits(&replayed.0), bits(&eager.0), "{tag}: q");
        assert_eq!(bits(&replayed.1), bits(&eager.1), "{tag}: k cache");
        assert_eq!(bits(&replayed.2), bits(&eager.2), "{tag}: v cache");
        // The second run's slots hold the second rows (not the first run's).
        let single = fused(&d, &c, &b);
        assert_eq!(
            bits(&replayed.0),
            bits(&single.0),
            "{tag}: q of the second run"
        );
    }
}
