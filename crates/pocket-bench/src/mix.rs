//! Format specifications (`q4_k_m`, `q8_0`, `fp8`, ...) and llama.cpp's per-tensor type choice,
//! so a synthetic GGUF has the same tensor types `llama-quantize` would give the real model.

use pocket_formats::GgmlType;

use crate::error::{BenchError, Result};
use crate::layout::{Role, TensorDef};
use crate::preset::Preset;

/// How llama-quantize would vary the types around the base type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mix {
    /// Every quantizable tensor gets the base type (`--pure`).
    Pure,
    /// The ftype's default rules (output/tied embedding to Q6_K or Q8_0).
    Default,
    /// The `_M` K-quant mix: more bits for some attn_v and ffn_down.
    Medium,
    /// The `_S` K-quant mix.
    Small,
}

/// A safetensors checkpoint flavour.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StKind {
    /// BF16 everywhere.
    Bf16,
    /// F16 everywhere.
    F16,
    /// FP8 E4M3 linear weights with 128x128 `weight_scale_inv` (Qwen/DeepSeek FP8 releases).
    Fp8Block,
    /// NVFP4 linear weights (modelopt layout: packed U8, E4M3 per-16 scales, f32 global scale).
    Nvfp4,
}

/// What to write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FormatSpec {
    /// A GGUF with a base type and mix.
    Gguf {
        /// Base type.
        base: GgmlType,
        /// Mix rules.
        mix: Mix,
    },
    /// A safetensors checkpoint directory.
    Safetensors(StKind),
}

impl FormatSpec {
    /// Parses `q4_0`, `q4_k_m`, `q8_0-pure`, `f16`, `bf16`, `st-bf16`, `st-f16`, `fp8`, `nvfp4`, ...
    pub fn parse(s: &str) -> Result<FormatSpec> {
        let lower = s.to_ascii_lowercase();
        let st = match lower.as_str() {
            "st-bf16" | "safetensors-bf16" => Some(StKind::Bf16),
            "st-f16" | "safetensors-f16" => Some(StKind::F16),
            "fp8" | "st-fp8" | "fp8-block" => Some(StKind::Fp8Block),
            "nvfp4" | "st-nvfp4" => Some(StKind::Nvfp4),
            _ => None,
        };
        if let Some(k) = st {
            return Ok(FormatSpec::Safetensors(k));
        }
        let (name, pure) = match lower.strip_suffix("-pure") {
            Some(n) => (n.to_string(), true),
            None => (lower.clone(), false),
        };
        let (base, mix) = match name.as_str() {
            "q4_k_m" | "q4_k" => (GgmlType::Q4_K, Mix::Medium),
            "q4_k_s" => (GgmlType::Q4_K, Mix::Small),
            "q5_k_m" | "q5_k" => (GgmlType::Q5_K, Mix::Medium),
            "q5_k_s" => (GgmlType::Q5_K, Mix::Small),
            other => match GgmlType::from_name(other) {
                Some(t) if crate::blocks::can_generate(t) => (t, Mix::Default),
                _ => {
                    return Err(BenchError::UnsupportedFormat(
                        s.to_string(),
                        "expected q4_0, q4_1, q5_0, q5_1, q8_0, q2_k, q3_k, q4_k_m, q4_k_s, \
                         q5_k_m, q6_k, iq4_nl, iq4_xs, f16, bf16, f32 (GGUF; add -pure for one \
                         type everywhere) or st-bf16, st-f16, fp8, nvfp4 (safetensors)"
                            .into(),
                    ))
                }
            },
        };
        let mix = if pure || matches!(base, GgmlType::F32 | GgmlType::F16 | GgmlType::BF16) {
            Mix::Pure
        } else {
            mix
        };
        Ok(FormatSpec::Gguf { base, mix })
    }

