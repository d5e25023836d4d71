//! GPU microbenchmarks (ignored by default; the device run script runs them with `--ignored`):
//! decode GEMV bandwidth per format at 8B-model shapes, and the cuBLAS prefill GEMM.
//!
//! Timing: CUDA events around each launch after a warm-up, median of the repeats. The weight
//! rotates among enough copies to exceed three times the 60 MB L2, so every launch reads its
//! weight from HBM. Bandwidth counts the weight bytes read (the activation and output are tiny).
#![cfg(feature = "cuda")]

use pocket_kernels::cuda::CudaBackend;
use pocket_kernels::{Backend, DType, HostBytes};
use pocket_quant::{GgmlType, QuantFormat};

/// Copy bandwidth of the H200 measured on the device machine (read + write), docs/…/cuda-kernels.md.
const ROOF_TBPS: f64 = 4.26;

fn random_bytes(t: GgmlType, rows: usize, cols: usize, seed: u64) -> Vec<u8> {
    let f = QuantFormat::Ggml(t);
    let nb = rows * cols / f.block_size();
    let bb = f.block_bytes();
    let mut s = seed | 1;
    let mut out = vec![0u8; nb * bb];
    for c in out.chunks_mut(8) {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        let b = s.to_le_bytes();
        c.copy_from_slice(&b[..c.len()]);
    }
    // Finite scales: f16 0.01 at each block's scale fields, and float formats as small values.
    let one = half::f16::from_f32(0.01).to_le_bytes();
    let offs: &[usize] = match t {
        GgmlType::Q4_0 | GgmlType::Q5_0 | GgmlType::Q8_0 | GgmlType::IQ4_NL | GgmlType::IQ4_XS => {
            &[0]
        }
        GgmlType::Q4_1 | GgmlType::Q5_1 | GgmlType::Q4_K | GgmlType::Q5_K => &[0, 2],
        GgmlType::Q2_K => &[80, 82],
        GgmlType::Q3_K => &[108],
        GgmlType::Q6_K => &[208],
        GgmlType::F16 => {
            for c in out.chunks_exact_mut(2) {
                c.copy_from_slice(&one);
            }
            &[]
        }
        GgmlType::BF16 => {
            for c in out.chunks_exact_mut(2) {
                c.copy_from_slice(&half::bf16::from_f32(0.01).to_le_bytes());
            }
            &[]
        }
        GgmlType::F32 => {
            for c in out.chunks_exact_mut(4) {
                c.copy_from_slice(&0.01f32.to_le_bytes());
            }
            &[]
        }
        _ => &[],
    };
    for b in out.chunks_exact_mut(bb) {
        for &o in offs {
            b[o..o + 2].copy_from_slice(&one);
        }
    }
    out
}

fn median(mut v: Vec<f32>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2] as f64
}

/// Times `f` with CUDA events: `warm` untimed calls, then `reps` timed ones; median ms.
fn time_ms(be: &CudaBackend, warm: usize, reps: usize, mut f: impl FnMut(usize)) -> f64 {
    let ctx = be.stream().context().clone();
    for i in 0..warm {
        f(i);
    }
    let mut times = Vec::with_capacity(reps);
    for i in 0..reps {
        let a = ctx.new_event(None).unwrap();
        let b = ctx.new_event(None).unwrap();
        a.record(be.stream()).unwrap();
        f(warm + i);
        b.record(be.stream()).unwrap();
        b.synchronize().unwrap();
        times.push(a.elapsed_ms(&b).unwrap());
    }
    median(times)
}

#[test]
#[ignore = "GPU benchmark: run with --ignored on the device machine"]
fn bench_gemv_and_gemm() {
    let be = match CudaBackend::new(0) {
        Ok(b) => b,
        Err(e) => {
            eprintln!("skipped: {e}");
            return;
        }
    };
    println!("device: {}", be.name());
    let formats = [
        GgmlType::Q4_0,
        GgmlType::Q4_1,
        GgmlType::Q8_0,
        GgmlType::Q4_K,
        GgmlType::Q6_K,
        GgmlType::Q5_0,
        GgmlType::Q5_K,
        GgmlType::IQ4_XS,
        GgmlType::F16,
        GgmlType::BF16,
    ];
    let shapes = [(4096usize, 4096usize), (14336, 4096), (4096, 14336)];
    let mut rows_out = Vec::new();
    for &t in &formats {
        for &(rows, cols) in &shapes {
            let f = QuantFormat::Ggml(t);
            let bytes = random_bytes(t, rows, cols, 7 + rows as u64);
            let wbytes = bytes.len();
            let copies = (200usize << 20).div_ceil(wbytes).max(1);
            let ws: Vec<_> = (0..copies)
                .map(|_| {
                    be.upload_weight(
                        f,
                        rows,
                        cols,
                        HostBytes::from_vec(bytes.clone()),
                        None,
                        None,
                    )
                    .unwrap()
                })
                .collect();
            let x: Vec<f32> = (0..cols)
                .map(|i| ((i * 7919) % 1000) as f32 / 1000.0 - 0.5)
                .collect();
            let xt = be.upload_f32(&x, &[1, cols]).unwrap();
            let mut out = be.alloc(DType::F32, &[1, rows]).unwrap();
            let ms = time_ms(&be, 5, 60, |i| {
                be.matmul(&xt, &ws[i % copies], &mut out).unwrap()
            });
            let tbps = wbytes as f64 / (ms * 1e-3) / 1e12;
            let line = format!(
                "gemv {:6} {rows:5}x{cols:5} n=1  {:8.1} us  {:6.3} TB/s  {:5.1}% of {ROOF_TBPS} TB/s",
                f.name(),
                ms * 1e3,
                tbps,
                100.0 * tbps / ROOF_TBPS
            );
            println!("{line}");
            rows_out.push(line);
        }
    }
    // Prefill: 512 tokens through the dequantize-to-f16 + cuBLAS path.
    for &t in &[GgmlType::Q4_0, GgmlType::Q4_K, GgmlType::Q8_0] {
        for &(rows, cols) in &[(4096usize, 4096usize), (14336, 4096)] {
            let f = QuantFormat::Ggml(t);
            let n = 512;
            let w = be
                .upload_weight(
                    f,
                    rows,
                    cols,
                    HostBytes::from_vec(random_bytes(t, rows, cols, 3)),
                    None,
                    None,
                )
                .unwrap();
            let x: Vec<f32> = (0..n * cols)
                .map(|i| ((i * 7919) % 1000) as f32 / 1000.0 - 0.5)
                .collect();
            let xt = be.upload_f32(&x, &[n, cols]).unwrap();
            let mut out = be.alloc(DType::F32, &[n, rows]).unwrap();
            let ms = time_ms(&be, 3, 20, |_| be.matmul(&xt, &w, &mut out).unwrap());
            let tflops = 2.0 * (n * rows * cols) as f64 / (ms * 1e-3) / 1e12;
            let line = format!(
                "gemm {:6} {rows:5}x{cols:5} n={n} {:8.1} us  {:6.1} TFLOP/s (dequant f16 + cuBLAS)",
                f.name(),
                ms * 1e3,
                tflops
            );
            println!("{line}");
            rows_out.push(line);
        }
    }
    println!("\n==== summary: kernel microbenchmarks (median of events) ====");
    for l in rows_out {
        println!("{l}");
    }
}
