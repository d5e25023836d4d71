//! The tensors of a preset, named as llama.cpp's GGUF names them or as Hugging Face checkpoints do.

use crate::blocks::Init;
use crate::preset::{Arch, Preset};

/// What a tensor does (decides its type in a mix and how its values are drawn).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Token embedding table.
    TokenEmbd,
    /// Output (LM head) projection.
    Output,
    /// A norm weight (1-D).
    Norm,
    /// A bias or small 1-D parameter.
    Bias,
    /// Attention query projection.
    AttnQ,
    /// Attention key projection.
    AttnK,
    /// Attention value projection.
    AttnV,
    /// Attention output projection.
    AttnO,
    /// Linear-attention fused q/k/v input projection.
    AttnQkv,
    /// Linear-attention output gate (z) projection.
    AttnGate,
    /// Linear-attention beta/alpha projections.
    SsmSmall,
    /// Linear-attention output projection.
    SsmOut,
    /// Short convolution weights (kept in f32).
    SsmConv,
    /// MLP (or expert) gate projection.
    FfnGate,
    /// MLP (or expert) up projection.
    FfnUp,
    /// MLP (or expert) down projection.
    FfnDown,
    /// MoE router (kept in f32).
    Router,
}

impl Role {
    /// Whether a GGUF mix quantizes tensors of this role (llama.cpp keeps norms, biases, the
    /// router and the short convolution unquantized).
    pub fn quantizable(self) -> bool {
        !matches!(self, Role::Norm | Role::Bias | Role::SsmConv | Role::Router)
    }
}

/// One tensor of a synthetic checkpoint.
#[derive(Debug, Clone, PartialEq)]
pub struct TensorDef {
    /// Name in the file.
    pub name: String,
    /// Row-major shape (outermost first).
    pub shape: Vec<usize>,
    /// Role.
    pub role: Role,
    /// Layer index, for per-layer tensors.
    pub layer: Option<usize>,
    /// How values are drawn.
    pub init: Init,
}

impl TensorDef {
    /// Number of elements.
    pub fn elements(&self) -> u64 {
        self.shape.iter().map(|&d| d as u64).product()
    }
    /// Innermost dimension (the one blocks run along).
    pub fn cols(&self) -> usize {
        *self.shape.last().unwrap_or(&1)
    }
}

/// Weight spread of the synthetic models.
pub const WEIGHT_STD: f32 = 0.02;

struct Out(Vec<TensorDef>);

impl Out {
    fn add(&mut self, name: String, shape: &[usize], role: Role, layer: Option<usize>) {
        let init = match role {
            Role::Norm => Init::around(1.0, 0.02),
            Role::Bias => Init::normal(WEIGHT_STD),
            _ => Init::normal(WEIGHT_STD),
        };
        self.add_init(name, shape, role, layer, init);
    }
    fn add_init(
        &mut self,
        name: String,
        shape: &[usize],
        role: Role,
        layer: Option<usize>,
        init: Init,
    ) {
        self.0.push(TensorDef {
            name,
            shape: shape.to_vec(),
            role,
            layer,
            init,
        });
    }
}

