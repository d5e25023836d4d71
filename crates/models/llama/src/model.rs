//! The family's forward pass, written once against pocket-layers for every format and device.

use std::sync::Arc;

use pocket_formats::{StoreMetadata, TensorStore};
use pocket_kernels::rope::DeviceRope;
use pocket_kernels::{AttentionParams, Device, Tensor, Weight};
use pocket_layers::model::DECODE_GRAPH_MAX_SEQS;
use pocket_layers::norm::ResidualNorm;
use pocket_layers::scratch::{fit, workspace};
use pocket_layers::{
    stack_projections, Attention, AttentionScratch, BatchPlan, BatchTensors, GateUp, KvCache,
    LayerError, Linear, Mlp, MlpScratch, Model, ModelInfo, QkvProj, Result, RmsNorm,
};

use crate::config::LlamaConfig;
use crate::load::{Loader, Part};

/// Options that shape a load.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoadOptions {
    /// Longest sequence the engine will run (sizes the RoPE table); capped at the model's context.
    pub max_seq_len: usize,
}

impl Default for LoadOptions {
    fn default() -> Self {
        LoadOptions { max_seq_len: 8192 }
    }
}

/// One transformer block.
struct Block {
    attn_norm: RmsNorm,
    attn: Attention,
    ffn_norm: RmsNorm,
    mlp: Mlp,
}

/// Activations reused across steps.
struct Workspace {
    batch: BatchTensors,
    /// Fixed-capacity inputs of graph-captured decode steps (allocated on first use).
    decode: Option<BatchTensors>,
    hidden: Tensor,
    /// Each layer's normalized input (and the final norm's output).
    normed: Tensor,
    /// The normalized residual between a layer's attention and its MLP: a second buffer, as the
    /// folded projection + norm writes it while the attention still borrows `normed`.
    mid: Tensor,
    delta: Tensor,
    last: Tensor,
    logits: Tensor,
    attn: AttentionScratch,
    mlp: MlpScratch,
}

/// A loaded Llama / Qwen2 / Qwen3 / SmolLM2 model.
pub struct LlamaModel {
    config: LlamaConfig,
    info: ModelInfo,
    dev: Device,
    embed: Weight,
    lm_head: Option<Weight>,
    blocks: Vec<Block>,
    norm: RmsNorm,
    rope: DeviceRope,
    ws: Workspace,
    _store: Arc<TensorStore>,
}

impl LlamaModel {
    /// Loads a model of the family from a GGUF file or a safetensors checkpoint with its
    /// `config.json`, placing the weights on `dev`. Q/K/V and gate/up are stacked into one
    /// weight each where [`stack_projections`] says it pays on `dev` (CUDA).
    pub fn load(store: Arc<TensorStore>, dev: &Device, opts: LoadOptions) -> Result<LlamaModel> {
        Self::load_with_stacking(store, dev, opts, stack_projections(dev))
    }

