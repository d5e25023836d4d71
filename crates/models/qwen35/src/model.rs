//! The Qwen3.5 text model: embeddings, a `layer_types` schedule of Gated DeltaNet and gated
//! full-attention blocks (each followed by a dense SwiGLU MLP), final norm and LM head. Written
//! once against pocket-layers for every weight format and device.

use std::sync::Arc;

use pocket_formats::{StoreMetadata, TensorStore};
use pocket_kernels::rope::DeviceRope;
use pocket_kernels::Weight;
use pocket_kernels::{AttentionParams, DeltaRuleParams, Device, HeadGrouping, RopeTable, Tensor};
use pocket_layers::model::{is_decode_padding, DECODE_GRAPH_MAX_SEQS};
use pocket_layers::norm::ResidualNorm;
use pocket_layers::scratch::{fit, workspace};
use pocket_layers::{
    stack_projections, BatchPlan, BatchTensors, DeltaNetScratch, GateUp, GatedDeltaNet, KvCache,
    LayerError, Linear, Mlp, MlpScratch, Model, ModelInfo, ProjPair, QkvProj, Result, RmsNorm,
    SeqId, StateBatch, StateCache, StateCacheConfig,
};

pub use crate::config::LoadOptions;

use crate::config::{check_quantization, LayerKind, Qwen35Config};
use crate::load::{Loader, Naming, Part};
use pocket_layers::{Attention, AttentionScratch};

/// A block's token mixer.
enum Mixer {
    Linear(Box<GatedDeltaNet>),
    Full(Box<Attention>),
}

/// One decoder block.
struct Block {
    attn_norm: RmsNorm,
    mixer: Mixer,
    ffn_norm: RmsNorm,
    mlp: Mlp,
}

/// Fixed-capacity inputs of graph-captured decode steps: the batch (ids, positions, block
/// tables) and the recurrent metadata (state slots, has_state), rewritten in place each step.
struct DecodeInputs {
    batch: BatchTensors,
    states: StateBatch,
    /// The prepared step's real sequences (their states are dropped if the step fails).
    seq_ids: Vec<SeqId>,
}

/// Activations reused across steps.
struct Workspace {
    batch: BatchTensors,
    states: StateBatch,
    decode: Option<DecodeInputs>,
    hidden: Tensor,
    /// Each layer's normalized input (and the final norm's output).
    normed: Tensor,
    /// The normalized residual between a layer's attention and its MLP: a second buffer, as the
    /// folded projection + norm writes it while the attention still borrows `normed`.
    mid: Tensor,
    delta: Tensor,
    last: Tensor,
    logits: Tensor,
    attn: Option<AttentionScratch>,
    deltanet: Option<DeltaNetScratch>,
    mlp: MlpScratch,
}

/// A loaded Qwen3.5 text model with its recurrent state cache.
pub struct Qwen35Model {
    config: Qwen35Config,
    info: ModelInfo,
    dev: Device,
    embed: Weight,
    lm_head: Option<Weight>,
    blocks: Vec<Block>,
    norm: RmsNorm,
    rope: DeviceRope,
    states: StateCache,
    ws: Workspace,
    notes: Vec<String>,
    _store: Arc<TensorStore>,
}

impl Qwen35Model {
    /// Loads the text model of a Qwen3.5 checkpoint (safetensors with `config.json`, BF16 or FP8
    /// block-scaled; or a llama.cpp `qwen35` GGUF) onto `dev`. A vision tower or MTP head in the
    /// checkpoint is skipped and named in [`Qwen35Model::notes`]. The full-attention layers'
    /// Q/K/V and every MLP's gate/up are stacked into one weight each where
    /// [`stack_projections`] says it pays on `dev` (CUDA).
    pub fn load(store: Arc<TensorStore>, dev: &Device, opts: LoadOptions) -> Result<Qwen35Model> {
        Self::load_with_stacking(store, dev, opts, stack_projections(dev))
    }

