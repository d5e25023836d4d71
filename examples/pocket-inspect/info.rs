//! `info PATH`: architecture report, sizes, and tensor counts per format.

use std::collections::BTreeMap;

use pocket_formats::{GgufMetadata, ModelConfig, StoreMetadata, TensorStore};
use serde_json::{json, Value};

/// Ordered (key, value) pairs: printed as aligned lines, or as one JSON object.
pub type Report = Vec<(String, Value)>;

/// Builds the info report for an opened store.
pub fn report(store: &TensorStore) -> Report {
    let mut r: Report = Vec::new();
    let mut put = |k: &str, v: Value| {
        if !v.is_null() {
            r.push((k.to_string(), v));
        }
    };
    put("path", json!(store.path().display().to_string()));
    match store.metadata() {
        StoreMetadata::Gguf(m) => {
            put(
                "format",
                json!(format!("GGUF v{}", store.gguf().map_or(0, |g| g.version()))),
            );
            for (k, v) in gguf_arch(m, store) {
                put(&k, v);
            }
        }
        StoreMetadata::Safetensors { config, .. } => {
            put(
                "format",
                json!(format!("safetensors ({} file(s))", store.files().len())),
            );
            if let Some(c) = config {
                for (k, v) in config_arch(c) {
                    put(&k, v);
                }
            }
        }
    }
    let mut per: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    let (mut bytes, mut elements) = (0u64, 0u64);
    for t in store.tensors() {
        let e = per.entry(t.format.name().to_string()).or_default();
        e.0 += 1;
        e.1 += t.data.len() as u64;
        bytes += t.data.len() as u64;
        if t.companion_of.is_none() {
            elements += t.n_elements();
        }
    }
    put("tensor_count", json!(store.len()));
    put("parameters", json!(elements));
    put("tensor_bytes", json!(bytes));
    let bpw = if elements > 0 {
        bytes as f64 * 8.0 / elements as f64
    } else {
        0.0
    };
    put("bits_per_weight", json!((bpw * 1000.0).round() / 1000.0));
    let formats: serde_json::Map<String, Value> = per
        .into_iter()
        .map(|(k, (n, b))| (k, json!({"tensors": n, "bytes": b})))
        .collect();
    put("formats", Value::Object(formats));
    r
}

fn gguf_arch(m: &GgufMetadata, store: &TensorStore) -> Vec<(String, Value)> {
    let arch = m
        .get_str_opt("general.architecture")
        .ok()
        .flatten()
        .unwrap_or("");
    let key = |s: &str| format!("{arch}.{s}");
    let num = |k: String| {
        m.get(&k).and_then(|v| match v {
            pocket_formats::GgufValue::Array(a) => a.int_at(0).map(|x| json!(x as i64)),
            v => v
                .as_int()
                .map(|x| json!(x as i64))
                .or_else(|| v.as_f64().map(|x| json!(x))),
        })
    };
    let vocab = m
        .get(&key("vocab_size"))
        .and_then(|v| v.as_int())
        .map(|x| x as usize)
        .or_else(|| {
            m.get_array_opt("tokenizer.ggml.tokens")
                .ok()
                .flatten()
                .map(|a| a.len())
        })
        .or_else(|| store.tensor("token_embd.weight").ok().map(|t| t.shape[0]));
    let mut v = vec![
        ("architecture".to_string(), json!(arch)),
        (
            "name".to_string(),
            json!(m.get_str_opt("general.name").ok().flatten()),
        ),
        ("block_count".to_string(), json!(num(key("block_count")))),
        (
            "embedding_length".to_string(),
            json!(num(key("embedding_length"))),
        ),
        (
            "feed_forward_length".to_string(),
            json!(num(key("feed_forward_length"))),
        ),
        (
            "head_count".to_string(),
            json!(num(key("attention.head_count"))),
        ),
        (
            "head_count_kv".to_string(),
            json!(num(key("attention.head_count_kv"))),
        ),
        ("vocab_size".to_string(), json!(vocab)),
        (
            "context_length".to_string(),
            json!(num(key("context_length"))),
        ),
        ("expert_count".to_string(), json!(num(key("expert_count")))),
        (
            "expert_used_count".to_string(),
            json!(num(key("expert_used_count"))),
        ),
        (
            "rope_freq_base".to_string(),
            json!(num(key("rope.freq_base"))),
        ),
        (
            "rope_dimension_count".to_string(),
            json!(num(key("rope.dimension_count"))),
        ),
        (
            "rope_scaling_type".to_string(),
            json!(m.get_str_opt(&key("rope.scaling.type")).ok().flatten()),
        ),
        (
            "rope_scaling_factor".to_string(),
            json!(num(key("rope.scaling.factor"))),
        ),
        (
            "tokenizer_model".to_string(),
            json!(m.get_str_opt("tokenizer.ggml.model").ok().flatten()),
        ),
        (
            "tokenizer_pre".to_string(),
            json!(m.get_str_opt("tokenizer.ggml.pre").ok().flatten()),
        ),
        (
            "file_type".to_string(),
            json!(num("general.file_type".into())),
        ),
        ("metadata_keys".to_string(), json!(m.len())),
    ];
    v.retain(|(_, x)| !x.is_null() && x != &json!(""));
    v
}

