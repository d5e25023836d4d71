//! The `run` command: resolve the model, measure it, compare with llama-bench, add the roofline,
//! print and record.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use pocket_formats::{StoreKind, TensorStore};

use crate::error::{BenchError, Result};
use crate::llama_bench::{self, LlamaBenchArgs};
use crate::record::{ModelInfo, Ratios, Record, Roofline};
use crate::roofline::{host_copy_bandwidth, quoted_h200, roofline_tok_s, weight_bytes, Bandwidth};
use crate::runner::{run, RunSettings};
use crate::synth::{cache_dir, materialize, SynthOptions, SyntheticSpec};
use crate::sysinfo::{commit, hardware, utc_now};
use crate::target::{StandIn, Target};

/// Everything the `run` command needs.
#[derive(Debug, Clone)]
pub struct RunRequest {
    /// `ALIAS`, `PATH` or `synthetic:PRESET:FORMAT`.
    pub model: String,
    /// `cpu` or `cuda`.
    pub device: String,
    /// `pocket` (the engine) or `standin`.
    pub engine: String,
    /// Measurement settings.
    pub settings: RunSettings,
    /// llama-bench to run beside ours.
    pub compare_llama_bench: Option<PathBuf>,
    /// The model llama-bench runs, when not the same as ours (a GGUF twin of a safetensors model).
    pub llama_model: Option<String>,
    /// Where records go.
    pub record_dir: Option<PathBuf>,
    /// Synthetic generation settings.
    pub synth: SynthOptions,
    /// Directory for generated synthetic models.
    pub synth_dir: Option<PathBuf>,
    /// Our engine's KV cache element type (`f32`, `f16`, `bf16`); `None`: the engine's default
    /// for the device (`pocket_models::default_cache_dtype`).
    pub kv_cache: Option<String>,
}

/// Resolves a model argument to a path (generating synthetic models on first use).
pub fn resolve_model(
    spec: &str,
    synth_dir: Option<&Path>,
    opts: &SynthOptions,
) -> Result<(PathBuf, bool)> {
    if let Some(s) = SyntheticSpec::parse(spec) {
        let s = s?;
        let dir = synth_dir.map_or_else(cache_dir, Path::to_path_buf);
        let (path, report) = materialize(&s, &dir, opts)?;
        if let Some(r) = report {
            eprintln!(
                "generated {} ({:.2} GB, {} tensors) in {:.1} s",
                r.path.display(),
                r.file_bytes as f64 / 1e9,
                r.tensors,
                r.seconds
            );
        }
        return Ok((path, true));
    }
    let p = PathBuf::from(spec);
    if p.exists() {
        return Ok((p, false));
    }
    Err(BenchError::Usage(format!(
        "model `{spec}`: no such file; aliases are resolved by the engine's model store, \
         pass a path or synthetic:PRESET:FORMAT"
    )))
}

fn format_summary(store: &TensorStore) -> String {
    let mut by: BTreeMap<String, u64> = BTreeMap::new();
    let mut total = 0u64;
    for t in store.tensors() {
        *by.entry(t.format.name().to_string()).or_default() += t.data.len() as u64;
        total += t.data.len() as u64;
    }
    let mut v: Vec<(String, u64)> = by.into_iter().collect();
    v.sort_by_key(|x| std::cmp::Reverse(x.1));
    v.iter()
        .filter(|(_, b)| *b as f64 >= 0.005 * total as f64)
        .map(|(n, b)| format!("{n} {:.0}%", 100.0 * *b as f64 / total.max(1) as f64))
        .collect::<Vec<_>>()
        .join(", ")
}

fn vocab_rows(store: &TensorStore) -> usize {
    ["token_embd.weight", "model.embed_tokens.weight"]
        .iter()
        .find_map(|n| store.tensor(n).ok().map(|t| t.shape[0]))
        .unwrap_or(32000)
}

