//! The dp4a GEMV epilogues (cuda/gemv_q8_epi.rs, kernels/gemv_q8_epi.cu) in the GGUF decode
//! step's order: o_proj as a folded norm's producer, the stacked `[gate; up]` GEMV with SwiGLU
//! as its consumer, the down projection as the next norm's producer (reading the quantization
//! the SwiGLU epilogue left), and the next block's QKV GEMV as its consumer. Every step is
//! checked against pocket-quant's CPU matmul on the device's own inputs to that step (the same
//! int8 quantization, so only the f32 summation order differs: tests/cuda_common/gemv_ref.rs
//! `tolerance`), and against a float64 norm; a captured graph of the chain replays bit for bit
//! (the epilogues' group counters return to zero). Skipped (with a message) without a CUDA
//! device.
#![cfg(feature = "cuda")]

use pocket_kernels::cuda::kernels::Q8Variant;
use pocket_kernels::cuda::CudaBackend;
use pocket_kernels::{Backend, DType, Tensor, Weight};
use pocket_quant::GgmlType;

#[path = "cuda_common/gemv_ref.rs"]
mod gemv_ref;
use gemv_ref::{quant_matrix, random_matrix, Rng};

const EPS: f32 = 1e-6;
/// |normed - exact| / |exact| (tests/cuda_rms_fold.rs derives it).
const NORM_REL: f64 = 4e-6;
/// Largest |silu'| (1.0998 at 2.40).
const SILU_SLOPE: f64 = 1.1;

/// A weight on the device and its raw blocks for the CPU reference.
struct W {
    t: GgmlType,
    bytes: Vec<u8>,
    w: Weight,
    rows: usize,
    cols: usize,
}

fn weight(be: &CudaBackend, t: GgmlType, rows: usize, cols: usize, rng: &mut Rng) -> W {
    let (bytes, _, w) = random_matrix(be, t, rows, cols, rng);
    W {
        t,
        bytes,
        w,
        rows,
        cols,
    }
}

/// pocket-quant's CPU matmul of one row (its own int8 quantization of `x`) and Σ|w·x| per row
/// over the dequantized weight, for the f32 accumulation bound.
fn cpu(w: &W, x: &[f32]) -> (Vec<f32>, Vec<f64>) {
    let m = quant_matrix(w.t, w.rows, w.cols, &w.bytes);
    let mut out = vec![0f32; w.rows];
    pocket_quant::matmul(&m, x, 1, &mut out).unwrap();
    let mut deq = vec![0f32; w.rows * w.cols];
    pocket_quant::dequantize_matrix(&m, &mut deq).unwrap();
    let abs = deq
        .chunks(w.cols)
        .map(|r| {
            r.iter()
                .zip(x)
                .map(|(&a, &b)| (a as f64 * b as f64).abs())
                .sum()
        })
        .collect();
    (out, abs)
}

/// The layer: o_proj [d, d_in], [gate; up] [2 inter, d], down [d, inter], qkv [q_rows, d].
#[derive(Clone, Copy, Debug)]
struct Shape {
    d: usize,
    d_in: usize,
    inter: usize,
    q_rows: usize,
}

/// Llama-3-8B's (the benchmark's), and a small one whose width is not a multiple of 256 (Q8
/// activations only, a partial last group).
const SHAPES: [Shape; 2] = [
    Shape {
        d: 4096,
        d_in: 4096,
        inter: 14336,
        q_rows: 6144,
    },
    Shape {
        d: 288,
        d_in: 320,
        inter: 96,
        q_rows: 160,
    },
];

/// Formats of (o_proj, gate_up, down, qkv): the 8B files' mixes.
fn mixes(s: Shape) -> Vec<[GgmlType; 4]> {
    use GgmlType as G;
    let mut v = vec![[G::Q4_0; 4], [G::Q8_0; 4]];
    if s.d.is_multiple_of(256) && s.inter.is_multiple_of(256) {
        v.push([G::Q4_K, G::Q4_K, G::Q6_K, G::Q4_K]);
    }
    v
}

struct Layer {
    wo: W,
    wgu: W,
    wd: W,
    wq: W,
}

