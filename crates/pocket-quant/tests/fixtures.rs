//! Our codecs against gguf-py 0.19.0's, through the committed fixtures of
//! `scripts/quant_fixtures.py`.
//!
//! Every dequantizer here reproduces gguf-py's f32 operation sequence (same products in the same
//! order, no fused multiply-add), so outputs are compared bit for bit; quantizers must produce
//! gguf-py's bytes exactly.

use pocket_quant::{dequantize, quantize, GgmlType, QuantFormat};
use std::path::PathBuf;

fn data_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data")
}

fn cases() -> Vec<serde_json::Value> {
    let text = std::fs::read_to_string(data_dir().join("index.json")).expect("fixture index");
    let v: serde_json::Value = serde_json::from_str(&text).expect("index json");
    v["cases"].as_array().expect("cases").clone()
}

fn read(name: &str) -> Vec<u8> {
    std::fs::read(data_dir().join(name)).expect("fixture file")
}

fn f32s(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

#[test]
fn dequantize_matches_gguf_py_bit_exactly() {
    let mut checked = 0;
    let mut failures = Vec::new();
    for c in cases().iter().filter(|c| c["op"] == "dequantize") {
        let name = c["type"].as_str().unwrap();
        let t = GgmlType::from_name(name).expect("known type");
        let input = read(c["input"].as_str().unwrap());
        let want = f32s(&read(c["output"].as_str().unwrap()));
        let mut got = vec![0.0f32; want.len()];
        dequantize(QuantFormat::Ggml(t), &input, &mut got).expect("dequantize");
        let bad = got
            .iter()
            .zip(&want)
            .position(|(a, b)| a.to_bits() != b.to_bits());
        if let Some(i) = bad {
            failures.push(format!(
                "{name}: element {i}: got {} want {}",
                got[i], want[i]
            ));
        }
        checked += 1;
    }
    assert!(failures.is_empty(), "{failures:#?}");
    assert!(checked >= 26, "only {checked} dequantize cases");
}

#[test]
fn quantize_matches_gguf_py_bytes() {
    let mut checked = 0;
    let mut failures = Vec::new();
    for c in cases().iter().filter(|c| c["op"] == "quantize") {
        let name = c["type"].as_str().unwrap();
        let t = GgmlType::from_name(name).expect("known type");
        let input = f32s(&read(c["input"].as_str().unwrap()));
        let want = read(c["output"].as_str().unwrap());
        let got = quantize(QuantFormat::Ggml(t), &input).expect("quantize");
        if got.len() != want.len() {
            failures.push(format!("{name}: {} bytes, want {}", got.len(), want.len()));
        } else if let Some(i) = got.iter().zip(&want).position(|(a, b)| a != b) {
            failures.push(format!(
                "{name}: byte {i}: got {:#x} want {:#x}",
                got[i], want[i]
            ));
        }
        checked += 1;
    }
    assert!(failures.is_empty(), "{failures:#?}");
    assert!(checked >= 10, "only {checked} quantize cases");
}

/// gguf-py does not quantize the K-quants; their quantizers follow llama.cpp's
/// `quantize_row_qN_K_ref`, whose bytes `scripts/quant_fixtures.py --ggml` recorded by calling the
/// C functions (ggml-base, built without FMA) through ctypes. Inputs include an all-zero, a
/// constant, an all-positive, an all-negative, an outlier and a tiny-valued block.
#[test]
fn k_quantizers_match_llama_cpp_bytes() {
    let text = std::fs::read_to_string(data_dir().join("ggml_index.json")).expect("ggml index");
    let v: serde_json::Value = serde_json::from_str(&text).expect("index json");
    let mut checked = Vec::new();
    let mut failures = Vec::new();
    for c in v["cases"].as_array().expect("cases") {
        let name = c["type"].as_str().unwrap();
        let t = GgmlType::from_name(name).expect("known type");
        let input = f32s(&read(c["input"].as_str().unwrap()));
        let want = read(c["output"].as_str().unwrap());
        let got = quantize(QuantFormat::Ggml(t), &input).expect("quantize");
        assert_eq!(got.len(), want.len(), "{name}");
        let bb = QuantFormat::Ggml(t).block_bytes();
        if let Some(i) = got.iter().zip(&want).position(|(a, b)| a != b) {
            failures.push(format!(
                "{name}: block {} byte {}: got {:#x} want {:#x}",
                i / bb,
                i % bb,
                got[i],
                want[i]
            ));
        }
        checked.push(name.to_string());
    }
    assert!(failures.is_empty(), "{failures:#?}");
    assert_eq!(checked, ["Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K"]);
}
