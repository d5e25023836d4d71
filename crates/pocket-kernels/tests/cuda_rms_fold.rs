//! The residual-add RMSNorm folded into the one-row FP8 GEMVs around it (cuda/rms_fold.rs,
//! kernels/rms_fold.cuh): `matmul_add_rms_norm` (producer) followed by each kind of reader of
//! its `normed` output: a one-row FP8 `matmul` and `matmul_silu_halves` (consumers that take the
//! fold), a non-GEMV op and a host read-back (which write the pending norm out first), a second
//! producer, a captured graph replayed, and a freed output. Every result is checked against the
//! same sequence with the fold off (`set_rms_fold(Some(false))`: GEMV + `add_rms_norm`, the
//! CUDA ops the CPU parity tests cover) and against a float64 reference over pocket-quant's
//! dequantizer. Skipped (with a message) without a CUDA device.
#![cfg(feature = "cuda")]

use pocket_kernels::cuda::CudaBackend;
use pocket_kernels::{Backend, DType, HostBytes, Tensor, Weight};
use pocket_quant::QuantFormat;

const EPS: f32 = 1e-6;

/// The bound on |normed_gpu - normed_ref| relative to |normed_ref|, and between the fold and the
/// unfused norm. Both sum d squares in f32 along paths of at most ~30 additions (per-row
/// squares, warp butterflies, block and partial sums; the unfused kernel's strided sums and
/// tree), so each sum is within 30 u (u = 2^-24, 1.8e-6) of exact, the inverse square root
/// within half that plus a rounding, and the product x * g * s within 3 u more: about 1.1e-6
/// from exact, 2.2e-6 between two such paths. Allowed: 4e-6.
const NORM_REL: f64 = 4e-6;

/// The GEMV bound of the FP8 tests (tests/cuda_fp8.rs): 1e-5 of Σ|w·x| for f32 summation order,
/// plus the input's own error (NORM_REL of each |normed| element, so NORM_REL of Σ|w·x|).
fn gemv_bound(abs: f64) -> f64 {
    (1e-5 + NORM_REL) * abs + 1e-6
}

#[path = "ops_support/mod.rs"]
mod ops_support;
use ops_support::Rng;

/// `n` values of `rng` in [-scale, scale).
fn scaled(rng: &mut Rng, n: usize, scale: f32) -> Vec<f32> {
    (0..n).map(|_| rng.f32() * scale).collect()
}

/// An FP8 E4M3 weight with 128x128 tile scales, on the device and dequantized on the host.
struct Fp8 {
    w: Weight,
    deq: Vec<f32>,
    rows: usize,
    cols: usize,
}

fn fp8(be: &CudaBackend, rows: usize, cols: usize, rng: &mut Rng) -> Fp8 {
    let f = QuantFormat::Fp8E4M3Block128;
    let src = scaled(rng, rows * cols, 0.05);
    let q = pocket_quant::quantize_matrix(f, rows, cols, &src).unwrap();
    let mut deq = vec![0f32; rows * cols];
    pocket_quant::dequantize_matrix(&q.view(), &mut deq).unwrap();
    let scales = (!q.scales.is_empty()).then(|| HostBytes::from_vec(q.scales.clone()));
    let w = be
        .upload_weight(
            f,
            rows,
            cols,
            HostBytes::from_vec(q.data.clone()),
            scales,
            q.tensor_scale,
        )
        .unwrap();
    Fp8 { w, deq, rows, cols }
}

/// Exact Σ w·x and Σ|w·x| per row of `w` (float64).
fn dots(w: &Fp8, x: &[f64]) -> Vec<(f64, f64)> {
    (0..w.rows)
        .map(|r| {
            let row = &w.deq[r * w.cols..(r + 1) * w.cols];
            row.iter().zip(x).fold((0.0, 0.0), |(s, a), (&wv, &xv)| {
                (s + wv as f64 * xv, a + (wv as f64 * xv).abs())
            })
        })
        .collect()
}

/// The layer's shapes: hidden d, the producer's input width, the consumer's rows, the SwiGLU
/// consumer's outputs.
#[derive(Clone, Copy, Debug)]
struct Shape {
    d: usize,
    in_cols: usize,
    out_rows: usize,
    inter: usize,
}

