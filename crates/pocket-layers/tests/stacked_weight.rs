//! `TensorSource::stacked_weight`: matrices of one format stack into one weight whose matmul is
//! the parts' matmuls side by side (to rounding: a kernel may sum a row in another order once the
//! row count changes); parts of different formats do not stack; a part of the wrong shape is an
//! error.

use std::sync::Arc;

use pocket_formats::{GgmlType, GgufWriter, TensorStore};
use pocket_kernels::Device;
use pocket_layers::TensorSource;
use pocket_quant::QuantFormat;

const COLS: usize = 64;

/// Deterministic values in [-1, 1).
fn values(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s >> 40) as f32 / (1u64 << 23) as f32 - 1.0
        })
        .collect()
}

/// A GGUF of `q` [64, 64] and `k` [32, 64] in Q8_0 and `v` [32, 64] in F16.
fn store() -> Arc<TensorStore> {
    let parts = [
        ("q", 64, GgmlType::Q8_0),
        ("k", 32, GgmlType::Q8_0),
        ("v", 32, GgmlType::F16),
    ];
    let mut w = GgufWriter::new();
    w.add("general.architecture", "llama");
    let mut blobs = Vec::new();
    for (i, &(name, rows, ty)) in parts.iter().enumerate() {
        w.add_tensor(name, ty, &[rows, COLS]).unwrap();
        let v = values(rows * COLS, i as u64 + 1);
        blobs.push(pocket_quant::quantize(QuantFormat::Ggml(ty), &v).unwrap());
    }
    let path = std::env::temp_dir().join(format!("pocket_stacked_{}.gguf", std::process::id()));
    let refs: Vec<&[u8]> = blobs.iter().map(|b| b.as_slice()).collect();
    w.write_file(&path, &refs).unwrap();
    let store = Arc::new(TensorStore::open(&path).unwrap());
    let _ = std::fs::remove_file(&path); // the mapping stays valid
    store
}

#[test]
fn stacked_weight_is_the_parts_side_by_side() {
    let store = store();
    for dev in Device::all_for_tests() {
        let src = TensorSource::new(store.clone(), dev.clone());
        let qk = src
            .stacked_weight(&[("q", 64), ("k", 32)], COLS)
            .unwrap()
            .expect("q and k share Q8_0");
        assert_eq!((qk.rows, qk.cols), (96, COLS));
        let (q, k) = (
            src.weight("q", 64, COLS).unwrap(),
            src.weight("k", 32, COLS).unwrap(),
        );
        for n in [1, 3, 20] {
            let x = dev.upload_f32(&values(n * COLS, 9), &[n, COLS]).unwrap();
            let mut y = dev.alloc(pocket_kernels::DType::F32, &[n, 96]).unwrap();
            let mut yq = dev.alloc(pocket_kernels::DType::F32, &[n, 64]).unwrap();
            let mut yk = dev.alloc(pocket_kernels::DType::F32, &[n, 32]).unwrap();
            dev.matmul(&x, &qk, &mut y).unwrap();
            dev.matmul(&x, &q, &mut yq).unwrap();
            dev.matmul(&x, &k, &mut yk).unwrap();
            let (y, yq, yk) = (
                dev.read_f32(&y).unwrap(),
                dev.read_f32(&yq).unwrap(),
                dev.read_f32(&yk).unwrap(),
            );
            let want: Vec<f32> = (0..n)
                .flat_map(|r| {
                    let a = &yq[r * 64..(r + 1) * 64];
                    let b = &yk[r * 32..(r + 1) * 32];
                    a.iter().chain(b).copied().collect::<Vec<_>>()
                })
                .collect();
            for (i, (g, w)) in y.iter().zip(&want).enumerate() {
                // Another summation order over 64 products: a few ulps of the row's magnitude.
                let tol = 1e-5 * (1.0 + w.abs());
                assert!(
                    (g - w).abs() <= tol,
                    "{} n {n} [{i}]: stacked {g}, separate {w}",
                    dev.name()
                );
            }
        }
        // V is F16: Q, K, V do not stack byte-wise.
        let qkv = src
            .stacked_weight(&[("q", 64), ("k", 32), ("v", 32)], COLS)
            .unwrap();
        assert!(qkv.is_none(), "mixed formats must not stack");
        assert!(src.stacked_weight(&[("q", 32), ("k", 32)], COLS).is_err());
        let bias = src.stacked_vector(&[("k", 32 * COLS), ("v", 32 * COLS)]);
        assert_eq!(bias.unwrap().numel(), 64 * COLS);
    }
}
