//! The [`Target`] for PocketLLM's `Engine`: prompts as new sequences, decode as engine steps
//! (greedy sampling included, end-of-sequence ignored).

use std::path::Path;

use pocket_kernels::{DType, DeviceKind};
use pocket_models::sampling::SamplingParams;
use pocket_models::{Engine, GenerateParams};

use crate::error::{BenchError, Result};
use crate::target::Target;

/// PocketLLM's engine driven by the bench.
pub struct EngineTarget {
    engine: Engine,
    ids: Vec<u64>,
    max_tokens: usize,
}

fn err(e: impl std::fmt::Display) -> BenchError {
    BenchError::Model(e.to_string())
}

impl EngineTarget {
    /// Loads `path` on `device` with room for `batch` sequences of `max_seq` tokens in a KV
    /// cache of `kv` elements.
    pub fn open(
        path: &Path,
        device: &str,
        batch: usize,
        max_seq: usize,
        max_step_tokens: usize,
        kv: DType,
    ) -> Result<Self> {
        let kind: DeviceKind = device.parse().map_err(BenchError::Usage)?;
        let engine = Engine::builder()
            .model(path.display().to_string())
            .device(kind)
            .max_seq_len(max_seq)
            .cache_tokens(batch * max_seq)
            .max_batch_tokens(max_step_tokens.max(batch))
            .cache_dtype(kv)
            .build()
            .map_err(err)?;
        Ok(EngineTarget {
            engine,
            ids: Vec::new(),
            max_tokens: max_seq,
        })
    }

    fn step_all(&mut self) -> Result<()> {
        // one step normally runs every sequence; loop until each has produced its token
        let mut left: Vec<u64> = self.ids.clone();
        while !left.is_empty() {
            let events = self.engine.step().map_err(err)?;
            if events.is_empty() {
                return Err(BenchError::Model("engine step ran no sequence".into()));
            }
            for (id, ev) in events {
                if let Some(f) = ev.finish {
                    return Err(BenchError::Model(format!(
                        "sequence {id} finished early: {f:?}"
                    )));
                }
                left.retain(|&x| x != id);
            }
        }
        Ok(())
    }
}

impl Target for EngineTarget {
    fn engine(&self) -> String {
        "pocketllm".into()
    }

    fn reset(&mut self) -> Result<()> {
        for id in self.ids.drain(..) {
            let _ = self.engine.cancel(id as _);
        }
        Ok(())
    }

    fn prefill(&mut self, batch: usize, tokens: &[u32]) -> Result<()> {
        if !self.ids.is_empty() {
            return Err(BenchError::Usage(
                "the Engine API cannot append a prompt to a live sequence (prefill at depth)"
                    .into(),
            ));
        }
        let params = GenerateParams {
            max_tokens: self.max_tokens,
            sampling: SamplingParams {
                temperature: 0.0,
                ..SamplingParams::default()
            },
            stop: Vec::new(),
            ignore_eos: true,
        };
        for _ in 0..batch {
            let id = self
                .engine
                .add_sequence(tokens.to_vec(), params.clone())
                .map_err(err)?;
            self.ids.push(id);
        }
        self.step_all()
    }

    fn decode_step(&mut self) -> Result<()> {
        if self.ids.is_empty() {
            return Err(BenchError::Model("decode before prefill".into()));
        }
        self.step_all()
    }

    fn can_append(&self) -> bool {
        false
    }

    fn device_peak_bytes(&self) -> Option<u64> {
        crate::model_target::device_peak(self.engine.model().device())
    }
}