/// Qwen3.5-27B (o/out projection 5120x6144, in_proj_qkvz 16384 rows: the 8-row warp kernel,
/// MLP 17408), a small one (the 4-row warp kernel, 16 partial sums), one whose consumer is not
/// whole blocks (100 rows: the fold is written out before it instead) and one whose producer is
/// not (d = 16400 rows take the 8-row warp kernel, 32 rows per block: no fold at all).
const SHAPES: [Shape; 4] = [
    Shape {
        d: 5120,
        in_cols: 6144,
        out_rows: 16384,
        inter: 17408,
    },
    Shape {
        d: 256,
        in_cols: 512,
        out_rows: 384,
        inter: 200,
    },
    Shape {
        d: 256,
        in_cols: 272,
        out_rows: 100,
        inter: 6,
    },
    Shape {
        d: 16400,
        in_cols: 64,
        out_rows: 64,
        inter: 8,
    },
];

/// What reads `normed` first after the producer.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Reader {
    /// `matmul` (then `matmul_silu_halves` over the written-out row).
    Gemv,
    /// `matmul_silu_halves` (then `matmul`).
    Silu,
    /// `rms_norm` of `normed` into another tensor (a non-GEMV launch), then both GEMVs.
    OtherOp,
    /// A host read-back, then both GEMVs.
    ReadBack,
    /// A second producer on another residual, then both GEMVs over the first `normed`.
    Producer,
}

/// What the first reader other than the two GEMVs saw.
enum Other {
    None,
    /// `rms_norm(normed) * g`.
    Renormed(Vec<f32>),
    /// `normed` read back before any GEMV.
    ReadBack(Vec<f32>),
    /// The second producer's consumer output.
    SecondOut(Vec<f32>),
}

/// Device tensors of one run, read back.
struct Run {
    delta: Vec<f32>,
    residual: Vec<f32>,
    normed: Vec<f32>,
    out: Vec<f32>,
    silu: Vec<f32>,
    other: Other,
}

struct Inputs {
    x: Vec<f32>,
    residual: Vec<f32>,
    g: Vec<f32>,
}

fn up(be: &CudaBackend, v: &[f32], shape: &[usize]) -> Tensor {
    be.upload_f32(v, shape).unwrap()
}

fn nan(be: &CudaBackend, shape: &[usize]) -> Tensor {
    let mut t = be.alloc(DType::F32, shape).unwrap();
    let n = t.numel();
    be.write_f32(&mut t, &vec![f32::NAN; n], shape).unwrap();
    t
}

fn run(be: &CudaBackend, s: Shape, w: &[Fp8; 3], inp: &Inputs, reader: Reader) -> Run {
    let [wp, wc, wgu] = w;
    let x = up(be, &inp.x, &[1, s.in_cols]);
    let mut residual = up(be, &inp.residual, &[1, s.d]);
    let g = up(be, &inp.g, &[s.d]);
    let mut delta = nan(be, &[1, s.d]);
    let mut normed = nan(be, &[1, s.d]);
    let mut out = nan(be, &[1, s.out_rows]);
    let mut gu = nan(be, &[1, 2 * s.inter]);
    let mut silu = nan(be, &[1, s.inter]);
    be.matmul_add_rms_norm(&x, &wp.w, &mut delta, &mut residual, &g, EPS, &mut normed)
        .unwrap();
    let mut other = Other::None;
    match reader {
        Reader::Gemv => {
            be.matmul(&normed, &wc.w, &mut out).unwrap();
            be.matmul_silu_halves(&normed, &wgu.w, &mut gu, &mut silu)
                .unwrap();
        }
        Reader::Silu => {
            be.matmul_silu_halves(&normed, &wgu.w, &mut gu, &mut silu)
                .unwrap();
            be.matmul(&normed, &wc.w, &mut out).unwrap();
        }
        Reader::OtherOp | Reader::ReadBack | Reader::Producer => {
            if reader == Reader::OtherOp {
                let mut o = nan(be, &[1, s.d]);
                be.rms_norm(&normed, &g, EPS, &mut o).unwrap();
                other = Other::Renormed(be.read_f32(&o).unwrap());
            } else if reader == Reader::ReadBack {
                other = Other::ReadBack(be.read_f32(&normed).unwrap());
            } else {
                // The same projection again onto a copy of the input residual.
                let mut r2 = up(be, &inp.residual, &[1, s.d]);
                let mut d2 = nan(be, &[1, s.d]);
                let mut n2 = nan(be, &[1, s.d]);
                be.matmul_add_rms_norm(&x, &wp.w, &mut d2, &mut r2, &g, EPS, &mut n2)
                    .unwrap();
                let mut o2 = nan(be, &[1, s.out_rows]);
                be.matmul(&n2, &wc.w, &mut o2).unwrap();
                other = Other::SecondOut(be.read_f32(&o2).unwrap());
            }
            be.matmul(&normed, &wc.w, &mut out).unwrap();
            be.matmul_silu_halves(&normed, &wgu.w, &mut gu, &mut silu)
                .unwrap();
        }
    }
    Run {
        delta: be.read_f32(&delta).unwrap(),
        residual: be.read_f32(&residual).unwrap(),
        normed: be.read_f32(&normed).unwrap(),
        out: be.read_f32(&out).unwrap(),
        silu: be.read_f32(&silu).unwrap(),
        other,
    }
}