    /// The canonical lower-case name.
    pub fn name(&self) -> String {
        match self {
            FormatSpec::Gguf { base, mix } => {
                let b = base.name().to_ascii_lowercase();
                match mix {
                    Mix::Medium => format!("{b}_m"),
                    Mix::Small => format!("{b}_s"),
                    Mix::Pure if !float_type(*base) => format!("{b}-pure"),
                    _ => b,
                }
            }
            FormatSpec::Safetensors(k) => match k {
                StKind::Bf16 => "st-bf16".into(),
                StKind::F16 => "st-f16".into(),
                StKind::Fp8Block => "fp8".into(),
                StKind::Nvfp4 => "nvfp4".into(),
            },
        }
    }

    /// llama.cpp's `general.file_type` (llama_ftype) for a GGUF spec.
    pub fn llama_ftype(&self) -> u32 {
        use GgmlType::*;
        let FormatSpec::Gguf { base, mix } = *self else {
            return 0;
        };
        match (base, mix) {
            (F32, _) => 0,
            (F16, _) => 1,
            (Q4_0, _) => 2,
            (Q4_1, _) => 3,
            (Q8_0, _) => 7,
            (Q5_0, _) => 8,
            (Q5_1, _) => 9,
            (Q2_K, _) => 10,
            (Q3_K, _) => 12,
            (Q4_K, Mix::Small) => 14,
            (Q4_K, _) => 15,
            (Q5_K, Mix::Small) => 16,
            (Q5_K, _) => 17,
            (Q6_K, _) => 18,
            (IQ4_NL, _) => 25,
            (IQ4_XS, _) => 30,
            (BF16, _) => 32,
            _ => 0,
        }
    }
}

/// Whether `t` is a plain float type (no blocks to mix).
fn float_type(t: GgmlType) -> bool {
    matches!(t, GgmlType::F32 | GgmlType::F16 | GgmlType::BF16)
}

fn use_more_bits(i: usize, n: usize) -> bool {
    i < n / 8 || i >= 7 * n / 8 || (i as i64 - (n / 8) as i64) % 3 == 2
}

/// llama.cpp's fallback when a row is not a whole number of the type's blocks.
fn fallback(t: GgmlType, cols: usize) -> GgmlType {
    use GgmlType::*;
    if cols.is_multiple_of(t.block_size()) {
        return t;
    }
    let f = match t {
        IQ4_XS => IQ4_NL,
        Q2_K | Q3_K => Q4_0,
        Q4_K => Q5_0,
        Q5_K => Q5_1,
        Q6_K => Q8_0,
        other => other,
    };
    if cols.is_multiple_of(f.block_size()) {
        f
    } else {
        F16
    }
}

