//! Runs llama.cpp's `llama-bench` on the same file with matching settings and reads its JSON.

use std::path::Path;
use std::process::Command;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::{BenchError, Result};
use crate::stats::Summary;

/// llama-bench's results for one model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LlamaBenchResult {
    /// The exact command line.
    pub command: String,
    /// llama.cpp build commit.
    pub build_commit: Option<String>,
    /// Backends (`CPU`, `CUDA`).
    pub backends: Option<String>,
    /// Threads it used.
    pub n_threads: Option<u64>,
    /// Prompt-processing tok/s (median of its samples; its own avg and stddev kept too).
    pub prefill_tok_s: Option<Summary>,
    /// Text-generation tok/s.
    pub decode_tok_s: Option<Summary>,
    /// llama-bench's own mean prompt tok/s.
    pub prefill_avg_ts: Option<f64>,
    /// llama-bench's own mean generation tok/s.
    pub decode_avg_ts: Option<f64>,
}

/// Settings passed to llama-bench.
#[derive(Debug, Clone)]
pub struct LlamaBenchArgs<'a> {
    /// The llama-bench executable.
    pub exe: &'a Path,
    /// The GGUF file.
    pub model: &'a Path,
    /// `-p`.
    pub prompt: usize,
    /// `-n`.
    pub gen: usize,
    /// `-r`.
    pub reps: usize,
    /// `-d` (context depth).
    pub depth: usize,
    /// `-t` (CPU threads), when set.
    pub threads: Option<usize>,
    /// `-ngl` (99 offloads every layer; 0 on the CPU).
    pub ngl: usize,
}

/// Runs llama-bench (`-o json -fa 1`) and parses its result.
pub fn run(a: &LlamaBenchArgs) -> Result<LlamaBenchResult> {
    let mut args: Vec<String> = vec![
        "-m".into(),
        a.model.display().to_string(),
        "-p".into(),
        a.prompt.to_string(),
        "-n".into(),
        a.gen.to_string(),
        "-r".into(),
        a.reps.to_string(),
        "-ngl".into(),
        a.ngl.to_string(),
        "-fa".into(),
        "1".into(),
        "-o".into(),
        "json".into(),
    ];
    if a.depth > 0 {
        args.extend(["-d".into(), a.depth.to_string()]);
    }
    if let Some(t) = a.threads {
        args.extend(["-t".into(), t.to_string()]);
    }
    let command = format!("{} {}", a.exe.display(), args.join(" "));
    let out = Command::new(a.exe)
        .args(&args)
        .output()
        .map_err(|e| BenchError::io(a.exe, e))?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        let tail: Vec<&str> = err.lines().rev().take(8).collect();
        return Err(BenchError::Tool {
            tool: "llama-bench".into(),
            msg: format!(
                "exit {}: {}",
                out.status,
                tail.into_iter().rev().collect::<Vec<_>>().join(" | ")
            ),
        });
    }
    parse(&String::from_utf8_lossy(&out.stdout), command)
}

fn samples(t: &Value) -> Option<Summary> {
    let v: Vec<f64> = t
        .get("samples_ts")?
        .as_array()?
        .iter()
        .filter_map(Value::as_f64)
        .collect();
    Summary::of(&v).or_else(|| {
        t.get("avg_ts")
            .and_then(Value::as_f64)
            .and_then(|x| Summary::of(&[x]))
    })
}

/// Parses llama-bench's `-o json` output.
pub fn parse(stdout: &str, command: String) -> Result<LlamaBenchResult> {
    let start = stdout.find('[').ok_or_else(|| BenchError::Tool {
        tool: "llama-bench".into(),
        msg: "no JSON array in its output".into(),
    })?;
    let tests: Vec<Value> = serde_json::from_str(stdout[start..].trim())?;
    let mut r = LlamaBenchResult {
        command,
        build_commit: None,
        backends: None,
        n_threads: None,
        prefill_tok_s: None,
        decode_tok_s: None,
        prefill_avg_ts: None,
        decode_avg_ts: None,
    };
    for t in &tests {
        let int = |k: &str| t.get(k).and_then(Value::as_u64).unwrap_or(0);
        r.build_commit = t
            .get("build_commit")
            .and_then(Value::as_str)
            .map(str::to_string);
        r.backends = t
            .get("backends")
            .and_then(Value::as_str)
            .map(str::to_string);
        r.n_threads = t.get("n_threads").and_then(Value::as_u64);
        let avg = t.get("avg_ts").and_then(Value::as_f64);
        if int("n_prompt") > 0 && int("n_gen") == 0 {
            r.prefill_tok_s = samples(t);
            r.prefill_avg_ts = avg;
        } else if int("n_gen") > 0 && int("n_prompt") == 0 {
            r.decode_tok_s = samples(t);
            r.decode_avg_ts = avg;
        }
    }
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_json() {
        let s = r#"some log
[
  {"build_commit": "0c1e570", "backends": "CPU", "n_threads": 2, "n_prompt": 512, "n_gen": 0,
   "avg_ts": 100.5, "stddev_ts": 1.0, "samples_ts": [99.0, 100.0, 102.5]},
  {"build_commit": "0c1e570", "backends": "CPU", "n_threads": 2, "n_prompt": 0, "n_gen": 128,
   "avg_ts": 20.0, "stddev_ts": 0.1, "samples_ts": [20.0, 19.9, 20.1]}
]"#;
        let r = parse(s, "x".into()).unwrap();
        assert_eq!(r.prefill_tok_s.unwrap().median, 100.0);
        assert_eq!(r.decode_tok_s.unwrap().median, 20.0);
        assert_eq!(r.n_threads, Some(2));
        assert!(parse("garbage", "x".into()).is_err());
    }

    /// With `-d`, llama-bench's tests carry `n_depth` (its `pp512 @ d4096`): the prompt and
    /// generation entries are still told apart by `n_prompt` and `n_gen`.
    #[test]
    fn parses_json_at_depth() {
        let s = r#"[
  {"n_prompt": 512, "n_gen": 0, "n_depth": 4096, "avg_ts": 80.0, "samples_ts": [79.0, 80.0, 81.0]},
  {"n_prompt": 0, "n_gen": 128, "n_depth": 4096, "avg_ts": 9.0, "samples_ts": [9.0, 8.9, 9.1]}
]"#;
        let r = parse(s, "x".into()).unwrap();
        assert_eq!(r.prefill_tok_s.unwrap().median, 80.0);
        assert_eq!(r.decode_tok_s.unwrap().median, 9.0);
    }
}