fn open_target(req: &RunRequest, path: &Path) -> Result<Box<dyn Target>> {
    match (req.engine.as_str(), req.device.as_str()) {
        ("standin", "cpu") => Ok(Box::new(StandIn::open(path)?)),
        ("standin", d) => Err(BenchError::Usage(format!(
            "the stand-in runs on the CPU only, not `{d}`"
        ))),
        #[cfg(not(feature = "engine"))]
        ("pocket", _) => Err(BenchError::Usage(
            "pocket-bench was built without the `engine` feature; use --engine standin".into(),
        )),
        #[cfg(feature = "engine")]
        ("pocket", d) => {
            let s = &req.settings;
            let max_seq = s.depth + s.prompt_tokens.max(1) + s.gen_tokens + 8;
            let step = s.batch * s.depth.max(s.prompt_tokens).max(1);
            Ok(Box::new(crate::engine::EngineTarget::open(
                path,
                d,
                s.batch,
                max_seq,
                step,
                kv_dtype(req)?,
            )?))
        }
        (e, _) => Err(BenchError::Usage(format!(
            "unknown engine `{e}` (pocket|standin)"
        ))),
    }
}

/// The KV cache element type our engine runs with: `--kv-cache`, else the engine's default for
/// the device.
#[cfg(feature = "engine")]
fn kv_dtype(req: &RunRequest) -> Result<pocket_kernels::DType> {
    match req.kv_cache.as_deref() {
        Some(name) => pocket_models::cache_dtype_by_name(name)
            .ok_or_else(|| BenchError::Usage(format!("--kv-cache {name}: f32, f16 or bf16"))),
        None => {
            let kind: pocket_kernels::DeviceKind = req.device.parse().map_err(BenchError::Usage)?;
            Ok(pocket_models::default_cache_dtype(kind))
        }
    }
}

