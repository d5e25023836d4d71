//! pocket-quant throughput: dequantize and GEMV per format, in GB/s of weight bytes, beside a
//! memcpy of the same bytes measured in the same run. Single thread (`matmul_serial`) and all
//! threads (`matmul`, rayon).
//!
//! cargo bench --bench quant -- --warm-up-time 1 --measurement-time 3

use criterion::{black_box, criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use pocket_quant::{
    dequantize_matrix, matmul, matmul_serial, quantize, GgmlType, QuantFormat, QuantMatrix,
};

const SHAPES: [(usize, usize); 2] = [(4096, 4096), (14336, 4096)];
const GEMV: [GgmlType; 8] = [
    GgmlType::Q4_0,
    GgmlType::Q8_0,
    GgmlType::Q4_K,
    GgmlType::IQ4_XS,
    GgmlType::Q4_1,
    GgmlType::Q5_0,
    GgmlType::Q6_K,
    GgmlType::BF16,
];

fn f16_field_offsets(t: GgmlType) -> &'static [usize] {
    match t {
        GgmlType::Q4_0 | GgmlType::Q5_0 | GgmlType::Q8_0 | GgmlType::IQ4_NL | GgmlType::IQ4_XS => {
            &[0]
        }
        GgmlType::Q4_1 | GgmlType::Q5_1 | GgmlType::Q4_K | GgmlType::Q5_K => &[0, 2],
        GgmlType::Q6_K => &[208],
        GgmlType::Q2_K => &[80, 82],
        GgmlType::Q3_K => &[108],
        _ => &[],
    }
}

/// Random weights in format `t` (random codes, finite f16 scales): same bytes as a real tensor.
fn weights(t: GgmlType, rows: usize, cols: usize) -> Vec<u8> {
    let f = QuantFormat::Ggml(t);
    let mut s = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        s
    };
    if matches!(t, GgmlType::BF16 | GgmlType::F16 | GgmlType::F32) {
        let v: Vec<f32> = (0..rows * cols)
            .map(|_| (next() % 1000) as f32 / 1000.0 - 0.5)
            .collect();
        return quantize(f, &v).unwrap();
    }
    let scale = quantize(QuantFormat::Ggml(GgmlType::F16), &[0.01]).unwrap();
    let mut d: Vec<u8> = (0..rows * f.row_bytes(cols).unwrap())
        .map(|_| next() as u8)
        .collect();
    for b in d.chunks_exact_mut(f.block_bytes()) {
        for &o in f16_field_offsets(t) {
            b[o..o + 2].copy_from_slice(&scale);
        }
    }
    d
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
        for t in GEMV {
            let data = weights(t, rows, cols);
            let m = QuantMatrix {
                format: QuantFormat::Ggml(t),
                rows,
                cols,
                data: &data,
                scales: None,
                tensor_scale: None,
            };
            let mut y = vec![0.0f32; rows];
            g.throughput(Throughput::Bytes(data.len() as u64));
            g.bench_with_input(BenchmarkId::new("1thread", t.name()), &m, |b, m| {
                b.iter(|| matmul_serial(m, black_box(&x), 1, &mut y).unwrap())
            });
            g.bench_with_input(BenchmarkId::new("allthreads", t.name()), &m, |b, m| {
                b.iter(|| matmul(m, black_box(&x), 1, &mut y).unwrap())
            });
        }
        g.finish();
    }
    let (rows, cols) = SHAPES[0];
    let mut g = c.benchmark_group(format!("dequant_{rows}x{cols}"));
    g.sample_size(10);
    let mut out = vec![0.0f32; rows * cols];
    for t in GEMV {
        let data = weights(t, rows, cols);
        let m = QuantMatrix {
            format: QuantFormat::Ggml(t),
            rows,
            cols,
            data: &data,
            scales: None,
            tensor_scale: None,
        };
        g.throughput(Throughput::Bytes(data.len() as u64));
        g.bench_with_input(BenchmarkId::new("1thread", t.name()), &m, |b, m| {
            b.iter(|| dequantize_matrix(m, &mut out).unwrap())
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
