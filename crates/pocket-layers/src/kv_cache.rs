//! The paged KV cache shared by every attention architecture: per layer a K and a V tensor of
//! fixed-size blocks, a block allocator, and a block table per sequence.

use std::collections::HashMap;

use pocket_kernels::{DType, Device, Tensor};

use crate::batch::{BatchPlan, SeqId};
use crate::{LayerError, Result};

/// Geometry of a paged cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KvCacheConfig {
    /// Attention layers (one K and one V tensor each).
    pub num_layers: usize,
    /// Key/value heads per layer.
    pub num_kv_heads: usize,
    /// Head dimension.
    pub head_dim: usize,
    /// Token slots per block.
    pub block_size: usize,
    /// Blocks in the pool (shared by all sequences).
    pub num_blocks: usize,
    /// Element type (f32, f16 or bf16).
    pub dtype: DType,
    /// Longest sequence allowed (the model's context, or less).
    pub max_seq_len: usize,
}

impl KvCacheConfig {
    /// Bytes the cache tensors take (the pool plus the padding block).
    pub fn bytes(&self) -> usize {
        2 * self.num_layers
            * (self.num_blocks + 1)
            * self.block_size
            * self.num_kv_heads
            * self.head_dim
            * self.dtype.size()
    }
}

/// A sequence's cache state.
#[derive(Debug, Clone, Default)]
struct SeqState {
    blocks: Vec<u32>,
    len: usize,
}

/// Paged K/V storage plus the bookkeeping of which sequence owns which blocks.
pub struct KvCache {
    config: KvCacheConfig,
    layers: Vec<(Tensor, Tensor)>,
    free: Vec<u32>,
    seqs: HashMap<SeqId, SeqState>,
}

