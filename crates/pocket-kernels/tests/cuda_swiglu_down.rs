//! The SwiGLU moved into the one-row dp4a down GEMV (cuda/swiglu_down.rs, kernels/gemv.cu
//! `gemv_q8r_swiglu{4,8}_*`): `matmul_silu_halves` followed by each kind of reader of its output
//! — the down `matmul` (which takes the fusion), a host read-back, another op, a GEMV that
//! cannot take it, a captured graph replayed, a freed output — against the same sequence with
//! the fusion off (`set_swiglu_down(Some(0))`: gate|up GEMV + `silu_mul_halves_q8` + GEMV, the
//! CUDA ops the CPU parity tests cover), bit for bit: the fused kernel quantizes with the same
//! expression and its dot products add in the same order. Both cluster sizes. Skipped (with a
//! message) without a CUDA device.
#![cfg(feature = "cuda")]

use pocket_kernels::cuda::{Artifact, CudaBackend};
use pocket_kernels::{Backend, DType, HostBytes, Tensor, Weight};
use pocket_quant::{GgmlType, QuantFormat};

#[path = "ops_support/mod.rs"]
mod ops_support;
use ops_support::Rng;

fn gpu() -> Option<CudaBackend> {
    match CudaBackend::new(0) {
        Ok(b) => Some(b),
        Err(e) => {
            eprintln!("skipped: no CUDA device ({e})");
            None
        }
    }
}

/// A `rows x cols` weight of `f` with values in [-0.05, 0.05), on the device.
fn weight(be: &CudaBackend, f: QuantFormat, rows: usize, cols: usize, rng: &mut Rng) -> Weight {
    let src: Vec<f32> = (0..rows * cols).map(|_| rng.f32() * 0.05).collect();
    let q = pocket_quant::quantize_matrix(f, rows, cols, &src).unwrap();
    be.upload_weight(f, rows, cols, HostBytes::from_vec(q.data), None, None)
        .unwrap()
}

/// One MLP shape: hidden size, intermediate size, format of both weights.
struct Case {
    hidden: usize,
    inter: usize,
    format: QuantFormat,
}

/// The Llama-3-8B MLP in Q4_0, smaller ones in Q8_0, Q6_K and Q4_K (the K formats read the Q8K
/// activation kind) and Q4_1. (Small shapes keep the host's quantization of the weights short.)
const CASES: [Case; 5] = [
    Case {
        hidden: 4096,
        inter: 14336,
        format: QuantFormat::Ggml(GgmlType::Q4_0),
    },
    Case {
        hidden: 1024,
        inter: 4096,
        format: QuantFormat::Ggml(GgmlType::Q8_0),
    },
    Case {
        hidden: 1024,
        inter: 4096,
        format: QuantFormat::Ggml(GgmlType::Q6_K),
    },
    Case {
        // 2048 rows: fewer take gemv_q8r1_q4_k, which has no fused form (gemv_q8.rs).
        hidden: 2048,
        inter: 4096,
        format: QuantFormat::Ggml(GgmlType::Q4_K),
    },
    Case {
        hidden: 512,
        inter: 8192,
        format: QuantFormat::Ggml(GgmlType::Q4_1),
    },
];

/// What reads the MLP's activation after `matmul_silu_halves`.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Reader {
    /// The down `matmul` (takes the fusion where it applies).
    Down,
    /// A host read-back, then the down `matmul`.
    ReadBack,
    /// `add_assign` of the activation into another tensor (a non-GEMV launch), then the down.
    OtherOp,
    /// A one-row GEMV with no fused form (Q5_0) over the activation, then the down.
    OtherGemv,
}

/// The activation, the down projection's output and what the other reader saw.
type Run = (Vec<f32>, Vec<f32>, Option<Vec<f32>>);

fn run(be: &CudaBackend, c: &Case, w: &[Weight; 3], x: &[f32], reader: Reader) -> Run {
    let [gu_w, down_w, other_w] = w;
    let x = be.upload_f32(x, &[1, c.hidden]).unwrap();
    let mut gu = be.alloc(DType::F32, &[1, 2 * c.inter]).unwrap();
    let mut act = be.alloc(DType::F32, &[1, c.inter]).unwrap();
    let mut out = be.alloc(DType::F32, &[1, c.hidden]).unwrap();
    be.matmul_silu_halves(&x, gu_w, &mut gu, &mut act).unwrap();
    let other = match reader {
        Reader::Down => None,
        Reader::ReadBack => Some(be.read_f32(&act).unwrap()),
        Reader::OtherOp => {
            let mut t = be.upload_f32(&vec![1.0; c.inter], &[1, c.inter]).unwrap();
            be.add_assign(&mut t, &act).unwrap();
            Some(be.read_f32(&t).unwrap())
        }
        Reader::OtherGemv => {
            let mut t = be.alloc(DType::F32, &[1, other_w.rows]).unwrap();
            be.matmul(&act, other_w, &mut t).unwrap();
            Some(be.read_f32(&t).unwrap())
        }
    };
    be.matmul(&act, down_w, &mut out).unwrap();
    (
        be.read_f32(&act).unwrap(),
        be.read_f32(&out).unwrap(),
        other,
    )
}

