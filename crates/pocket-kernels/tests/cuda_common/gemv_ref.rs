//! Shared by the CUDA GEMV test binaries (cuda_gemv, cuda_gemv_variants): random weight blocks,
//! the error bounds of each GEMV path, and the comparison of a result with the float64 dot and
//! pocket-quant's CPU matmul.
#![allow(dead_code)]

use pocket_kernels::{Backend, DType, HostBytes};
use pocket_quant::{GgmlType, QuantFormat, QuantMatrix};

#[path = "../rng/mod.rs"]
mod rng;
pub use rng::Rng;

/// Offsets of the f16 scales inside one block (ggml layouts), to overwrite with finite values.
pub fn scale_offsets(t: GgmlType) -> &'static [usize] {
    use GgmlType as G;
    match t {
        G::Q4_0 | G::Q5_0 | G::Q8_0 | G::IQ4_NL | G::IQ4_XS => &[0],
        G::Q4_1 | G::Q5_1 | G::Q4_K | G::Q5_K => &[0, 2],
        G::Q2_K => &[80, 82],
        G::Q3_K => &[108],
        G::Q6_K => &[208],
        _ => &[],
    }
}

/// Random valid blocks: random quants and sub-scales, small finite f16 scales; float formats
/// through their quantizer.
pub fn random_weight(t: GgmlType, rows: usize, cols: usize, rng: &mut Rng) -> Vec<u8> {
    let f = QuantFormat::Ggml(t);
    if matches!(t, GgmlType::F32 | GgmlType::F16 | GgmlType::BF16) {
        let w: Vec<f32> = (0..rows * cols).map(|_| rng.f32()).collect();
        return pocket_quant::quantize(f, &w).unwrap();
    }
    let bb = f.block_bytes();
    let nb = rows * cols / f.block_size();
    let mut out: Vec<u8> = (0..nb * bb).map(|_| rng.next_u64() as u8).collect();
    for b in out.chunks_exact_mut(bb) {
        for &o in scale_offsets(t) {
            let v = half::f16::from_f32(0.002 + 0.01 * rng.f32().abs());
            b[o..o + 2].copy_from_slice(&v.to_le_bytes());
        }
    }
    out
}

/// Whether `POCKET_PREFILL_ACT=f16` selects plain f16 prefill activations (no int8 rounding).
pub fn plain_f16_prefill() -> bool {
    std::env::var("POCKET_PREFILL_ACT").is_ok_and(|v| v == "f16")
}

/// The error bounds of the path the GPU takes for `n` rows of `format`, (against the exact f64
/// dot, against pocket-quant's CPU matmul):
/// * dp4a GEMV (n <= 8, quantized formats): the int8 rounding of each activation block (half a
///   step of amax/127 per element, times |w|; blocks of 32, or 256 for the formats the CPU pairs
///   with Q8_K activations), plus f32 accumulation. The GPU's int8 blocks equal the CPU's, so
///   against the CPU only the f32 accumulation order remains.
/// * f32 GEMV (float formats): f32 accumulation only, against both.
/// * cuBLAS prefill (n > 8, quantized formats): the same int8 rounding as the CPU (unless
///   `POCKET_PREFILL_ACT=f16`), then W and q * d rounded to f16 (2^-11 relative each).
pub fn tolerance(t: GgmlType, n: usize, w: &[f32], x: &[f32]) -> (f64, f64) {
    let abs: f64 = w
        .iter()
        .zip(x)
        .map(|(a, b)| (*a as f64 * *b as f64).abs())
        .sum();
    let accum = 1e-5 * abs + 1e-6;
    if matches!(t, GgmlType::F32 | GgmlType::F16 | GgmlType::BF16) {
        return (accum, accum);
    }
    let qk = if matches!(
        t,
        GgmlType::Q4_0
            | GgmlType::Q4_1
            | GgmlType::Q5_0
            | GgmlType::Q5_1
            | GgmlType::Q8_0
            | GgmlType::IQ4_NL
    ) {
        32
    } else {
        256
    };
    let act: f64 = w
        .chunks(qk)
        .zip(x.chunks(qk))
        .map(|(w, x)| {
            let amax = x.iter().fold(0.0f64, |m, v| m.max(v.abs() as f64));
            w.iter().map(|v| v.abs() as f64).sum::<f64>() * amax / 254.0
        })
        .sum();
    let f16 = abs * 2.0f64.powi(-10) * 1.01;
    if n <= 8 {
        (act + accum, accum)
    } else if plain_f16_prefill() {
        // Plain f16 activations: exact up to f16 rounding, the CPU's int8 rounding apart.
        (f16 + accum, act + f16 + accum)
    } else {
        // The f16 rounding applies to x' = q * d, within act of x.
        (act + f16 * 1.01 + accum, f16 * 1.01 + accum)
    }
}

