//! `matmul_silu_halves` over a stacked FP8 `[gate; up]` weight: the CUDA fused one-row kernel
//! (`gemv_fp8_silu_*`, every outputs-per-warp variant, and the per-shape dispatch) against the
//! CPU backend's default (matmul + silu_mul_halves on the same codes) and a float64 reference
//! over pocket-quant's dequantizer; and the CUDA unfused path (stacked GEMV + silu_mul_halves).

use super::{bound, par_map, random_weights, Rng};
use pocket_kernels::cuda::CudaBackend;
use pocket_kernels::{Backend, DType, Device, DeviceKind, HostBytes};
use pocket_quant::QuantFormat;

/// silu(g) and the largest |silu'| (1.0998 at g = 2.40): an error e in the gate moves the
/// output by at most 1.1 e |up|.
fn silu(g: f64) -> f64 {
    g / (1.0 + (-g).exp())
}
const SILU_SLOPE: f64 = 1.1;

/// The bound on one output: the gate and up sums each within their GEMV bound (`bound`: 1e-5
/// of Σ|w·x|, the f32 summation-order allowance of the plain FP8 GEMV tests), propagated
/// through silu(g)·u to first order plus the product of the two bounds, plus the f32 epilogue
/// (expf, one division, two multiplies: a few ulp, allowed 2^-20 relative).
fn out_bound(g: f64, u: f64, tg: f64, tu: f64) -> f64 {
    SILU_SLOPE * tg * u.abs()
        + silu(g).abs() * tu
        + SILU_SLOPE * tg * tu
        + (silu(g) * u).abs() * 2f64.powi(-20)
}

/// Checks `got` (one row of `inter` outputs) against the CPU's and the float64 reference.
fn compare(label: &str, got: &[f32], cpu: &[f32], refs: &[(f64, f64)], f: &mut Vec<String>) {
    let inter = got.len();
    let mut worst = 0f64;
    for i in 0..inter {
        let ((g, tg), (u, tu)) = (refs[i], refs[inter + i]);
        let exact = silu(g) * u;
        let tol = out_bound(g, u, tg, tu);
        let (v, c) = (got[i] as f64, cpu[i] as f64);
        let ratio = if v.is_nan() {
            f64::INFINITY
        } else {
            (v - c).abs().max((v - exact).abs()) / tol
        };
        worst = worst.max(ratio);
        if ratio > 1.0 && f.len() < 40 {
            f.push(format!(
                "{label}: out[{i}] = {v}, cpu {c} (exact {exact}) ± {tol}"
            ));
        }
    }
    eprintln!("{label:60}: worst |gpu - cpu| / bound = {worst:.3}");
}

