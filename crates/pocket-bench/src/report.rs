//! Markdown tables from run records.

use std::path::Path;

use crate::error::{BenchError, Result};
use crate::record::Record;
use crate::stats::Summary;

/// The table header (two lines).
pub fn header() -> String {
    "| date | commit | hardware | engine | model | format | GB | threads | B | depth | pp | tg \
     | prefill tok/s (min-max) | decode tok/s (min-max) | TTFT ms | peak RSS GB | llama.cpp pp | \
     llama.cpp tg | ratio pp | ratio tg | roofline tg | share | peak device GB |\n\
     |---|---|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n"
        .to_string()
}

fn summ(s: &Option<Summary>) -> String {
    match s {
        Some(s) if s.median >= 100.0 => format!("{:.1} ({:.1}-{:.1})", s.median, s.min, s.max),
        Some(s) => format!("{:.2} ({:.2}-{:.2})", s.median, s.min, s.max),
        None => "-".into(),
    }
}

fn med(s: &Option<Summary>) -> String {
    s.as_ref()
        .map_or("-".into(), |s| format!("{:.2}", s.median))
}

fn opt(x: Option<f64>, prec: usize) -> String {
    x.map_or("-".into(), |v| format!("{v:.prec$}"))
}

/// One table row for `r`.
pub fn row(r: &Record) -> String {
    let hw = match r.hardware.gpus.first() {
        Some(g) if r.device == "cuda" => format!("{} (driver {})", g.name, g.driver),
        _ => format!("{} ({} cpus)", r.hardware.cpu, r.hardware.cpus),
    };
    let model = if r.model.synthetic {
        r.model.spec.clone()
    } else {
        r.model
            .path
            .file_name()
            .map_or(r.model.spec.clone(), |f| f.to_string_lossy().into_owned())
    };
    let lb = r.llama_bench.as_ref();
    let m = &r.measurements;
    format!(
        "| {} | {} | {} | {} {} | {} | {} | {:.2} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
        &r.date[..10.min(r.date.len())],
        r.commit,
        hw,
        r.engine,
        r.device,
        model,
        r.model.format,
        r.model.weight_bytes as f64 / 1e9,
        r.settings.threads.map_or("-".into(), |t| t.to_string()),
        r.settings.batch,
        r.settings.depth,
        r.settings.prompt_tokens,
        r.settings.gen_tokens,
        summ(&m.prefill_tok_s),
        summ(&m.decode_tok_s),
        med(&m.ttft_ms),
        opt(m.peak_rss_bytes.map(|b| b as f64 / 1e9), 2),
        lb.map_or("-".into(), |l| med(&l.prefill_tok_s)),
        lb.map_or("-".into(), |l| med(&l.decode_tok_s)),
        opt(r.ratios.as_ref().and_then(|x| x.prefill), 2),
        opt(r.ratios.as_ref().and_then(|x| x.decode), 2),
        opt(r.roofline.as_ref().map(|x| x.decode_tok_s), 1),
        opt(r.roofline.as_ref().and_then(|x| x.decode_share).map(|s| s * 100.0), 0)
            + if r.roofline.as_ref().and_then(|x| x.decode_share).is_some() { "%" } else { "" },
        opt(m.peak_device_bytes.map(|b| b as f64 / 1e9), 2),
    )
}

/// Every record (`*.json`) in `dir`, sorted by model, device, settings and date.
pub fn load_dir(dir: &Path) -> Result<Vec<Record>> {
    let mut v = Vec::new();
    let rd = std::fs::read_dir(dir).map_err(|e| BenchError::io(dir, e))?;
    for e in rd {
        let p = e.map_err(|e| BenchError::io(dir, e))?.path();
        if p.extension().is_some_and(|x| x == "json") {
            match Record::load(&p) {
                Ok(r) => v.push(r),
                Err(e) => eprintln!("skipping {}: {e}", p.display()),
            }
        }
    }
    v.sort_by(|a, b| {
        (
            &a.model.spec,
            &a.device,
            a.settings.batch,
            a.settings.depth,
            &a.date,
        )
            .cmp(&(
                &b.model.spec,
                &b.device,
                b.settings.batch,
                b.settings.depth,
                &b.date,
            ))
    });
    Ok(v)
}

/// The markdown table of every record in `dir`.
pub fn render_dir(dir: &Path) -> Result<String> {
    let recs = load_dir(dir)?;
    let mut s = header();
    for r in &recs {
        s.push_str(&row(r));
    }
    Ok(s)
}