/// Runs one end-to-end measurement and returns its record (saved when a record dir is set).
pub fn run_e2e(req: &RunRequest) -> Result<Record> {
    if !matches!(req.device.as_str(), "cpu" | "cuda") {
        return Err(BenchError::Usage(format!(
            "--device {}: cpu or cuda",
            req.device
        )));
    }
    // A bad --kv-cache is refused here, before a synthetic model is generated.
    let mut notes = Vec::new();
    #[cfg(feature = "engine")]
    if req.engine == "pocket" {
        notes.push(format!("pocketllm KV cache: {}", kv_dtype(req)?.name()));
    }
    let (path, synthetic) = resolve_model(&req.model, req.synth_dir.as_deref(), &req.synth)?;
    let store = TensorStore::open(&path)?;
    let wb = weight_bytes(&store);
    let architecture = match store.metadata() {
        pocket_formats::StoreMetadata::Gguf(g) => g.architecture().ok().map(str::to_string),
        pocket_formats::StoreMetadata::Safetensors { config, .. } => {
            config.and_then(|c| c.model_type()).map(str::to_string)
        }
    };
    let model = ModelInfo {
        spec: req.model.clone(),
        path: path.clone(),
        architecture,
        format: format_summary(&store),
        synthetic,
        weight_bytes: wb.total,
        weight_bytes_per_token: wb.per_token,
        params: wb.params,
    };
    let is_gguf = store.kind() == StoreKind::Gguf;
    let mut settings = req.settings.clone();
    settings.vocab = vocab_rows(&store);
    drop(store);
    let mut target = open_target(req, &path)?;
    if req.engine == "standin" {
        notes.push(
            "stand-in engine: every 2-D weight through pocket-quant matmul per token, no attention; \
             not a model's speed"
                .into(),
        );
    }
    let mut measurements = run(target.as_mut(), &settings)?;
    let appends = target.can_append();
    drop(target);
    if settings.depth > 0 && settings.prompt_tokens > 0 && !appends {
        depth_prefill(req, &path, &settings, &mut measurements, &mut notes)?;
    }
    let bandwidth: Bandwidth = if req.device == "cpu" {
        host_copy_bandwidth(512)
    } else {
        quoted_h200()
    };
    let roof = roofline_tok_s(&wb, &bandwidth);
    let decode_share = measurements
        .decode_tok_s
        .as_ref()
        .filter(|_| settings.batch == 1 && roof > 0.0)
        .map(|d| d.median / roof);
    let roofline = Some(Roofline {
        bandwidth,
        decode_tok_s: roof,
        decode_share,
    });
    let mut llama = None;
    if let Some(exe) = &req.compare_llama_bench {
        let llama_path = match &req.llama_model {
            Some(spec) => {
                let (p, _) = resolve_model(spec, req.synth_dir.as_deref(), &req.synth)?;
                notes.push(format!("llama-bench ran on {spec}, ours on {}", req.model));
                p
            }
            None => path.clone(),
        };
        let llama_is_gguf = req.llama_model.is_some() || is_gguf;
        if !llama_is_gguf {
            notes.push("llama-bench skipped: the model is not a GGUF".into());
        } else if settings.batch != 1 {
            notes.push("llama-bench skipped: it has no concurrent-sequence batch".into());
        } else {
            let args = LlamaBenchArgs {
                exe,
                model: &llama_path,
                prompt: settings.prompt_tokens,
                gen: settings.gen_tokens,
                reps: settings.reps,
                depth: settings.depth,
                threads: if req.device == "cpu" {
                    settings.threads
                } else {
                    None
                },
                ngl: if req.device == "cpu" { 0 } else { 99 },
            };
            match llama_bench::run(&args) {
                Ok(r) => llama = Some(r),
                Err(e) => notes.push(format!("llama-bench failed: {e}")),
            }
        }
    }
    let ratio =
        |ours: &Option<crate::stats::Summary>, theirs: &Option<crate::stats::Summary>| match (
            ours, theirs,
        ) {
            (Some(a), Some(b)) if b.median > 0.0 => Some(a.median / b.median),
            _ => None,
        };
    let ratios = llama.as_ref().map(|l| Ratios {
        prefill: ratio(&measurements.prefill_tok_s, &l.prefill_tok_s),
        decode: ratio(&measurements.decode_tok_s, &l.decode_tok_s),
    });
    let record = Record {
        schema: 1,
        date: utc_now(),
        commit: commit(),
        hardware: hardware(),
        engine: target_name(req),
        device: req.device.clone(),
        model,
        settings,
        measurements,
        roofline,
        llama_bench: llama,
        ratios,
        notes,
    };
    if let Some(dir) = &req.record_dir {
        let p = record.save(dir)?;
        eprintln!("record: {}", p.display());
    }
    Ok(record)
}

/// Prefill at a depth for an engine that cannot append to a live sequence: the same settings on
/// the model forward driven directly ([`crate::model_target::ModelTarget`]), loaded after the
/// engine is gone; its prefill, TTFT and depth-fill figures replace the missing ones.
#[cfg(feature = "engine")]
fn depth_prefill(
    req: &RunRequest,
    path: &Path,
    settings: &RunSettings,
    m: &mut crate::runner::Measurements,
    notes: &mut Vec<String>,
) -> Result<()> {
    let s = RunSettings {
        gen_tokens: 0,
        ..settings.clone()
    };
    let max_seq = s.depth + s.prompt_tokens + 8;
    let mut t = crate::model_target::ModelTarget::open(
        path,
        &req.device,
        s.batch,
        max_seq,
        kv_dtype(req)?,
    )?;
    let d = run(&mut t, &s)?;
    drop(t);
    m.prefill_tok_s = d.prefill_tok_s;
    m.ttft_ms = d.ttft_ms;
    m.depth_fill_tok_s = d.depth_fill_tok_s;
    m.peak_rss_bytes = m.peak_rss_bytes.max(d.peak_rss_bytes);
    m.peak_device_bytes = m.peak_device_bytes.max(d.peak_device_bytes);
    notes.push(format!(
        "prefill pp{} @ d{}: the model forward driven directly (the Engine API cannot append a \
         prompt to a live sequence); depth filled in chunks of {} tokens, untimed, then the \
         prompt timed as one chunk, as llama-bench -d does",
        s.prompt_tokens,
        s.depth,
        crate::model_target::CHUNK
    ));
    Ok(())
}

