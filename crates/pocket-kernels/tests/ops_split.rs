//! One test body per fused-projection op (`split_columns`, `silu_mul_halves`), run on every
//! device `Device::all_for_tests()` opens, against plain references written here and against the
//! unfused ops (`split_halves` + `silu_mul`), which the fused path must match bit for bit.

use pocket_kernels::{DType, Device, HostBytes, Result, Tensor};
use pocket_quant::{GgmlType, QuantFormat};

#[path = "rng/mod.rs"]
mod rng;
use rng::Rng;

fn alloc(d: &Device, shape: &[usize]) -> Tensor {
    d.alloc(DType::F32, shape).unwrap()
}

/// Fails the test, naming the device, when an op returns an error.
fn ran(d: &Device, r: Result<()>) {
    if let Err(e) = r {
        panic!("{}: {e}", d.name());
    }
}

#[test]
fn split_columns_copies_each_range() {
    let mut rng = Rng::new(1);
    // QKV-like widths, odd widths, two outputs, one output.
    let cases: &[(usize, &[usize])] = &[
        (1, &[64, 32, 32]),
        (5, &[64, 32, 32]),
        (7, &[5, 3, 11]),
        (3, &[48, 16]),
        (2, &[40]),
    ];
    for d in Device::all_for_tests() {
        for &(n, widths) in cases {
            let w: usize = widths.iter().sum();
            let x = rng.scaled(n * w, 3.0);
            let xt = d.upload_f32(&x, &[n, w]).unwrap();
            let mut outs: Vec<Tensor> = widths.iter().map(|&wi| alloc(&d, &[n, wi])).collect();
            let mut refs: Vec<&mut Tensor> = outs.iter_mut().collect();
            ran(&d, d.split_columns(&xt, &mut refs));
            let mut start = 0;
            for (o, &wi) in outs.iter().zip(widths) {
                let got = d.read_f32(o).unwrap();
                let want: Vec<f32> = (0..n * wi)
                    .map(|i| x[(i / wi) * w + start + i % wi])
                    .collect();
                assert_eq!(got, want, "{}: n {n} widths {widths:?}", d.name());
                start += wi;
            }
        }
    }
}

#[test]
fn split_columns_rejects_bad_widths() {
    for d in Device::all_for_tests() {
        let x = alloc(&d, &[2, 10]);
        let (mut a, mut b) = (alloc(&d, &[2, 4]), alloc(&d, &[2, 4]));
        assert!(
            d.split_columns(&x, &mut [&mut a, &mut b]).is_err(),
            "{}",
            d.name()
        );
        let mut c = alloc(&d, &[3, 6]);
        assert!(
            d.split_columns(&x, &mut [&mut a, &mut c]).is_err(),
            "{}",
            d.name()
        );
    }
}

#[test]
fn silu_mul_halves_matches_silu_mul_of_the_split() {
    let mut rng = Rng::new(2);
    // Decode shapes (the CUDA q8 variant: <= 8 rows, d a multiple of 32; 256 also writes Q8_K),
    // a prefill shape and a width that is no multiple of 32.
    let cases = [(1, 64), (3, 256), (8, 96), (13, 128), (4, 24)];
    for d in Device::all_for_tests() {
        for (n, ff) in cases {
            let x = rng.scaled(n * 2 * ff, 3.0);
            let xt = d.upload_f32(&x, &[n, 2 * ff]).unwrap();
            let mut fused = alloc(&d, &[n, ff]);
            ran(&d, d.silu_mul_halves(&xt, &mut fused));
            let got = d.read_f32(&fused).unwrap();
            let (mut g, mut u, mut split) = (
                alloc(&d, &[n, ff]),
                alloc(&d, &[n, ff]),
                alloc(&d, &[n, ff]),
            );
            ran(&d, d.split_halves(&xt, &mut g, &mut u));
            ran(&d, d.silu_mul(&g, &u, &mut split));
            assert_eq!(
                got,
                d.read_f32(&split).unwrap(),
                "{}: [{n}, {ff}]",
                d.name()
            );
            for (i, &v) in got.iter().enumerate() {
                let (r, c) = (i / ff, i % ff);
                let (a, b) = (x[r * 2 * ff + c] as f64, x[r * 2 * ff + ff + c] as f64);
                let want = a / (1.0 + (-a).exp()) * b;
                assert!(
                    (v as f64 - want).abs() <= 1e-5 * (1.0 + want.abs()),
                    "{}: [{n}, {ff}] [{i}] got {v}, want {want}",
                    d.name()
                );
            }
        }
    }
}

/// On CUDA a decode-sized `silu_mul_halves` also writes the quantized activation the next GEMV
/// reads instead of quantizing its input; that GEMV must give what it gives after `silu_mul`.
#[test]
fn matmul_after_silu_mul_halves_matches_the_unfused_path() {
    let mut rng = Rng::new(3);
    let (rows, ff) = (48, 512);
    let wv = rng.scaled(rows * ff, 3.0);
    for fmt in [GgmlType::Q4_0, GgmlType::Q4_K, GgmlType::Q8_0] {
        let format = QuantFormat::Ggml(fmt);
        let bytes = match pocket_quant::quantize(format, &wv) {
            Ok(b) => b,
            Err(_) => continue,
        };
        for d in Device::all_for_tests() {
            let w = d
                .upload_weight(
                    format,
                    rows,
                    ff,
                    HostBytes::from_vec(bytes.clone()),
                    None,
                    None,
                )
                .unwrap();
            for n in [1, 2, 8] {
                let x = rng.scaled(n * 2 * ff, 3.0);
                let xt = d.upload_f32(&x, &[n, 2 * ff]).unwrap();
                let mut act = alloc(&d, &[n, ff]);
                let mut fused = alloc(&d, &[n, rows]);
                ran(&d, d.silu_mul_halves(&xt, &mut act));
                ran(&d, d.matmul(&act, &w, &mut fused));
                let (mut g, mut u) = (alloc(&d, &[n, ff]), alloc(&d, &[n, ff]));
                let (mut act2, mut split) = (alloc(&d, &[n, ff]), alloc(&d, &[n, rows]));
                ran(&d, d.split_halves(&xt, &mut g, &mut u));
                ran(&d, d.silu_mul(&g, &u, &mut act2));
                ran(&d, d.matmul(&act2, &w, &mut split));
                assert_eq!(
                    d.read_f32(&fused).unwrap(),
                    d.read_f32(&split).unwrap(),
                    "{}: {fmt:?} n {n}",
                    d.name()
                );
            }
        }
    }
}