/// Shapes: the Qwen3.5-27B MLP (17408 outputs x 5120), an 8B-class one (14336 x 4096, 4
/// outputs per warp), intermediate widths that are not multiples of 128 (partial tiles: the up
/// half starts inside a tile) nor of the larger row groups (1031: odd, so only 1 per warp; 130:
/// 2 but not 4), columns with a partial last tile and past one step of every variant (4112,
/// 8208), and tiny ones (one warp, part of a block).
#[test]
fn fp8_gate_up_silu_matches_cpu() {
    let be = match CudaBackend::new(0) {
        Ok(b) => b,
        Err(e) => {
            eprintln!("skipped: no CUDA device ({e})");
            return;
        }
    };
    let dev = Device::open(DeviceKind::Cuda(0)).unwrap();
    let cpu = Device::open(DeviceKind::Cpu).unwrap();
    let e4b = QuantFormat::Fp8E4M3Block128;
    let all = [
        QuantFormat::Fp8E4M3Block128,
        QuantFormat::Fp8E4M3,
        QuantFormat::Fp8E5M2Block128,
        QuantFormat::Fp8E5M2,
    ];
    let mut cases: Vec<(QuantFormat, usize, usize)> = vec![(e4b, 17408, 5120), (e4b, 14336, 4096)];
    for format in all {
        for (inter, cols) in [
            (1031usize, 4112usize),
            (130, 8208),
            (200, 208),
            (6, 16),
            (1, 32),
        ] {
            cases.push((format, inter, cols));
        }
    }
    let mut f = Vec::new();
    for (ci, &(format, inter, cols)) in cases.iter().enumerate() {
        let rows = 2 * inter;
        let mut rng = Rng::new(200 + ci as u64);
        let src = random_weights(rows, cols, &mut rng);
        let q = pocket_quant::quantize_matrix(format, rows, cols, &src).unwrap();
        let mut deq = vec![0f32; rows * cols];
        pocket_quant::dequantize_matrix(&q.view(), &mut deq).unwrap();
        let up = |d: &dyn Backend| {
            let scales = (!q.scales.is_empty()).then(|| HostBytes::from_vec(q.scales.clone()));
            d.upload_weight(
                format,
                rows,
                cols,
                HostBytes::from_vec(q.data.clone()),
                scales,
                q.tensor_scale,
            )
            .unwrap()
        };
        let (wb, wd, wc) = (up(&be), up(&*dev), up(&*cpu));
        let x: Vec<f32> = (0..cols).map(|_| rng.f32()).collect();
        // The CPU: the op's default (matmul into the workspace, then silu_mul_halves).
        let xc = cpu.upload_f32(&x, &[1, cols]).unwrap();
        let mut gc = cpu.alloc(DType::F32, &[1, rows]).unwrap();
        let mut oc = cpu.alloc(DType::F32, &[1, inter]).unwrap();
        cpu.matmul_silu_halves(&xc, &wc, &mut gc, &mut oc).unwrap();
        let want = cpu.read_f32(&oc).unwrap();
        // Gate and up rows' exact sums and GEMV bounds.
        let refs = par_map(rows, |r| {
            let wr = &deq[r * cols..(r + 1) * cols];
            let exact: f64 = wr.iter().zip(&x).map(|(a, b)| *a as f64 * *b as f64).sum();
            (exact, bound(1, false, wr, &x))
        });
        let name = format!("{} [{inter}x2 x {cols}]", format.name());
        let poisoned = |b: &dyn Backend, n: usize| {
            let mut t = b.alloc(DType::F32, &[1, n]).unwrap();
            b.write_f32(&mut t, &vec![f32::NAN; n], &[1, n]).unwrap();
            t
        };
        // Every variant whose outputs per warp divide the width, called directly, twice.
        let xb = be.upload_f32(&x, &[1, cols]).unwrap();
        for per in [1usize, 2, 4] {
            if !inter.is_multiple_of(per) {
                let mut o = poisoned(&be, inter);
                let r = be.fp8_gate_up_silu_row1(&xb, &wb, &mut o, Some(per));
                assert!(
                    r.is_err(),
                    "{name}: {per} per warp accepted for {inter} outputs"
                );
                continue;
            }
            let mut runs = Vec::new();
            for _ in 0..2 {
                let mut o = poisoned(&be, inter);
                be.fp8_gate_up_silu_row1(&xb, &wb, &mut o, Some(per))
                    .unwrap();
                runs.push(be.read_f32(&o).unwrap());
            }
            let bits = |v: &[f32]| v.iter().map(|a| a.to_bits()).collect::<Vec<_>>();
            if bits(&runs[0]) != bits(&runs[1]) {
                f.push(format!("{name} {per}/warp: repeated launches differ"));
            }
            compare(
                &format!("{name} fused {per}/warp"),
                &runs[0],
                &want,
                &refs,
                &mut f,
            );
        }
        // The op through the device handle: the fused kernel of the per-shape variant (or, with
        // POCKET_GATE_UP_FUSED=0 in the environment, the unfused path); the workspace is
        // poisoned too, so neither path may read it unwritten.
        let xd = dev.upload_f32(&x, &[1, cols]).unwrap();
        let mut gd = poisoned(&*dev, rows);
        let mut od = poisoned(&*dev, inter);
        dev.matmul_silu_halves(&xd, &wd, &mut gd, &mut od).unwrap();
        let got = dev.read_f32(&od).unwrap();
        compare(
            &format!("{name} matmul_silu_halves"),
            &got,
            &want,
            &refs,
            &mut f,
        );
        // The unfused path on the GPU (stacked GEMV + silu_mul_halves) for the A/B's sake:
        // the same bound; how many outputs agree bit for bit with the fused op is printed.
        let mut ou = poisoned(&*dev, inter);
        dev.matmul(&xd, &wd, &mut gd).unwrap();
        dev.silu_mul_halves(&gd, &mut ou).unwrap();
        let unfused = dev.read_f32(&ou).unwrap();
        compare(&format!("{name} unfused"), &unfused, &want, &refs, &mut f);
        let same = got
            .iter()
            .zip(&unfused)
            .filter(|(a, b)| a.to_bits() == b.to_bits())
            .count();
        eprintln!("{name}: fused == unfused bit for bit at {same} of {inter} outputs");
    }
    assert!(f.is_empty(), "fused gate|up failures:\n{}", f.join("\n"));
}

/// Shape errors of the fused op are typed errors, not launches: a weight whose rows are not
/// twice the output width, an activation of the wrong width.
#[test]
fn fp8_gate_up_silu_bad_shapes_are_errors() {
    let be = match CudaBackend::new(0) {
        Ok(b) => b,
        Err(e) => {
            eprintln!("skipped: no CUDA device ({e})");
            return;
        }
    };
    let format = QuantFormat::Fp8E4M3Block128;
    let (rows, cols) = (64usize, 128usize);
    let w = be
        .upload_weight(
            format,
            rows,
            cols,
            HostBytes::from_vec(vec![0u8; rows * cols]),
            Some(HostBytes::from_vec(vec![
                0u8;
                format.scale_bytes(rows, cols)
            ])),
            None,
        )
        .unwrap();
    let x = be.upload_f32(&vec![0f32; cols], &[1, cols]).unwrap();
    let mut out = be.alloc(DType::F32, &[1, 31]).unwrap();
    assert!(be.fp8_gate_up_silu_row1(&x, &w, &mut out, None).is_err());
    let x2 = be.upload_f32(&vec![0f32; 96], &[1, 96]).unwrap();
    let mut out = be.alloc(DType::F32, &[1, 32]).unwrap();
    assert!(be.fp8_gate_up_silu_row1(&x2, &w, &mut out, None).is_err());
    assert!(be.fp8_gate_up_silu_row1(&x, &w, &mut out, Some(3)).is_err());
    be.fp8_gate_up_silu_row1(&x, &w, &mut out, None).unwrap();
}
