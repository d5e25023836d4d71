//! safetensors: round trips with the Python `safetensors` package, sharded checkpoints, config,
//! companion pairing, the TensorStore view, and hostile headers.

mod common;

use common::{bytes, hex, run_py, temp_dir};
use pocket_formats::safetensors::parse_layout;
use pocket_formats::{
    CompanionRole, FormatError, GgmlType, SafetensorsCheckpoint, SafetensorsFile,
    SafetensorsWriter, StoreKind, TensorFormat, TensorStore, WeightScheme,
};
use proptest::prelude::*;
use serde_json::{json, Value};

const F32: TensorFormat = TensorFormat::Ggml(GgmlType::F32);
const BF16: TensorFormat = TensorFormat::Ggml(GgmlType::BF16);

#[test]
fn we_read_python_safetensors() {
    let dir = temp_dir("st-py");
    let p = dir.join("py.safetensors");
    run_py("gguf_st_pyref.py", &["write", p.to_str().unwrap()]);
    let f = SafetensorsFile::open(&p).unwrap();
    assert_eq!(
        f.metadata().get("note").map(String::as_str),
        Some("from python")
    );
    let e = f.tensor_info("model.embed_tokens.weight").unwrap();
    assert_eq!((e.format, e.shape.clone()), (F32, vec![3, 4]));
    let vals: Vec<f32> = f
        .tensor_data("model.embed_tokens.weight")
        .unwrap()
        .chunks(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect();
    assert_eq!(vals, (0..12).map(|x| x as f32).collect::<Vec<_>>());
    assert_eq!(
        f.tensor_info("model.norm.weight").unwrap().format,
        TensorFormat::Ggml(GgmlType::F16)
    );
    assert_eq!(
        f.tensor_info("ids").unwrap().format,
        TensorFormat::Ggml(GgmlType::I64)
    );
    assert_eq!(
        &f.tensor_data("ids").unwrap()[24..32],
        &(1i64 << 40).to_le_bytes()
    );
    assert_eq!(f.tensor_info("mask").unwrap().format, TensorFormat::Bool);
    assert_eq!(f.tensor_data("mask").unwrap(), &[1, 0, 1]);
    assert_eq!(f.tensor_data("bytes").unwrap(), &[1, 2, 3, 250, 251, 252]);
    assert_eq!(f.tensor_info("scalar").unwrap().shape, Vec::<usize>::new());
    assert_eq!(f.tensor_data("scalar").unwrap(), &3.5f64.to_le_bytes());
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn python_reads_our_safetensors() {
    let dir = temp_dir("st-ours");
    let p = dir.join("ours.safetensors");
    let cases: Vec<(&str, TensorFormat, Vec<usize>, &str, usize)> = vec![
        ("a.f32", F32, vec![2, 3], "float32", 4),
        (
            "b.f16",
            TensorFormat::Ggml(GgmlType::F16),
            vec![5],
            "float16",
            2,
        ),
        (
            "c.i32",
            TensorFormat::Ggml(GgmlType::I32),
            vec![1, 2, 2],
            "int32",
            4,
        ),
        ("d.u8", TensorFormat::U8, vec![7], "uint8", 1),
        ("e.i8", TensorFormat::Ggml(GgmlType::I8), vec![3], "int8", 1),
        ("f.u16", TensorFormat::U16, vec![2], "uint16", 2),
        (
            "g.f64",
            TensorFormat::Ggml(GgmlType::F64),
            vec![2],
            "float64",
            8,
        ),
        ("h.empty", F32, vec![0, 4], "float32", 4),
    ];
    let data: Vec<Vec<u8>> = cases
        .iter()
        .enumerate()
        .map(|(i, c)| bytes(c.2.iter().product::<usize>() * c.4, i as u64))
        .collect();
    let mut w = SafetensorsWriter::new();
    w.metadata("format", "pt");
    for (c, d) in cases.iter().zip(&data) {
        w.add(c.0, c.1, &c.2, d).unwrap();
    }
    w.write_file(&p).unwrap();
    let py: Value =
        serde_json::from_str(&run_py("gguf_st_pyref.py", &["read", p.to_str().unwrap()])).unwrap();
    assert_eq!(py["metadata"], json!({"format": "pt"}));
    for (c, d) in cases.iter().zip(&data) {
        let t = &py["tensors"][c.0];
        assert_eq!(t["dtype"], json!(c.3), "{}", c.0);
        assert_eq!(t["shape"], json!(c.2), "{}", c.0);
        assert_eq!(t["hex"].as_str().unwrap(), hex(d), "{}", c.0);
    }
    std::fs::remove_dir_all(dir).unwrap();
}

/// A sharded FP8 / NVFP4 / MXFP4 checkpoint with config.json and index.
fn write_checkpoint(dir: &std::path::Path) {
    let w8 = bytes(256 * 256, 1);
    let s8 = bytes(2 * 2 * 4, 2);
    let nv = bytes(64 * 32, 3);
    let nvs = bytes(64 * 4, 4);
    let one = 1.0f32.to_le_bytes();
    let norm = bytes(64 * 2, 5);
    let mxb = bytes(2 * 8 * 2 * 16, 6);
    let mxs = bytes(2 * 8 * 2, 7);
    let mut a = SafetensorsWriter::new();
    a.metadata("format", "pt");
    a.add(
        "model.layers.0.mlp.down_proj.weight",
        TensorFormat::F8E4M3,
        &[256, 256],
        &w8,
    )
    .unwrap();
    a.add(
        "model.layers.0.mlp.down_proj.weight_scale_inv",
        F32,
        &[2, 2],
        &s8,
    )
    .unwrap();
    a.add("model.norm.weight", BF16, &[64], &norm).unwrap();
    a.write_file(dir.join("model-00001-of-00002.safetensors"))
        .unwrap();
    let mut b = SafetensorsWriter::new();
    b.add(
        "model.layers.0.self_attn.q_proj.weight",
        TensorFormat::U8,
        &[64, 32],
        &nv,
    )
    .unwrap();
    b.add(
        "model.layers.0.self_attn.q_proj.weight_scale",
        TensorFormat::F8E4M3,
        &[64, 4],
        &nvs,
    )
    .unwrap();
    b.add(
        "model.layers.0.self_attn.q_proj.weight_scale_2",
        F32,
        &[],
        &one,
    )
    .unwrap();
    b.add(
        "model.layers.0.self_attn.q_proj.input_scale",
        F32,
        &[],
        &one,
    )
    .unwrap();
    b.add(
        "model.layers.0.mlp.experts.gate_up_proj_blocks",
        TensorFormat::U8,
        &[2, 8, 2, 16],
        &mxb,
    )
    .unwrap();
    b.add(
        "model.layers.0.mlp.experts.gate_up_proj_scales",
        TensorFormat::U8,
        &[2, 8, 2],
        &mxs,
    )
    .unwrap();
    b.write_file(dir.join("model-00002-of-00002.safetensors"))
        .unwrap();
    let mut map = serde_json::Map::new();
    for (f, names) in [
        (
            "model-00001-of-00002.safetensors",
            vec![
                "model.layers.0.mlp.down_proj.weight",
                "model.layers.0.mlp.down_proj.weight_scale_inv",
                "model.norm.weight",
            ],
        ),
        (
            "model-00002-of-00002.safetensors",
            vec![
                "model.layers.0.self_attn.q_proj.weight",
                "model.layers.0.self_attn.q_proj.weight_scale",
                "model.layers.0.self_attn.q_proj.weight_scale_2",
                "model.layers.0.self_attn.q_proj.input_scale",
                "model.layers.0.mlp.experts.gate_up_proj_blocks",
                "model.layers.0.mlp.experts.gate_up_proj_scales",
            ],
        ),
    ] {
        for n in names {
            map.insert(n.to_string(), json!(f));
        }
    }
    std::fs::write(
        dir.join("model.safetensors.index.json"),
        json!({"metadata": {"total_size": 1}, "weight_map": map}).to_string(),
    )
    .unwrap();
    std::fs::write(
        dir.join("config.json"),
        json!({"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "num_hidden_layers": 1,
               "hidden_size": 64, "rope_theta": 1000000.0, "rope_scaling": {"factor": 4.0},
               "tie_word_embeddings": false, "quantization_config": {"weight_block_size": [128, 128]}})
        .to_string(),
    )
    .unwrap();
}

#[test]
fn sharded_checkpoint_with_companions() {
    let dir = temp_dir("st-shard");
    write_checkpoint(&dir);
    let store = TensorStore::open(&dir).unwrap();
    assert_eq!(store.kind(), StoreKind::Safetensors);
    assert_eq!(store.len(), 9);
    assert_eq!(store.files().len(), 2);

    let fp8 = store.tensor("model.layers.0.mlp.down_proj.weight").unwrap();
    assert_eq!(fp8.format, TensorFormat::F8E4M3);
    assert_eq!(fp8.shape, &[256, 256]);
    assert_eq!(fp8.scheme, WeightScheme::Fp8BlockScaled);
    let s = fp8.companion(CompanionRole::ScaleInv).unwrap();
    assert_eq!((s.shape, s.format), (&[2usize, 2][..], F32));
    assert_eq!(s.data, &bytes(16, 2)[..]);
    assert_eq!(fp8.data, &bytes(256 * 256, 1)[..]);

    let nv = store
        .tensor("model.layers.0.self_attn.q_proj.weight")
        .unwrap();
    assert_eq!(nv.scheme, WeightScheme::Nvfp4);
    assert_eq!(nv.companions.len(), 3);
    assert_eq!(
        nv.companion(CompanionRole::WeightScale).unwrap().format,
        TensorFormat::F8E4M3
    );
    assert!(nv.companion(CompanionRole::WeightScale2).is_some());
    assert!(nv.companion(CompanionRole::InputScale).is_some());

    let mx = store
        .tensor("model.layers.0.mlp.experts.gate_up_proj")
        .unwrap();
    assert_eq!(mx.name, "model.layers.0.mlp.experts.gate_up_proj_blocks");
    assert_eq!(mx.scheme, WeightScheme::Mxfp4);
    assert_eq!(
        mx.companion(CompanionRole::BlockScales).unwrap().shape,
        &[2, 8, 2]
    );

    let sc = store
        .tensor("model.layers.0.mlp.down_proj.weight_scale_inv")
        .unwrap();
    assert_eq!(sc.companion_of, Some("model.layers.0.mlp.down_proj.weight"));
    let weights: Vec<&str> = store.weights().map(|v| v.name).collect();
    assert_eq!(weights.len(), 4, "{weights:?}");
    assert_eq!(
        store.tensor("model.norm.weight").unwrap().scheme,
        WeightScheme::Plain
    );

    let pocket_formats::StoreMetadata::Safetensors {
        config: Some(c),
        header,
    } = store.metadata()
    else {
        panic!("safetensors metadata with config expected");
    };
    assert_eq!(
        header.unwrap().get("format").map(String::as_str),
        Some("pt")
    );
    assert_eq!(c.architecture(), Some("Qwen3ForCausalLM"));
    assert_eq!(c.model_type(), Some("qwen3"));
    assert_eq!(c.get_usize("num_hidden_layers").unwrap(), 1);
    assert_eq!(c.get_f64("rope_theta").unwrap(), 1e6);
    assert_eq!(c.get_f64("rope_scaling.factor").unwrap(), 4.0);
    assert!(!c.get_bool("tie_word_embeddings").unwrap());
    assert_eq!(
        c.get_usize("intermediate_size").unwrap_err().to_string(),
        "metadata key `intermediate_size` is missing"
    );
    let e = c.get_usize("model_type").unwrap_err();
    assert_eq!(
        e.to_string(),
        "metadata key `model_type` has type string, expected unsigned integer"
    );

    // The index file and a single shard open too.
    let via_index = TensorStore::open(dir.join("model.safetensors.index.json")).unwrap();
    assert_eq!(via_index.len(), 9);
    let one = TensorStore::open(dir.join("model-00001-of-00002.safetensors")).unwrap();
    assert_eq!(one.len(), 3);
    assert!(
        one.safetensors().unwrap().config().is_some(),
        "sibling config.json is read"
    );
    assert!(matches!(
        store.tensor("nope"),
        Err(FormatError::TensorNotFound(_))
    ));
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn bad_indexes_are_rejected() {
    let dir = temp_dir("st-badindex");
    write_checkpoint(&dir);
    let idx = dir.join("model.safetensors.index.json");
    std::fs::write(&idx, r#"{"weight_map": {"x": "../etc/passwd"}}"#).unwrap();
    let e = SafetensorsCheckpoint::open(&dir).unwrap_err();
    assert!(
        e.to_string().contains("leaves the checkpoint folder"),
        "{e}"
    );
    std::fs::write(
        &idx,
        r#"{"weight_map": {"ghost": "model-00001-of-00002.safetensors"}}"#,
    )
    .unwrap();
    let e = SafetensorsCheckpoint::open(&dir).unwrap_err();
    assert!(e.to_string().contains("`ghost` is not in its shard"), "{e}");
    std::fs::write(&idx, "[1,2").unwrap();
    assert!(matches!(
        SafetensorsCheckpoint::open(&dir),
        Err(FormatError::BadIndex { .. })
    ));
    std::fs::write(dir.join("config.json"), "{").unwrap();
    std::fs::remove_file(&idx).unwrap();
    assert!(matches!(
        SafetensorsCheckpoint::open(&dir),
        Err(FormatError::BadConfig { .. })
    ));
    std::fs::remove_dir_all(dir).unwrap();
}

fn raw(header: &str, data: usize) -> Vec<u8> {
    let mut b = (header.len() as u64).to_le_bytes().to_vec();
    b.extend_from_slice(header.as_bytes());
    b.resize(b.len() + data, 0);
    b
}

fn st_err(b: Vec<u8>) -> FormatError {
    SafetensorsFile::from_bytes(b).expect_err("malformed safetensors must be rejected")
}

#[test]
fn hostile_headers() {
    assert!(matches!(
        st_err(vec![1, 2, 3]),
        FormatError::Truncated { .. }
    ));
    let mut huge = u64::MAX.to_le_bytes().to_vec();
    huge.extend_from_slice(b"{}");
    assert!(matches!(st_err(huge), FormatError::SafetensorsHeader(m) if m.contains("limit")));
    let mut long = 1000u64.to_le_bytes().to_vec();
    long.extend_from_slice(b"{}");
    assert!(matches!(st_err(long), FormatError::Truncated { .. }));
    let mut bad_utf8 = 3u64.to_le_bytes().to_vec();
    bad_utf8.extend_from_slice(&[b'{', 0xff, b'}']);
    assert!(matches!(st_err(bad_utf8), FormatError::SafetensorsHeader(m) if m.contains("UTF-8")));
    assert!(
        matches!(st_err(raw("{\"a\":", 0)), FormatError::SafetensorsHeader(m) if m.contains("invalid JSON"))
    );
    assert!(matches!(
        st_err(raw("[]", 0)),
        FormatError::SafetensorsHeader(_)
    ));
    let e = st_err(raw(
        r#"{"w":{"dtype":"F7","shape":[1],"data_offsets":[0,1]}}"#,
        1,
    ));
    assert!(
        matches!(e, FormatError::UnknownDtype { ref dtype, .. } if dtype == "F7"),
        "{e}"
    );
    let e = st_err(raw(
        r#"{"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}"#,
        4,
    ));
    assert!(
        matches!(e, FormatError::TensorOutOfBounds { ref tensor, .. } if tensor == "w"),
        "{e}"
    );
    let e = st_err(raw(
        r#"{"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}}"#,
        16,
    ));
    assert!(
        matches!(e, FormatError::BadShape { ref reason, .. } if reason.contains("needs 12 bytes")),
        "{e}"
    );
    let e = st_err(raw(
        r#"{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"U8","shape":[4],"data_offsets":[4,8]}}"#,
        8,
    ));
    assert!(matches!(e, FormatError::TensorOverlap { .. }), "{e}");
    let e = st_err(raw(
        r#"{"w":{"dtype":"F32","shape":[-1],"data_offsets":[0,0]}}"#,
        0,
    ));
    assert!(matches!(e, FormatError::SafetensorsHeader(_)), "{e}");
    let e = st_err(raw(
        r#"{"w":{"dtype":"F32","shape":[4294967296,4294967296,4294967296],"data_offsets":[0,0]}}"#,
        0,
    ));
    assert!(
        matches!(
            e,
            FormatError::SafetensorsHeader(_) | FormatError::BadShape { .. }
        ),
        "{e}"
    );
    let e = st_err(raw(
        r#"{"w":{"dtype":"F32","shape":[1],"data_offsets":[4,0]}}"#,
        4,
    ));
    assert!(matches!(e, FormatError::SafetensorsHeader(m) if m.contains("backwards")));
    let e = st_err(raw(r#"{"w":{"dtype":"F32","shape":[1]}}"#, 4));
    assert!(matches!(e, FormatError::SafetensorsHeader(m) if m.contains("data_offsets")));
    let e = st_err(raw(r#"{"__metadata__":{"a":1}}"#, 0));
    assert!(matches!(e, FormatError::SafetensorsHeader(m) if m.contains("__metadata__.a")));
    // Deep JSON nesting is refused by serde_json's recursion limit, not a stack overflow.
    let deep = format!("{{\"a\":{}{}}}", "[".repeat(100_000), "]".repeat(100_000));
    assert!(matches!(
        st_err(raw(&deep, 0)),
        FormatError::SafetensorsHeader(_)
    ));
}

fn valid_st() -> Vec<u8> {
    let a = bytes(24, 1);
    let b = bytes(6, 2);
    let mut w = SafetensorsWriter::new();
    w.metadata("k", "v");
    w.add("x.weight", F32, &[2, 3], &a).unwrap();
    w.add("x.weight_scale_inv", BF16, &[3], &b).unwrap();
    w.to_vec().unwrap()
}

#[test]
fn every_truncation_is_an_error() {
    let b = valid_st();
    for len in 0..b.len() {
        assert!(
            SafetensorsFile::from_bytes(b[..len].to_vec()).is_err(),
            "prefix {len} accepted"
        );
    }
    assert!(parse_layout(&b).is_ok());
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn mutated_safetensors_never_panic(
        muts in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8),
        cut in any::<prop::sample::Index>(),
        do_cut in any::<bool>(),
    ) {
        let mut b = valid_st();
        for (i, v) in &muts {
            let i = i.index(b.len());
            b[i] = *v;
        }
        if do_cut {
            let n = cut.index(b.len());
            b.truncate(n);
        }
        if let Ok(f) = SafetensorsFile::from_bytes(b) {
            for t in f.tensor_infos() {
                prop_assert_eq!(f.data_of(t).len() as u64, t.size());
            }
        }
    }
}
