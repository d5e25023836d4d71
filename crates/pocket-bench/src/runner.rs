//! The end-to-end measurement loop: warm-up, then repetitions of a prompt-processing test and a
//! generation test (as llama-bench runs them), summarised as medians with min and max.

use std::time::Instant;

use serde::{Deserialize, Serialize};

use crate::error::{BenchError, Result};
use crate::rng::Rng;
use crate::stats::Summary;
use crate::sysinfo::peak_rss_bytes;
use crate::target::Target;

/// What to run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunSettings {
    /// Prompt tokens per sequence (the prefill test).
    pub prompt_tokens: usize,
    /// Generated tokens per sequence (the decode test).
    pub gen_tokens: usize,
    /// Measured repetitions (at least 3).
    pub reps: usize,
    /// Concurrent sequences.
    pub batch: usize,
    /// Context already in the cache before each test (tokens).
    pub depth: usize,
    /// Warm-up repetitions, not recorded.
    pub warmup: usize,
    /// CPU threads (None: the runtime default).
    pub threads: Option<usize>,
    /// Vocabulary size, for drawing random prompt tokens.
    pub vocab: usize,
}

/// The measurements of one run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Measurements {
    /// Prompt tokens per second over all sequences (prompt_tokens * batch / prefill time). At a
    /// depth, the prompt is a chunk appended after `depth` tokens already in the cache
    /// (llama-bench's `pp512 @ d4096`).
    pub prefill_tok_s: Option<Summary>,
    /// At a depth: tokens per second of filling that depth from an empty cache (depth * batch /
    /// fill time), measured on the runs of the prefill test.
    #[serde(default)]
    pub depth_fill_tok_s: Option<Summary>,
    /// Generated tokens per second over all sequences (gen_tokens * batch / decode time).
    pub decode_tok_s: Option<Summary>,
    /// Time to first token in milliseconds (the prefill test's wall time, depth fill excluded).
    pub ttft_ms: Option<Summary>,
    /// Peak resident host memory of the process (VmHWM) in bytes, after all runs.
    pub peak_rss_bytes: Option<u64>,
    /// Peak device memory in bytes, when the target reports it.
    pub peak_device_bytes: Option<u64>,
}

fn tokens(rng: &mut Rng, n: usize, vocab: usize) -> Vec<u32> {
    (0..n)
        .map(|_| (rng.next_u64() % vocab.max(1) as u64) as u32)
        .collect()
}

/// Resets the target and fills `depth` tokens per sequence; returns the seconds the fill took.
fn fill_depth(t: &mut dyn Target, s: &RunSettings, rng: &mut Rng) -> Result<f64> {
    t.reset()?;
    if s.depth == 0 {
        return Ok(0.0);
    }
    let fill = tokens(rng, s.depth, s.vocab);
    let start = Instant::now();
    t.prefill(s.batch, &fill)?;
    Ok(start.elapsed().as_secs_f64())
}

