//! pocket-quant throughput: dequantize and GEMV per format, in GB/s of weight bytes, beside a
//! memcpy of the same bytes measured in the same run. Single thread (`matmul_serial`) and all
//! threads (`matmul`, rayon).
//!
//! cargo bench --bench quant -- --warm-up-time 1 --measurement-time 3
//! (a criterion filter picks formats, e.g. `-- 'memcpy|IQ2_XS'`; `-- fp8_tile_lanes` the FP8
//! upload's host reorder)

use criterion::{black_box, criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use pocket_quant::{
    dequantize_matrix, fp8_tile_lanes, matmul, matmul_serial, quantize, quantize_matrix, GgmlType,
    QuantFormat, QuantizedMatrix,
};

const SHAPES: [(usize, usize); 2] = [(4096, 4096), (14336, 4096)];
const GEMV: [QuantFormat; 27] = [
    QuantFormat::Ggml(GgmlType::Q4_0),
    QuantFormat::Ggml(GgmlType::Q8_0),
    QuantFormat::Ggml(GgmlType::Q4_K),
    QuantFormat::Ggml(GgmlType::IQ4_XS),
    QuantFormat::Ggml(GgmlType::Q4_1),
    QuantFormat::Ggml(GgmlType::Q5_0),
    QuantFormat::Ggml(GgmlType::Q6_K),
    QuantFormat::Ggml(GgmlType::BF16),
    // dots added in the "every format" pass (Q8_K activations, or Q8 for FP4, f32 for FP8)
    QuantFormat::Ggml(GgmlType::Q2_K),
    QuantFormat::Ggml(GgmlType::Q3_K),
    QuantFormat::Ggml(GgmlType::IQ1_S),
    QuantFormat::Ggml(GgmlType::IQ1_M),
    QuantFormat::Ggml(GgmlType::IQ2_XXS),
    QuantFormat::Ggml(GgmlType::IQ2_XS),
    QuantFormat::Ggml(GgmlType::IQ2_S),
    QuantFormat::Ggml(GgmlType::IQ3_XXS),
    QuantFormat::Ggml(GgmlType::IQ3_S),
    QuantFormat::Ggml(GgmlType::TQ1_0),
    QuantFormat::Ggml(GgmlType::TQ2_0),
    QuantFormat::Ggml(GgmlType::MXFP4),
    QuantFormat::Ggml(GgmlType::NVFP4),
    QuantFormat::Fp8E4M3,
    QuantFormat::Fp8E5M2,
    QuantFormat::Fp8E4M3Block128,
    QuantFormat::NvFp4,
    QuantFormat::MxFp4Blocks,
    QuantFormat::Ggml(GgmlType::Q5_K),
];

fn f16_field_offsets(t: GgmlType) -> &'static [usize] {
    match t {
        GgmlType::Q4_0 | GgmlType::Q5_0 | GgmlType::Q8_0 | GgmlType::IQ4_NL | GgmlType::IQ4_XS => {
            &[0]
        }
        GgmlType::IQ2_XXS
        | GgmlType::IQ2_XS
        | GgmlType::IQ2_S
        | GgmlType::IQ3_XXS
        | GgmlType::IQ3_S
        | GgmlType::IQ1_S => &[0],
        GgmlType::Q4_1 | GgmlType::Q5_1 | GgmlType::Q4_K | GgmlType::Q5_K => &[0, 2],
        GgmlType::Q6_K => &[208],
        GgmlType::Q2_K => &[80, 82],
        GgmlType::Q3_K => &[108],
        GgmlType::TQ1_0 => &[52],
        GgmlType::TQ2_0 => &[64],
        _ => &[],
    }
}

