//! The recurrent-layer contract (Gated DeltaNet, and later other linear-attention or SSM layers):
//! varlen token batches whose per-sequence state lives in slots of a state pool.
//!
//! A batch stacks the new tokens of several sequences row-wise, as for attention: sequence `s`
//! owns rows `query_start[s]..query_start[s+1]`. Its recurrent state (the short-convolution window
//! and the delta-rule matrix) lives at slot `state_slots[s]` of each layer's state tensors. When
//! `has_state[s]` is 0 the sequence starts fresh: the ops read zeros instead of the slot, so a
//! reused slot never needs clearing, and they write the slot's new state either way.

use crate::Tensor;

/// Per-batch index tensors of a recurrent layer (all u32).
pub struct RecurrentMeta {
    /// `[num_seqs + 1]` prefix offsets of each sequence's rows.
    pub query_start: Tensor,
    /// `[num_seqs]` state slot of each sequence.
    pub state_slots: Tensor,
    /// `[num_seqs]` 1 if the slot holds the sequence's state so far, 0 to start from zeros.
    pub has_state: Tensor,
    /// Number of sequences in the batch (may be less than the tensors' capacity).
    pub num_seqs: usize,
    /// Most rows any one sequence has in this batch (1 for a pure decode step).
    pub max_rows: usize,
}

/// How value heads share query/key heads when there are fewer of the latter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeadGrouping {
    /// Value head `h` reads key head `h / (v_heads / k_heads)` (Hugging Face `repeat_interleave`).
    Grouped,
    /// Value head `h` reads key head `h % k_heads` (llama.cpp's GGUF, whose converter re-tiles the
    /// value heads so that `ggml_repeat` broadcasts them).
    Tiled,
}

impl HeadGrouping {
    /// The key head that value head `h` reads.
    pub fn key_head(self, h: usize, k_heads: usize, v_heads: usize) -> usize {
        match self {
            HeadGrouping::Grouped => h / (v_heads / k_heads).max(1),
            HeadGrouping::Tiled => h % k_heads.max(1),
        }
    }
}

/// Scalar settings of one gated delta rule layer.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DeltaRuleParams {
    /// Query/key heads.
    pub k_heads: usize,
    /// Value heads (a multiple of `k_heads`); the state has one `[k_dim, v_dim]` matrix per head.
    pub v_heads: usize,
    /// Query/key head dimension.
    pub k_dim: usize,
    /// Value head dimension.
    pub v_dim: usize,
    /// Which key head each value head reads.
    pub grouping: HeadGrouping,
    /// Epsilon of the L2 normalisation of queries and keys (`x * rsqrt(sum x² + eps)`).
    pub l2_eps: f32,
    /// Query scale, usually `1 / sqrt(k_dim)`.
    pub scale: f32,
}

impl DeltaRuleParams {
    /// Row width of the mixed `[q | k | v]` input: `2 * k_heads * k_dim + v_heads * v_dim`.
    pub fn qkv_width(&self) -> usize {
        2 * self.k_heads * self.k_dim + self.v_heads * self.v_dim
    }
}
