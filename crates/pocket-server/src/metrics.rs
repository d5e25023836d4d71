//! Counters and histograms, rendered as Prometheus text on `GET /metrics`.

use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::backend::BackendStats;

/// Upper bounds (seconds) of the time-to-first-token histogram buckets.
const TTFT_BUCKETS: [f64; 12] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

/// Window over which the aggregate tokens-per-second gauge is computed.
const RATE_WINDOW: Duration = Duration::from_secs(10);

#[derive(Default)]
struct Histogram {
    counts: [AtomicU64; TTFT_BUCKETS.len()],
    count: AtomicU64,
    sum_micros: AtomicU64,
}

impl Histogram {
    fn observe(&self, d: Duration) {
        let s = d.as_secs_f64();
        for (i, b) in TTFT_BUCKETS.iter().enumerate() {
            if s <= *b {
                self.counts[i].fetch_add(1, Ordering::Relaxed);
            }
        }
        self.count.fetch_add(1, Ordering::Relaxed);
        self.sum_micros
            .fetch_add(d.as_micros() as u64, Ordering::Relaxed);
    }
}

/// Escapes a Prometheus label value (backslash, quote, newline).
fn label(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// Server-wide metrics; cheap to update from any task.
#[derive(Default)]
pub struct Metrics {
    requests: Mutex<Vec<(String, u16, u64)>>,
    prompt_tokens: AtomicU64,
    completion_tokens: AtomicU64,
    cancelled: AtomicU64,
    ttft: Histogram,
    recent: Mutex<Vec<(Instant, u64)>>,
}

impl Metrics {
    /// Counts one finished HTTP request on `endpoint` with `status`.
    pub fn request(&self, endpoint: &str, status: u16) {
        let mut r = self.requests.lock().unwrap_or_else(|e| e.into_inner());
        match r.iter_mut().find(|(e, s, _)| e == endpoint && *s == status) {
            Some(entry) => entry.2 += 1,
            None => r.push((endpoint.to_string(), status, 1)),
        }
    }

    /// Records the time from arrival to the first generated token.
    pub fn first_token(&self, d: Duration) {
        self.ttft.observe(d);
    }

    /// Adds tokens read and written by a generation request.
    pub fn tokens(&self, prompt: usize, completion: usize) {
        self.prompt_tokens
            .fetch_add(prompt as u64, Ordering::Relaxed);
        self.completion_tokens
            .fetch_add(completion as u64, Ordering::Relaxed);
    }

    /// Notes generated tokens now, for the tokens-per-second gauge.
    pub fn generated(&self, n: usize) {
        let now = Instant::now();
        let mut r = self.recent.lock().unwrap_or_else(|e| e.into_inner());
        r.retain(|(t, _)| now.duration_since(*t) <= RATE_WINDOW);
        r.push((now, n as u64));
    }

    /// Counts a generation stopped because the client went away or timed out.
    pub fn cancelled(&self) {
        self.cancelled.fetch_add(1, Ordering::Relaxed);
    }

    fn tokens_per_second(&self) -> f64 {
        let now = Instant::now();
        let r = self.recent.lock().unwrap_or_else(|e| e.into_inner());
        let n: u64 = r
            .iter()
            .filter(|(t, _)| now.duration_since(*t) <= RATE_WINDOW)
            .map(|(_, n)| n)
            .sum();
        n as f64 / RATE_WINDOW.as_secs_f64()
    }

    /// Renders every metric in Prometheus text exposition format; `per_model` adds the queue and
    /// cache gauges of each served model, labelled `model="id"`.
    pub fn render(&self, stats: &BackendStats, per_model: &[(String, BackendStats)]) -> String {
        let mut o = String::new();
        let _ = writeln!(
            o,
            "# HELP pocket_requests_total HTTP requests by endpoint and status."
        );
        let _ = writeln!(o, "# TYPE pocket_requests_total counter");
        for (e, s, n) in self
            .requests
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
        {
            let _ = writeln!(
                o,
                "pocket_requests_total{{endpoint=\"{e}\",status=\"{s}\"}} {n}"
            );
        }
        let counter = |o: &mut String, name: &str, help: &str, v: u64| {
            let _ = writeln!(o, "# HELP {name} {help}");
            let _ = writeln!(o, "# TYPE {name} counter");
            let _ = writeln!(o, "{name} {v}");
        };
        let gauge = |o: &mut String, name: &str, help: &str, v: f64| {
            let _ = writeln!(o, "# HELP {name} {help}");
            let _ = writeln!(o, "# TYPE {name} gauge");
            let _ = writeln!(o, "{name} {v}");
        };
        counter(
            &mut o,
            "pocket_prompt_tokens_total",
            "Prompt tokens processed.",
            self.prompt_tokens.load(Ordering::Relaxed),
        );
        counter(
            &mut o,
            "pocket_completion_tokens_total",
            "Completion tokens generated.",
            self.completion_tokens.load(Ordering::Relaxed),
        );
        counter(
            &mut o,
            "pocket_cancelled_total",
            "Generations cancelled by disconnect or timeout.",
            self.cancelled.load(Ordering::Relaxed),
        );
        gauge(
            &mut o,
            "pocket_queue_depth",
            "Sequences waiting to join the batch.",
            stats.queued as f64,
        );
        gauge(
            &mut o,
            "pocket_running_sequences",
            "Sequences in the running batch.",
            stats.running as f64,
        );
        gauge(
            &mut o,
            "pocket_cache_blocks_used",
            "KV-cache blocks in use.",
            stats.cache_blocks_used as f64,
        );
        gauge(
            &mut o,
            "pocket_cache_blocks_total",
            "KV-cache blocks in all.",
            stats.cache_blocks_total as f64,
        );
        gauge(
            &mut o,
            "pocket_tokens_per_second",
            "Completion tokens per second over the last 10 s, all requests together.",
            self.tokens_per_second(),
        );
        if !per_model.is_empty() {
            type Field = fn(&BackendStats) -> usize;
            let fields: [(&str, &str, Field); 4] = [
                (
                    "pocket_model_queue_depth",
                    "Sequences waiting to join the batch, per model.",
                    |s| s.queued,
                ),
                (
                    "pocket_model_running_sequences",
                    "Sequences in the running batch, per model.",
                    |s| s.running,
                ),
                (
                    "pocket_model_cache_blocks_used",
                    "KV-cache blocks in use, per model.",
                    |s| s.cache_blocks_used,
                ),
                (
                    "pocket_model_cache_blocks_total",
                    "KV-cache blocks in all, per model.",
                    |s| s.cache_blocks_total,
                ),
            ];
            for (name, help, get) in fields {
                let _ = writeln!(o, "# HELP {name} {help}");
                let _ = writeln!(o, "# TYPE {name} gauge");
                for (id, st) in per_model {
                    let _ = writeln!(o, "{name}{{model=\"{}\"}} {}", label(id), get(st));
                }
            }
        }
        let name = "pocket_time_to_first_token_seconds";
        let _ = writeln!(
            o,
            "# HELP {name} Time from request arrival to its first generated token."
        );
        let _ = writeln!(o, "# TYPE {name} histogram");
        for (i, b) in TTFT_BUCKETS.iter().enumerate() {
            let c = self.ttft.counts[i].load(Ordering::Relaxed);
            let _ = writeln!(o, "{name}_bucket{{le=\"{b}\"}} {c}");
        }
        let count = self.ttft.count.load(Ordering::Relaxed);
        let _ = writeln!(o, "{name}_bucket{{le=\"+Inf\"}} {count}");
        let sum = self.ttft.sum_micros.load(Ordering::Relaxed) as f64 / 1e6;
        let _ = writeln!(o, "{name}_sum {sum}");
        let _ = writeln!(o, "{name}_count {count}");
        o
    }
}