/// The gate|up and down weights of `c`, and a Q5_0 one over the activation (no fused form).
fn weights(be: &CudaBackend, c: &Case, rng: &mut Rng) -> [Weight; 3] {
    let q5 = QuantFormat::Ggml(GgmlType::Q5_0);
    [
        weight(be, c.format, 2 * c.inter, c.hidden, rng),
        weight(be, c.format, c.hidden, c.inter, rng),
        weight(be, q5, 256, c.inter, rng),
    ]
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|f| f.to_bits()).collect()
}

#[test]
fn fused_down_projection_equals_the_separate_swiglu_bit_for_bit() {
    let Some(be) = gpu() else { return };
    let sm90 = be.artifact() == Artifact::Sm90Cubin;
    let mut rng = Rng::new(0x5157_0001);
    for c in &CASES {
        let w = weights(&be, c, &mut rng);
        let x: Vec<f32> = (0..c.hidden).map(|_| rng.f32()).collect();
        be.set_swiglu_down(Some(0));
        let want = run(&be, c, &w, &x, Reader::OtherGemv);
        assert!(want.1.iter().all(|v| v.is_finite()), "{:?}", c.format);
        let readers = [
            Reader::Down,
            Reader::ReadBack,
            Reader::OtherOp,
            Reader::OtherGemv,
        ];
        for (cluster, reader) in [4, 8].into_iter().flat_map(|k| readers.map(|r| (k, r))) {
            be.set_swiglu_down(Some(cluster));
            let before = be.swiglu_down_launches();
            let got = run(&be, c, &w, &x, reader);
            let fused = be.swiglu_down_launches() - before;
            be.set_swiglu_down(None);
            let what = format!(
                "{:?} {}x{} {reader:?} c{cluster}",
                c.format, c.hidden, c.inter
            );
            // Only the down GEMV reading the pending row takes the fusion, on the sm_90 cubin.
            let expect = u64::from(sm90 && reader == Reader::Down);
            assert_eq!(fused, expect, "{what}: fused launches");
            assert_eq!(bits(&got.0), bits(&want.0), "{what}: activation");
            assert_eq!(bits(&got.1), bits(&want.1), "{what}: down output");
            if let Some(o) = got.2 {
                let act1: Vec<f32> = want.0.iter().map(|v| 1.0 + v).collect();
                let expect_other = match reader {
                    Reader::ReadBack => &want.0,
                    Reader::OtherOp => &act1,
                    _ => want.2.as_ref().unwrap(),
                };
                assert_eq!(bits(&o), bits(expect_other), "{what}: other reader");
            }
        }
    }
}

/// Gate|up + down captured as a graph (the fused kernel inside it) and replayed equals the
/// eager unfused run; freeing the activation while its SwiGLU is pending cancels it cleanly.
#[test]
fn fused_down_projection_in_a_graph_and_a_freed_activation() {
    let Some(be) = gpu() else { return };
    let c = &CASES[0];
    let mut rng = Rng::new(0x5157_0002);
    let w = weights(&be, c, &mut rng);
    let xv: Vec<f32> = (0..c.hidden).map(|_| rng.f32()).collect();
    be.set_swiglu_down(Some(0));
    let want = run(&be, c, &w, &xv, Reader::Down);
    be.set_swiglu_down(Some(8));
    let x = be.upload_f32(&xv, &[1, c.hidden]).unwrap();
    let mut gu = be.alloc(DType::F32, &[1, 2 * c.inter]).unwrap();
    let mut act = be.alloc(DType::F32, &[1, c.inter]).unwrap();
    let mut out = be.alloc(DType::F32, &[1, c.hidden]).unwrap();
    be.begin_capture().unwrap();
    be.matmul_silu_halves(&x, &w[0], &mut gu, &mut act).unwrap();
    be.matmul(&act, &w[1], &mut out).unwrap();
    let graph = be.end_capture().unwrap();
    for rep in 0..5 {
        be.write_f32(&mut out, &vec![f32::NAN; c.hidden], &[1, c.hidden])
            .unwrap();
        graph.replay().unwrap();
        assert_eq!(
            bits(&be.read_f32(&out).unwrap()),
            bits(&want.1),
            "replay {rep}"
        );
        assert_eq!(
            bits(&be.read_f32(&act).unwrap()),
            bits(&want.0),
            "replay {rep}"
        );
    }
    // Pending, then freed: the next launch must not write into the freed block.
    let mut gone: Tensor = be.alloc(DType::F32, &[1, c.inter]).unwrap();
    be.matmul_silu_halves(&x, &w[0], &mut gu, &mut gone)
        .unwrap();
    drop(gone);
    let mut out2 = be.alloc(DType::F32, &[1, c.hidden]).unwrap();
    be.matmul(&act, &w[1], &mut out2).unwrap();
    assert_eq!(
        bits(&be.read_f32(&out2).unwrap()),
        bits(&want.1),
        "after a freed activation"
    );
    be.set_swiglu_down(None);
}