/// The tensors of `p` with llama.cpp's GGUF names, in file order.
pub fn gguf_layout(p: &Preset) -> Vec<TensorDef> {
    let mut o = Out(Vec::new());
    let (h, hd) = (p.hidden, p.head_dim);
    let (q, kv) = (p.heads * hd, p.kv_heads * hd);
    o.add(
        "token_embd.weight".into(),
        &[p.vocab, h],
        Role::TokenEmbd,
        None,
    );
    for il in 0..p.layers {
        let b = |s: &str| format!("blk.{il}.{s}");
        let l = Some(il);
        o.add(b("attn_norm.weight"), &[h], Role::Norm, l);
        if p.arch == Arch::Qwen35 {
            o.add(b("post_attention_norm.weight"), &[h], Role::Norm, l);
        }
        if p.is_full_attention(il) {
            let qw = if p.arch == Arch::Qwen35 { 2 * q } else { q };
            o.add(b("attn_q.weight"), &[qw, h], Role::AttnQ, l);
            o.add(b("attn_k.weight"), &[kv, h], Role::AttnK, l);
            o.add(b("attn_v.weight"), &[kv, h], Role::AttnV, l);
            if p.arch == Arch::Qwen2 {
                o.add(b("attn_q.bias"), &[q], Role::Bias, l);
                o.add(b("attn_k.bias"), &[kv], Role::Bias, l);
                o.add(b("attn_v.bias"), &[kv], Role::Bias, l);
            }
            o.add(b("attn_output.weight"), &[h, q], Role::AttnO, l);
            match p.arch {
                Arch::Qwen3Moe | Arch::Qwen35 => {
                    o.add(b("attn_q_norm.weight"), &[hd], Role::Norm, l);
                    o.add(b("attn_k_norm.weight"), &[hd], Role::Norm, l);
                }
                Arch::MinimaxM2 => {
                    o.add(b("attn_q_norm.weight"), &[q], Role::Norm, l);
                    o.add(b("attn_k_norm.weight"), &[kv], Role::Norm, l);
                }
                _ => {}
            }
        } else if let Some(la) = p.linear {
            let (kd, vd, nv) = (la.key_dim(), la.value_dim(), la.v_heads);
            o.add(b("attn_qkv.weight"), &[2 * kd + vd, h], Role::AttnQkv, l);
            o.add(b("attn_gate.weight"), &[vd, h], Role::AttnGate, l);
            o.add(
                b("ssm_conv1d.weight"),
                &[la.conv_dim(), la.conv],
                Role::SsmConv,
                l,
            );
            o.add_init(
                b("ssm_dt.bias"),
                &[nv],
                Role::Bias,
                l,
                Init::around(1.0, 0.3),
            );
            o.add_init(b("ssm_a"), &[nv], Role::Bias, l, Init::around(-6.0, 2.0));
            o.add(b("ssm_beta.weight"), &[nv, h], Role::SsmSmall, l);
            o.add(b("ssm_alpha.weight"), &[nv, h], Role::SsmSmall, l);
            o.add(b("ssm_norm.weight"), &[la.v_dim], Role::Norm, l);
            o.add(b("ssm_out.weight"), &[h, vd], Role::SsmOut, l);
        }
        if p.arch != Arch::Qwen35 {
            o.add(b("ffn_norm.weight"), &[h], Role::Norm, l);
        }
        match p.moe {
            Some(m) => {
                o.add(b("ffn_gate_inp.weight"), &[m.experts, h], Role::Router, l);
                o.add(
                    b("ffn_gate_exps.weight"),
                    &[m.experts, m.ffn, h],
                    Role::FfnGate,
                    l,
                );
                o.add(
                    b("ffn_up_exps.weight"),
                    &[m.experts, m.ffn, h],
                    Role::FfnUp,
                    l,
                );
                o.add(
                    b("ffn_down_exps.weight"),
                    &[m.experts, h, m.ffn],
                    Role::FfnDown,
                    l,
                );
                if p.arch == Arch::MinimaxM2 {
                    o.add(b("exp_probs_b.bias"), &[m.experts], Role::Bias, l);
                }
            }
            None => {
                o.add(b("ffn_gate.weight"), &[p.ffn, h], Role::FfnGate, l);
                o.add(b("ffn_up.weight"), &[p.ffn, h], Role::FfnUp, l);
                o.add(b("ffn_down.weight"), &[h, p.ffn], Role::FfnDown, l);
            }
        }
    }
    o.add("output_norm.weight".into(), &[h], Role::Norm, None);
    if !p.tied {
        o.add("output.weight".into(), &[p.vocab, h], Role::Output, None);
    }
    o.0
}

