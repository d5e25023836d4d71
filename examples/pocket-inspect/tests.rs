//! Tests of pocket-inspect's commands against files generated with pocket-formats' writers.

use std::path::PathBuf;

use pocket_formats::{GgmlType, GgufWriter, SafetensorsWriter, TensorFormat, TensorStore};

fn temp(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("pocket-inspect-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// A 2-block qwen3-shaped GGUF (embd 8, 2 heads, 1 kv head, head_dim 4, ff 16, vocab 5).
fn tiny_qwen3(path: &std::path::Path, drop: Option<&str>) {
    let mut w = GgufWriter::new();
    w.add("general.architecture", "qwen3")
        .add("qwen3.block_count", 2u32)
        .add("qwen3.embedding_length", 8u32)
        .add("qwen3.feed_forward_length", 16u32)
        .add("qwen3.attention.head_count", 2u32)
        .add("qwen3.attention.head_count_kv", 1u32)
        .add("qwen3.context_length", 64u32)
        .add("tokenizer.ggml.tokens", vec!["a", "b", "c", "d", "e"]);
    let mut shapes: Vec<(String, Vec<usize>)> = vec![
        ("token_embd.weight".into(), vec![5, 8]),
        ("output_norm.weight".into(), vec![8]),
    ];
    for i in 0..2 {
        for (n, s) in [
            ("attn_norm.weight", vec![8]),
            ("attn_q.weight", vec![8, 8]),
            ("attn_k.weight", vec![4, 8]),
            ("attn_v.weight", vec![4, 8]),
            ("attn_output.weight", vec![8, 8]),
            ("attn_q_norm.weight", vec![4]),
            ("attn_k_norm.weight", vec![4]),
            ("ffn_norm.weight", vec![8]),
            ("ffn_gate.weight", vec![16, 8]),
            ("ffn_up.weight", vec![16, 8]),
            ("ffn_down.weight", vec![8, 16]),
        ] {
            shapes.push((format!("blk.{i}.{n}"), s));
        }
    }
    let mut data = Vec::new();
    for (n, s) in &shapes {
        if Some(n.as_str()) == drop {
            continue;
        }
        w.add_tensor(n, GgmlType::F32, s).unwrap();
        let count: usize = s.iter().product();
        data.push(
            (0..count)
                .flat_map(|x| (x as f32).to_le_bytes())
                .collect::<Vec<u8>>(),
        );
    }
    let refs: Vec<&[u8]> = data.iter().map(|d| d.as_slice()).collect();
    w.write_file(path, &refs).unwrap();
}

#[test]
fn check_passes_and_fails() {
    let d = temp("check");
    let good = d.join("good.gguf");
    tiny_qwen3(&good, None);
    let a = super::check::audit(&TensorStore::open(&good).unwrap()).unwrap();
    assert!(a.ok(), "{:?} {:?} {:?}", a.missing, a.wrong_shape, a.extra);
    let bad = d.join("bad.gguf");
    tiny_qwen3(&bad, Some("blk.1.attn_k_norm.weight"));
    let a = super::check::audit(&TensorStore::open(&bad).unwrap()).unwrap();
    assert!(!a.ok());
    assert_eq!(a.missing, vec!["blk.1.attn_k_norm.weight"]);
    std::fs::remove_dir_all(d).unwrap();
}

#[test]
fn info_reports_architecture() {
    let d = temp("info");
    let p = d.join("m.gguf");
    tiny_qwen3(&p, None);
    let r = super::info::to_json(&super::info::report(&TensorStore::open(&p).unwrap()));
    assert_eq!(r["architecture"], "qwen3");
    assert_eq!(r["block_count"], 2);
    assert_eq!(r["embedding_length"], 8);
    assert_eq!(r["head_count"], 2);
    assert_eq!(r["head_count_kv"], 1);
    assert_eq!(r["vocab_size"], 5);
    assert_eq!(r["context_length"], 64);
    assert_eq!(r["tensor_count"], 24);
    assert_eq!(r["bits_per_weight"], 32.0);
    assert_eq!(r["formats"]["F32"]["tensors"], 24);
    std::fs::remove_dir_all(d).unwrap();
}

#[test]
fn dump_writes_npy() {
    let d = temp("dump");
    let p = d.join("m.safetensors");
    let vals: Vec<u8> = [1.0f32, -2.0, 0.5, 3.0, 4.0, 5.0]
        .iter()
        .flat_map(|x| half::bf16::from_f32(*x).to_le_bytes())
        .collect();
    let mut w = SafetensorsWriter::new();
    w.add("w", TensorFormat::Ggml(GgmlType::BF16), &[2, 3], &vals)
        .unwrap();
    w.write_file(&p).unwrap();
    let store = TensorStore::open(&p).unwrap();
    let out = d.join("w.npy");
    assert_eq!(
        super::dump::dump(&store.tensor("w").unwrap(), &out).unwrap(),
        6
    );
    let b = std::fs::read(&out).unwrap();
    assert_eq!(&b[..6], b"\x93NUMPY");
    let hlen = u16::from_le_bytes([b[8], b[9]]) as usize;
    assert_eq!((10 + hlen) % 64, 0);
    let header = std::str::from_utf8(&b[10..10 + hlen]).unwrap();
    assert!(header.contains("'shape': (2, 3)"), "{header}");
    let got: Vec<f32> = b[10 + hlen..]
        .chunks(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect();
    assert_eq!(got, vec![1.0, -2.0, 0.5, 3.0, 4.0, 5.0]);
    std::fs::remove_dir_all(d).unwrap();
}

#[test]
fn args_parse() {
    let a = |s: &[&str]| super::args::parse(&s.iter().map(|x| x.to_string()).collect::<Vec<_>>());
    let c = a(&["tensors", "m.gguf", "--filter", "blk\\.0", "--json"]).unwrap();
    assert!(c.json);
    assert!(matches!(
        c.command,
        super::args::Command::Tensors {
            filter: Some(_),
            ..
        }
    ));
    assert!(a(&["dump", "m.gguf", "t"]).is_err());
    assert!(a(&["info"]).is_err());
    assert!(a(&["info", "x", "--filter", "y"]).is_err());
    assert!(a(&["frobnicate", "x"]).is_err());
    let t = a(&["tokenize", "v.gguf", "--text", "hi", "--add-special"]).unwrap();
    assert!(
        matches!(t.command, super::args::Command::Tokenize(ref k) if k.add_special && !k.parse_special)
    );
}
