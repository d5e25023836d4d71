//! The per-sequence recurrent state cache that sits beside the paged KV cache: for every
//! recurrent layer (Gated DeltaNet, Mamba-style SSMs, other linear attention) a few state tensors
//! of fixed size per sequence, held in slots of a pool.
//!
//! Unlike the KV cache it does not grow with the sequence: a sequence owns one slot for its whole
//! life. A sequence whose step starts at position 0 begins from zeros (the kernels read zeros when
//! `has_state` is 0, so reused slots are never cleared); any later step must continue exactly
//! where the previous one ended, since a recurrent state cannot be rewound.

use std::collections::HashMap;

use pocket_kernels::{DType, Device, RecurrentMeta, Tensor};

use crate::batch::{BatchPlan, SeqId};
use crate::{LayerError, Result};

/// Geometry of a state cache.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateCacheConfig {
    /// Recurrent layers.
    pub num_layers: usize,
    /// Shape of each state tensor of one layer for one sequence (e.g. the conv window
    /// `[K - 1, channels]` and the delta-rule state `[v_heads, k_dim, v_dim]`).
    pub slot_shapes: Vec<Vec<usize>>,
    /// Sequences that can hold state at once.
    pub max_seqs: usize,
    /// Extra slots, owned by no sequence, that the padding rows of a padded decode batch write
    /// their (discarded) state into: distinct slots, since the ops refuse two rows writing one.
    pub spare_slots: usize,
}

impl StateCacheConfig {
    /// Bytes the cache tensors take (f32).
    pub fn bytes(&self) -> usize {
        let per_slot: usize = self
            .slot_shapes
            .iter()
            .map(|s| s.iter().product::<usize>())
            .sum();
        self.num_layers * (self.max_seqs + self.spare_slots) * per_slot * 4
    }
}

/// A sequence's slot and how many tokens its state has absorbed.
#[derive(Debug, Clone, Copy)]
struct SeqState {
    slot: u32,
    len: usize,
}

/// Recurrent state tensors plus the slot bookkeeping.
pub struct StateCache {
    config: StateCacheConfig,
    layers: Vec<Vec<Tensor>>,
    free: Vec<u32>,
    seqs: HashMap<SeqId, SeqState>,
}

/// The host side of one step's recurrent metadata.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StatePlan {
    /// `[num_seqs + 1]` row offsets (the batch plan's).
    pub query_start: Vec<u32>,
    /// `[num_seqs]` slot of each sequence.
    pub slots: Vec<u32>,
    /// `[num_seqs]` 1 where the slot already holds the sequence's state.
    pub has_state: Vec<u32>,
    /// Most rows of one sequence in the step.
    pub max_rows: usize,
}

