//! The attention contract: varlen query batches over a paged KV cache.
//!
//! A batch holds the new tokens of several sequences, stacked row-wise (`q` is
//! `[tokens, heads, head_dim]`). Sequence `s` owns query rows `query_start[s]..query_start[s+1]`;
//! those are the *last* tokens of the sequence, whose total length (cached + new) is
//! `seq_lens[s]`. So query row `i` of sequence `s` sits at position
//! `seq_lens[s] - (query_start[s+1] - query_start[s]) + (i - query_start[s])` and, causally,
//! attends to keys `0..=position`. Prefill (one sequence, many rows), decode (many sequences, one
//! row each) and mixed batches are the same call.
//!
//! Keys and values live in a paged cache: fixed-size blocks of `block_size` token slots, and per
//! sequence a row of `block_tables` naming its blocks in order. Token `t` of sequence `s` is in
//! block `block_tables[s][t / block_size]`, slot `t % block_size`.

use crate::Tensor;

/// Per-batch index tensors that describe how query rows map onto sequences and cache blocks.
pub struct AttentionMeta {
    /// `[num_seqs + 1]` u32: prefix offsets of each sequence's query rows.
    pub query_start: Tensor,
    /// `[num_seqs]` u32: total tokens of each sequence after this step (cached + new).
    pub seq_lens: Tensor,
    /// `[num_seqs, max_blocks_per_seq]` u32: cache block ids of each sequence, in order.
    pub block_tables: Tensor,
    /// `[tokens]` u32: the cache slot (`block * block_size + offset`) each new token's K/V goes to.
    pub slot_mapping: Tensor,
    /// Number of sequences in the batch (may be less than the tensors' capacity).
    pub num_seqs: usize,
    /// Longest `seq_lens` entry, or any larger bound (a captured decode graph passes its context
    /// bucket), so kernels can size their split along the keys; never read as a length.
    pub max_seq_len: usize,
}

/// Scalar settings of one attention layer.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AttentionParams {
    /// Query heads.
    pub num_heads: usize,
    /// Key/value heads (GQA: `num_heads` is a multiple of it).
    pub num_kv_heads: usize,
    /// Dimension of each head.
    pub head_dim: usize,
    /// Softmax scale, usually `1 / sqrt(head_dim)`.
    pub scale: f32,
    /// Sliding window: a query at position p sees keys in `(p - window, p]`; `None` is full causal.
    pub sliding_window: Option<usize>,
    /// Tanh soft-capping of the scores (Gemma-style); `None` for none.
    pub softcap: Option<f32>,
}
