//! Step trace (`POCKET_STEP_TRACE=1`, sm_90 with PDL): where a replayed graph's time goes, with
//! the overlap between kernels included.
//!
//! Isolated kernel timings (benches, Nsight Compute) serialize kernels, so they cannot say what a
//! kernel costs inside the step, where programmatic dependent launch overlaps its start with its
//! predecessor's tail. Here block 0 of every kernel writes the `%globaltimer` at which its
//! `pdl_wait()` returned (kernels/common.cuh `pdl_trace`): with PDL, the moment the previous
//! kernel of the stream had finished. The difference between consecutive stamps is then the
//! time from one kernel's predecessor finishing to the kernel itself finishing: its share of the
//! step's critical path, launch gaps included. The names come from the capture (the PDL-aware
//! launches, which are the kernels that call `pdl_wait()`), so the report names each share.
//!
//! A traced replay synchronizes and reads the stamps back (a few microseconds between steps, none
//! inside them). Every 16 traced replays, and when the graph is dropped, the means go to
//! `$POCKET_STEP_TRACE_DIR/graph-<n>.txt` (default `/tmp/pocket-step-trace`). The timer ticks
//! coarsely on some GPUs; means over many replays are still unbiased, single steps are not.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use cudarc::driver::result as dr;
use cudarc::driver::{CudaContext, CudaStream};

use super::memory::{cuda_err, CudaStorage, Pool};
use super::switch::EnvSwitch;
use crate::Result;

/// `POCKET_STEP_TRACE=1` turns the trace on at open (where PDL is supported).
pub(super) static STEP_TRACE: EnvSwitch = EnvSwitch::off_unless_one("POCKET_STEP_TRACE");

/// Stamps kept per replay (kernels/common.cuh PDL_TRACE_CAP).
const TRACE_CAP: usize = 4096;
/// Traced replays between report writes.
const REPORT_EVERY: usize = 16;

/// The device buffer the kernels stamp and the names of the kernels being captured.
pub(crate) struct StepTrace {
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    /// `[count, stamp 0, stamp 1, ...]` (u64 each).
    buf: CudaStorage,
    /// Names of the PDL-aware launches since `begin_capture`, in launch order (None: not
    /// capturing).
    capturing: Mutex<Option<Vec<String>>>,
    graphs: AtomicUsize,
}

impl StepTrace {
    /// Allocates the stamp buffer; the caller points the kernels' `pdl_trace` at [`Self::ptr`].
    pub(super) fn new(
        ctx: Arc<CudaContext>,
        stream: Arc<CudaStream>,
        pool: &Arc<Pool>,
    ) -> Result<Arc<StepTrace>> {
        let buf = pool.alloc(8 * (1 + TRACE_CAP))?;
        Ok(Arc::new(StepTrace {
            ctx,
            stream,
            buf,
            capturing: Mutex::new(None),
            graphs: AtomicUsize::new(0),
        }))
    }

    /// Device address of the stamp buffer.
    pub(super) fn ptr(&self) -> u64 {
        self.buf.ptr()
    }

    /// Starts collecting the names of the kernels launched from now on.
    pub(super) fn begin_capture(&self) {
        if let Ok(mut c) = self.capturing.lock() {
            *c = Some(Vec::new());
        }
    }

    /// Notes a PDL-aware launch (its kernel stamps once per replay) while capturing; the grid
    /// tells apart launches of one kernel at different shapes.
    pub(super) fn note_launch(&self, symbol: &'static str, grid: (u32, u32, u32)) {
        if let Ok(mut c) = self.capturing.lock() {
            if let Some(names) = c.as_mut() {
                names.push(format!("{symbol} {}x{}x{}", grid.0, grid.1, grid.2));
            }
        }
    }

    /// The names collected since `begin_capture`, for the graph just captured.
    pub(super) fn end_capture(self: &Arc<Self>) -> GraphTrace {
        let names = self
            .capturing
            .lock()
            .ok()
            .and_then(|mut c| c.take())
            .unwrap_or_default();
        GraphTrace {
            trace: self.clone(),
            id: self.graphs.fetch_add(1, Ordering::Relaxed),
            names,
            stats: Mutex::new(Stats::default()),
        }
    }

