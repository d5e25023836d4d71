//! Pure-decode steps on graph-capable devices: a padded, fixed-layout batch, the forward captured
//! once per (batch bucket, context bucket) and replayed, and the tokens drawn on the device.
//!
//! Everything that changes from step to step (ids, positions, slots, block tables, lengths,
//! sampling parameters and RNG counters) is written into fixed device buffers before the replay;
//! the kernels read lengths from those buffers. Padding rows (up to the bucket) decode token 0 at
//! position 0 into the cache's spare block (a model with recurrent state gives them spare state
//! slots). A sequence's first step (its prompt, even of one token) always runs eagerly.
//! `POCKET_GRAPHS=0` runs the same padded steps eagerly (for A/B measurement: the logits are
//! bit-identical).

use std::collections::{HashMap, HashSet};

use pocket_kernels::device::Graph;
use pocket_kernels::{DType, Device, Tensor};

use super::{Engine, Result};
use crate::model::{BatchPlan, KvCache, Model, SeqId};
use crate::sampling::{device_row, SampledToken};
use pocket_layers::model::{DECODE_GRAPH_MAX_SEQS, DECODE_PAD_SEQ_ID};

/// Batch sizes a decode step is padded to.
const BUCKETS: [usize; 4] = [1, 2, 4, 8];

/// Smallest context bucket: attention's split count is chosen for it at capture.
const MIN_CTX_BUCKET: usize = 256;

/// Ids of padding rows (counting down from here): engine ids count up from 0 and never get here.
const PAD_SEQ_ID: SeqId = DECODE_PAD_SEQ_ID;

/// A graph is keyed by (padded sequences, context bucket).
type Key = (usize, usize);

/// Captured decode graphs and the device buffers the sampler reads and writes.
pub(crate) struct DecodeGraphs {
    /// Capture graphs (false: `POCKET_GRAPHS=0`, or a capture failed on this device).
    capture: bool,
    graphs: HashMap<Key, Graph>,
    /// Keys that ran eagerly once, so the backend's scratch is sized before a capture.
    warmed: HashSet<Key>,
    /// Most tokens and most sequences of any eager step so far: a bigger step may reallocate
    /// model workspaces (token rows, logits rows) that the graphs address, so it drops them.
    rows_seen: (usize, usize),
    bufs: Option<SampleBufs>,
    /// Whether the last step took the padded decode path.
    pub(crate) last_was_decode: bool,
}

/// Fixed device buffers of the sampler.
struct SampleBufs {
    params: Tensor,
    seeds: Tensor,
    ids: Tensor,
    logprobs: Tensor,
}

impl DecodeGraphs {
    /// Graph capture on unless `POCKET_GRAPHS=0`.
    pub(crate) fn from_env() -> DecodeGraphs {
        DecodeGraphs {
            capture: !std::env::var("POCKET_GRAPHS").is_ok_and(|v| v == "0"),
            graphs: HashMap::new(),
            warmed: HashSet::new(),
            rows_seen: (0, 0),
            bufs: None,
            last_was_decode: false,
        }
    }

    /// Turns capture on or off (off drops the captured graphs).
    pub(crate) fn set_capture(&mut self, on: bool) {
        self.capture = on;
        if !on {
            self.graphs.clear();
        }
    }

    /// Records an eager step of `tokens` rows over `seqs` sequences; drops the graphs when it
    /// may have grown the model's workspaces.
    pub(crate) fn note_eager(&mut self, tokens: usize, seqs: usize) {
        let (t, s) = self.rows_seen;
        if tokens > t || seqs > s {
            self.rows_seen = (t.max(tokens), s.max(seqs));
            self.graphs.clear();
            self.warmed.clear();
        }
    }

    /// Captured graphs held now.
    pub(crate) fn len(&self) -> usize {
        self.graphs.len()
    }
}

/// The bucket `n` sequences are padded to, if a decode graph serves them.
fn bucket(n: usize) -> Option<usize> {
    BUCKETS
        .iter()
        .copied()
        .find(|&b| b >= n && b <= DECODE_GRAPH_MAX_SEQS)
}