#[cfg(not(feature = "engine"))]
fn depth_prefill(
    _req: &RunRequest,
    _path: &Path,
    _settings: &RunSettings,
    _m: &mut crate::runner::Measurements,
    notes: &mut Vec<String>,
) -> Result<()> {
    notes.push("prefill at depth skipped: built without the `engine` feature".into());
    Ok(())
}

fn target_name(req: &RunRequest) -> String {
    match req.engine.as_str() {
        "standin" => "standin".into(),
        _ => "pocketllm".into(),
    }
}

/// A human summary: ours, theirs, ratio, roofline.
pub fn summary(r: &Record) -> String {
    let m = &r.measurements;
    let f = |s: &Option<crate::stats::Summary>| {
        s.as_ref().map_or("-".to_string(), |s| {
            format!("{:.2} (min {:.2}, max {:.2})", s.median, s.min, s.max)
        })
    };
    let mut out = format!(
        "{} on {} [{}], {} threads, batch {}, depth {}\n  model: {} ({}, {:.2} GB, {:.2} GB read per token)\n",
        r.engine,
        r.device,
        r.hardware.cpu,
        r.settings.threads.map_or("default".into(), |t| t.to_string()),
        r.settings.batch,
        r.settings.depth,
        r.model.spec,
        r.model.format,
        r.model.weight_bytes as f64 / 1e9,
        r.model.weight_bytes_per_token as f64 / 1e9
    );
    let lb = r.llama_bench.as_ref();
    let theirs = |s: Option<&Option<crate::stats::Summary>>| {
        s.and_then(|s| s.as_ref())
            .map_or("-".to_string(), |s| format!("{:.2}", s.median))
    };
    let rat = |x: Option<f64>| x.map_or("-".to_string(), |v| format!("{v:.2}x"));
    let at = if r.settings.depth > 0 {
        format!(" @ d{}", r.settings.depth)
    } else {
        String::new()
    };
    out += &format!(
        "  prefill pp{}{at}: ours {} tok/s | llama.cpp {} | ratio {}\n",
        r.settings.prompt_tokens,
        f(&m.prefill_tok_s),
        theirs(lb.map(|l| &l.prefill_tok_s)),
        rat(r.ratios.as_ref().and_then(|x| x.prefill))
    );
    out += &format!(
        "  decode tg{}{at}: ours {} tok/s | llama.cpp {} | ratio {}",
        r.settings.gen_tokens,
        f(&m.decode_tok_s),
        theirs(lb.map(|l| &l.decode_tok_s)),
        rat(r.ratios.as_ref().and_then(|x| x.decode))
    );
    if let Some(rf) = &r.roofline {
        out += &format!(
            " | roofline {:.1} tok/s ({:.0} GB/s copy, {}){}\n",
            rf.decode_tok_s,
            rf.bandwidth.copy_bytes_per_s / 1e9,
            rf.bandwidth.source,
            rf.decode_share.map_or(String::new(), |s| format!(
                ", ours at {:.0}% of it",
                s * 100.0
            ))
        );
    } else {
        out += "\n";
    }
    out += &format!(
        "  TTFT {} ms | peak RSS {} | peak device {}\n",
        m.ttft_ms
            .as_ref()
            .map_or("-".into(), |s| format!("{:.1}", s.median)),
        m.peak_rss_bytes
            .map_or("-".into(), |b| format!("{:.2} GB", b as f64 / 1e9)),
        m.peak_device_bytes
            .map_or("-".into(), |b| format!("{:.2} GB", b as f64 / 1e9)),
    );
    if let Some(f) = &m.depth_fill_tok_s {
        out += &format!(
            "  depth fill d{}: {:.2} tok/s (min {:.2}, max {:.2})\n",
            r.settings.depth, f.median, f.min, f.max
        );
    }
    for n in &r.notes {
        out += &format!("  note: {n}\n");
    }
    out
}
