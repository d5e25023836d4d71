//! The `Model` trait: what the engine needs from any architecture.

use pocket_kernels::{DType, Device, Tensor};

use crate::batch::BatchPlan;
use crate::{KvCache, KvCacheConfig, LayerError, Result};

/// Static facts about a loaded model that the engine and cache sizing need.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelInfo {
    /// Architecture name as the checkpoint states it (`llama`, `qwen2`, `qwen3`).
    pub architecture: String,
    /// Output vocabulary size (logit width).
    pub vocab_size: usize,
    /// Hidden size.
    pub hidden_size: usize,
    /// Layers with a KV cache.
    pub num_layers: usize,
    /// Key/value heads per layer.
    pub num_kv_heads: usize,
    /// Head dimension.
    pub head_dim: usize,
    /// Longest context the model supports.
    pub max_context: usize,
}

impl ModelInfo {
    /// A cache configuration for this model holding `max_tokens` tokens in all.
    pub fn kv_cache_config(
        &self,
        max_tokens: usize,
        max_seq_len: usize,
        dtype: DType,
    ) -> KvCacheConfig {
        let block_size = 16;
        KvCacheConfig {
            num_layers: self.num_layers,
            num_kv_heads: self.num_kv_heads,
            head_dim: self.head_dim,
            block_size,
            num_blocks: max_tokens.div_ceil(block_size).max(1),
            dtype,
            max_seq_len: max_seq_len.min(self.max_context),
        }
    }
}

/// A loaded model: one forward over a varlen batch, returning the logits of the last new token
/// of each sequence.
pub trait Model: Send {
    /// Shapes and limits.
    fn info(&self) -> &ModelInfo;

    /// The device the model's weights live on.
    fn device(&self) -> &Device;

    /// Runs `plan` (already reserved in `cache` by [`KvCache::plan`]) and returns the logits
    /// `[num_seqs, vocab]` on the model's device, in `plan`'s sequence order.
    fn forward(&mut self, plan: &BatchPlan, cache: &mut KvCache) -> Result<&Tensor>;

    /// Whether [`Model::prepare_decode`] and [`Model::forward_decode`] are implemented, so the
    /// engine may capture decode steps as device graphs. A model that says yes promises that
    /// [`Model::forward`] reallocates its workspaces only for a batch of more tokens or more
    /// sequences than every earlier one (the engine drops its graphs then).
    fn supports_decode_graphs(&self) -> bool {
        false
    }

    /// Writes a pure-decode `plan` (one token per sequence, at most
    /// [`DECODE_GRAPH_MAX_SEQS`] sequences, block tables of a fixed width) into fixed device
    /// buffers that [`Model::forward_decode`] reads. Only host-to-device copies, no kernels.
    fn prepare_decode(&mut self, plan: &BatchPlan) -> Result<()> {
        let _ = plan;
        Err(LayerError::Config(format!(
            "{}: no decode graphs",
            self.info().architecture
        )))
    }

    /// The forward of the batch [`Model::prepare_decode`] wrote: kernel launches only, over
    /// buffers that live as long as the model, so it can be captured and replayed. Returns the
    /// logits `[num_seqs, vocab]`, always the same tensor.
    fn forward_decode(&mut self, cache: &mut KvCache) -> Result<&Tensor> {
        let _ = cache;
        Err(LayerError::Config(format!(
            "{}: no decode graphs",
            self.info().architecture
        )))
    }

    /// The logits tensor [`Model::forward_decode`] writes (what a replayed decode graph wrote
    /// last), if the model has one.
    fn decode_logits(&self) -> Option<&Tensor> {
        None
    }
}

/// Most sequences of a decode batch that [`Model::prepare_decode`] accepts (the decode GEMV's
/// row limit: larger batches go through the GEMM path and stay eager).
pub const DECODE_GRAPH_MAX_SEQS: usize = 8;

/// Id of the first padding row of a padded decode batch (the engine pads a decode step to its
/// batch bucket with rows counting down from here; real sequence ids count up from 0). A model
/// that keeps per-sequence state gives these rows scratch state instead of a slot of its own.
pub const DECODE_PAD_SEQ_ID: crate::batch::SeqId = crate::batch::SeqId::MAX;

/// Whether `id` is a padding row of a padded decode batch (see [`DECODE_PAD_SEQ_ID`]).
pub fn is_decode_padding(id: crate::batch::SeqId) -> bool {
    id > DECODE_PAD_SEQ_ID - DECODE_GRAPH_MAX_SEQS as crate::batch::SeqId
}