/// The tensors of `p` with Hugging Face names (text model), in file order.
pub fn hf_layout(p: &Preset) -> Vec<TensorDef> {
    let mut o = Out(Vec::new());
    let (h, hd) = (p.hidden, p.head_dim);
    let (q, kv) = (p.heads * hd, p.kv_heads * hd);
    // Qwen3.5 stores its decoder norms as offsets from one: (1 + w)
    let offset_norm = p.arch == Arch::Qwen35;
    let norm_init = if offset_norm {
        Init::normal(0.02)
    } else {
        Init::around(1.0, 0.02)
    };
    o.add(
        "model.embed_tokens.weight".into(),
        &[p.vocab, h],
        Role::TokenEmbd,
        None,
    );
    for il in 0..p.layers {
        let b = |s: &str| format!("model.layers.{il}.{s}");
        let l = Some(il);
        o.add_init(b("input_layernorm.weight"), &[h], Role::Norm, l, norm_init);
        o.add_init(
            b("post_attention_layernorm.weight"),
            &[h],
            Role::Norm,
            l,
            norm_init,
        );
        if p.is_full_attention(il) {
            let qw = if p.arch == Arch::Qwen35 { 2 * q } else { q };
            o.add(b("self_attn.q_proj.weight"), &[qw, h], Role::AttnQ, l);
            o.add(b("self_attn.k_proj.weight"), &[kv, h], Role::AttnK, l);
            o.add(b("self_attn.v_proj.weight"), &[kv, h], Role::AttnV, l);
            if p.arch == Arch::Qwen2 {
                o.add(b("self_attn.q_proj.bias"), &[q], Role::Bias, l);
                o.add(b("self_attn.k_proj.bias"), &[kv], Role::Bias, l);
                o.add(b("self_attn.v_proj.bias"), &[kv], Role::Bias, l);
            }
            o.add(b("self_attn.o_proj.weight"), &[h, q], Role::AttnO, l);
            match p.arch {
                Arch::Qwen3Moe | Arch::Qwen35 => {
                    o.add_init(
                        b("self_attn.q_norm.weight"),
                        &[hd],
                        Role::Norm,
                        l,
                        norm_init,
                    );
                    o.add_init(
                        b("self_attn.k_norm.weight"),
                        &[hd],
                        Role::Norm,
                        l,
                        norm_init,
                    );
                }
                Arch::MinimaxM2 => {
                    o.add(b("self_attn.q_norm.weight"), &[q], Role::Norm, l);
                    o.add(b("self_attn.k_norm.weight"), &[kv], Role::Norm, l);
                }
                _ => {}
            }
        } else if let Some(la) = p.linear {
            let (kd, vd, nv) = (la.key_dim(), la.value_dim(), la.v_heads);
            o.add(
                b("linear_attn.in_proj_qkv.weight"),
                &[2 * kd + vd, h],
                Role::AttnQkv,
                l,
            );
            o.add(
                b("linear_attn.in_proj_z.weight"),
                &[vd, h],
                Role::AttnGate,
                l,
            );
            o.add(
                b("linear_attn.in_proj_b.weight"),
                &[nv, h],
                Role::SsmSmall,
                l,
            );
            o.add(
                b("linear_attn.in_proj_a.weight"),
                &[nv, h],
                Role::SsmSmall,
                l,
            );
            o.add(
                b("linear_attn.conv1d.weight"),
                &[la.conv_dim(), 1, la.conv],
                Role::SsmConv,
                l,
            );
            o.add_init(
                b("linear_attn.dt_bias"),
                &[nv],
                Role::Bias,
                l,
                Init::around(1.0, 0.3),
            );
            o.add_init(
                b("linear_attn.A_log"),
                &[nv],
                Role::Bias,
                l,
                Init::around(1.5, 0.5),
            );
            o.add(b("linear_attn.norm.weight"), &[la.v_dim], Role::Norm, l);
            o.add(b("linear_attn.out_proj.weight"), &[h, vd], Role::SsmOut, l);
        }
        match (p.moe, p.arch) {
            (Some(m), Arch::MinimaxM2) => {
                o.add(
                    b("block_sparse_moe.gate.weight"),
                    &[m.experts, h],
                    Role::Router,
                    l,
                );
                o.add(
                    b("block_sparse_moe.e_score_correction_bias"),
                    &[m.experts],
                    Role::Bias,
                    l,
                );
                for e in 0..m.experts {
                    let x = |w: &str| b(&format!("block_sparse_moe.experts.{e}.{w}.weight"));
                    o.add(x("w1"), &[m.ffn, h], Role::FfnGate, l);
                    o.add(x("w3"), &[m.ffn, h], Role::FfnUp, l);
                    o.add(x("w2"), &[h, m.ffn], Role::FfnDown, l);
                }
            }
            (Some(m), _) => {
                o.add(b("mlp.gate.weight"), &[m.experts, h], Role::Router, l);
                for e in 0..m.experts {
                    let x = |w: &str| b(&format!("mlp.experts.{e}.{w}.weight"));
                    o.add(x("gate_proj"), &[m.ffn, h], Role::FfnGate, l);
                    o.add(x("up_proj"), &[m.ffn, h], Role::FfnUp, l);
                    o.add(x("down_proj"), &[h, m.ffn], Role::FfnDown, l);
                }
            }
            (None, _) => {
                o.add(b("mlp.gate_proj.weight"), &[p.ffn, h], Role::FfnGate, l);
                o.add(b("mlp.up_proj.weight"), &[p.ffn, h], Role::FfnUp, l);
                o.add(b("mlp.down_proj.weight"), &[h, p.ffn], Role::FfnDown, l);
            }
        }
    }
    o.add_init(
        "model.norm.weight".into(),
        &[h],
        Role::Norm,
        None,
        norm_init,
    );
    if !p.tied {
        o.add("lm_head.weight".into(), &[p.vocab, h], Role::Output, None);
    }
    o.0
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::preset::preset;

    fn params(defs: &[TensorDef]) -> u64 {
        defs.iter().map(|d| d.elements()).sum()
    }

    #[test]
    fn parameter_counts_match_the_real_models() {
        let b = |n: &str| params(&gguf_layout(&preset(n).unwrap())) as f64 / 1e9;
        assert!(
            (0.13..0.14).contains(&b("smollm-135m")),
            "{}",
            b("smollm-135m")
        );
        assert!(
            (0.49..0.50).contains(&b("qwen2.5-0.5b")),
            "{}",
            b("qwen2.5-0.5b")
        );
        assert!((8.0..8.1).contains(&b("llama3-8b")), "{}", b("llama3-8b"));
        assert!(
            (70.5..70.6).contains(&b("llama3-70b")),
            "{}",
            b("llama3-70b")
        );
        assert!(
            (30.4..30.6).contains(&b("qwen3-30b-a3b")),
            "{}",
            b("qwen3-30b-a3b")
        );
        assert!(
            (26.5..27.5).contains(&b("qwen3.5-27b")),
            "{}",
            b("qwen3.5-27b")
        );
        assert!(
            (228.0..231.0).contains(&b("minimax-m2")),
            "{}",
            b("minimax-m2")
        );
    }

    #[test]
    fn hf_and_gguf_hold_the_same_parameters() {
        for n in [
            "smollm-135m",
            "qwen2.5-0.5b",
            "qwen3-30b-a3b",
            "qwen3.5-27b",
            "qwen3.5-tiny",
        ] {
            let p = preset(n).unwrap();
            assert_eq!(params(&gguf_layout(&p)), params(&hf_layout(&p)), "{n}");
        }
    }
}
