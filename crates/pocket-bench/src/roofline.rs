//! The decode roofline: weight bytes read per token over a measured copy bandwidth.

use std::time::Instant;

use pocket_formats::TensorStore;
use rayon::prelude::*;
use serde::{Deserialize, Serialize};

/// The H200 device-to-device copy bandwidth measured in DESIGN.md (bytes read + written per s).
pub const H200_COPY_BYTES_PER_S: f64 = 4.26e12;

/// Bytes of a model's weights and the share read for one decoded token.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WeightBytes {
    /// Every tensor's bytes (companion scales included).
    pub total: u64,
    /// Bytes read per decoded token: everything except the embedding table (one row is read),
    /// unless it doubles as the output; routed experts count `used / experts` of their bytes.
    pub per_token: u64,
    /// Parameters (elements of all tensors).
    pub params: u64,
}

fn is_embedding(name: &str) -> bool {
    name == "token_embd.weight" || name.ends_with("embed_tokens.weight")
}

fn is_output(name: &str) -> bool {
    name == "output.weight" || name == "lm_head.weight"
}

fn is_expert(name: &str) -> bool {
    name.contains("_exps.") || name.contains(".experts.")
}

/// Counts [`WeightBytes`] of an opened store.
pub fn weight_bytes(store: &TensorStore) -> WeightBytes {
    let md = store.metadata();
    let (experts, used) = expert_counts(&md);
    let mut total = 0u64;
    let mut per_token = 0f64;
    let mut params = 0u64;
    let mut embedding = 0u64;
    let mut has_output = false;
    for t in store.tensors() {
        let b = t.data.len() as u64;
        total += b;
        params += t.n_elements();
        if is_output(t.name) {
            has_output = true;
        }
        if is_embedding(t.name) {
            embedding += b;
            continue;
        }
        let share = match (is_expert(t.name), experts) {
            (true, Some(e)) if e > 0 => used.unwrap_or(e) as f64 / e as f64,
            _ => 1.0,
        };
        per_token += b as f64 * share;
    }
    if !has_output {
        per_token += embedding as f64;
    }
    WeightBytes {
        total,
        per_token: per_token as u64,
        params,
    }
}

fn expert_counts(md: &pocket_formats::StoreMetadata<'_>) -> (Option<u64>, Option<u64>) {
    match md {
        pocket_formats::StoreMetadata::Gguf(g) => {
            let arch = g.architecture().unwrap_or("").to_string();
            let get = |k: &str| {
                g.get(&format!("{arch}.{k}"))
                    .and_then(|v| v.as_int())
                    .map(|x| x as u64)
            };
            (get("expert_count"), get("expert_used_count"))
        }
        pocket_formats::StoreMetadata::Safetensors { config, .. } => {
            let get = |keys: &[&str]| {
                keys.iter()
                    .find_map(|k| config.and_then(|c| c.get(k)).and_then(|v| v.as_u64()))
            };
            (
                get(&["num_experts", "num_local_experts", "n_routed_experts"]),
                get(&["num_experts_per_tok"]),
            )
        }
    }
}

/// A measured copy bandwidth.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Bandwidth {
    /// Bytes read plus bytes written per second (the DESIGN.md convention).
    pub copy_bytes_per_s: f64,
    /// How it was obtained (`host memcpy, 8 threads, 512 MiB` or the quoted figure).
    pub source: String,
}

/// Host copy bandwidth: the median of 5 parallel copies of a `mib` MiB buffer on the current
/// rayon pool (after one warm-up copy), counted as bytes read + written.
pub fn host_copy_bandwidth(mib: usize) -> Bandwidth {
    let n = mib << 20;
    let src = vec![1u8; n];
    let mut dst = vec![0u8; n];
    let chunk = (n / (rayon::current_num_threads() * 4)).max(1 << 16);
    let mut times = Vec::new();
    for i in 0..6 {
        let t = Instant::now();
        dst.par_chunks_mut(chunk)
            .zip(src.par_chunks(chunk))
            .for_each(|(d, s)| d.copy_from_slice(s));
        std::hint::black_box(&dst);
        if i > 0 {
            times.push(t.elapsed().as_secs_f64());
        }
    }
    times.sort_by(|a, b| a.total_cmp(b));
    let t = times[times.len() / 2];
    Bandwidth {
        copy_bytes_per_s: 2.0 * n as f64 / t,
        source: format!(
            "host memcpy, {} threads, {mib} MiB, read+write",
            rayon::current_num_threads()
        ),
    }
}

/// The H200 figure from DESIGN.md, labelled as quoted rather than measured here.
pub fn quoted_h200() -> Bandwidth {
    Bandwidth {
        copy_bytes_per_s: H200_COPY_BYTES_PER_S,
        source: "DESIGN.md H200 device-to-device copy 4.26 TB/s (quoted, not measured in this run)"
            .into(),
    }
}

/// Decode tokens per second if every weight byte were read at the copy bandwidth.
pub fn roofline_tok_s(w: &WeightBytes, b: &Bandwidth) -> f64 {
    if w.per_token == 0 {
        return 0.0;
    }
    b.copy_bytes_per_s / w.per_token as f64
}
