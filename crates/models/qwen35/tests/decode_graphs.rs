//! The hybrid's padded decode path (`Model::prepare_decode` + `forward_decode`, what the engine
//! captures as a device graph) against the eager step, on the BF16 and FP8 fixtures:
//!
//! - On CUDA, one model captures each (batch bucket) step once and replays it; a second model runs
//!   the same padded steps eagerly. Their logits must be bit-identical at every step (a replay
//!   runs the very kernels the eager step launches, on the same buffers).
//! - On every device, the padded step's rows of real sequences must equal a third model's plain
//!   `forward` of the unpadded batch: padding rows (spare state slots, the cache's spare block)
//!   change nothing for the real ones. Bit-for-bit on the CPU; on CUDA within `hf_parity.rs`'s
//!   1e-3 (f32 reordering), since split-K decode attention picks its split count from the
//!   padded batch and its context bucket, so it sums the same products in another order.
//!
//! The script runs 24 decode steps over 1 to 3 concurrent sequences: A alone, B joins, C joins
//! (3 sequences, padded to 4), B leaves, then C leaves (A alone again). Greedy tokens of the
//! graph model feed all three. Build with `--features pocket-kernels/cuda` for the CUDA part;
//! without a GPU only the CPU runs.

#[path = "../../hf_parity_support.rs"]
mod parity;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use parity::data;
use pocket_formats::TensorStore;
use pocket_kernels::device::Graph;
use pocket_kernels::{DType, Device};
use pocket_layers::model::DECODE_PAD_SEQ_ID;
use pocket_layers::{BatchPlan, KvCache, Model, SeqId};
use pocket_model_qwen35::{LoadOptions, Qwen35Model};

fn load(name: &str, dev: &Device) -> (Qwen35Model, KvCache) {
    let store = Arc::new(TensorStore::open(data(name)).unwrap());
    let opts = LoadOptions {
        max_seq_len: 256,
        max_seqs: 4,
    };
    let model = Qwen35Model::load(store, dev, opts).unwrap();
    let cfg = model.info().kv_cache_config(2048, 256, DType::F32);
    let cache = KvCache::new(dev, cfg).unwrap();
    (model, cache)
}

/// `plan` padded to `b` sequences as the engine pads a decode step (graphs.rs `pad_plan`):
/// fixed-width block tables, a context bound of 256, padding rows decoding token 0 at position
/// 0 into the cache's spare block.
fn pad(plan: &BatchPlan, b: usize, cache: &KvCache) -> BatchPlan {
    let width = cache.max_blocks_per_seq();
    let bs = cache.config().block_size as u32;
    let spare = cache.pad_block();
    let s = plan.num_seqs();
    let mut p = plan.clone();
    p.block_tables = vec![0; b * width];
    p.max_blocks = width;
    p.max_seq_len = 256;
    for i in 0..s {
        let used = plan.max_blocks.min(width);
        p.block_tables[i * width..i * width + used]
            .copy_from_slice(&plan.block_tables[i * plan.max_blocks..i * plan.max_blocks + used]);
    }
    for i in s..b {
        p.seq_ids.push(DECODE_PAD_SEQ_ID - (i - s) as SeqId);
        p.tokens.push(0);
        p.positions.push(0);
        p.query_start.push(i as u32 + 1);
        p.seq_lens.push(1);
        p.block_tables[i * width] = spare;
        p.slot_mapping.push(spare * bs);
        p.last_rows.push(i as u32);
    }
    p
}

/// A model with its cache and, for the graph side, its captured graphs per batch bucket.
struct Runner {
    model: Qwen35Model,
    cache: KvCache,
    graphs: HashMap<usize, Graph>,
    warmed: HashSet<usize>,
    captured: usize,
}

impl Runner {
    fn new(name: &str, dev: &Device) -> Runner {
        let (model, cache) = load(name, dev);
        Runner {
            model,
            cache,
            graphs: HashMap::new(),
            warmed: HashSet::new(),
            captured: 0,
        }
    }

    /// A prompt step (always eager, as in the engine): the logits of its sequences.
    fn prefill(&mut self, entries: &[(SeqId, Vec<u32>)]) -> Vec<f32> {
        let refs: Vec<(SeqId, &[u32])> = entries.iter().map(|(i, t)| (*i, t.as_slice())).collect();
        let plan = self.cache.plan(&refs).unwrap();
        // An eager step of more rows may grow workspaces the graphs address (the engine drops
        // its graphs then, `note_eager`): do the same.
        self.graphs.clear();
        self.warmed.clear();
        let dev = self.model.device().clone();
        dev.read_f32(self.model.forward(&plan, &mut self.cache).unwrap())
            .unwrap()
    }