    /// [`Qwen35Model::load`] with the stacking of Q/K/V and gate/up chosen by the caller
    /// (`stack`; parts that cannot be stacked byte-wise stay separate either way).
    pub fn load_with_stacking(
        store: Arc<TensorStore>,
        dev: &Device,
        opts: LoadOptions,
        stack: bool,
    ) -> Result<Qwen35Model> {
        let ld = Loader::new(store.clone(), dev.clone())?;
        let (embed_name, norm_name, out_name) = ld.global_names();
        let mut notes = Vec::new();
        let config = match store.metadata() {
            StoreMetadata::Gguf(md) => {
                let rows = ld.shape(&embed_name)?.first().copied().unwrap_or(0);
                Qwen35Config::from_gguf(md, rows)?
            }
            StoreMetadata::Safetensors { config, .. } => {
                let c = config
                    .ok_or_else(|| LayerError::Config("checkpoint has no config.json".into()))?;
                check_quantization(c)?;
                let (cfg, has_vision) = Qwen35Config::from_hf(c)?;
                let visual = ld.count_prefix("model.visual.");
                if has_vision || visual > 0 {
                    notes.push(format!(
                        "vision tower ignored: {visual} tensors under `model.visual.` are not loaded (text model only)"
                    ));
                }
                cfg
            }
        };
        let mtp = ld.count_prefix("mtp.");
        if mtp > 0 {
            notes.push(format!(
                "MTP head ignored: {mtp} tensors under `mtp.` are not run"
            ));
        }
        let c = &config;
        let gguf = *ld.naming() == Naming::Gguf;
        let h = c.hidden_size;
        let embed = ld.weight(&embed_name, c.vocab_size, h)?;
        let lm_head = if ld.contains(&out_name) {
            Some(ld.weight(&out_name, c.vocab_size, h)?)
        } else if c.tie_word_embeddings || gguf {
            None
        } else {
            return Err(LayerError::Checkpoint(format!(
                "`{out_name}` is missing and tie_word_embeddings is false"
            )));
        };
        let dev_vec = |v: &[f32]| -> Result<Tensor> { Ok(dev.upload_f32(v, &[v.len()])?) };
        // Zero-centred RMSNorm scales (Hugging Face) are applied as 1 + w; llama.cpp stores 1 + w.
        let norm = |name: &str, len: usize| -> Result<RmsNorm> {
            let mut w = ld.values(name, len)?;
            if !gguf {
                w.iter_mut().for_each(|x| *x += 1.0);
            }
            Ok(RmsNorm::new(dev_vec(&w)?, c.rms_norm_eps))
        };
        let linear = |l: usize, part: Part, rows: usize, cols: usize| -> Result<Linear> {
            Linear::new(ld.weight(&ld.layer_name(l, part), rows, cols)?, None)
        };
        // Rows of several parts stacked into one weight, or `None` if their formats differ or
        // their tiles do not stack.
        let stacked = |l: usize, parts: &[(Part, usize)], cols: usize| -> Result<Option<Linear>> {
            if !stack {
                return Ok(None);
            }
            let names: Vec<(String, usize)> = parts
                .iter()
                .map(|&(p, r)| (ld.layer_name(l, p), r))
                .collect();
            let refs: Vec<(&str, usize)> = names.iter().map(|(n, r)| (n.as_str(), *r)).collect();
            ld.stacked_weight(&refs, cols)?
                .map(|w| Linear::new(w, None))
                .transpose()
        };
        let attn_params = AttentionParams {
            num_heads: c.num_heads,
            num_kv_heads: c.num_kv_heads,
            head_dim: c.head_dim,
            scale: 1.0 / (c.head_dim as f32).sqrt(),
            sliding_window: None,
            softcap: None,
        };
        let delta_params = DeltaRuleParams {
            k_heads: c.linear_k_heads,
            v_heads: c.linear_v_heads,
            k_dim: c.linear_k_dim,
            v_dim: c.linear_v_dim,
            grouping: if gguf {
                HeadGrouping::Tiled
            } else {
                HeadGrouping::Grouped
            },
            l2_eps: 1e-6,
            scale: 1.0 / (c.linear_k_dim as f32).sqrt(),
        };
        let (qw, kw) = (c.num_heads * c.head_dim, c.num_kv_heads * c.head_dim);
        let (vw, hv) = (c.linear_v_heads * c.linear_v_dim, c.linear_v_heads);
        let (mut n_full, mut n_lin) = (0, 0);
        let mut blocks = Vec::with_capacity(c.layers.len());
        for (l, kind) in c.layers.iter().enumerate() {
            let mixer = match kind {
                LayerKind::Full => {
                    // Gated attention: `[query | gate]` per head from one projection (stacked
                    // with K and V, its rows come out first and are split per head as before).
                    let parts = [(Part::Q, 2 * qw), (Part::K, kw), (Part::V, kw)];
                    let qkv = match stacked(l, &parts, h)? {
                        Some(w) => QkvProj::Fused(w),
                        None => QkvProj::Separate {
                            q: linear(l, Part::Q, 2 * qw, h)?,
                            k: linear(l, Part::K, kw, h)?,
                            v: linear(l, Part::V, kw, h)?,
                        },
                    };
                    let a = Attention {
                        qkv,
                        o: linear(l, Part::O, h, qw)?,
                        q_norm: Some(norm(&ld.layer_name(l, Part::QNorm), c.head_dim)?),
                        k_norm: Some(norm(&ld.layer_name(l, Part::KNorm), c.head_dim)?),
                        output_gate: true,
                        params: attn_params,
                        cache_layer: n_full,
                    };
                    a.validate()?;
                    n_full += 1;
                    Mixer::Full(Box::new(a))
                }
                LayerKind::Linear => {
                    let w = delta_params.qkv_width();
                    let conv = ld.values(&ld.layer_name(l, Part::Conv), w * c.conv_kernel)?;
                    let mut a = ld.values(&ld.layer_name(l, Part::A), hv)?;
                    if !gguf {
                        // Hugging Face stores A_log; the decay rate is -exp(A_log).
                        a.iter_mut().for_each(|x| *x = -x.exp());
                    }
                    // `[q | k | v | z]` (FP8: when the 128-row tiles do not straddle the two)
                    // and `[b | a]`, each stacked when both parts share a format.
                    let pair = |parts: [(Part, usize); 2]| -> Result<ProjPair> {
                        Ok(match stacked(l, &parts, h)? {
                            Some(w) => ProjPair::Fused(w),
                            None => ProjPair::Separate {
                                first: linear(l, parts[0].0, parts[0].1, h)?,
                                second: linear(l, parts[1].0, parts[1].1, h)?,
                            },
                        })
                    };
                    let d = GatedDeltaNet {
                        in_qkvz: pair([(Part::InQkv, w), (Part::InZ, vw)])?,
                        in_ba: pair([(Part::InB, hv), (Part::InA, hv)])?,
                        out: linear(l, Part::Out, h, vw)?,
                        conv_weight: dev.upload_f32(&conv, &[w, c.conv_kernel])?,
                        a_neg: dev_vec(&a)?,
                        dt_bias: dev_vec(&ld.values(&ld.layer_name(l, Part::DtBias), hv)?)?,
                        norm_weight: dev_vec(
                            &ld.values(&ld.layer_name(l, Part::GatedNorm), c.linear_v_dim)?,
                        )?,
                        norm_eps: c.rms_norm_eps,
                        params: delta_params,
                        state_layer: n_lin,
                    };
                    d.validate()?;
                    n_lin += 1;
                    Mixer::Linear(Box::new(d))
                }
            };
            let ff = c.intermediate_size;
            let gate_up = match stacked(l, &[(Part::Gate, ff), (Part::Up, ff)], h)? {
                Some(w) => GateUp::Fused(w),
                None => GateUp::Separate {
                    gate: linear(l, Part::Gate, ff, h)?,
                    up: linear(l, Part::Up, ff, h)?,
                },
            };
            blocks.push(Block {
                attn_norm: norm(&ld.layer_name(l, Part::AttnNorm), h)?,
                mixer,
                ffn_norm: norm(&ld.layer_name(l, Part::FfnNorm), h)?,
                mlp: Mlp::new(gate_up, linear(l, Part::Down, h, ff)?)?,
            });
        }
        let max_pos = opts.max_seq_len.min(c.max_context).max(1);
        let rope = dev.upload_rope(&RopeTable::new(c.rope, max_pos))?;
        let info = ModelInfo {
            architecture: "qwen35".to_string(),
            vocab_size: c.vocab_size,
            hidden_size: h,
            num_layers: n_full,
            num_kv_heads: c.num_kv_heads,
            head_dim: c.head_dim,
            max_context: max_pos,
        };
        let states = StateCache::new(
            dev,
            StateCacheConfig {
                num_layers: n_lin,
                slot_shapes: GatedDeltaNet::slot_shapes(&delta_params, c.conv_kernel),
                max_seqs: opts.max_seqs,
                spare_slots: if dev.supports_graphs() {
                    DECODE_PAD_SPARE_SLOTS
                } else {
                    0
                },
            },
        )?;
        let rows = 16;
        let ws = Workspace {
            batch: BatchTensors::new(dev)?,
            states: StateBatch::new(dev)?,
            decode: None,
            hidden: workspace(dev, rows, h)?,
            normed: workspace(dev, rows, h)?,
            mid: workspace(dev, rows, h)?,
            delta: workspace(dev, rows, h)?,
            last: workspace(dev, rows, h)?,
            logits: workspace(dev, rows, c.vocab_size)?,
            attn: if n_full > 0 {
                Some(AttentionScratch::new_gated(dev, rows, &attn_params)?)
            } else {
                None
            },
            deltanet: if n_lin > 0 {
                Some(DeltaNetScratch::new(dev, rows, &delta_params)?)
            } else {
                None
            },
            mlp: MlpScratch::new(dev, rows, c.intermediate_size)?,
        };
        Ok(Qwen35Model {
            norm: norm(&norm_name, h)?,
            config,
            info,
            dev: dev.clone(),
            embed,
            lm_head,
            blocks,
            rope,
            states,
            ws,
            notes,
            _store: store,
        })
    }