/// Everything the chain wrote, read back.
struct Run {
    delta1: Vec<f32>,
    res1: Vec<f32>,
    normed1: Vec<f32>,
    act: Vec<f32>,
    gate_up_written: bool,
    delta2: Vec<f32>,
    res2: Vec<f32>,
    normed2: Vec<f32>,
    q: Vec<f32>,
}

struct Inputs {
    x: Vec<f32>,
    res: Vec<f32>,
    g1: Vec<f32>,
    g2: Vec<f32>,
}

fn nan(be: &CudaBackend, n: usize) -> Tensor {
    let mut t = be.alloc(DType::F32, &[1, n]).unwrap();
    be.write_f32(&mut t, &vec![f32::NAN; n], &[1, n]).unwrap();
    t
}

/// The device tensors of one chain.
struct Bufs {
    x: Tensor,
    res: Tensor,
    g1: Tensor,
    g2: Tensor,
    delta1: Tensor,
    normed1: Tensor,
    gu: Tensor,
    act: Tensor,
    delta2: Tensor,
    normed2: Tensor,
    q: Tensor,
}

fn bufs(be: &CudaBackend, s: Shape, i: &Inputs) -> Bufs {
    Bufs {
        x: be.upload_f32(&i.x, &[1, s.d_in]).unwrap(),
        res: be.upload_f32(&i.res, &[1, s.d]).unwrap(),
        g1: be.upload_f32(&i.g1, &[s.d]).unwrap(),
        g2: be.upload_f32(&i.g2, &[s.d]).unwrap(),
        delta1: nan(be, s.d),
        normed1: nan(be, s.d),
        gu: nan(be, 2 * s.inter),
        act: nan(be, s.inter),
        delta2: nan(be, s.d),
        normed2: nan(be, s.d),
        q: nan(be, s.q_rows),
    }
}

/// The step's ops, in the decode step's order.
fn chain(be: &CudaBackend, l: &Layer, b: &mut Bufs) {
    be.matmul_add_rms_norm(
        &b.x,
        &l.wo.w,
        &mut b.delta1,
        &mut b.res,
        &b.g1,
        EPS,
        &mut b.normed1,
    )
    .unwrap();
    be.matmul_silu_halves(&b.normed1, &l.wgu.w, &mut b.gu, &mut b.act)
        .unwrap();
    be.matmul_add_rms_norm(
        &b.act,
        &l.wd.w,
        &mut b.delta2,
        &mut b.res,
        &b.g2,
        EPS,
        &mut b.normed2,
    )
    .unwrap();
    be.matmul(&b.normed2, &l.wq.w, &mut b.q).unwrap();
}

fn read(be: &CudaBackend, l: &Layer, s: Shape, i: &Inputs) -> Run {
    let mut b = bufs(be, s, i);
    // The residual after the first producer, read in a separate run of the first op alone
    // (reading it inside the chain would write the pending norm out).
    be.matmul_add_rms_norm(
        &b.x,
        &l.wo.w,
        &mut b.delta1,
        &mut b.res,
        &b.g1,
        EPS,
        &mut b.normed1,
    )
    .unwrap();
    let res1 = be.read_f32(&b.res).unwrap();
    let mut b = bufs(be, s, i);
    chain(be, l, &mut b);
    let gu = be.read_f32(&b.gu).unwrap();
    Run {
        delta1: be.read_f32(&b.delta1).unwrap(),
        res1,
        normed1: be.read_f32(&b.normed1).unwrap(),
        act: be.read_f32(&b.act).unwrap(),
        gate_up_written: gu.iter().any(|v| !v.is_nan()),
        delta2: be.read_f32(&b.delta2).unwrap(),
        res2: be.read_f32(&b.res).unwrap(),
        normed2: be.read_f32(&b.normed2).unwrap(),
        q: be.read_f32(&b.q).unwrap(),
    }
}

/// 1 / rms of `r` in float64, and x * g as the device forms it (one f32 product).
fn norm_parts(r: &[f32], g: &[f32]) -> (f64, Vec<f32>) {
    let ss: f64 = r.iter().map(|&v| v as f64 * v as f64).sum();
    let inv = 1.0 / (ss / r.len() as f64 + EPS as f64).sqrt();
    (inv, r.iter().zip(g).map(|(&a, &b)| a * b).collect())
}

