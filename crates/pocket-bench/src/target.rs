//! What the runner measures: a [`Target`] processes prompts and decode steps for a batch of
//! sequences. The engine adaptor implements it; [`StandIn`] is a trivial stand-in that streams
//! every weight through pocket-quant's matmul, for testing the harness before the engine exists.

use std::path::Path;

use pocket_formats::{TensorFormat, TensorStore};
use pocket_quant::{matmul, QuantFormat, QuantMatrix};

use crate::error::{BenchError, Result};

/// A model under test, driven token by token.
pub trait Target {
    /// A short label for records (`pocketllm`, `standin:quant-matmul`).
    fn engine(&self) -> String;
    /// Drops every sequence and its cached context.
    fn reset(&mut self) -> Result<()>;
    /// Appends `tokens` to each of `batch` sequences (creating them if needed) and returns once
    /// every sequence's next token is known (synchronised with the device).
    fn prefill(&mut self, batch: usize, tokens: &[u32]) -> Result<()>;
    /// Generates one more token for every live sequence (synchronised).
    fn decode_step(&mut self) -> Result<()>;
    /// Whether a prompt can be appended to live sequences (prefill at a context depth).
    fn can_append(&self) -> bool {
        true
    }
    /// Peak device memory in bytes since the target was created, when the device reports it.
    fn device_peak_bytes(&self) -> Option<u64> {
        None
    }
}

/// Stand-in target: per token, multiplies every 2-D weight of a GGUF by a random activation row
/// with pocket-quant (reads every weight byte once per token, no attention, no real model).
pub struct StandIn {
    store: TensorStore,
    names: Vec<String>,
    batch: usize,
    scratch_x: Vec<f32>,
    scratch_y: Vec<f32>,
}

impl StandIn {
    /// Opens `path` and picks its multipliable 2-D weights.
    pub fn open(path: &Path) -> Result<StandIn> {
        let store = TensorStore::open(path)?;
        let names = store
            .tensors()
            .filter(|t| t.shape.len() == 2 && !t.name.contains("token_embd"))
            .filter(|t| matches!(t.format, TensorFormat::Ggml(_)))
            .map(|t| t.name.to_string())
            .collect();
        Ok(StandIn {
            store,
            names,
            batch: 0,
            scratch_x: Vec::new(),
            scratch_y: Vec::new(),
        })
    }

    fn pass(&mut self, rows: usize) -> Result<()> {
        for name in &self.names {
            let t = self.store.tensor(name)?;
            let TensorFormat::Ggml(g) = t.format else {
                continue;
            };
            let (r, c) = (t.shape[0], t.shape[1]);
            let w = QuantMatrix {
                format: QuantFormat::Ggml(g),
                rows: r,
                cols: c,
                data: t.data,
                scales: None,
                tensor_scale: None,
            };
            self.scratch_x.resize(rows * c, 0.01);
            self.scratch_y.resize(rows * r, 0.0);
            matmul(&w, &self.scratch_x, rows, &mut self.scratch_y)
                .map_err(|e| BenchError::Model(format!("{name}: {e}")))?;
        }
        Ok(())
    }
}

impl Target for StandIn {
    fn engine(&self) -> String {
        "standin:quant-matmul".into()
    }
    fn reset(&mut self) -> Result<()> {
        self.batch = 0;
        Ok(())
    }
    fn prefill(&mut self, batch: usize, tokens: &[u32]) -> Result<()> {
        self.batch = batch;
        self.pass(batch * tokens.len())
    }
    fn decode_step(&mut self) -> Result<()> {
        if self.batch == 0 {
            return Err(BenchError::Model("decode before prefill".into()));
        }
        self.pass(self.batch)
    }
}