impl KvCache {
    /// Allocates the cache on `dev`.
    pub fn new(dev: &Device, config: KvCacheConfig) -> Result<KvCache> {
        if config.block_size == 0 || config.num_blocks == 0 || config.num_blocks > u32::MAX as usize
        {
            return Err(LayerError::Config(format!(
                "bad KV cache geometry {config:?}"
            )));
        }
        // One block past the pool (never handed to a sequence) receives the K/V of the padding
        // rows of fixed-size decode batches (see [`KvCache::pad_block`]).
        let shape = [
            config.num_blocks + 1,
            config.block_size,
            config.num_kv_heads,
            config.head_dim,
        ];
        let layers = (0..config.num_layers)
            .map(|_| {
                Ok((
                    dev.alloc(config.dtype, &shape)?,
                    dev.alloc(config.dtype, &shape)?,
                ))
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(KvCache {
            config,
            layers,
            free: (0..config.num_blocks as u32).rev().collect(),
            seqs: HashMap::new(),
        })
    }

    /// The geometry.
    pub fn config(&self) -> &KvCacheConfig {
        &self.config
    }

    /// The spare block that padding rows of a fixed-size decode batch write to and attend over;
    /// no sequence ever owns it.
    pub fn pad_block(&self) -> u32 {
        self.config.num_blocks as u32
    }

    /// Width of a block-table row that fits the longest allowed sequence.
    pub fn max_blocks_per_seq(&self) -> usize {
        self.config
            .max_seq_len
            .div_ceil(self.config.block_size)
            .max(1)
    }

    /// Registers an empty sequence.
    pub fn add_sequence(&mut self, id: SeqId) {
        self.seqs.entry(id).or_default();
    }

    /// Whether the cache knows `id`.
    pub fn contains(&self, id: SeqId) -> bool {
        self.seqs.contains_key(&id)
    }

    /// Forgets a sequence and returns its blocks to the pool.
    pub fn free_sequence(&mut self, id: SeqId) {
        if let Some(s) = self.seqs.remove(&id) {
            self.free.extend(s.blocks.into_iter().rev());
        }
    }

    /// Tokens cached for `id`.
    pub fn seq_len(&self, id: SeqId) -> Option<usize> {
        self.seqs.get(&id).map(|s| s.len)
    }

    /// Blocks not owned by any sequence.
    pub fn free_blocks(&self) -> usize {
        self.free.len()
    }

    /// Blocks `id` would need to grow by `new` tokens.
    pub fn blocks_needed(&self, id: SeqId, new: usize) -> usize {
        let s = self
            .seqs
            .get(&id)
            .map_or((0, 0), |s| (s.len, s.blocks.len()));
        (s.0 + new)
            .div_ceil(self.config.block_size)
            .saturating_sub(s.1)
    }

    /// The K and V tensors of layer `l`.
    pub fn layer_mut(&mut self, l: usize) -> Result<(&mut Tensor, &mut Tensor)> {
        let n = self.layers.len();
        self.layers
            .get_mut(l)
            .map(|(k, v)| (k, v))
            .ok_or_else(|| LayerError::Config(format!("layer {l} of a {n}-layer cache")))
    }

    /// Plans a step: appends `tokens` to each sequence (registering new ones), reserving blocks,
    /// and returns the batch description. Either every sequence fits or nothing changes.
    pub fn plan(&mut self, entries: &[(SeqId, &[u32])]) -> Result<BatchPlan> {
        let bs = self.config.block_size;
        let mut need = 0;
        for (id, toks) in entries {
            let len = self.seq_len(*id).unwrap_or(0) + toks.len();
            if len > self.config.max_seq_len {
                return Err(LayerError::ContextOverflow {
                    seq: *id,
                    len,
                    limit: self.config.max_seq_len,
                });
            }
            if toks.is_empty() {
                return Err(LayerError::Shape(format!("sequence {id}: empty step")));
            }
            need += self.blocks_needed(*id, toks.len());
            if need > self.free.len() {
                return Err(LayerError::CacheFull {
                    seq: *id,
                    needed: need,
                    free: self.free.len(),
                });
            }
        }
        let mut plan = BatchPlan {
            query_start: vec![0],
            ..Default::default()
        };
        for (id, toks) in entries {
            let st = self.seqs.entry(*id).or_default();
            let start = st.len;
            let end = start + toks.len();
            while st.blocks.len() * bs < end {
                // Cannot fail: the whole batch's need was checked against the pool above.
                let b = self.free.pop().ok_or(LayerError::CacheFull {
                    seq: *id,
                    needed: 1,
                    free: 0,
                })?;
                st.blocks.push(b);
            }
            st.len = end;
            plan.seq_ids.push(*id);
            plan.tokens.extend_from_slice(toks);
            for t in start..end {
                plan.positions.push(t as u32);
                plan.slot_mapping
                    .push(st.blocks[t / bs] * bs as u32 + (t % bs) as u32);
            }
            plan.query_start.push(plan.tokens.len() as u32);
            plan.last_rows.push(plan.tokens.len() as u32 - 1);
            plan.seq_lens.push(end as u32);
            plan.max_seq_len = plan.max_seq_len.max(end);
        }
        plan.max_blocks = plan
            .seq_ids
            .iter()
            .map(|id| self.seqs[id].blocks.len())
            .max()
            .unwrap_or(0)
            .max(1);
        plan.block_tables = vec![0; plan.num_seqs() * plan.max_blocks];
        for (i, id) in plan.seq_ids.iter().enumerate() {
            let b = &self.seqs[id].blocks;
            plan.block_tables[i * plan.max_blocks..i * plan.max_blocks + b.len()]
                .copy_from_slice(b);
        }
        Ok(plan)
    }

    /// Undoes a step's growth of `id` back to `len` tokens (after a failed forward), freeing
    /// blocks it no longer needs.
    pub fn truncate(&mut self, id: SeqId, len: usize) {
        if let Some(st) = self.seqs.get_mut(&id) {
            if len < st.len {
                st.len = len;
                let keep = len.div_ceil(self.config.block_size);
                while st.blocks.len() > keep {
                    if let Some(b) = st.blocks.pop() {
                        self.free.push(b);
                    }
                }
            }
        }
    }
}