/// Failures of one run against the references built on its own intermediate values.
fn check(label: &str, l: &Layer, i: &Inputs, r: &Run, fold: bool, f: &mut Vec<String>) {
    let mut fail = |m: String| {
        if f.len() < 40 {
            f.push(format!("{label}: {m}"));
        }
    };
    let bound = |abs: f64| 1e-5 * abs + 1e-6;
    // A GEMV output against the CPU's over `x`, scaled by `sc` (1 / rms folded in: its f32
    // rounding, NORM_REL of the value, on top of the summation bound).
    let mut gemv = |name: &str, got: &[f32], (want, abs): (Vec<f32>, Vec<f64>), sc: f64| {
        for (k, (&g, &w)) in got.iter().zip(&want).enumerate() {
            let (g, w) = (g as f64, w as f64 * sc);
            let tol = bound(abs[k]) * sc + NORM_REL * w.abs();
            if g.is_nan() || (g - w).abs() > tol {
                fail(format!("{name}[{k}] = {g}, cpu {w} ± {tol}"));
                return;
            }
        }
    };
    gemv("delta1", &r.delta1, cpu(&l.wo, &i.x), 1.0);
    // A norm's output against float64.
    let normed_ok = |got: &[f32], res: &[f32], g: &[f32]| {
        let (inv, _) = norm_parts(res, g);
        got.iter().zip(res.iter().zip(g)).all(|(&n, (&rv, &gv))| {
            let want = rv as f64 * inv * gv as f64;
            (n as f64 - want).abs() <= NORM_REL * want.abs() + 1e-12
        })
    };
    let mut msgs = Vec::new();
    let want1: Vec<f32> = i.res.iter().zip(&r.delta1).map(|(a, b)| a + b).collect();
    if r.res1 != want1 {
        msgs.push("residual after o_proj is not residual + delta1".to_string());
    }
    if !normed_ok(&r.normed1, &r.res1, &i.g1) {
        msgs.push("normed1 off the float64 norm".into());
    }
    let want2: Vec<f32> = r.res1.iter().zip(&r.delta2).map(|(a, b)| a + b).collect();
    if r.res2 != want2 {
        msgs.push("residual after down is not residual + delta2".into());
    }
    if !normed_ok(&r.normed2, &r.res2, &i.g2) {
        msgs.push("normed2 off the float64 norm".into());
    }
    // The consumers read x * g's quantization and scale by 1 / rms (fold), or normed's.
    let (inv1, xg1) = norm_parts(&r.res1, &i.g1);
    let (inv2, xg2) = norm_parts(&r.res2, &i.g2);
    let (in1, s1) = if fold {
        (xg1, inv1)
    } else {
        (r.normed1.clone(), 1.0)
    };
    let (in2, s2) = if fold {
        (xg2, inv2)
    } else {
        (r.normed2.clone(), 1.0)
    };
    let (gu, gu_abs) = cpu(&l.wgu, &in1);
    let inter = l.wgu.rows / 2;
    for k in 0..inter {
        let (g, u) = (gu[k] as f64 * s1, gu[inter + k] as f64 * s1);
        let tg = bound(gu_abs[k]) * s1 + NORM_REL * g.abs();
        let tu = bound(gu_abs[inter + k]) * s1 + NORM_REL * u.abs();
        let sg = g / (1.0 + (-g).exp());
        let tol = SILU_SLOPE * tg * u.abs()
            + sg.abs() * tu
            + SILU_SLOPE * tg * tu
            + (sg * u).abs() * 2f64.powi(-20);
        let v = r.act[k] as f64;
        if v.is_nan() || (v - sg * u).abs() > tol {
            msgs.push(format!("act[{k}] = {v}, cpu {} ± {tol}", sg * u));
            break;
        }
    }
    // down reads the quantization the SwiGLU epilogue left: equal to the CPU's of act.
    gemv("delta2", &r.delta2, cpu(&l.wd, &r.act), 1.0);
    gemv("q", &r.q, cpu(&l.wq, &in2), s2);
    for m in msgs {
        fail(m);
    }
}