    /// The configuration read from the checkpoint.
    pub fn config(&self) -> &Qwen35Config {
        &self.config
    }

    /// How many Gated DeltaNet layers run a stacked `[q | k | v | z]` weight and how many a
    /// stacked `[b | a]` weight.
    pub fn stacked_deltanet_projections(&self) -> (usize, usize) {
        let lin = || {
            self.blocks.iter().filter_map(|b| match &b.mixer {
                Mixer::Linear(d) => Some(d),
                Mixer::Full(_) => None,
            })
        };
        (
            lin().filter(|d| d.in_qkvz.is_fused()).count(),
            lin().filter(|d| d.in_ba.is_fused()).count(),
        )
    }

    /// How many full-attention layers run a stacked Q/K/V weight and how many blocks a stacked
    /// gate/up weight.
    pub fn stacked_projections(&self) -> (usize, usize) {
        let qkv = self
            .blocks
            .iter()
            .filter(|b| matches!(&b.mixer, Mixer::Full(a) if matches!(a.qkv, QkvProj::Fused(_))));
        let mlp = self
            .blocks
            .iter()
            .filter(|b| matches!(b.mlp.gate_up, GateUp::Fused(_)));
        (qkv.count(), mlp.count())
    }

    /// What the load skipped (vision tower, MTP head), one line each.
    pub fn notes(&self) -> &[String] {
        &self.notes
    }

