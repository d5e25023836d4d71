//! The synthetic-model entry points: `synthetic:PRESET:FORMAT` specs, generation, caching.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::{BenchError, Result};
use crate::mix::FormatSpec;
use crate::preset::preset;
use crate::stream::{stream_tensors, StreamTensor};

/// Generator settings.
#[derive(Debug, Clone, Default)]
pub struct SynthOptions {
    /// Where vocab GGUFs live (searched first).
    pub vocab_dir: Option<PathBuf>,
    /// Seed for all weights.
    pub seed: u64,
}

/// What was generated.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SynthReport {
    /// Output path (GGUF file or safetensors directory).
    pub path: PathBuf,
    /// Preset name.
    pub preset: String,
    /// Format name.
    pub format: String,
    /// `gguf` or `safetensors`.
    pub container: String,
    /// Bytes on disk.
    pub file_bytes: u64,
    /// Bytes of tensor data (weights and scales).
    pub weight_bytes: u64,
    /// Parameters.
    pub params: u64,
    /// Tensor count.
    pub tensors: usize,
    /// Bytes per element type.
    pub bytes_by_type: BTreeMap<String, u64>,
    /// Vocab file the tokenizer came from (GGUF only).
    pub vocab_file: Option<String>,
    /// Wall time of generation.
    pub seconds: f64,
}

/// A parsed `synthetic:PRESET:FORMAT`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SyntheticSpec {
    /// Preset name.
    pub preset: String,
    /// Format name as given.
    pub format: String,
}

impl SyntheticSpec {
    /// Parses `synthetic:PRESET:FORMAT` (`None` when `s` does not start with `synthetic:`).
    pub fn parse(s: &str) -> Option<Result<SyntheticSpec>> {
        let rest = s.strip_prefix("synthetic:")?;
        Some(match rest.split_once(':') {
            Some((p, f)) if !p.is_empty() && !f.is_empty() => Ok(SyntheticSpec {
                preset: p.to_string(),
                format: f.to_string(),
            }),
            _ => Err(BenchError::Usage(format!(
                "`{s}`: expected synthetic:PRESET:FORMAT"
            ))),
        })
    }

    /// The default file or directory name for this spec.
    pub fn file_name(&self) -> Result<String> {
        let spec = FormatSpec::parse(&self.format)?;
        Ok(match spec {
            FormatSpec::Gguf { .. } => format!("{}-{}.gguf", self.preset, spec.name()),
            FormatSpec::Safetensors(_) => format!("{}-{}", self.preset, spec.name()),
        })
    }
}

/// Generates `preset` in `format` at `out` (a `.gguf` file, or a directory for safetensors).
pub fn synthesize(
    preset_name: &str,
    format: &str,
    out: &Path,
    opts: &SynthOptions,
) -> Result<SynthReport> {
    let p = preset(preset_name)?;
    let spec = FormatSpec::parse(format)?;
    match spec {
        FormatSpec::Gguf { .. } => crate::synth_gguf::write_gguf(&p, spec, out, opts),
        FormatSpec::Safetensors(kind) => crate::synth_st::write_safetensors(&p, kind, out, opts),
    }
}

/// The cache directory for synthetic models: `$POCKET_SYNTH_DIR`, else the system temp dir's
/// `pocket-synth`.
pub fn cache_dir() -> PathBuf {
    std::env::var_os("POCKET_SYNTH_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| std::env::temp_dir().join("pocket-synth"))
}

/// The path of a synthetic model, generated into `dir` first if it is not there yet.
pub fn materialize(
    spec: &SyntheticSpec,
    dir: &Path,
    opts: &SynthOptions,
) -> Result<(PathBuf, Option<SynthReport>)> {
    let path = dir.join(spec.file_name()?);
    let done = if path.is_dir() {
        path.join("model.safetensors").is_file()
    } else {
        path.is_file()
    };
    if done {
        return Ok((path, None));
    }
    std::fs::create_dir_all(dir).map_err(|e| BenchError::io(dir, e))?;
    let report = synthesize(&spec.preset, &spec.format, &path, opts)?;
    Ok((path, Some(report)))
}

/// Writes `header` then the streamed tensors to `out` through a `.partial` file renamed at the
/// end (so an interrupted run never leaves a file that looks complete).
pub(crate) fn finish_file(
    out: &Path,
    header: &[u8],
    tensors: &[StreamTensor],
    align: u64,
    opts: &SynthOptions,
    report: impl FnOnce(u64) -> SynthReport,
) -> Result<SynthReport> {
    let mut partial = out.as_os_str().to_owned();
    partial.push(".partial");
    let partial = PathBuf::from(partial);
    let f = std::fs::File::create(&partial).map_err(|e| BenchError::io(&partial, e))?;
    let mut w = std::io::BufWriter::with_capacity(8 << 20, f);
    w.write_all(header)
        .map_err(|e| BenchError::io(&partial, e))?;
    let data = stream_tensors(&mut w, tensors, align, opts.seed)?;
    w.flush().map_err(|e| BenchError::io(&partial, e))?;
    drop(w);
    std::fs::rename(&partial, out).map_err(|e| BenchError::io(out, e))?;
    Ok(report(header.len() as u64 + data))
}