/// `plan` padded to `b` sequences with fixed-width block tables and a bucketed context bound.
fn pad_plan(plan: &BatchPlan, b: usize, cache: &KvCache) -> BatchPlan {
    let width = cache.max_blocks_per_seq();
    let bs = cache.config().block_size as u32;
    let pad = cache.pad_block();
    let s = plan.num_seqs();
    let mut p = BatchPlan {
        seq_ids: plan.seq_ids.clone(),
        tokens: plan.tokens.clone(),
        positions: plan.positions.clone(),
        query_start: plan.query_start.clone(),
        seq_lens: plan.seq_lens.clone(),
        block_tables: vec![0; b * width],
        max_blocks: width,
        slot_mapping: plan.slot_mapping.clone(),
        last_rows: plan.last_rows.clone(),
        max_seq_len: plan
            .max_seq_len
            .next_power_of_two()
            .max(MIN_CTX_BUCKET)
            .min(cache.config().max_seq_len.max(plan.max_seq_len)),
    };
    for i in 0..s {
        let used = plan.max_blocks.min(width);
        p.block_tables[i * width..i * width + used]
            .copy_from_slice(&plan.block_tables[i * plan.max_blocks..i * plan.max_blocks + used]);
    }
    for i in s..b {
        // A padding row is a sequence of its own (the model checks tokens == sequences); its id
        // is one no real sequence gets, and nothing looks it up (the padded plan only feeds
        // `prepare_decode`).
        p.seq_ids.push(PAD_SEQ_ID - (i - s) as SeqId);
        p.tokens.push(0);
        p.positions.push(0);
        p.query_start.push(i as u32 + 1);
        p.seq_lens.push(1);
        p.block_tables[i * width] = pad;
        p.slot_mapping.push(pad * bs);
        p.last_rows.push(i as u32);
    }
    p
}

/// Runs the padded forward and the sampler, eagerly or as one graph replay.
fn run_step(
    dev: &Device,
    model: &mut dyn Model,
    cache: &mut KvCache,
    bufs: &mut SampleBufs,
    sample: bool,
) -> Result<()> {
    let logits = model.forward_decode(cache)?;
    let SampleBufs {
        params,
        seeds,
        ids,
        logprobs,
    } = bufs;
    if sample {
        dev.sample_rows(logits, params, seeds, ids, logprobs)?;
    }
    Ok(())
}

impl Engine {
    /// Whether this step (every chosen sequence decoding one token) takes the graph path.
    pub(super) fn decode_graph_eligible(&self, chosen: &[SeqId]) -> bool {
        self.model.supports_decode_graphs()
            && self.model.device().supports_graphs()
            && bucket(chosen.len()).is_some()
            && chosen.iter().all(|id| self.seqs[id].pending.len() == 1)
            // A first step may need a new recurrent-state slot, whose reclaiming of dead
            // sequences' slots needs the KV cache (see `Model::forward`): it runs eagerly.
            && chosen
                .iter()
                .all(|id| self.cache.seq_len(*id).unwrap_or(0) > 0)
    }

    /// Runs a reserved pure-decode `plan` through the padded path (a graph replay where one is
    /// captured) and returns each sequence's pick: drawn on the device where its params allow,
    /// else by its host sampler from the step's logits row read back.
    pub(super) fn decode_step(&mut self, plan: &BatchPlan) -> Result<Vec<SampledToken>> {
        let s = plan.num_seqs();
        let b = bucket(s).unwrap_or(DECODE_GRAPH_MAX_SEQS);
        let padded = pad_plan(plan, b, &self.cache);
        let key = (b, padded.max_seq_len);
        let dev = self.model.device().clone();
        let g = &mut self.graphs;
        if g.bufs.is_none() {
            let m = DECODE_GRAPH_MAX_SEQS;
            g.bufs = Some(SampleBufs {
                params: dev.alloc(DType::F32, &[m, 4])?,
                seeds: dev.alloc(DType::U32, &[m, 4])?,
                ids: dev.alloc(DType::U32, &[m])?,
                logprobs: dev.alloc(DType::F32, &[m])?,
            });
        }
        // Per-row sampler inputs; padding rows are greedy.
        let mut params = vec![0f32; b * 4];
        let mut seeds = vec![0u32; b * 4];
        let mut host_rows = Vec::new();
        for (i, id) in plan.seq_ids.iter().enumerate() {
            let seq = &self.seqs[id];
            match device_row(&seq.params.sampling, *id, seq.generated as u64) {
                Some((p, r)) => {
                    params[i * 4..i * 4 + 4].copy_from_slice(&p);
                    seeds[i * 4..i * 4 + 4].copy_from_slice(&r);
                }
                None => host_rows.push(i),
            }
        }
        self.model.prepare_decode(&padded)?;
        let bufs = g.bufs.as_mut().expect("allocated above");
        dev.write_f32(&mut bufs.params, &params, &[b, 4])?;
        dev.write_u32(&mut bufs.seeds, &seeds, &[b, 4])?;
        bufs.ids.set_leading(b)?;
        bufs.logprobs.set_leading(b)?;

        if let Some(graph) = g.graphs.get(&key) {
            graph.replay()?;
        } else if g.capture && g.warmed.contains(&key) {
            let model = self.model.as_mut();
            let cache = &mut self.cache;
            let bufs = g.bufs.as_mut().expect("allocated above");
            match dev.capture(|| run_step(&dev, model, cache, bufs, true)) {
                Ok(((), Some(graph))) => {
                    g.graphs.insert(key, graph);
                    // The graph took the backend's scratch: the next key warms up again first.
                    g.warmed.clear();
                }
                Ok(((), None)) => g.capture = false,
                Err(e) => {
                    // The capture recorded nothing that ran: turn graphs off and run eagerly.
                    eprintln!("pocket-models: decode graph capture failed ({e}); running eagerly");
                    g.capture = false;
                    let bufs = g.bufs.as_mut().expect("allocated above");
                    run_step(&dev, self.model.as_mut(), &mut self.cache, bufs, true)?;
                }
            }
        } else {
            g.warmed.insert(key);
            let bufs = g.bufs.as_mut().expect("allocated above");
            run_step(&dev, self.model.as_mut(), &mut self.cache, bufs, true)?;
        }
        // Rows a host sampler draws (penalties, logit bias, top log-probabilities) read the
        // step's logits back; the device drew them greedily beside the others, unused.
        let host_logits = match (host_rows.is_empty(), self.model.decode_logits()) {
            (true, _) => None,
            (false, Some(l)) => Some(dev.read_f32(l)?),
            (false, None) => {
                let arch = &self.model.info().architecture;
                let why = format!("{arch}: the decode step left no logits to read back");
                return Err(pocket_layers::LayerError::Config(why).into());
            }
        };
        let bufs = self.graphs.bufs.as_ref().expect("allocated above");
        let ids = dev.read_u32(&bufs.ids)?;
        let lps = dev.read_f32(&bufs.logprobs)?;
        let vocab = self.model.info().vocab_size;
        let mut out = Vec::with_capacity(s);
        for (i, id) in plan.seq_ids.iter().enumerate() {
            if let (Some(l), true) = (&host_logits, host_rows.contains(&i)) {
                let mut row = l[i * vocab..(i + 1) * vocab].to_vec();
                let seq = self.seqs.get_mut(id).expect("chosen sequence");
                out.push(seq.sampler.sample(&mut row, &seq.tokens)?);
            } else {
                out.push(SampledToken {
                    id: ids[i],
                    logprob: lps[i],
                    top_logprobs: Vec::new(),
                });
            }
        }
        Ok(out)
    }

