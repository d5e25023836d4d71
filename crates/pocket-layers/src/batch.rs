//! A step's batch: the host plan (tokens, positions, cache slots) and its device tensors.

use pocket_kernels::{AttentionMeta, DType, Device, Tensor};

use crate::Result;

/// Identifies a sequence in the KV cache and the engine.
pub type SeqId = u64;

/// One step's batch on the host: the new tokens of several sequences, stacked in order, with
/// everything attention needs to find each sequence's cache blocks (see
/// [`pocket_kernels::attention`]).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct BatchPlan {
    /// The sequences, in batch order.
    pub seq_ids: Vec<SeqId>,
    /// New token ids, sequence after sequence.
    pub tokens: Vec<u32>,
    /// Position of each new token in its sequence.
    pub positions: Vec<u32>,
    /// `[num_seqs + 1]` prefix offsets of each sequence's rows.
    pub query_start: Vec<u32>,
    /// `[num_seqs]` sequence lengths after this step.
    pub seq_lens: Vec<u32>,
    /// `[num_seqs, max_blocks]` block ids (unused entries 0).
    pub block_tables: Vec<u32>,
    /// Width of a `block_tables` row.
    pub max_blocks: usize,
    /// `[tokens]` cache slot of each new token.
    pub slot_mapping: Vec<u32>,
    /// `[num_seqs]` row of each sequence's last new token (whose logits are returned).
    pub last_rows: Vec<u32>,
    /// Longest sequence after this step.
    pub max_seq_len: usize,
}

impl BatchPlan {
    /// Number of sequences.
    pub fn num_seqs(&self) -> usize {
        self.seq_ids.len()
    }

    /// Number of new tokens.
    pub fn num_tokens(&self) -> usize {
        self.tokens.len()
    }
}

/// The device copy of a [`BatchPlan`], allocated once and rewritten every step.
pub struct BatchTensors {
    /// `[tokens]` token ids.
    pub ids: Tensor,
    /// `[tokens]` positions.
    pub positions: Tensor,
    /// Attention metadata.
    pub meta: AttentionMeta,
    /// `[num_seqs]` rows whose hidden states become logits.
    pub last_rows: Tensor,
}

/// Writes `data` into `t` as `shape`, reallocating (with headroom) when it outgrows `t`.
fn put(dev: &Device, t: &mut Tensor, data: &[u32], shape: &[usize]) -> Result<()> {
    if data.len() > t.capacity() {
        *t = dev.alloc(DType::U32, &[data.len().next_power_of_two()])?;
    }
    dev.write_u32(t, data, shape)?;
    Ok(())
}

impl BatchTensors {
    /// Empty device tensors (grown by the first [`BatchTensors::upload`]).
    pub fn new(dev: &Device) -> Result<Self> {
        let a = |n: usize| dev.alloc(DType::U32, &[n]);
        Ok(BatchTensors {
            ids: a(64)?,
            positions: a(64)?,
            meta: AttentionMeta {
                query_start: a(16)?,
                seq_lens: a(16)?,
                block_tables: a(256)?,
                slot_mapping: a(64)?,
                num_seqs: 0,
                max_seq_len: 0,
            },
            last_rows: a(16)?,
        })
    }

    /// Device tensors of fixed capacity for pure-decode batches of up to `max_seqs` sequences
    /// with block tables `max_blocks` wide. They are never reallocated (see
    /// [`BatchTensors::write_fixed`]), so a graph captured over them stays valid.
    pub fn with_capacity(dev: &Device, max_seqs: usize, max_blocks: usize) -> Result<Self> {
        let a = |n: usize| dev.alloc(DType::U32, &[n.max(1)]);
        let s = max_seqs.max(1);
        Ok(BatchTensors {
            ids: a(s)?,
            positions: a(s)?,
            meta: AttentionMeta {
                query_start: a(s + 1)?,
                seq_lens: a(s)?,
                block_tables: a(s * max_blocks.max(1))?,
                slot_mapping: a(s)?,
                num_seqs: 0,
                max_seq_len: 0,
            },
            last_rows: a(s)?,
        })
    }

    /// Copies `plan` into these tensors in place, failing (instead of reallocating, which would
    /// leave a captured graph reading stale buffers) when it does not fit their capacity.
    pub fn write_fixed(&mut self, dev: &Device, plan: &BatchPlan) -> Result<()> {
        let (n, s) = (plan.num_tokens(), plan.num_seqs());
        let fixed = |t: &mut Tensor, data: &[u32], shape: &[usize]| -> Result<()> {
            if data.len() > t.capacity() {
                return Err(crate::LayerError::Shape(format!(
                    "decode batch of {} values exceeds its fixed buffer of {}",
                    data.len(),
                    t.capacity()
                )));
            }
            dev.write_u32(t, data, shape)?;
            Ok(())
        };
        fixed(&mut self.ids, &plan.tokens, &[n])?;
        fixed(&mut self.positions, &plan.positions, &[n])?;
        let m = &mut self.meta;
        fixed(&mut m.query_start, &plan.query_start, &[s + 1])?;
        fixed(&mut m.seq_lens, &plan.seq_lens, &[s])?;
        fixed(
            &mut m.block_tables,
            &plan.block_tables,
            &[s, plan.max_blocks],
        )?;
        fixed(&mut m.slot_mapping, &plan.slot_mapping, &[n])?;
        m.num_seqs = s;
        m.max_seq_len = plan.max_seq_len;
        fixed(&mut self.last_rows, &plan.last_rows, &[s])?;
        Ok(())
    }

    /// Copies `plan` to the device.
    pub fn upload(&mut self, dev: &Device, plan: &BatchPlan) -> Result<()> {
        let (n, s) = (plan.num_tokens(), plan.num_seqs());
        put(dev, &mut self.ids, &plan.tokens, &[n])?;
        put(dev, &mut self.positions, &plan.positions, &[n])?;
        let m = &mut self.meta;
        put(dev, &mut m.query_start, &plan.query_start, &[s + 1])?;
        put(dev, &mut m.seq_lens, &plan.seq_lens, &[s])?;
        put(
            dev,
            &mut m.block_tables,
            &plan.block_tables,
            &[s, plan.max_blocks],
        )?;
        put(dev, &mut m.slot_mapping, &plan.slot_mapping, &[n])?;
        m.num_seqs = s;
        m.max_seq_len = plan.max_seq_len;
        put(dev, &mut self.last_rows, &plan.last_rows, &[s])?;
        Ok(())
    }
}