/// Compares a GEMV result `got` (`[n, rows]`) with the float64 dot over the dequantized weight
/// `deq` and with pocket-quant's CPU matmul `cpu` of the same `x` (`[n, cols]`), each within its
/// `tolerance`; a NaN (an unwritten, poisoned element) always fails. Records up to 20 failures
/// labelled with `what` and returns the worst error / bound ratio.
#[allow(clippy::too_many_arguments)]
pub fn check_against_references(
    t: GgmlType,
    what: &str,
    deq: &[f32],
    x: &[f32],
    (n, rows, cols): (usize, usize, usize),
    got: &[f32],
    cpu: &[f32],
    failures: &mut Vec<String>,
) -> f64 {
    let mut worst = 0.0f64;
    for i in 0..n {
        for r in 0..rows {
            let wr = &deq[r * cols..(r + 1) * cols];
            let xr = &x[i * cols..(i + 1) * cols];
            let want: f64 = wr.iter().zip(xr).map(|(a, b)| *a as f64 * *b as f64).sum();
            let (tol, tol_cpu) = tolerance(t, n, wr, xr);
            let g = got[i * rows + r] as f64;
            let c = cpu[i * rows + r] as f64;
            let ratio = if g.is_nan() {
                f64::INFINITY
            } else {
                ((g - want).abs() / tol).max((g - c).abs() / tol_cpu)
            };
            worst = worst.max(ratio);
            if ratio > 1.0 && failures.len() < 20 {
                failures.push(format!(
                    "{what} out[{i},{r}] = {g}, want {want} ± {tol}, cpu {c} ± {tol_cpu}"
                ));
            }
        }
    }
    worst
}

/// Random weight blocks of `t` with their reference dequantization and the device upload.
pub fn random_matrix(
    be: &dyn Backend,
    t: GgmlType,
    rows: usize,
    cols: usize,
    rng: &mut Rng,
) -> (Vec<u8>, Vec<f32>, pocket_kernels::Weight) {
    let format = QuantFormat::Ggml(t);
    let bytes = random_weight(t, rows, cols, rng);
    let mut deq = vec![0f32; rows * cols];
    pocket_quant::dequantize_matrix(&quant_matrix(t, rows, cols, &bytes), &mut deq).unwrap();
    let w = be
        .upload_weight(
            format,
            rows,
            cols,
            HostBytes::from_vec(bytes.clone()),
            None,
            None,
        )
        .unwrap();
    (bytes, deq, w)
}

/// pocket-quant's view of raw GGML blocks.
pub fn quant_matrix(t: GgmlType, rows: usize, cols: usize, data: &[u8]) -> QuantMatrix<'_> {
    QuantMatrix {
        format: QuantFormat::Ggml(t),
        rows,
        cols,
        data,
        scales: None,
        tensor_scale: None,
    }
}

/// Runs the one-row GEMV of `w` on `x` twice into NaN-poisoned outputs; returns both results.
pub fn gemv_twice(
    be: &dyn Backend,
    w: &pocket_kernels::Weight,
    x: &[f32],
    rows: usize,
) -> [Vec<f32>; 2] {
    let cols = x.len();
    let xt = be.upload_f32(x, &[1, cols]).unwrap();
    let run = || {
        let mut out = be.alloc(DType::F32, &[1, rows]).unwrap();
        be.write_f32(&mut out, &vec![f32::NAN; rows], &[1, rows])
            .unwrap();
        be.matmul(&xt, w, &mut out).unwrap();
        be.read_f32(&out).unwrap()
    };
    [run(), run()]
}

/// Whether two results are identical bit for bit.
pub fn same_bits(a: &[f32], b: &[f32]) -> bool {
    a.iter()
        .map(|v| v.to_bits())
        .eq(b.iter().map(|v| v.to_bits()))
}
