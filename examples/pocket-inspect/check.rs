//! `check PATH`: audits that every tensor the llama family (llama, qwen2, qwen3) needs is present
//! with the expected shape, in llama.cpp GGUF naming or Hugging Face safetensors naming.

use std::collections::BTreeSet;

use pocket_formats::{StoreMetadata, TensorStore, WeightScheme};
use serde_json::{json, Value};

/// Hyper-parameters that determine the tensor shapes.
#[derive(Debug, Clone, Copy)]
pub struct Dims {
    layers: usize,
    embd: usize,
    heads: usize,
    kv_heads: usize,
    head_dim: usize,
    v_head_dim: usize,
    ff: usize,
    vocab: usize,
}

/// One expected tensor.
struct Want {
    name: String,
    shape: Vec<usize>,
    required: bool,
}

fn want(name: String, shape: Vec<usize>, required: bool) -> Want {
    Want {
        name,
        shape,
        required,
    }
}

/// The audit result.
pub struct Audit {
    /// Architecture audited.
    pub arch: String,
    /// Number of expected tensors (required and optional).
    pub expected: usize,
    /// Required tensors that are absent.
    pub missing: Vec<String>,
    /// (name, expected shape, found shape).
    pub wrong_shape: Vec<(String, Vec<usize>, Vec<usize>)>,
    /// Tensors the architecture does not use.
    pub extra: Vec<String>,
}

impl Audit {
    /// Whether nothing is missing or misshapen (extras alone fail the audit too).
    pub fn ok(&self) -> bool {
        self.missing.is_empty() && self.wrong_shape.is_empty() && self.extra.is_empty()
    }

    /// JSON form.
    pub fn to_json(&self) -> Value {
        json!({
            "ok": self.ok(),
            "architecture": self.arch,
            "expected": self.expected,
            "missing": self.missing,
            "wrong_shape": self.wrong_shape.iter()
                .map(|(n, e, f)| json!({"name": n, "expected": e, "found": f})).collect::<Vec<_>>(),
            "extra": self.extra,
        })
    }

    /// Renders the human-readable form.
    pub fn render_human(&self) -> String {
        use std::fmt::Write;
        let mut o = String::new();
        let verdict = if self.ok() { "OK" } else { "FAILED" };
        let _ = writeln!(
            o,
            "check {}: {verdict} ({} expected, {} missing, {} wrong shape, {} extra)",
            self.arch,
            self.expected,
            self.missing.len(),
            self.wrong_shape.len(),
            self.extra.len()
        );
        const SHOW: usize = 20;
        let more = |o: &mut String, n: usize| {
            if n > SHOW {
                let _ = writeln!(o, "  ... and {} more (see --json)", n - SHOW);
            }
        };
        for m in self.missing.iter().take(SHOW) {
            let _ = writeln!(o, "  missing      {m}");
        }
        more(&mut o, self.missing.len());
        for (n, e, f) in self.wrong_shape.iter().take(SHOW) {
            let _ = writeln!(o, "  wrong shape  {n}: expected {e:?}, found {f:?}");
        }
        more(&mut o, self.wrong_shape.len());
        for x in self.extra.iter().take(SHOW) {
            let _ = writeln!(o, "  extra        {x}");
        }
        more(&mut o, self.extra.len());
        o
    }
}

/// Audits a store; an error when the architecture is not one this tool knows.
pub fn audit(store: &TensorStore) -> Result<Audit, String> {
    let (arch, wants) = match store.metadata() {
        StoreMetadata::Gguf(m) => {
            let arch = m.architecture().map_err(|e| e.to_string())?.to_string();
            known(&arch)?;
            let k = |s: &str| format!("{arch}.{s}");
            let u = |s: &str| {
                m.get_u32(&k(s))
                    .map(|x| x as usize)
                    .map_err(|e| e.to_string())
            };
            let embd = u("embedding_length")?;
            let heads = u("attention.head_count")?;
            let kv_heads = m
                .get_u32_or_first(&k("attention.head_count_kv"))
                .map(|x| x as usize)
                .unwrap_or(heads);
            let head_dim = m
                .get_u32_opt(&k("attention.key_length"))
                .ok()
                .flatten()
                .map_or(embd / heads.max(1), |x| x as usize);
            let vocab = match m.get_u32_opt(&k("vocab_size")).ok().flatten() {
                Some(v) => v as usize,
                None => match m.get_array_opt("tokenizer.ggml.tokens").ok().flatten() {
                    Some(a) => a.len(),
                    None => {
                        store
                            .tensor("token_embd.weight")
                            .map_err(|e| e.to_string())?
                            .shape[0]
                    }
                },
            };
            let d = Dims {
                layers: u("block_count")?,
                embd,
                heads,
                kv_heads,
                head_dim,
                v_head_dim: m
                    .get_u32_opt(&k("attention.value_length"))
                    .ok()
                    .flatten()
                    .map_or(head_dim, |x| x as usize),
                ff: u("feed_forward_length")?,
                vocab,
            };
            (arch.clone(), gguf_wants(&arch, &d))
        }
        StoreMetadata::Safetensors { config, .. } => {
            let c = config.ok_or("no config.json next to the safetensors files: cannot audit")?;
            let arch = c
                .model_type()
                .ok_or("config.json has no model_type")?
                .to_string();
            known(&arch)?;
            let u = |s: &str| c.get_usize(s).map_err(|e| e.to_string());
            let embd = u("hidden_size")?;
            let heads = u("num_attention_heads")?;
            let head_dim = c
                .get_usize_opt("head_dim")
                .ok()
                .flatten()
                .unwrap_or(embd / heads.max(1));
            let d = Dims {
                layers: u("num_hidden_layers")?,
                embd,
                heads,
                kv_heads: c
                    .get_usize_opt("num_key_value_heads")
                    .ok()
                    .flatten()
                    .unwrap_or(heads),
                head_dim,
                v_head_dim: head_dim,
                ff: u("intermediate_size")?,
                vocab: u("vocab_size")?,
            };
            let tied = c
                .get_bool_opt("tie_word_embeddings")
                .ok()
                .flatten()
                .unwrap_or(false);
            (arch.clone(), hf_wants(&arch, &d, tied))
        }
    };
    let mut audit = Audit {
        arch,
        expected: wants.len(),
        missing: vec![],
        wrong_shape: vec![],
        extra: vec![],
    };
    let wanted: BTreeSet<&str> = wants.iter().map(|w| w.name.as_str()).collect();
    for w in &wants {
        match store.tensor(&w.name) {
            Err(_) if w.required => audit.missing.push(w.name.clone()),
            Err(_) => {}
            Ok(t) => {
                let mut shape = t.shape.to_vec();
                if t.scheme == WeightScheme::Nvfp4 {
                    if let Some(last) = shape.last_mut() {
                        *last *= 2; // two FP4 values per byte
                    }
                }
                if shape != w.shape {
                    audit
                        .wrong_shape
                        .push((w.name.clone(), w.shape.clone(), t.shape.to_vec()));
                }
            }
        }
    }
    for t in store.weights() {
        if !wanted.contains(t.name) {
            audit.extra.push(t.name.to_string());
        }
    }
    Ok(audit)
}