/// silu(g) and the largest |silu'| (1.0998 at g = 2.40), as tests/cuda_fp8/gate_up.rs.
fn silu(g: f64) -> f64 {
    g / (1.0 + (-g).exp())
}
const SILU_SLOPE: f64 = 1.1;

/// Checks one run against the float64 reference built on its own residual (the producer's GEMV
/// is held to its bound separately), pushing failures.
fn check_ref(label: &str, s: Shape, w: &[Fp8; 3], inp: &Inputs, r: &Run, f: &mut Vec<String>) {
    let mut fail = |m: String| {
        if f.len() < 40 {
            f.push(format!("{label}: {m}"));
        }
    };
    let x: Vec<f64> = inp.x.iter().map(|&v| v as f64).collect();
    for (i, &(exact, abs)) in dots(&w[0], &x).iter().enumerate() {
        let got = r.delta[i] as f64;
        if got.is_nan() || (got - exact).abs() > 1e-5 * abs + 1e-6 {
            fail(format!("delta[{i}] = {got}, exact {exact}"));
        }
        let want_res = inp.residual[i] + r.delta[i];
        if r.residual[i].to_bits() != want_res.to_bits() {
            fail(format!(
                "residual[{i}] = {}, want {want_res}",
                r.residual[i]
            ));
        }
    }
    let ss: f64 = r.residual.iter().map(|&v| v as f64 * v as f64).sum();
    let inv = 1.0 / (ss / s.d as f64 + EPS as f64).sqrt();
    let normed: Vec<f64> = (0..s.d)
        .map(|i| r.residual[i] as f64 * inv * inp.g[i] as f64)
        .collect();
    let close = |got: f32, want: f64| {
        let got = got as f64;
        !got.is_nan() && (got - want).abs() <= NORM_REL * want.abs() + 1e-12
    };
    for (i, &want) in normed.iter().enumerate() {
        if !close(r.normed[i], want) {
            fail(format!("normed[{i}] = {}, exact {want}", r.normed[i]));
        }
    }
    match &r.other {
        Other::ReadBack(o) => {
            if o != &r.normed {
                fail("the read-back normed differs from the one read at the end".into());
            }
        }
        Other::Renormed(o) => {
            // A second norm over normed: its own error on top of normed's.
            let ss2: f64 = normed.iter().map(|v| v * v).sum();
            let inv2 = 1.0 / (ss2 / s.d as f64 + EPS as f64).sqrt();
            for (i, &v) in normed.iter().enumerate() {
                let want = v * inv2 * inp.g[i] as f64;
                let got = o[i] as f64;
                if got.is_nan() || (got - want).abs() > 2.0 * NORM_REL * want.abs() + 1e-12 {
                    fail(format!("rms_norm(normed)[{i}] = {got}, exact {want}"));
                }
            }
        }
        Other::None | Other::SecondOut(_) => {}
    }
    let outs = dots(&w[1], &normed);
    let mut check_outs = |name: &str, got: &[f32]| {
        for (i, &(exact, abs)) in outs.iter().enumerate() {
            let v = got[i] as f64;
            if v.is_nan() || (v - exact).abs() > gemv_bound(abs) {
                fail(format!(
                    "{name}[{i}] = {v}, exact {exact} ± {}",
                    gemv_bound(abs)
                ));
            }
        }
    };
    check_outs("out", &r.out);
    if let Other::SecondOut(o) = &r.other {
        check_outs("second producer's out", o);
    }
    let gu = dots(&w[2], &normed);
    for i in 0..s.inter {
        let ((g, ag), (u, au)) = (gu[i], gu[s.inter + i]);
        let (tg, tu) = (gemv_bound(ag), gemv_bound(au));
        let tol = SILU_SLOPE * tg * u.abs()
            + silu(g).abs() * tu
            + SILU_SLOPE * tg * tu
            + (silu(g) * u).abs() * 2f64.powi(-20);
        let v = r.silu[i] as f64;
        if v.is_nan() || (v - silu(g) * u).abs() > tol {
            fail(format!("silu[{i}] = {v}, exact {} ± {tol}", silu(g) * u));
        }
    }
}