    /// Turns decode-graph capture on or off for this engine (the padded decode path and device
    /// sampling stay; off is what `POCKET_GRAPHS=0` selects).
    pub fn set_decode_graphs(&mut self, on: bool) {
        self.graphs.set_capture(on);
    }

    /// How many decode graphs are captured now (0 on the CPU).
    pub fn decode_graphs(&self) -> usize {
        self.graphs.len()
    }

    /// The logits of the last decode step (`[padded sequences, vocab]`) when it took the padded
    /// device path; for tests comparing graph replays with eager steps.
    pub fn last_decode_logits(&mut self) -> Result<Option<Vec<f32>>> {
        if !self.graphs.last_was_decode {
            return Ok(None);
        }
        let dev = self.model.device().clone();
        Ok(self
            .model
            .decode_logits()
            .map(|t| dev.read_f32(t))
            .transpose()?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pocket_kernels::DeviceKind;
    use pocket_layers::kv_cache::KvCacheConfig;

    /// Padding 3 decoding sequences to the bucket of 4 gives 4 sequences of one token each
    /// (prepare_decode rejects a plan whose tokens and sequences differ: the GPU engine test
    /// lost every sequence at the first step of 3), with the real rows unchanged.
    #[test]
    fn padded_plan_has_one_sequence_per_token() {
        let dev = Device::open(DeviceKind::Cpu).unwrap();
        let cfg = KvCacheConfig {
            num_layers: 1,
            num_kv_heads: 1,
            head_dim: 4,
            block_size: 16,
            num_blocks: 8,
            dtype: DType::F32,
            max_seq_len: 64,
        };
        let mut cache = KvCache::new(&dev, cfg).unwrap();
        let prompts: [&[u32]; 3] = [&[1, 2, 3], &[4, 5], &[6]];
        let entries: Vec<(SeqId, &[u32])> = (0..3).map(|i| (i as SeqId, prompts[i])).collect();
        cache.plan(&entries).unwrap();
        let step: Vec<(SeqId, &[u32])> = (0..3).map(|i| (i as SeqId, &[7u32][..])).collect();
        let plan = cache.plan(&step).unwrap();
        let b = bucket(plan.num_seqs()).unwrap();
        assert_eq!(b, 4);
        let p = pad_plan(&plan, b, &cache);
        assert_eq!((p.num_seqs(), p.num_tokens()), (4, 4));
        assert_eq!(p.query_start.len(), 5);
        assert_eq!((p.seq_lens.len(), p.last_rows.len()), (4, 4));
        assert_eq!(&p.seq_ids[..3], &plan.seq_ids[..]);
        assert!(!plan.seq_ids.contains(&p.seq_ids[3]));
        assert_eq!(p.block_tables.len(), 4 * cache.max_blocks_per_seq());
    }
}