/// Runs the prefill test then the decode test, `warmup` times unrecorded and `reps` times
/// recorded, and summarises them.
pub fn run(t: &mut dyn Target, s: &RunSettings) -> Result<Measurements> {
    if s.reps < 3 {
        return Err(BenchError::Usage(format!(
            "--reps {}: at least 3 repetitions are needed for a median",
            s.reps
        )));
    }
    if s.batch == 0 || (s.prompt_tokens == 0 && s.gen_tokens == 0) {
        return Err(BenchError::Usage(
            "need --batch >= 1 and a prompt or generation length".into(),
        ));
    }
    let mut rng = Rng::new(42);
    let (mut pp, mut tg, mut ttft, mut fill) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for rep in 0..s.warmup + s.reps {
        let record = rep >= s.warmup;
        if s.prompt_tokens > 0 && (s.depth == 0 || t.can_append()) {
            let fill_s = fill_depth(t, s, &mut rng)?;
            let prompt = tokens(&mut rng, s.prompt_tokens, s.vocab);
            let start = Instant::now();
            t.prefill(s.batch, &prompt)?;
            let dt = start.elapsed().as_secs_f64();
            if record {
                pp.push((s.prompt_tokens * s.batch) as f64 / dt);
                ttft.push(dt * 1e3);
                if s.depth > 0 {
                    fill.push((s.depth * s.batch) as f64 / fill_s);
                }
            }
        }
        if s.gen_tokens > 0 {
            fill_depth(t, s, &mut rng)?;
            let start = Instant::now();
            // gen_tokens forwards of one token: the first feeds a fresh token (depth 0) or the
            // token sampled after the depth fill
            let steps = if s.depth > 0 && !t.can_append() {
                s.gen_tokens
            } else {
                t.prefill(s.batch, &tokens(&mut rng, 1, s.vocab))?;
                s.gen_tokens - 1
            };
            for _ in 0..steps {
                t.decode_step()?;
            }
            let dt = start.elapsed().as_secs_f64();
            if record {
                tg.push((s.gen_tokens * s.batch) as f64 / dt);
            }
        }
    }
    t.reset()?;
    Ok(Measurements {
        prefill_tok_s: Summary::of(&pp),
        depth_fill_tok_s: Summary::of(&fill),
        decode_tok_s: Summary::of(&tg),
        ttft_ms: Summary::of(&ttft),
        peak_rss_bytes: peak_rss_bytes(),
        peak_device_bytes: t.device_peak_bytes(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Sleepy {
        calls: usize,
    }
    impl Target for Sleepy {
        fn engine(&self) -> String {
            "sleepy".into()
        }
        fn reset(&mut self) -> Result<()> {
            Ok(())
        }
        fn prefill(&mut self, _b: usize, t: &[u32]) -> Result<()> {
            self.calls += 1;
            std::thread::sleep(std::time::Duration::from_micros(20 * t.len() as u64));
            Ok(())
        }
        fn decode_step(&mut self) -> Result<()> {
            self.calls += 1;
            std::thread::sleep(std::time::Duration::from_micros(200));
            Ok(())
        }
    }

    fn settings() -> RunSettings {
        RunSettings {
            prompt_tokens: 64,
            gen_tokens: 8,
            reps: 3,
            batch: 1,
            depth: 0,
            warmup: 1,
            threads: None,
            vocab: 100,
        }
    }

    #[test]
    fn measures_medians_after_warmup() {
        let mut t = Sleepy { calls: 0 };
        let m = run(&mut t, &settings()).unwrap();
        let pp = m.prefill_tok_s.unwrap();
        assert_eq!(pp.values.len(), 3);
        assert!(pp.min <= pp.median && pp.median <= pp.max);
        // 4 reps x (1 prompt + 1 first token + 7 decode steps)
        assert_eq!(t.calls, 4 * 9);
        assert!(m.decode_tok_s.unwrap().median < 8.0 / 0.0014 * 1.01);
        assert_eq!(m.ttft_ms.unwrap().values.len(), 3);
    }

    /// At a depth an appending target gets: fill (untimed for pp), then the timed chunk; the
    /// fill's own rate is reported too.
    #[test]
    fn prefill_at_depth_times_only_the_chunk() {
        let mut t = Sleepy { calls: 0 };
        let s = RunSettings {
            depth: 256,
            gen_tokens: 0,
            ..settings()
        };
        let m = run(&mut t, &s).unwrap();
        // 4 reps x (depth fill + chunk)
        assert_eq!(t.calls, 4 * 2);
        let pp = m.prefill_tok_s.unwrap().median;
        let fill = m.depth_fill_tok_s.unwrap().median;
        // Sleepy takes 20 us per token either way: both near 50k tok/s, the chunk timed alone.
        assert!(
            pp < 50_000.0 * 1.01 && fill < 50_000.0 * 1.01,
            "{pp} {fill}"
        );
        assert!(pp > 5_000.0 && fill > 5_000.0, "{pp} {fill}");
        assert!(m.decode_tok_s.is_none());
    }

    #[test]
    fn rejects_too_few_reps() {
        let mut t = Sleepy { calls: 0 };
        let s = RunSettings {
            reps: 2,
            ..settings()
        };
        assert!(run(&mut t, &s).is_err());
    }
}