fn config_arch(c: &ModelConfig) -> Vec<(String, Value)> {
    let first = |keys: &[&str]| keys.iter().find_map(|k| c.get(k).cloned());
    let mut v = vec![
        ("architecture".to_string(), json!(c.model_type())),
        ("hf_architecture".to_string(), json!(c.architecture())),
        (
            "block_count".to_string(),
            json!(first(&["num_hidden_layers", "n_layer"])),
        ),
        (
            "embedding_length".to_string(),
            json!(first(&["hidden_size", "n_embd"])),
        ),
        (
            "feed_forward_length".to_string(),
            json!(first(&["intermediate_size"])),
        ),
        (
            "head_count".to_string(),
            json!(first(&["num_attention_heads", "n_head"])),
        ),
        (
            "head_count_kv".to_string(),
            json!(first(&["num_key_value_heads"])),
        ),
        ("vocab_size".to_string(), json!(first(&["vocab_size"]))),
        (
            "context_length".to_string(),
            json!(first(&["max_position_embeddings"])),
        ),
        (
            "expert_count".to_string(),
            json!(first(&[
                "num_experts",
                "num_local_experts",
                "n_routed_experts"
            ])),
        ),
        (
            "expert_used_count".to_string(),
            json!(first(&["num_experts_per_tok"])),
        ),
        ("rope_freq_base".to_string(), json!(first(&["rope_theta"]))),
        ("rope_scaling".to_string(), json!(first(&["rope_scaling"]))),
        (
            "quantization".to_string(),
            json!(first(&["quantization_config.quant_method"])),
        ),
    ];
    v.retain(|(_, x)| !x.is_null());
    v
}

/// Renders a report as aligned `key: value` lines.
pub fn render_human(r: &Report) -> String {
    use std::fmt::Write;
    let mut o = String::new();
    let width = r.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
    for (k, v) in r {
        match v {
            Value::Object(m) if k == "formats" => {
                let _ = writeln!(o, "{k:width$}  :");
                for (f, x) in m {
                    let _ = writeln!(
                        o,
                        "  {f:>8}  {:>6} tensors  {:>14} bytes",
                        x["tensors"].to_string(),
                        x["bytes"].to_string()
                    );
                }
            }
            Value::String(s) => {
                let _ = writeln!(o, "{k:width$}  : {s}");
            }
            other => {
                let _ = writeln!(o, "{k:width$}  : {other}");
            }
        }
    }
    o
}

/// The report as one JSON object.
pub fn to_json(r: &Report) -> Value {
    Value::Object(r.iter().cloned().collect())
}