    /// Zeroes the stamp count (in stream order, before a replay).
    fn reset(&self) -> Result<()> {
        const OP: &str = "step_trace";
        self.ctx.bind_to_thread().map_err(|e| cuda_err(OP, e))?;
        // SAFETY: the buffer holds at least 8 bytes and lives as long as `self`.
        unsafe { dr::memset_d8_async(self.buf.ptr(), 0, 8, self.stream.cu_stream()) }
            .map_err(|e| cuda_err(OP, e))
    }

    /// Waits for the replay and reads back its stamps: the count and at most `want + 1` stamps
    /// (`want`: the graph's stamping launches; one more shows a surplus as another count).
    fn read(&self, want: usize) -> Result<Vec<u64>> {
        const OP: &str = "step_trace";
        let mut raw = vec![0u8; 8 * (2 + want.min(TRACE_CAP - 1))];
        self.ctx.bind_to_thread().map_err(|e| cuda_err(OP, e))?;
        // SAFETY: `raw` has the buffer's length; the copy is waited for before `raw` is read.
        unsafe { dr::memcpy_dtoh_async(&mut raw[..], self.buf.ptr(), self.stream.cu_stream()) }
            .map_err(|e| cuda_err(OP, e))?;
        self.stream.synchronize().map_err(|e| cuda_err(OP, e))?;
        let words: Vec<u64> = raw
            .chunks_exact(8)
            .map(|c| u64::from_le_bytes(c.try_into().unwrap_or([0; 8])))
            .collect();
        let n = (words[0] as usize).min(words.len() - 1);
        Ok(words[1..1 + n].to_vec())
    }
}

/// Sums over the traced replays of one graph.
#[derive(Default)]
struct Stats {
    replays: usize,
    /// Replays whose stamp count differed from the first one's (not summed).
    other_count: usize,
    /// Σ (stamp i+1 - stamp i) in ns, per i (their total is the first-to-last span).
    sums: Vec<f64>,
}

impl Stats {
    /// Adds one replay's stamps; false when their count differs from the first replay's.
    fn add(&mut self, stamps: &[u64]) -> bool {
        if self.replays == 0 && self.other_count == 0 {
            self.sums = vec![0.0; stamps.len().saturating_sub(1)];
        }
        if stamps.len() < 2 || stamps.len() != self.sums.len() + 1 {
            self.other_count += 1;
            return false;
        }
        for (i, w) in stamps.windows(2).enumerate() {
            self.sums[i] += w[1].saturating_sub(w[0]) as f64;
        }
        self.replays += 1;
        true
    }

    /// The report (means in microseconds) of graph `graph`, whose stamping kernels are `names`.
    fn report(&self, graph: usize, names: &[String]) -> String {
        let s = self;
        let n = s.replays.max(1) as f64;
        let marks = s.sums.len() + usize::from(!s.sums.is_empty());
        let aligned = marks == names.len();
        let mut out = String::new();
        let alignment = if aligned {
            "names aligned"
        } else {
            "NAMES NOT ALIGNED"
        };
        let _ = writeln!(
            out,
            "step trace, graph {}: {} replays ({} skipped: another stamp count)",
            graph, s.replays, s.other_count
        );
        let _ = writeln!(
            out,
            "{marks} stamps per replay, {} PDL-aware launches captured ({alignment})",
            names.len()
        );
        let span_us = s.sums.iter().sum::<f64>() / n / 1e3;
        let _ = writeln!(out, "first to last stamp: {span_us:.1} us");
        let name = |i: usize| -> &str {
            if aligned {
                &names[i]
            } else {
                "?"
            }
        };
        // Per kernel: launches per replay and the summed share (the last kernel has none).
        let mut by_name: BTreeMap<&str, (usize, f64)> = BTreeMap::new();
        for (i, sum) in s.sums.iter().enumerate() {
            let e = by_name.entry(name(i)).or_default();
            e.0 += 1;
            e.1 += sum / n / 1e3;
        }
        let mut rows: Vec<_> = by_name.into_iter().collect();
        rows.sort_by(|a, b| b.1 .1.total_cmp(&a.1 .1));
        let _ = writeln!(
            out,
            "\n{:56} launches  us/replay  us each  share",
            "kernel (grid)"
        );
        for (k, (count, us)) in &rows {
            let _ = writeln!(
                out,
                "{k:56} {count:8} {us:10.1} {:8.2} {:5.1}%",
                us / *count as f64,
                100.0 * us / span_us.max(1e-9)
            );
        }
        let _ = writeln!(out, "\nindex {:56} us (to the next stamp)", "kernel (grid)");
        for (i, sum) in s.sums.iter().enumerate() {
            let _ = writeln!(out, "{i:5} {:56} {:8.2}", name(i), sum / n / 1e3);
        }
        out
    }
}