impl StateCache {
    /// Allocates the state tensors on `dev` (f32, `[max_seqs + spare_slots, ...slot_shape]`
    /// each; the spare slots come last).
    pub fn new(dev: &Device, config: StateCacheConfig) -> Result<StateCache> {
        let total = config.max_seqs.saturating_add(config.spare_slots);
        if config.max_seqs == 0 || total > u32::MAX as usize {
            return Err(LayerError::Config(format!(
                "bad state cache geometry {config:?}"
            )));
        }
        let layers = (0..config.num_layers)
            .map(|_| {
                config
                    .slot_shapes
                    .iter()
                    .map(|s| {
                        let mut shape = vec![total];
                        shape.extend_from_slice(s);
                        Ok(dev.alloc(DType::F32, &shape)?)
                    })
                    .collect::<Result<Vec<_>>>()
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(StateCache {
            free: (0..config.max_seqs as u32).rev().collect(),
            config,
            layers,
            seqs: HashMap::new(),
        })
    }

    /// The geometry.
    pub fn config(&self) -> &StateCacheConfig {
        &self.config
    }

    /// Whether `id` holds a slot.
    pub fn contains(&self, id: SeqId) -> bool {
        self.seqs.contains_key(&id)
    }

    /// Tokens absorbed into `id`'s state.
    pub fn seq_len(&self, id: SeqId) -> Option<usize> {
        self.seqs.get(&id).map(|s| s.len)
    }

    /// Slots not owned by any sequence.
    pub fn free_slots(&self) -> usize {
        self.free.len()
    }

    /// Forgets a sequence and returns its slot to the pool.
    pub fn free_sequence(&mut self, id: SeqId) {
        if let Some(s) = self.seqs.remove(&id) {
            self.free.push(s.slot);
        }
    }

    /// The state tensors of recurrent layer `l`, in `slot_shapes` order.
    pub fn layer_mut(&mut self, l: usize) -> Result<&mut [Tensor]> {
        let n = self.layers.len();
        self.layers
            .get_mut(l)
            .map(|v| v.as_mut_slice())
            .ok_or_else(|| LayerError::Config(format!("state layer {l} of a {n}-layer cache")))
    }

    /// Assigns slots for a step. A sequence whose rows start at position 0 starts fresh (taking a
    /// slot, reclaiming those of sequences `alive` no longer knows when the pool is empty); any
    /// other must continue at the length its state has absorbed. Either every sequence is
    /// placed or nothing changes.
    pub fn plan(&mut self, plan: &BatchPlan, alive: impl Fn(SeqId) -> bool) -> Result<StatePlan> {
        let s = plan.num_seqs();
        if plan.query_start.len() != s + 1 {
            return Err(LayerError::Shape(format!(
                "batch plan has {} query offsets for {s} sequences",
                plan.query_start.len()
            )));
        }
        let mut out = StatePlan {
            query_start: plan.query_start.clone(),
            ..Default::default()
        };
        let mut fresh = Vec::new();
        for (i, &id) in plan.seq_ids.iter().enumerate() {
            let (r0, r1) = (
                plan.query_start[i] as usize,
                plan.query_start[i + 1] as usize,
            );
            let first = *plan.positions.get(r0).ok_or_else(|| {
                LayerError::Shape(format!("sequence {id}: no rows in the batch plan"))
            })? as usize;
            out.max_rows = out.max_rows.max(r1 - r0);
            if first == 0 {
                fresh.push(i);
                continue;
            }
            match self.seqs.get(&id) {
                Some(st) if st.len == first => {}
                Some(st) => {
                    return Err(LayerError::Shape(format!(
                    "sequence {id}: recurrent state covers {} tokens, the step starts at {first}",
                    st.len
                )))
                }
                None => return Err(LayerError::UnknownSequence(id)),
            }
        }
        let need = fresh
            .iter()
            .filter(|&&i| !self.seqs.contains_key(&plan.seq_ids[i]))
            .count();
        if need > self.free.len() {
            let dead: Vec<SeqId> = self
                .seqs
                .keys()
                .copied()
                .filter(|id| !alive(*id) && !plan.seq_ids.contains(id))
                .collect();
            for id in dead {
                self.free_sequence(id);
            }
        }
        if need > self.free.len() {
            return Err(LayerError::CacheFull {
                seq: plan.seq_ids[fresh[0]],
                needed: need,
                free: self.free.len(),
            });
        }
        for (i, &id) in plan.seq_ids.iter().enumerate() {
            let rows = (plan.query_start[i + 1] - plan.query_start[i]) as usize;
            let is_fresh = fresh.contains(&i);
            let st = match self.seqs.get_mut(&id) {
                Some(st) => st,
                None => {
                    // Cannot fail: the fresh sequences' need was checked against the pool above.
                    let slot = self.free.pop().ok_or(LayerError::CacheFull {
                        seq: id,
                        needed: 1,
                        free: 0,
                    })?;
                    self.seqs.entry(id).or_insert(SeqState { slot, len: 0 })
                }
            };
            if is_fresh {
                st.len = 0;
            }
            out.has_state.push(u32::from(!is_fresh));
            out.slots.push(st.slot);
            st.len += rows;
        }
        Ok(out)
    }
}

impl StateCache {
    /// [`StateCache::plan`] for a padded decode batch: the rows of sequences `is_pad` names must
    /// follow the real ones; they get distinct slots no sequence owns (the spare slots, then
    /// free ones of the pool) with no state to read, so what they write is never read. Real
    /// sequences are planned as [`StateCache::plan`] does, with `alive` for reclaiming.
    pub fn plan_padded(
        &mut self,
        plan: &BatchPlan,
        is_pad: impl Fn(SeqId) -> bool,
        alive: impl Fn(SeqId) -> bool,
    ) -> Result<StatePlan> {
        let s = plan.num_seqs();
        if plan.query_start.len() != s + 1 {
            return Err(LayerError::Shape(format!(
                "batch plan has {} query offsets for {s} sequences",
                plan.query_start.len()
            )));
        }
        let real = plan.seq_ids.iter().take_while(|&&id| !is_pad(id)).count();
        if plan.seq_ids[real..].iter().any(|&id| !is_pad(id)) {
            return Err(LayerError::Shape(
                "padding rows of a decode batch must follow its sequences".into(),
            ));
        }
        let rows = plan.query_start[real] as usize;
        let head = BatchPlan {
            seq_ids: plan.seq_ids[..real].to_vec(),
            positions: plan.positions.get(..rows).unwrap_or_default().to_vec(),
            query_start: plan.query_start[..=real].to_vec(),
            ..Default::default()
        };
        // Kept to undo the real rows' planning if the padding rows do not fit.
        let (seqs, free) = (self.seqs.clone(), self.free.clone());
        let mut out = self.plan(&head, alive)?;
        let (lo, hi) = (
            self.config.max_seqs,
            self.config.max_seqs + self.config.spare_slots,
        );
        let pads: Vec<u32> = (lo as u32..hi as u32)
            .chain(self.free.iter().rev().copied())
            .take(s - real)
            .collect();
        if pads.len() < s - real {
            self.seqs = seqs;
            self.free = free;
            return Err(LayerError::CacheFull {
                seq: plan.seq_ids[real],
                needed: s - real,
                free: pads.len(),
            });
        }
        for (i, slot) in (real..s).zip(pads) {
            out.slots.push(slot);
            out.has_state.push(0);
            let r = plan.query_start[i + 1].saturating_sub(plan.query_start[i]) as usize;
            out.max_rows = out.max_rows.max(r);
        }
        out.query_start = plan.query_start.clone();
        Ok(out)
    }
}

/// The device copy of a [`StatePlan`], allocated once and rewritten every step.
pub struct StateBatch {
    /// The metadata the recurrent ops read.
    pub meta: RecurrentMeta,
}

/// Writes `data` into `t` as `[data.len()]`, reallocating (with headroom) when it outgrows `t`.
fn put(dev: &Device, t: &mut Tensor, data: &[u32]) -> Result<()> {
    if data.len() > t.capacity() {
        *t = dev.alloc(DType::U32, &[data.len().next_power_of_two()])?;
    }
    dev.write_u32(t, data, &[data.len()])?;
    Ok(())
}

impl StateBatch {
    /// Empty device tensors (grown by the first [`StateBatch::upload`]).
    pub fn new(dev: &Device) -> Result<Self> {
        let a = |n: usize| dev.alloc(DType::U32, &[n]);
        Ok(StateBatch {
            meta: RecurrentMeta {
                query_start: a(16)?,
                state_slots: a(16)?,
                has_state: a(16)?,
                num_seqs: 0,
                max_rows: 0,
            },
        })
    }

    /// Device tensors for batches of up to `max_seqs` sequences, never reallocated by
    /// [`StateBatch::upload`] of such a batch (their addresses can be captured in a graph).
    pub fn with_capacity(dev: &Device, max_seqs: usize) -> Result<Self> {
        let a = |n: usize| dev.alloc(DType::U32, &[n]);
        let n = max_seqs.max(1);
        Ok(StateBatch {
            meta: RecurrentMeta {
                query_start: a(n + 1)?,
                state_slots: a(n)?,
                has_state: a(n)?,
                num_seqs: 0,
                max_rows: 0,
            },
        })
    }

    /// Copies `plan` to the device.
    pub fn upload(&mut self, dev: &Device, plan: &StatePlan) -> Result<()> {
        put(dev, &mut self.meta.query_start, &plan.query_start)?;
        put(dev, &mut self.meta.state_slots, &plan.slots)?;
        put(dev, &mut self.meta.has_state, &plan.has_state)?;
        self.meta.num_seqs = plan.slots.len();
        self.meta.max_rows = plan.max_rows;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cache(max_seqs: usize) -> StateCache {
        let cfg = StateCacheConfig {
            num_layers: 2,
            slot_shapes: vec![vec![3, 4], vec![2, 2, 2]],
            max_seqs,
            spare_slots: 2,
        };
        StateCache::new(&Device::cpu(), cfg).unwrap()
    }

    /// A plan of sequences `(id, first position, rows)`.
    fn plan(seqs: &[(SeqId, u32, u32)]) -> BatchPlan {
        let mut p = BatchPlan {
            query_start: vec![0],
            ..Default::default()
        };
        for &(id, start, rows) in seqs {
            p.seq_ids.push(id);
            p.positions.extend(start..start + rows);
            p.query_start.push(p.positions.len() as u32);
        }
        p
    }

    #[test]
    fn fresh_then_continue() {
        let mut c = cache(2);
        let p = c.plan(&plan(&[(1, 0, 5), (2, 0, 1)]), |_| true).unwrap();
        assert_eq!(p.has_state, vec![0, 0]);
        assert_eq!(p.max_rows, 5);
        assert_ne!(p.slots[0], p.slots[1]);
        let q = c.plan(&plan(&[(2, 1, 1), (1, 5, 1)]), |_| true).unwrap();
        assert_eq!(q.has_state, vec![1, 1]);
        assert_eq!(q.slots, vec![p.slots[1], p.slots[0]]);
        assert_eq!(c.seq_len(1), Some(6));
        // Two slots for sequences, then the two spare ones.
        assert_eq!(c.layer_mut(1).unwrap()[1].shape, vec![4, 2, 2, 2]);
    }

    #[test]
    fn gaps_unknown_and_full_are_errors() {
        let mut c = cache(1);
        c.plan(&plan(&[(1, 0, 3)]), |_| true).unwrap();
        assert!(matches!(
            c.plan(&plan(&[(1, 4, 1)]), |_| true),
            Err(LayerError::Shape(_))
        ));
        assert!(matches!(
            c.plan(&plan(&[(9, 2, 1)]), |_| true),
            Err(LayerError::UnknownSequence(9))
        ));
        assert!(matches!(
            c.plan(&plan(&[(2, 0, 1)]), |_| true),
            Err(LayerError::CacheFull { .. })
        ));
        // Once the KV cache no longer knows sequence 1, its slot is reclaimed.
        let p = c.plan(&plan(&[(2, 0, 1)]), |id| id != 1).unwrap();
        assert_eq!(p.has_state, vec![0]);
        assert!(!c.contains(1));
    }

    #[test]
    fn restart_at_zero_resets() {
        let mut c = cache(1);
        c.plan(&plan(&[(1, 0, 3)]), |_| true).unwrap();
        let p = c.plan(&plan(&[(1, 0, 2)]), |_| true).unwrap();
        assert_eq!(p.has_state, vec![0]);
        assert_eq!(c.seq_len(1), Some(2));
        c.free_sequence(1);
        assert_eq!(c.free_slots(), 1);
    }

    #[test]
    fn padding_rows_take_spare_then_free_slots() {
        let pad = |id: SeqId| id >= 100;
        let mut c = cache(3);
        assert_eq!(c.layer_mut(0).unwrap()[0].shape, vec![5, 3, 4]);
        let p = c.plan(&plan(&[(1, 0, 4)]), |_| true).unwrap();
        let s1 = p.slots[0];
        // Sequence 1 continues; three padding rows: the two spare slots, then a free one.
        let q = c
            .plan_padded(
                &plan(&[(1, 4, 1), (100, 0, 1), (101, 0, 1), (102, 0, 1)]),
                pad,
                |_| true,
            )
            .unwrap();
        assert_eq!(q.query_start, vec![0, 1, 2, 3, 4]);
        assert_eq!(q.has_state, vec![1, 0, 0, 0]);
        assert_eq!(&q.slots[..3], &[s1, 3, 4]);
        assert!(q.slots[3] < 3 && q.slots[3] != s1);
        assert_eq!(c.seq_len(1), Some(5));
        assert!(!c.contains(100) && !c.contains(102));
        assert_eq!(c.free_slots(), 2);
        // More padding rows than spare and free slots; padding before a sequence.
        assert!(matches!(
            c.plan_padded(
                &plan(&[
                    (1, 5, 1),
                    (100, 0, 1),
                    (101, 0, 1),
                    (102, 0, 1),
                    (103, 0, 1),
                    (104, 0, 1)
                ]),
                pad,
                |_| true
            ),
            Err(LayerError::CacheFull { .. })
        ));
        assert_eq!((c.seq_len(1), c.free_slots()), (Some(5), 2));
        assert!(matches!(
            c.plan_padded(&plan(&[(100, 0, 1), (1, 5, 1)]), pad, |_| true),
            Err(LayerError::Shape(_))
        ));
    }
}