    /// [`LlamaModel::load`] with the stacking of Q/K/V and gate/up chosen by the caller (`stack`;
    /// parts that cannot be stacked byte-wise stay separate either way).
    pub fn load_with_stacking(
        store: Arc<TensorStore>,
        dev: &Device,
        opts: LoadOptions,
        stack: bool,
    ) -> Result<LlamaModel> {
        let ld = Loader::new(store.clone(), dev.clone());
        let (embed_name, norm_name, out_name) = ld.global_names();
        let config = match store.metadata() {
            StoreMetadata::Gguf(md) => {
                let rows = ld.shape(embed_name)?.first().copied().unwrap_or(0);
                LlamaConfig::from_gguf(md, rows)?
            }
            StoreMetadata::Safetensors { config, .. } => {
                let c = config
                    .ok_or_else(|| LayerError::Config("checkpoint has no config.json".into()))?;
                LlamaConfig::from_hf(c)?
            }
        };
        let c = &config;
        let (h, qw, kw) = (
            c.hidden_size,
            c.num_heads * c.head_dim,
            c.num_kv_heads * c.head_dim,
        );
        let embed = ld.weight(embed_name, c.vocab_size, h)?;
        let lm_head = if ld.contains(out_name) {
            Some(ld.weight(out_name, c.vocab_size, h)?)
        } else {
            None
        };
        let params = AttentionParams {
            num_heads: c.num_heads,
            num_kv_heads: c.num_kv_heads,
            head_dim: c.head_dim,
            scale: 1.0 / (c.head_dim as f32).sqrt(),
            sliding_window: None,
            softcap: None,
        };
        let norm = |name: String, len| -> Result<RmsNorm> {
            Ok(RmsNorm::new(ld.vector(&name, len)?, c.rms_norm_eps))
        };
        let linear = |l, part, rows, cols, bias: bool| -> Result<Linear> {
            let w = ld.weight(&ld.layer_name(l, part, false), rows, cols)?;
            let b = if bias {
                Some(ld.vector(&ld.layer_name(l, part, true), rows)?)
            } else {
                None
            };
            Linear::new(w, b)
        };
        // Rows of several parts stacked into one weight (biases alike), or `None` if their
        // formats differ or their tiles do not stack.
        let stacked = |l, parts: &[(Part, usize)], cols, bias: bool| -> Result<Option<Linear>> {
            if !stack {
                return Ok(None);
            }
            let names: Vec<(String, usize)> = parts
                .iter()
                .map(|&(p, r)| (ld.layer_name(l, p, false), r))
                .collect();
            let refs: Vec<(&str, usize)> = names.iter().map(|(n, r)| (n.as_str(), *r)).collect();
            let Some(w) = ld.stacked_weight(&refs, cols)? else {
                return Ok(None);
            };
            let b = if bias {
                let names: Vec<(String, usize)> = parts
                    .iter()
                    .map(|&(p, r)| (ld.layer_name(l, p, true), r))
                    .collect();
                let refs: Vec<(&str, usize)> =
                    names.iter().map(|(n, r)| (n.as_str(), *r)).collect();
                Some(ld.stacked_vector(&refs)?)
            } else {
                None
            };
            Ok(Some(Linear::new(w, b)?))
        };
        let mut blocks = Vec::with_capacity(c.num_layers);
        for l in 0..c.num_layers {
            let qkv_parts = [(Part::Q, qw), (Part::K, kw), (Part::V, kw)];
            let qkv = match stacked(l, &qkv_parts, h, c.qkv_bias)? {
                Some(w) => QkvProj::Fused(w),
                None => QkvProj::Separate {
                    q: linear(l, Part::Q, qw, h, c.qkv_bias)?,
                    k: linear(l, Part::K, kw, h, c.qkv_bias)?,
                    v: linear(l, Part::V, kw, h, c.qkv_bias)?,
                },
            };
            let attn = Attention {
                qkv,
                o: linear(l, Part::O, h, qw, false)?,
                q_norm: if c.qk_norm {
                    Some(norm(ld.layer_name(l, Part::QNorm, false), c.head_dim)?)
                } else {
                    None
                },
                output_gate: false,
                k_norm: if c.qk_norm {
                    Some(norm(ld.layer_name(l, Part::KNorm, false), c.head_dim)?)
                } else {
                    None
                },
                params: AttentionParams {
                    sliding_window: c.layer_windows[l],
                    ..params
                },
                cache_layer: l,
            };
            attn.validate()?;
            let ff = c.intermediate_size;
            let gate_up = match stacked(l, &[(Part::Gate, ff), (Part::Up, ff)], h, false)? {
                Some(w) => GateUp::Fused(w),
                None => GateUp::Separate {
                    gate: linear(l, Part::Gate, ff, h, false)?,
                    up: linear(l, Part::Up, ff, h, false)?,
                },
            };
            blocks.push(Block {
                attn_norm: norm(ld.layer_name(l, Part::AttnNorm, false), h)?,
                attn,
                ffn_norm: norm(ld.layer_name(l, Part::FfnNorm, false), h)?,
                mlp: Mlp::new(gate_up, linear(l, Part::Down, h, ff, false)?)?,
            });
        }
        let max_pos = opts.max_seq_len.min(c.max_context).max(1);
        let rope = dev.upload_rope(&ld.rope_table(c.rope, max_pos)?)?;
        let info = ModelInfo {
            architecture: c.variant.name().to_string(),
            vocab_size: c.vocab_size,
            hidden_size: h,
            num_layers: c.num_layers,
            num_kv_heads: c.num_kv_heads,
            head_dim: c.head_dim,
            max_context: max_pos,
        };
        let rows = 16;
        let ws = Workspace {
            batch: BatchTensors::new(dev)?,
            decode: None,
            hidden: workspace(dev, rows, h)?,
            normed: workspace(dev, rows, h)?,
            mid: workspace(dev, rows, h)?,
            delta: workspace(dev, rows, h)?,
            last: workspace(dev, rows, h)?,
            logits: workspace(dev, rows, c.vocab_size)?,
            attn: AttentionScratch::new(dev, rows, &params)?,
            mlp: MlpScratch::new(dev, rows, c.intermediate_size)?,
        };
        Ok(LlamaModel {
            norm: norm(norm_name.to_string(), h)?,
            config,
            info,
            dev: dev.clone(),
            embed,
            lm_head,
            blocks,
            rope,
            ws,
            _store: store,
        })
    }

    /// The configuration read from the checkpoint.
    pub fn config(&self) -> &LlamaConfig {
        &self.config
    }