/// The GGUF type of every tensor in `defs` (llama.cpp's `llama_tensor_get_type` for the ftypes
/// we generate); unquantized roles and 1-D tensors are F32.
pub fn gguf_types(p: &Preset, defs: &[TensorDef], base: GgmlType, mix: Mix) -> Vec<GgmlType> {
    let n_wv = defs
        .iter()
        .filter(|d| matches!(d.role, Role::AttnV | Role::AttnQkv))
        .count();
    let n_down = defs.iter().filter(|d| d.role == Role::FfnDown).count();
    let (mut i_wv, mut i_down) = (0usize, 0usize);
    let quantized = !float_type(base);
    defs.iter()
        .map(|d| {
            if d.shape.len() < 2 || !d.role.quantizable() {
                return GgmlType::F32;
            }
            let mut t = base;
            if quantized && mix != Mix::Pure {
                let output = d.role == Role::Output || (p.tied && d.role == Role::TokenEmbd);
                if output {
                    t = if d.cols() % base.block_size() != 0 {
                        GgmlType::Q8_0
                    } else if base != GgmlType::Q8_0 {
                        GgmlType::Q6_K
                    } else {
                        base
                    };
                } else if matches!(d.role, Role::AttnV | Role::AttnQkv) {
                    match mix {
                        Mix::Medium if use_more_bits(i_wv, n_wv) => t = GgmlType::Q6_K,
                        Mix::Small if base == GgmlType::Q4_K && i_wv < 4 => t = GgmlType::Q5_K,
                        _ => {}
                    }
                    if p.llama_70b && matches!(t, GgmlType::Q2_K | GgmlType::Q3_K | GgmlType::Q4_K)
                    {
                        t = GgmlType::Q5_K;
                    }
                    i_wv += 1;
                } else if d.role == Role::FfnDown {
                    let (il, nl) = if p.moe.is_some() {
                        (d.layer.unwrap_or(0), p.layers)
                    } else {
                        (i_down, n_down)
                    };
                    match mix {
                        Mix::Medium if use_more_bits(il, nl) => t = GgmlType::Q6_K,
                        Mix::Small if base == GgmlType::Q4_K && il < nl / 8 => t = GgmlType::Q5_K,
                        _ => {}
                    }
                    i_down += 1;
                }
            }
            if quantized {
                fallback(t, d.cols())
            } else {
                t
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::gguf_layout;
    use crate::preset::preset;

    fn size_gb(preset_name: &str, spec: &str) -> f64 {
        let p = preset(preset_name).unwrap();
        let defs = gguf_layout(&p);
        let FormatSpec::Gguf { base, mix } = FormatSpec::parse(spec).unwrap() else {
            panic!()
        };
        let types = gguf_types(&p, &defs, base, mix);
        defs.iter()
            .zip(&types)
            .map(|(d, t)| t.bytes_for(d.elements()).unwrap() as f64)
            .sum::<f64>()
            / 1e9
    }

    #[test]
    fn sizes_match_the_h200_anchor_files() {
        // DESIGN.md: Llama-3-8B shape Q4_0 4.65 GB, Q4_K_M 4.91 GB, Q8_0 8.53 GB; Qwen3-30B-A3B Q4_K_M 18.6 GB
        let close = |a: f64, b: f64| (a - b).abs() < 0.02 * b;
        assert!(
            close(size_gb("llama3-8b", "q4_0"), 4.65),
            "{}",
            size_gb("llama3-8b", "q4_0")
        );
        assert!(
            close(size_gb("llama3-8b", "q4_k_m"), 4.91),
            "{}",
            size_gb("llama3-8b", "q4_k_m")
        );
        assert!(
            close(size_gb("llama3-8b", "q8_0"), 8.53),
            "{}",
            size_gb("llama3-8b", "q8_0")
        );
        assert!(
            close(size_gb("qwen3-30b-a3b", "q4_k_m"), 18.6),
            "{}",
            size_gb("qwen3-30b-a3b", "q4_k_m")
        );
    }

    #[test]
    fn parse_names() {
        assert_eq!(FormatSpec::parse("Q4_K_M").unwrap().name(), "q4_k_m");
        assert_eq!(FormatSpec::parse("q8_0-pure").unwrap().name(), "q8_0-pure");
        assert_eq!(FormatSpec::parse("bf16").unwrap().name(), "bf16");
        assert_eq!(
            FormatSpec::parse("fp8").unwrap(),
            FormatSpec::Safetensors(StKind::Fp8Block)
        );
        assert!(FormatSpec::parse("iq2_xxs").is_err());
        assert!(FormatSpec::parse("nonsense").is_err());
    }

    #[test]
    fn qwen_small_hidden_falls_back_like_llama_cpp() {
        let p = preset("qwen2.5-0.5b").unwrap();
        let defs = gguf_layout(&p);
        let t = gguf_types(&p, &defs, GgmlType::Q4_K, Mix::Medium);
        let of = |n: &str| t[defs.iter().position(|d| d.name == n).unwrap()];
        assert_eq!(of("token_embd.weight"), GgmlType::Q8_0);
        assert_eq!(of("blk.1.attn_q.weight"), GgmlType::Q5_0);
        assert_eq!(of("blk.0.ffn_down.weight"), GgmlType::Q6_K);
        assert_eq!(of("blk.0.attn_norm.weight"), GgmlType::F32);
    }
}