fn backend() -> Option<CudaBackend> {
    match CudaBackend::new(0) {
        Ok(b) => Some(b),
        Err(e) => {
            eprintln!("skipped: no CUDA device ({e})");
            None
        }
    }
}

fn layer(be: &CudaBackend, s: Shape, m: [GgmlType; 4], rng: &mut Rng) -> Layer {
    Layer {
        wo: weight(be, m[0], s.d, s.d_in, rng),
        wgu: weight(be, m[1], 2 * s.inter, s.d, rng),
        wd: weight(be, m[2], s.d, s.inter, rng),
        wq: weight(be, m[3], s.q_rows, s.d, rng),
    }
}

fn inputs(s: Shape, rng: &mut Rng) -> Inputs {
    let v = |rng: &mut Rng, n: usize, sc: f32| (0..n).map(|_| rng.f32() * sc).collect();
    Inputs {
        x: v(rng, s.d_in, 1.0),
        res: v(rng, s.d, 2.0),
        g1: v(rng, s.d, 1.5),
        g2: v(rng, s.d, 1.5),
    }
}

#[test]
fn dp4a_epilogues_match_the_cpu_step_by_step() {
    let Some(be) = backend() else { return };
    let mut f = Vec::new();
    for (si, s) in SHAPES.into_iter().enumerate() {
        for (mi, m) in mixes(s).into_iter().enumerate() {
            let mut rng = Rng::new(31 + 10 * si as u64 + mi as u64);
            let l = layer(&be, s, m, &mut rng);
            let i = inputs(s, &mut rng);
            // The 4-row kernel of 128 threads (auto) and of 64 (r64: Q4_0, Q4_1, Q8_0 at <= 4096
            // columns), each with the fold on and off.
            for v in [Q8Variant::Auto, Q8Variant::Rows64] {
                for fold in [true, false] {
                    be.set_q8_gemv_variant(v);
                    be.set_rms_fold(Some(fold));
                    let label = format!("{s:?} {m:?} {} fold {fold}", v.name());
                    let r = read(&be, &l, s, &i);
                    if r.gate_up_written {
                        f.push(format!("{label}: the fused [gate; up] GEMV did not run"));
                    }
                    check(&label, &l, &i, &r, fold, &mut f);
                    eprintln!("{label}: checked");
                }
            }
        }
    }
    be.set_rms_fold(None);
    be.set_q8_gemv_variant(Q8Variant::Auto);
    assert!(f.is_empty(), "{} failures:\n{}", f.len(), f.join("\n"));
}

/// The chain captured into a graph and replayed three times: each replay equals the eager run
/// bit for bit (the quantizing blocks are chosen by arrival order, the values are not).
#[test]
fn dp4a_epilogue_chain_replays_bit_for_bit() {
    let Some(be) = backend() else { return };
    let s = SHAPES[0];
    let mut rng = Rng::new(77);
    let l = layer(&be, s, [GgmlType::Q4_0; 4], &mut rng);
    let i = inputs(s, &mut rng);
    be.set_rms_fold(Some(true));
    let eager = read(&be, &l, s, &i);
    let mut b = bufs(&be, s, &i);
    be.synchronize().unwrap();
    be.begin_capture().unwrap();
    chain(&be, &l, &mut b);
    let graph = be.end_capture().unwrap();
    be.set_rms_fold(None);
    for rep in 0..3 {
        be.write_f32(&mut b.res, &i.res, &[1, s.d]).unwrap();
        for t in [&mut b.normed1, &mut b.act, &mut b.normed2, &mut b.q] {
            let n = t.numel();
            be.write_f32(t, &vec![f32::NAN; n], &[1, n]).unwrap();
        }
        graph.replay().unwrap();
        be.synchronize().unwrap();
        let got = [&b.normed1, &b.act, &b.res, &b.normed2, &b.q].map(|t| be.read_f32(t).unwrap());
        let want = [
            &eager.normed1,
            &eager.act,
            &eager.res2,
            &eager.normed2,
            &eager.q,
        ];
        for (k, (a, w)) in got.iter().zip(want).enumerate() {
            assert_eq!(a, w, "replay {rep}: output {k} differs from the eager run");
        }
    }
}
