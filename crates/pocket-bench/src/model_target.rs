//! A [`Target`] over the model forward itself (no engine, no sampler beyond a host argmax) that
//! can append a prompt to live sequences: prefill at a context depth, as llama-bench's `-d`
//! measures it (the depth processed first, untimed, then the prompt timed as a chunk on top).
//!
//! The Engine API starts each prompt as a new sequence, so the engine target cannot do this;
//! prefill cost is the model forward either way (the engine adds one sampling per sequence).

use std::path::Path;
use std::sync::Arc;

use pocket_formats::TensorStore;
use pocket_kernels::{DType, Device, DeviceKind};
use pocket_models::model::{KvCache, Model, SeqId};
use pocket_models::registry::{load_model, LoadOptions};

use crate::error::{BenchError, Result};
use crate::target::Target;

/// Tokens per forward when a prompt is longer (llama-bench's default `-b 2048`), which bounds
/// the activation memory of a long depth fill.
pub const CHUNK: usize = 2048;

fn err(e: impl std::fmt::Display) -> BenchError {
    BenchError::Model(e.to_string())
}

/// The model forward driven directly, with its own paged cache.
pub struct ModelTarget {
    dev: Device,
    model: Box<dyn Model>,
    cache: KvCache,
    /// Live sequences and the token each feeds next (its last argmax).
    seqs: Vec<(SeqId, u32)>,
    next_id: SeqId,
    chunk: usize,
}

impl ModelTarget {
    /// Loads `path` on `device` with room for `batch` sequences of `max_seq` tokens.
    pub fn open(
        path: &Path,
        device: &str,
        batch: usize,
        max_seq: usize,
        kv: DType,
    ) -> Result<Self> {
        let kind: DeviceKind = device.parse().map_err(BenchError::Usage)?;
        let dev = Device::open(kind).map_err(err)?;
        let store = Arc::new(TensorStore::open(path)?);
        let model = load_model(
            store,
            &dev,
            LoadOptions {
                max_seq_len: max_seq,
            },
        )
        .map_err(err)?;
        let info = model.info();
        if max_seq > info.max_context {
            return Err(BenchError::Usage(format!(
                "{max_seq} tokens per sequence exceed the model's context of {}",
                info.max_context
            )));
        }
        let cfg = info.kv_cache_config(batch * max_seq, max_seq, kv);
        let cache = KvCache::new(&dev, cfg).map_err(err)?;
        Ok(ModelTarget {
            dev,
            model,
            cache,
            seqs: Vec::new(),
            next_id: 1,
            chunk: CHUNK,
        })
    }

    /// Sets the most tokens per sequence in one forward (for tests; default [`CHUNK`]).
    pub fn with_chunk(mut self, chunk: usize) -> Self {
        self.chunk = chunk.max(1);
        self
    }

    /// One forward of `tokens[i]` appended to sequence `i`; returns every sequence's logits row
    /// (read back, which also waits for the device).
    fn forward(&mut self, entries: &[(SeqId, &[u32])]) -> Result<Vec<Vec<f32>>> {
        let plan = self.cache.plan(entries).map_err(err)?;
        let logits = self.model.forward(&plan, &mut self.cache).map_err(err)?;
        let flat = self.dev.read_f32(logits).map_err(err)?;
        let vocab = self.model.info().vocab_size;
        Ok(flat.chunks(vocab).map(<[f32]>::to_vec).collect())
    }

    /// Appends `tokens` to every live sequence (after creating `batch` when there are none),
    /// in forwards of at most the chunk size; returns the last logits of each sequence.
    pub fn append(&mut self, batch: usize, tokens: &[u32]) -> Result<Vec<Vec<f32>>> {
        if tokens.is_empty() {
            return Err(BenchError::Usage("empty prompt".into()));
        }
        if self.seqs.is_empty() {
            for _ in 0..batch {
                self.seqs.push((self.next_id, 0));
                self.next_id += 1;
            }
        }
        let mut last = Vec::new();
        for part in tokens.chunks(self.chunk) {
            let entries: Vec<(SeqId, &[u32])> =
                self.seqs.iter().map(|(id, _)| (*id, part)).collect();
            last = self.forward(&entries)?;
        }
        for ((_, next), row) in self.seqs.iter_mut().zip(&last) {
            *next = argmax(row);
        }
        Ok(last)
    }
}