    /// One decode step of `entries` (one token each): plain `forward` when `padded` is `None`,
    /// else padded to that bucket, through graphs when `graphs`. The real rows' logits.
    fn decode(
        &mut self,
        entries: &[(SeqId, u32)],
        padded: Option<usize>,
        graphs: bool,
    ) -> Vec<f32> {
        let toks: Vec<(SeqId, [u32; 1])> = entries.iter().map(|&(i, t)| (i, [t])).collect();
        let refs: Vec<(SeqId, &[u32])> = toks.iter().map(|(i, t)| (*i, &t[..])).collect();
        let plan = self.cache.plan(&refs).unwrap();
        let dev = self.model.device().clone();
        let vocab = self.model.info().vocab_size;
        let Some(b) = padded else {
            return dev
                .read_f32(self.model.forward(&plan, &mut self.cache).unwrap())
                .unwrap();
        };
        self.model
            .prepare_decode(&pad(&plan, b, &self.cache))
            .unwrap();
        if let Some(g) = self.graphs.get(&b).filter(|_| graphs) {
            g.replay().unwrap();
        } else if graphs && self.warmed.contains(&b) {
            let (model, cache) = (&mut self.model, &mut self.cache);
            let ((), g) = dev
                .capture(|| model.forward_decode(cache).map(|_| ()))
                .unwrap();
            if let Some(g) = g {
                self.graphs.insert(b, g);
                self.captured += 1;
                self.warmed.clear();
            }
        } else {
            self.warmed.insert(b);
            self.model.forward_decode(&mut self.cache).unwrap();
        }
        let all = dev.read_f32(self.model.decode_logits().unwrap()).unwrap();
        all[..entries.len() * vocab].to_vec()
    }

    fn finish(&mut self, id: SeqId) {
        self.cache.free_sequence(id);
        self.model.free_sequence(id);
    }
}

/// `hf_parity.rs`'s bound for f32 reorderings on these fixtures.
const TOL: f32 = 1e-3;

fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0f32, |m, d| if d > m || d.is_nan() { d } else { m })
}

fn argmax(row: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &x) in row.iter().enumerate() {
        if x > row[best] {
            best = i;
        }
    }
    best as u32
}

fn bucket(n: usize) -> usize {
    n.next_power_of_two()
}

fn check(name: &str) {
    for dev in Device::all_for_tests() {
        let graphs = dev.supports_graphs();
        let mut g = Runner::new(name, &dev);
        let mut e = Runner::new(name, &dev);
        let mut plain = Runner::new(name, &dev);
        let vocab = g.model.info().vocab_size;
        let prompts: [(SeqId, Vec<u32>); 3] = [
            (0, vec![1, 5, 9, 33, 2]),
            (1, vec![7, 8, 9, 10, 11, 12, 13]),
            (2, (20..57).collect()),
        ];
        // Live sequences and the token each decodes next.
        let mut live: Vec<(SeqId, u32)> = Vec::new();
        let mut steps = 0;
        for step in 0..28 {
            let join = match step {
                0 => Some(0),
                4 => Some(1),
                8 => Some(2),
                _ => None,
            };
            if let Some(j) = join {
                let entry = [prompts[j].clone()];
                let l = g.prefill(&entry);
                assert_eq!(l, e.prefill(&entry), "{name} {}: prefill", dev.name());
                assert_eq!(l, plain.prefill(&entry), "{name} {}: prefill", dev.name());
                live.push((prompts[j].0, argmax(&l)));
                continue;
            }
            let leave = match step {
                16 => Some(1),
                22 => Some(2),
                _ => None,
            };
            if let Some(id) = leave {
                live.retain(|&(i, _)| i != id);
                for r in [&mut g, &mut e, &mut plain] {
                    r.finish(id);
                }
            }
            let b = bucket(live.len());
            let lg = g.decode(&live, Some(b), graphs);
            let le = e.decode(&live, Some(b), false);
            let lp = plain.decode(&live, None, false);
            let what = format!("{name} {} step {step} ({} seqs)", dev.name(), live.len());
            assert_eq!(lg.len(), live.len() * vocab, "{what}");
            assert!(lg == le, "{what}: graph replay differs from the eager step");
            if dev.supports_graphs() {
                let d = max_diff(&lg, &lp);
                assert!(d <= TOL, "{what}: padded step vs plain forward |Δ| {d}");
            } else {
                assert!(
                    lg == lp,
                    "{what}: padded step differs from the plain forward"
                );
            }
            for (i, (_, next)) in live.iter_mut().enumerate() {
                *next = argmax(&lg[i * vocab..(i + 1) * vocab]);
            }
            steps += 1;
        }
        assert!(steps >= 16, "{name}: only {steps} decode steps");
        if graphs {
            // Buckets 1, 2 and 4, each captured again after a prompt step dropped the graphs.
            assert!(g.captured >= 3, "{name}: {} graphs captured", g.captured);
        }
        eprintln!(
            "{name} {}: {steps} decode steps equal, {} graphs captured",
            dev.name(),
            g.captured
        );
    }
}

#[test]
fn bf16_decode_graphs_match_eager() {
    check("bf16");
}

#[test]
fn fp8_decode_graphs_match_eager() {
    check("fp8");
}