/// The fold against the unfused ops: the producer's outputs bit for bit, the rest within the
/// bounds above (normed NORM_REL; GEMV outputs are checked against the reference instead).
fn check_unfused(label: &str, fold: &Run, plain: &Run, f: &mut Vec<String>) {
    if fold.delta != plain.delta || fold.residual != plain.residual {
        f.push(format!(
            "{label}: delta/residual differ from the unfused ops"
        ));
    }
    for (i, (&a, &b)) in fold.normed.iter().zip(&plain.normed).enumerate() {
        if (a as f64 - b as f64).abs() > NORM_REL * (b as f64).abs() + 1e-12 {
            f.push(format!("{label}: normed[{i}] = {a}, unfused {b}"));
            break;
        }
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

fn weights(be: &CudaBackend, s: Shape, rng: &mut Rng) -> [Fp8; 3] {
    [
        fp8(be, s.d, s.in_cols, rng),
        fp8(be, s.out_rows, s.d, rng),
        fp8(be, 2 * s.inter, s.d, rng),
    ]
}

fn inputs(s: Shape, rng: &mut Rng) -> Inputs {
    Inputs {
        x: scaled(rng, s.in_cols, 1.0),
        residual: scaled(rng, s.d, 2.0),
        g: scaled(rng, s.d, 1.5),
    }
}

/// One layer with `reader` run unfused and folded: both against the reference, and the two
/// against each other; failures into `f`.
fn fold_against_unfused(
    be: &CudaBackend,
    label: &str,
    s: Shape,
    w: &[Fp8; 3],
    inp: &Inputs,
    reader: Reader,
    f: &mut Vec<String>,
) {
    be.set_rms_fold(Some(false));
    let plain = run(be, s, w, inp, reader);
    be.set_rms_fold(Some(true));
    let fold = run(be, s, w, inp, reader);
    be.set_rms_fold(None);
    check_ref(&format!("{label} unfused"), s, w, inp, &plain, f);
    check_ref(&format!("{label} fold"), s, w, inp, &fold, f);
    check_unfused(label, &fold, &plain, f);
    eprintln!("{label}: checked");
}

#[test]
fn folded_norm_equals_the_unfused_ops_for_every_reader() {
    let Some(be) = backend() else { return };
    let mut f = Vec::new();
    for (si, s) in SHAPES.into_iter().enumerate() {
        let mut rng = Rng::new(7 + si as u64);
        let w = weights(&be, s, &mut rng);
        let inp = inputs(s, &mut rng);
        for reader in [
            Reader::Gemv,
            Reader::Silu,
            Reader::OtherOp,
            Reader::ReadBack,
            Reader::Producer,
        ] {
            fold_against_unfused(
                &be,
                &format!("{s:?} {reader:?}"),
                s,
                &w,
                &inp,
                reader,
                &mut f,
            );
        }
    }
    assert!(f.is_empty(), "{} failures:\n{}", f.len(), f.join("\n"));
}

/// Producer + consumer captured into a graph and replayed: each replay equals the eager run
/// (the pending fold is resolved inside the capture, the scratch is the graph's).
#[test]
fn folded_norm_in_a_replayed_graph_equals_eager() {
    let Some(be) = backend() else { return };
    let s = SHAPES[0];
    let mut rng = Rng::new(99);
    let w = weights(&be, s, &mut rng);
    let inp = inputs(s, &mut rng);
    be.set_rms_fold(Some(true));
    let eager = run(&be, s, &w, &inp, Reader::Silu);
    let x = up(&be, &inp.x, &[1, s.in_cols]);
    let g = up(&be, &inp.g, &[s.d]);
    let mut residual = up(&be, &inp.residual, &[1, s.d]);
    let mut delta = nan(&be, &[1, s.d]);
    let mut normed = nan(&be, &[1, s.d]);
    let mut out = nan(&be, &[1, s.out_rows]);
    let mut gu = nan(&be, &[1, 2 * s.inter]);
    let mut silu = nan(&be, &[1, s.inter]);
    be.synchronize().unwrap();
    be.begin_capture().unwrap();
    be.matmul_add_rms_norm(&x, &w[0].w, &mut delta, &mut residual, &g, EPS, &mut normed)
        .unwrap();
    be.matmul_silu_halves(&normed, &w[2].w, &mut gu, &mut silu)
        .unwrap();
    be.matmul(&normed, &w[1].w, &mut out).unwrap();
    let graph = be.end_capture().unwrap();
    be.set_rms_fold(None);
    for rep in 0..3 {
        // Each replay starts from the input residual (the step adds into it).
        be.write_f32(&mut residual, &inp.residual, &[1, s.d])
            .unwrap();
        for t in [&mut normed, &mut silu] {
            let n = t.numel();
            let shape = t.shape.clone();
            be.write_f32(t, &vec![f32::NAN; n], &shape).unwrap();
        }
        graph.replay().unwrap();
        be.synchronize().unwrap();
        let got = [
            be.read_f32(&residual).unwrap(),
            be.read_f32(&normed).unwrap(),
            be.read_f32(&out).unwrap(),
            be.read_f32(&silu).unwrap(),
        ];
        let want = [&eager.residual, &eager.normed, &eager.out, &eager.silu];
        for (k, (a, b)) in got.iter().zip(want).enumerate() {
            assert_eq!(a, b, "replay {rep}: output {k} differs from the eager run");
        }
    }
}

/// A pending norm whose output is freed before anyone reads it writes nothing: the block the
/// pool hands out next keeps what its new owner wrote.
#[test]
fn freeing_a_pending_norm_output_cancels_its_write() {
    let Some(be) = backend() else { return };
    let s = SHAPES[1];
    let mut rng = Rng::new(5);
    let w = weights(&be, s, &mut rng);
    let inp = inputs(s, &mut rng);
    be.set_rms_fold(Some(true));
    let x = up(&be, &inp.x, &[1, s.in_cols]);
    let g = up(&be, &inp.g, &[s.d]);
    let mut residual = up(&be, &inp.residual, &[1, s.d]);
    let mut delta = nan(&be, &[1, s.d]);
    let mut normed = nan(&be, &[1, s.d]);
    be.matmul_add_rms_norm(&x, &w[0].w, &mut delta, &mut residual, &g, EPS, &mut normed)
        .unwrap();
    drop(normed);
    let mine: Vec<f32> = (0..s.d).map(|i| i as f32).collect();
    let t = up(&be, &mine, &[1, s.d]);
    // A launch that would write the pending norm out, then the read.
    let mut o = nan(&be, &[1, s.d]);
    be.rms_norm(&t, &g, EPS, &mut o).unwrap();
    be.set_rms_fold(None);
    assert_eq!(
        be.read_f32(&t).unwrap(),
        mine,
        "the freed norm output was written"
    );
}