    /// The recurrent state cache (one slot per live sequence).
    pub fn state_cache(&self) -> &StateCache {
        &self.states
    }

    /// Releases a finished sequence's recurrent state slot (slots of sequences the KV cache no
    /// longer knows are also reclaimed on demand).
    pub fn free_sequence(&mut self, id: SeqId) {
        self.states.free_sequence(id);
    }

    /// Plans the states of `plan`, uploads it and runs it.
    fn eager(&mut self, plan: &BatchPlan, cache: &mut KvCache) -> Result<()> {
        let sp = self.states.plan(plan, |id| cache.contains(id))?;
        self.ws.batch.upload(&self.dev, plan)?;
        self.ws.states.upload(&self.dev, &sp)?;
        self.run(false, plan.num_tokens(), plan.num_seqs(), cache)
    }

    /// The forward over the batch in `ws.batch` / `ws.states` (or `ws.decode` when `decode`):
    /// `n` tokens of `s` sequences, launching kernels only (workspaces grow, never shrink).
    fn run(&mut self, decode: bool, n: usize, s: usize, cache: &mut KvCache) -> Result<()> {
        let dev = &self.dev;
        let ws = &mut self.ws;
        let (batch, meta) = match (&ws.decode, decode) {
            (Some(d), true) => (&d.batch, &d.states.meta),
            (None, true) => return Err(LayerError::Shape("no decode batch prepared".into())),
            (_, false) => (&ws.batch, &ws.states.meta),
        };
        for t in [&mut ws.hidden, &mut ws.normed, &mut ws.mid, &mut ws.delta] {
            fit(dev, t, n)?;
        }
        dev.embedding(&self.embed, &batch.ids, &mut ws.hidden)?;
        self.blocks[0]
            .attn_norm
            .forward(dev, &ws.hidden, &mut ws.normed)?;
        // Mixer + `ffn_norm` into `mid`, MLP + the next `attn_norm` (or final norm) into `normed`;
        // every block folds the norm into its last GEMV where the device can.
        for (l, b) in self.blocks.iter().enumerate() {
            match &b.mixer {
                Mixer::Full(a) => {
                    let s = ws.attn.as_mut().ok_or_else(|| scratch_missing(l))?;
                    let then = ResidualNorm {
                        norm: &b.ffn_norm,
                        residual: &mut ws.hidden,
                        normed: &mut ws.mid,
                    };
                    a.forward_add_norm(
                        dev,
                        &ws.normed,
                        batch,
                        &self.rope,
                        cache,
                        s,
                        &mut ws.delta,
                        then,
                    )?
                }
                Mixer::Linear(d) => {
                    let s = ws.deltanet.as_mut().ok_or_else(|| scratch_missing(l))?;
                    let then = ResidualNorm {
                        norm: &b.ffn_norm,
                        residual: &mut ws.hidden,
                        normed: &mut ws.mid,
                    };
                    d.forward_add_norm(
                        dev,
                        &ws.normed,
                        meta,
                        &mut self.states,
                        s,
                        &mut ws.delta,
                        then,
                    )?;
                }
            }
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
        Ok(())
    }
}

fn scratch_missing(l: usize) -> LayerError {
    LayerError::Config(format!("layer {l}: no workspace for its mixer"))
}

impl Model for Qwen35Model {
    fn info(&self) -> &ModelInfo {
        &self.info
    }