/// Random weights in format `f` (random codes, finite scales): same bytes as a real tensor.
/// Formats with companion scales are quantized from random values instead.
fn weights(f: QuantFormat, rows: usize, cols: usize) -> QuantizedMatrix {
    let mut s = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        s
    };
    let t = match f {
        QuantFormat::Ggml(t) if !matches!(t, GgmlType::BF16 | GgmlType::F16 | GgmlType::F32) => t,
        _ => {
            let v: Vec<f32> = (0..rows * cols)
                .map(|_| (next() % 1000) as f32 / 1000.0 - 0.5)
                .collect();
            return quantize_matrix(f, rows, cols, &v).unwrap();
        }
    };
    let scale = quantize(QuantFormat::Ggml(GgmlType::F16), &[0.01]).unwrap();
    let mut d: Vec<u8> = (0..rows * f.row_bytes(cols).unwrap())
        .map(|_| next() as u8)
        .collect();
    for b in d.chunks_exact_mut(f.block_bytes()) {
        for &o in f16_field_offsets(t) {
            b[o..o + 2].copy_from_slice(&scale);
        }
        match t {
            // the f16 scale 0.01 (0x211f) split over the top nibbles of the scale words
            GgmlType::IQ1_M => {
                for k in 0..4 {
                    b[49 + 2 * k] =
                        (b[49 + 2 * k] & 0x0f) | ((((0x211fu16 >> (4 * k)) & 0xf) as u8) << 4);
                }
            }
            GgmlType::MXFP4 => b[0] = 120,
            _ => {}
        }
    }
    QuantizedMatrix {
        format: f,
        rows,
        cols,
        data: d,
        scales: vec![],
        tensor_scale: None,
    }
}

fn bench(c: &mut Criterion) {
    for (rows, cols) in SHAPES {
        let x: Vec<f32> = (0..cols)
            .map(|i| ((i * 37 % 101) as f32 - 50.0) / 50.0)
            .collect();
        let mut g = c.benchmark_group(format!("gemv_{rows}x{cols}"));
        g.sample_size(10);
        // memcpy reference: the Q8_0 weight size (the largest quantized matrix here)
        let bytes = QuantFormat::Ggml(GgmlType::Q8_0).row_bytes(cols).unwrap() * rows;
        let src = vec![1u8; bytes];
        let mut dst = vec![0u8; bytes];
        g.throughput(Throughput::Bytes(bytes as u64));
        g.bench_function("memcpy", |b| {
            b.iter(|| dst.copy_from_slice(black_box(&src)))
        });
        for f in GEMV {
            let q = weights(f, rows, cols);
            let m = q.view();
            let mut y = vec![0.0f32; rows];
            g.throughput(Throughput::Bytes((q.data.len() + q.scales.len()) as u64));
            g.bench_with_input(BenchmarkId::new("1thread", f.name()), &m, |b, m| {
                b.iter(|| matmul_serial(m, black_box(&x), 1, &mut y).unwrap())
            });
            g.bench_with_input(BenchmarkId::new("allthreads", f.name()), &m, |b, m| {
                b.iter(|| matmul(m, black_box(&x), 1, &mut y).unwrap())
            });
        }
        g.finish();
    }
    let (rows, cols) = SHAPES[0];
    let mut g = c.benchmark_group(format!("dequant_{rows}x{cols}"));
    g.sample_size(10);
    let mut out = vec![0.0f32; rows * cols];
    for f in GEMV {
        let q = weights(f, rows, cols);
        let m = q.view();
        g.throughput(Throughput::Bytes((q.data.len() + q.scales.len()) as u64));
        g.bench_with_input(BenchmarkId::new("1thread", f.name()), &m, |b, m| {
            b.iter(|| dequantize_matrix(m, &mut out).unwrap())
        });
    }
    g.finish();
    // The CUDA backend's FP8 upload reorders codes into tile-lane order on the host (all
    // threads): its cost per GB against a copy of the same bytes, on the 27B down projection.
    let (rows, cols) = (5120, 17408);
    let mut g = c.benchmark_group(format!("fp8_tile_lanes_{rows}x{cols}"));
    g.sample_size(10);
    g.throughput(Throughput::Bytes((rows * cols) as u64));
    let src: Vec<u8> = (0..rows * cols).map(|i| (i * 7 % 251) as u8).collect();
    let mut codes = src.clone();
    g.bench_function("memcpy", |b| {
        b.iter(|| codes.copy_from_slice(black_box(&src)))
    });
    g.bench_function("reorder", |b| {
        b.iter(|| fp8_tile_lanes(black_box(&mut codes), cols))
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