fn argmax(row: &[f32]) -> u32 {
    let mut best = 0;
    for (i, v) in row.iter().enumerate() {
        if *v > row[best] {
            best = i;
        }
    }
    best as u32
}

impl Target for ModelTarget {
    fn engine(&self) -> String {
        "pocketllm:model-forward".into()
    }

    fn reset(&mut self) -> Result<()> {
        for (id, _) in self.seqs.drain(..) {
            self.cache.free_sequence(id);
        }
        Ok(())
    }

    fn prefill(&mut self, batch: usize, tokens: &[u32]) -> Result<()> {
        if !self.seqs.is_empty() && self.seqs.len() != batch {
            return Err(BenchError::Usage(format!(
                "{} live sequences, {batch} asked for",
                self.seqs.len()
            )));
        }
        self.append(batch, tokens).map(|_| ())
    }

    fn decode_step(&mut self) -> Result<()> {
        if self.seqs.is_empty() {
            return Err(BenchError::Model("decode before prefill".into()));
        }
        let feeds: Vec<(SeqId, [u32; 1])> = self.seqs.iter().map(|(id, t)| (*id, [*t])).collect();
        let entries: Vec<(SeqId, &[u32])> = feeds.iter().map(|(id, t)| (*id, &t[..])).collect();
        let rows = self.forward(&entries)?;
        for ((_, next), row) in self.seqs.iter_mut().zip(&rows) {
            *next = argmax(row);
        }
        Ok(())
    }

    fn device_peak_bytes(&self) -> Option<u64> {
        device_peak(&self.dev)
    }
}

/// This process's peak memory on a CUDA device (the allocator's high-water mark); `None` on the
/// CPU, where the host peak is the resident-set figure.
pub fn device_peak(dev: &Device) -> Option<u64> {
    match dev.kind() {
        DeviceKind::Cpu => None,
        DeviceKind::Cuda(_) => dev.memory_info().and_then(|m| m.process_peak_bytes),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture() -> std::path::PathBuf {
        std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../models/llama/tests/data/llama")
    }

    fn max_diff(a: &[f32], b: &[f32]) -> f32 {
        a.iter()
            .zip(b)
            .map(|(x, y)| (x - y).abs())
            .fold(0.0, f32::max)
    }

    /// A prompt appended in chunks on top of a depth gives the logits of the same tokens in one
    /// forward: the chunked prefill at depth computes the model, not an approximation of it.
    #[test]
    fn chunked_prefill_at_depth_equals_one_forward() {
        let tokens: Vec<u32> = (0..90u32).map(|i| (i * 37 + 11) % 120 + 1).collect();
        let mut whole = ModelTarget::open(&fixture(), "cpu", 2, 128, DType::F32).unwrap();
        let reference = whole.append(2, &tokens).unwrap();
        let mut parts = ModelTarget::open(&fixture(), "cpu", 2, 128, DType::F32)
            .unwrap()
            .with_chunk(16);
        // 64 tokens of depth in 4 forwards, then a 26-token chunk at depth 64.
        parts.append(2, &tokens[..64]).unwrap();
        let chunked = parts.append(2, &tokens[64..]).unwrap();
        assert_eq!(chunked.len(), 2);
        let scale = reference[0].iter().fold(0f32, |m, v| m.max(v.abs()));
        for (a, b) in reference.iter().zip(&chunked) {
            assert!(
                max_diff(a, b) <= 1e-4 * scale.max(1.0),
                "{}",
                max_diff(a, b)
            );
        }
        // Decode continues from there; reset frees every cache block.
        parts.decode_step().unwrap();
        parts.reset().unwrap();
        assert_eq!(
            parts.cache.free_blocks(),
            parts.cache.config().num_blocks,
            "every block free after reset"
        );
        assert_eq!(parts.device_peak_bytes(), None, "no device peak on the CPU");
    }
}