fn known(arch: &str) -> Result<(), String> {
    match arch {
        "llama" | "qwen2" | "qwen3" => Ok(()),
        other => Err(format!(
            "no tensor audit for architecture `{other}` (known: llama, qwen2, qwen3)"
        )),
    }
}

fn gguf_wants(arch: &str, d: &Dims) -> Vec<Want> {
    let (q, kv, vo) = (
        d.heads * d.head_dim,
        d.kv_heads * d.head_dim,
        d.kv_heads * d.v_head_dim,
    );
    let mut w = vec![
        want("token_embd.weight".into(), vec![d.vocab, d.embd], true),
        want("output_norm.weight".into(), vec![d.embd], true),
        want("output.weight".into(), vec![d.vocab, d.embd], false),
        want("rope_freqs.weight".into(), vec![d.head_dim / 2], false),
    ];
    for i in 0..d.layers {
        let n = |s: &str| format!("blk.{i}.{s}");
        w.push(want(n("attn_norm.weight"), vec![d.embd], true));
        w.push(want(n("attn_q.weight"), vec![q, d.embd], true));
        w.push(want(n("attn_k.weight"), vec![kv, d.embd], true));
        w.push(want(n("attn_v.weight"), vec![vo, d.embd], true));
        w.push(want(
            n("attn_output.weight"),
            vec![d.embd, d.heads * d.v_head_dim],
            true,
        ));
        w.push(want(n("ffn_norm.weight"), vec![d.embd], true));
        w.push(want(n("ffn_gate.weight"), vec![d.ff, d.embd], true));
        w.push(want(n("ffn_up.weight"), vec![d.ff, d.embd], true));
        w.push(want(n("ffn_down.weight"), vec![d.embd, d.ff], true));
        let bias = arch == "qwen2";
        w.push(want(n("attn_q.bias"), vec![q], bias));
        w.push(want(n("attn_k.bias"), vec![kv], bias));
        w.push(want(n("attn_v.bias"), vec![vo], bias));
        if arch == "qwen3" {
            w.push(want(n("attn_q_norm.weight"), vec![d.head_dim], true));
            w.push(want(n("attn_k_norm.weight"), vec![d.head_dim], true));
        }
    }
    w
}

fn hf_wants(arch: &str, d: &Dims, tied: bool) -> Vec<Want> {
    let (q, kv) = (d.heads * d.head_dim, d.kv_heads * d.head_dim);
    let mut w = vec![
        want(
            "model.embed_tokens.weight".into(),
            vec![d.vocab, d.embd],
            true,
        ),
        want("model.norm.weight".into(), vec![d.embd], true),
        want("lm_head.weight".into(), vec![d.vocab, d.embd], !tied),
    ];
    for i in 0..d.layers {
        let n = |s: &str| format!("model.layers.{i}.{s}");
        w.push(want(n("input_layernorm.weight"), vec![d.embd], true));
        w.push(want(n("self_attn.q_proj.weight"), vec![q, d.embd], true));
        w.push(want(n("self_attn.k_proj.weight"), vec![kv, d.embd], true));
        w.push(want(n("self_attn.v_proj.weight"), vec![kv, d.embd], true));
        w.push(want(n("self_attn.o_proj.weight"), vec![d.embd, q], true));
        w.push(want(
            n("post_attention_layernorm.weight"),
            vec![d.embd],
            true,
        ));
        w.push(want(n("mlp.gate_proj.weight"), vec![d.ff, d.embd], true));
        w.push(want(n("mlp.up_proj.weight"), vec![d.ff, d.embd], true));
        w.push(want(n("mlp.down_proj.weight"), vec![d.embd, d.ff], true));
        let bias = arch == "qwen2";
        w.push(want(n("self_attn.q_proj.bias"), vec![q], bias));
        w.push(want(n("self_attn.k_proj.bias"), vec![kv], bias));
        w.push(want(n("self_attn.v_proj.bias"), vec![kv], bias));
        if arch == "qwen3" {
            w.push(want(n("self_attn.q_norm.weight"), vec![d.head_dim], true));
            w.push(want(n("self_attn.k_norm.weight"), vec![d.head_dim], true));
        }
    }
    w
}