    /// How many layers run a stacked Q/K/V weight and how many a stacked gate/up weight.
    pub fn stacked_projections(&self) -> (usize, usize) {
        let qkv = self
            .blocks
            .iter()
            .filter(|b| matches!(b.attn.qkv, QkvProj::Fused(_)));
        let mlp = self
            .blocks
            .iter()
            .filter(|b| matches!(b.mlp.gate_up, GateUp::Fused(_)));
        (qkv.count(), mlp.count())
    }
}

impl Model for LlamaModel {
    fn info(&self) -> &ModelInfo {
        &self.info
    }

    fn device(&self) -> &Device {
        &self.dev
    }

    fn forward(&mut self, plan: &BatchPlan, cache: &mut KvCache) -> Result<&Tensor> {
        let (n, s) = (plan.num_tokens(), plan.num_seqs());
        if n == 0 {
            return Err(LayerError::Shape("empty batch".into()));
        }
        self.ws.batch.upload(&self.dev, plan)?;
        self.run(false, n, s, cache)
    }

    fn supports_decode_graphs(&self) -> bool {
        true
    }

    fn prepare_decode(&mut self, plan: &BatchPlan) -> Result<()> {
        let s = plan.num_seqs();
        if s == 0 || s > DECODE_GRAPH_MAX_SEQS || plan.num_tokens() != s {
            return Err(LayerError::Shape(format!(
                "decode batch of {} tokens over {s} sequences",
                plan.num_tokens()
            )));
        }
        if self.ws.decode.is_none() {
            self.ws.decode = Some(BatchTensors::with_capacity(
                &self.dev,
                DECODE_GRAPH_MAX_SEQS,
                plan.max_blocks,
            )?);
        }
        if let Some(b) = self.ws.decode.as_mut() {
            b.write_fixed(&self.dev, plan)?;
        }
        // A replay does not run `run`'s `fit`s: view the logits as this batch's rows here (an
        // eager step may have left another shape; the capacity of 16 rows is never exceeded).
        fit(&self.dev, &mut self.ws.logits, s)?;
        Ok(())
    }

    fn decode_logits(&self) -> Option<&Tensor> {
        self.ws.decode.as_ref().map(|_| &self.ws.logits)
    }

    fn forward_decode(&mut self, cache: &mut KvCache) -> Result<&Tensor> {
        let s = match &self.ws.decode {
            Some(b) if b.meta.num_seqs > 0 => b.meta.num_seqs,
            _ => return Err(LayerError::Shape("no decode batch prepared".into())),
        };
        self.run(true, s, s, cache)
    }
}

impl LlamaModel {
    /// The forward over the batch in `ws.batch` (or `ws.decode` when `decode`): `n` tokens of
    /// `s` sequences, launching kernels only (workspaces grow, never shrink, with `n`).
    fn run(&mut self, decode: bool, n: usize, s: usize, cache: &mut KvCache) -> Result<&Tensor> {
        let dev = &self.dev;
        let ws = &mut self.ws;
        let batch = match (&ws.decode, decode) {
            (Some(b), true) => b,
            (None, true) => return Err(LayerError::Shape("no decode batch prepared".into())),
            (_, false) => &ws.batch,
        };
        for t in [&mut ws.hidden, &mut ws.normed, &mut ws.mid, &mut ws.delta] {
            fit(dev, t, n)?;
        }
        dev.embedding(&self.embed, &batch.ids, &mut ws.hidden)?;
        self.blocks[0]
            .attn_norm
            .forward(dev, &ws.hidden, &mut ws.normed)?;
        // Each block ends its attention with `ffn_norm` into `mid` and its MLP with the next
        // block's `attn_norm` (the final norm after the last) into `normed`, each folded into
        // the projection where the device can (one launch per fold on CUDA decode).
        for (l, b) in self.blocks.iter().enumerate() {
            b.attn.forward_add_norm(
                dev,
                &ws.normed,
                batch,
                &self.rope,
                cache,
                &mut ws.attn,
                &mut ws.delta,
                ResidualNorm {
                    norm: &b.ffn_norm,
                    residual: &mut ws.hidden,
                    normed: &mut ws.mid,
                },
            )?;
            let next = self
                .blocks
                .get(l + 1)
                .map_or(&self.norm, |nb| &nb.attn_norm);
            b.mlp.forward_add_norm(
                dev,
                &ws.mid,
                &mut ws.mlp,
                &mut ws.delta,
                ResidualNorm {
                    norm: next,
                    residual: &mut ws.hidden,
                    normed: &mut ws.normed,
                },
            )?;
        }
        fit(dev, &mut ws.last, s)?;
        fit(dev, &mut ws.logits, s)?;
        dev.gather_rows(&ws.normed, &batch.last_rows, &mut ws.last)?;
        dev.matmul(
            &ws.last,
            self.lm_head.as_ref().unwrap_or(&self.embed),
            &mut ws.logits,
        )?;
        Ok(&ws.logits)
    }
}
