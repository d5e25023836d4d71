//! Synthetic GGUF files: llama.cpp's tensor names, metadata keys and per-tensor types, a real
//! tokenizer copied from a vocab GGUF, and random blocks streamed to disk.

use std::collections::BTreeMap;
use std::path::Path;

use pocket_formats::{GgmlType, GgufValue, GgufWriter};

use crate::error::{BenchError, Result};
use crate::layout::gguf_layout;
use crate::mix::{gguf_types, FormatSpec};
use crate::preset::{Arch, Preset};
use crate::stream::{Gen, StreamTensor};
use crate::synth::{finish_file, SynthOptions, SynthReport};
use crate::vocab::{find_vocab, load_fitted};

/// llama.cpp metadata for `p`.
fn arch_metadata(w: &mut GgufWriter, p: &Preset) {
    let a = p.arch.gguf_name();
    let k = |s: &str| format!("{a}.{s}");
    let u = |x: usize| GgufValue::U32(x as u32);
    w.add(k("context_length"), u(p.ctx));
    w.add(k("embedding_length"), u(p.hidden));
    w.add(k("block_count"), u(p.layers));
    let ffn = p.moe.map_or(p.ffn, |m| m.ffn);
    w.add(k("feed_forward_length"), u(ffn));
    w.add(k("attention.head_count"), u(p.heads));
    w.add(k("attention.head_count_kv"), u(p.kv_heads));
    w.add(k("attention.key_length"), u(p.head_dim));
    w.add(k("attention.value_length"), u(p.head_dim));
    w.add(k("rope.freq_base"), GgufValue::F32(p.rope_theta));
    w.add(k("rope.dimension_count"), u(p.rope_dim));
    w.add(
        k("attention.layer_norm_rms_epsilon"),
        GgufValue::F32(p.rms_eps),
    );
    w.add(k("vocab_size"), u(p.vocab));
    if let Some(m) = p.moe {
        w.add(k("expert_count"), u(m.experts));
        w.add(k("expert_used_count"), u(m.used));
        w.add(k("expert_feed_forward_length"), u(m.ffn));
        if p.arch == Arch::MinimaxM2 {
            // LLAMA_EXPERT_GATING_FUNC_TYPE_SIGMOID
            w.add(k("expert_gating_func"), u(2));
        }
    }
    if let Some(l) = p.linear {
        w.add(k("ssm.conv_kernel"), u(l.conv));
        w.add(k("ssm.inner_size"), u(l.value_dim()));
        w.add(k("ssm.state_size"), u(l.k_dim));
        w.add(k("ssm.time_step_rank"), u(l.v_heads));
        w.add(k("ssm.group_count"), u(l.k_heads));
        w.add(k("full_attention_interval"), u(l.interval));
        // interleaved M-RoPE sections of Qwen3.5 (text positions use all of them alike)
        let half = p.rope_dim / 2;
        let s = [
            half * 11 / 32,
            half * 11 / 32,
            half - 2 * (half * 11 / 32),
            0,
        ];
        w.add(
            k("rope.dimension_sections"),
            s.iter().map(|&x| x as i32).collect::<Vec<i32>>(),
        );
    }
}

/// Writes a synthetic GGUF of `p` with base type `base` and mix `mix` to `out`.
pub fn write_gguf(
    p: &Preset,
    spec: FormatSpec,
    out: &Path,
    opts: &SynthOptions,
) -> Result<SynthReport> {
    let FormatSpec::Gguf { base, mix } = spec else {
        return Err(BenchError::Usage("write_gguf needs a GGUF format".into()));
    };
    let start = std::time::Instant::now();
    let defs = gguf_layout(p);
    let types = gguf_types(p, &defs, base, mix);
    let mut w = GgufWriter::new();
    w.add("general.architecture", p.arch.gguf_name());
    w.add(
        "general.name",
        format!("synthetic {} {} (random weights)", p.name, spec.name()).as_str(),
    );
    w.add("general.file_type", GgufValue::U32(spec.llama_ftype()));
    if !matches!(base, GgmlType::F32 | GgmlType::F16 | GgmlType::BF16) {
        w.add("general.quantization_version", GgufValue::U32(2));
    }
    arch_metadata(&mut w, p);
    let vocab = find_vocab(p.vocab_file, opts.vocab_dir.as_deref())?;
    for (k, v) in load_fitted(&vocab, p.vocab)? {
        w.add(k, v);
    }
    let mut tensors = Vec::with_capacity(defs.len());
    let mut by_type: BTreeMap<String, u64> = BTreeMap::new();
    for (d, &t) in defs.iter().zip(&types) {
        w.add_tensor(&d.name, t, &d.shape)?;
        let bytes = t.bytes_for(d.elements()).ok_or_else(|| {
            BenchError::Usage(format!("{}: {:?} is not whole {t} blocks", d.name, d.shape))
        })?;
        *by_type.entry(t.name().to_string()).or_default() += bytes;
        tensors.push(StreamTensor {
            name: d.name.clone(),
            bytes,
            gen: Gen::Ggml(t, d.init),
        });
    }
    let header = w.header_bytes();
    let params = defs.iter().map(|d| d.elements()).sum();
    finish_file(out, &header, &tensors, 32, opts, |bytes| SynthReport {
        path: out.to_path_buf(),
        preset: p.name.to_string(),
        format: spec.name(),
        container: "gguf".into(),
        file_bytes: bytes,
        weight_bytes: by_type.values().sum(),
        params,
        tensors: defs.len(),
        bytes_by_type: by_type.clone(),
        vocab_file: vocab.file_name().map(|s| s.to_string_lossy().into_owned()),
        seconds: start.elapsed().as_secs_f64(),
    })
}