/// One captured graph's trace: its kernel names and the sums of its replays.
pub(crate) struct GraphTrace {
    trace: Arc<StepTrace>,
    id: usize,
    names: Vec<String>,
    stats: Mutex<Stats>,
}

impl GraphTrace {
    /// Runs `launch` (one replay) between zeroing and reading the stamps, and adds them up.
    pub(super) fn traced(&self, launch: impl FnOnce() -> Result<()>) -> Result<()> {
        self.trace.reset()?;
        launch()?;
        let stamps = self.trace.read(self.names.len())?;
        let Ok(mut s) = self.stats.lock() else {
            return Ok(());
        };
        if !s.add(&stamps) {
            return Ok(());
        }
        if s.replays % REPORT_EVERY == 0 {
            self.write_report(&s);
        }
        Ok(())
    }

    fn write_report(&self, s: &Stats) {
        let dir = std::env::var("POCKET_STEP_TRACE_DIR")
            .unwrap_or_else(|_| "/tmp/pocket-step-trace".to_string());
        let _ = std::fs::create_dir_all(&dir);
        let path = format!("{dir}/graph-{}.txt", self.id);
        if let Err(e) = std::fs::write(&path, s.report(self.id, &self.names)) {
            eprintln!("step trace: cannot write {path}: {e}");
        }
    }
}

impl Drop for GraphTrace {
    fn drop(&mut self) {
        if let Ok(s) = self.stats.lock() {
            if s.replays > 0 {
                self.write_report(&s);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Stats;

    #[test]
    fn shares_are_the_mean_gaps_to_the_next_stamp_summed_per_kernel() {
        let names: Vec<String> = ["a 1x1x1", "b 2x1x1", "a 1x1x1", "c 1x1x1"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let mut s = Stats::default();
        // Two replays: gaps (ns) 1000, 2000, 3000 and 3000, 4000, 5000.
        assert!(s.add(&[10_000, 11_000, 13_000, 16_000]));
        assert!(s.add(&[50_000, 53_000, 57_000, 62_000]));
        // A replay with another count is skipped, not summed.
        assert!(!s.add(&[1, 2, 3]));
        let r = s.report(7, &names);
        assert!(
            r.starts_with("step trace, graph 7: 2 replays (1 skipped"),
            "{r}"
        );
        assert!(r.contains("names aligned"), "{r}");
        assert!(r.contains("first to last stamp: 9.0 us"), "{r}");
        // a: (1 + 3) / 2 + (3 + 5) / 2 = 6 us over 2 launches; b: (2 + 4) / 2 = 3 us.
        let row = |k: &str| r.lines().find(|l| l.starts_with(k)).unwrap().to_string();
        let (a, b) = (row("a 1x1x1 "), row("b 2x1x1 "));
        let a: Vec<&str> = a.split_whitespace().collect();
        assert_eq!(&a[2..5], ["2", "6.0", "3.00"], "{r}");
        let b: Vec<&str> = b.split_whitespace().collect();
        assert_eq!(&b[2..5], ["1", "3.0", "3.00"], "{r}");
        // The last kernel has no successor, so no share; names unaligned are not guessed.
        assert!(!r.contains("c 1x1x1 "), "{r}");
        assert!(s.report(0, &names[..3]).contains("NAMES NOT ALIGNED"));
    }
}