    fn device(&self) -> &Device {
        &self.dev
    }

    fn forward(&mut self, plan: &BatchPlan, cache: &mut KvCache) -> Result<&Tensor> {
        if plan.num_tokens() == 0 {
            return Err(LayerError::Shape("empty batch".into()));
        }
        if let Err(e) = self.eager(plan, cache) {
            // A failed step may have advanced some layers' states: they cannot be trusted.
            for &id in &plan.seq_ids {
                self.states.free_sequence(id);
            }
            return Err(e);
        }
        Ok(&self.ws.logits)
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
            self.ws.decode = Some(DecodeInputs {
                batch: BatchTensors::with_capacity(
                    &self.dev,
                    DECODE_GRAPH_MAX_SEQS,
                    plan.max_blocks,
                )?,
                states: StateBatch::with_capacity(&self.dev, DECODE_GRAPH_MAX_SEQS)?,
                seq_ids: Vec::new(),
            });
        }
        // Padding rows get spare state slots. Real rows continue their states (the engine runs a
        // sequence's first step eagerly), so no slot is reclaimed here.
        let sp = self.states.plan_padded(plan, is_decode_padding, |_| true)?;
        let real: Vec<SeqId> = plan
            .seq_ids
            .iter()
            .copied()
            .filter(|&id| !is_decode_padding(id))
            .collect();
        let written = match self.ws.decode.as_mut() {
            Some(d) => {
                d.seq_ids.clone_from(&real);
                d.batch
                    .write_fixed(&self.dev, plan)
                    .and_then(|()| d.states.upload(&self.dev, &sp))
            }
            None => Err(LayerError::Shape("no decode batch prepared".into())),
        };
        if let Err(e) = written {
            for id in real {
                self.states.free_sequence(id);
            }
            return Err(e);
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
            Some(d) if d.states.meta.num_seqs > 0 => d.states.meta.num_seqs,
            _ => return Err(LayerError::Shape("no decode batch prepared".into())),
        };
        if let Err(e) = self.run(true, s, s, cache) {
            // As in `forward`: the states the failed step touched cannot be trusted.
            let ids = self
                .ws
                .decode
                .as_mut()
                .map(|d| std::mem::take(&mut d.seq_ids))
                .unwrap_or_default();
            for id in ids {
                self.states.free_sequence(id);
            }
            return Err(e);
        }
        Ok(&self.ws.logits)
    }
}

/// Spare state slots for the padding rows of a decode batch: the engine pads to powers of two
/// up to [`DECODE_GRAPH_MAX_SEQS`], so at most `8 - 5 = 3` rows are padding (more would take
/// free slots of the pool; see [`StateCache::plan_padded`]).
const DECODE_PAD_SPARE_SLOTS: usize = {
    let (mut s, mut most) = (1, 0);
    while s <= DECODE_GRAPH_MAX_SEQS {
        let pad = s.next_power_of_two() - s;
        if pad > most {
            most = pad;
        }
        s += 1;
    }
    most
};
