//! Run records: one JSON file per run with everything needed to judge the numbers, plus one
//! markdown row appended to the folder's `RESULTS.md`.

use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::{BenchError, Result};
use crate::llama_bench::LlamaBenchResult;
use crate::roofline::Bandwidth;
use crate::runner::{Measurements, RunSettings};
use crate::sysinfo::Hardware;

/// The model a run measured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelInfo {
    /// What was asked for (`synthetic:llama3-8b:q4_0`, an alias or a path).
    pub spec: String,
    /// The file or directory loaded.
    pub path: PathBuf,
    /// Architecture as the file states it.
    pub architecture: Option<String>,
    /// Format summary: element types by share of bytes (`Q4_K 71%, Q6_K 21%, ...`).
    pub format: String,
    /// Random weights at a real shape.
    pub synthetic: bool,
    /// Bytes of all tensors.
    pub weight_bytes: u64,
    /// Bytes read per decoded token (see [`crate::roofline::WeightBytes`]).
    pub weight_bytes_per_token: u64,
    /// Parameters.
    pub params: u64,
}

/// The roofline beside the decode number.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Roofline {
    /// The bandwidth used.
    pub bandwidth: Bandwidth,
    /// Weight bytes per token / bandwidth, as tok/s.
    pub decode_tok_s: f64,
    /// Measured decode median / roofline (batch 1 only).
    pub decode_share: Option<f64>,
}

/// Ours over theirs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Ratios {
    /// Prefill median ratio.
    pub prefill: Option<f64>,
    /// Decode median ratio.
    pub decode: Option<f64>,
}

/// One end-to-end run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Record {
    /// Record format version.
    pub schema: u32,
    /// UTC time the run finished.
    pub date: String,
    /// Commit of the binary.
    pub commit: String,
    /// The machine.
    pub hardware: Hardware,
    /// The engine measured.
    pub engine: String,
    /// `cpu` or `cuda`.
    pub device: String,
    /// The model.
    pub model: ModelInfo,
    /// Settings.
    pub settings: RunSettings,
    /// Our measurements.
    pub measurements: Measurements,
    /// Decode roofline.
    pub roofline: Option<Roofline>,
    /// llama-bench on the same file, same invocation.
    pub llama_bench: Option<LlamaBenchResult>,
    /// Ours / llama.cpp's.
    pub ratios: Option<Ratios>,
    /// Anything a reader must know (stand-in engine, skipped comparisons, ...).
    pub notes: Vec<String>,
}

fn slug(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '.' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

impl Record {
    /// A file name that sorts by date and says what was run.
    pub fn file_name(&self) -> String {
        let model = self
            .model
            .path
            .file_name()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| self.model.spec.clone());
        format!(
            "{}-{}-{}-p{}-n{}-b{}-d{}.json",
            self.date.replace(':', ""),
            slug(&model),
            self.device,
            self.settings.prompt_tokens,
            self.settings.gen_tokens,
            self.settings.batch,
            self.settings.depth
        )
    }

    /// Writes the JSON record into `dir` and appends its row to `dir/RESULTS.md`.
    pub fn save(&self, dir: &Path) -> Result<PathBuf> {
        std::fs::create_dir_all(dir).map_err(|e| BenchError::io(dir, e))?;
        let path = dir.join(self.file_name());
        let json = serde_json::to_string_pretty(self)?;
        std::fs::write(&path, json + "\n").map_err(|e| BenchError::io(&path, e))?;
        let md = dir.join("RESULTS.md");
        // A file started under an older header (other columns) gets a new table.
        let header = crate::report::header();
        let first = header.lines().next().unwrap_or_default();
        let new = !std::fs::read_to_string(&md).is_ok_and(|t| t.contains(first));
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&md)
            .map_err(|e| BenchError::io(&md, e))?;
        let mut text = String::new();
        if new {
            if md.exists() {
                text.push('\n');
            }
            text.push_str(&header);
        }
        text.push_str(&crate::report::row(self));
        f.write_all(text.as_bytes())
            .map_err(|e| BenchError::io(&md, e))?;
        Ok(path)
    }

    /// Reads a JSON record.
    pub fn load(path: &Path) -> Result<Record> {
        let s = std::fs::read_to_string(path).map_err(|e| BenchError::io(path, e))?;
        Ok(serde_json::from_str(&s)?)
    }
}
