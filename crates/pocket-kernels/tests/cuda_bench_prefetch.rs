//! GPU microbenchmarks of the L2 prefetch of the next decode GEMV's weight (`POCKET_L2_PREFETCH`,
//! cuda/prefetch.rs; issues #7 and #9). Ignored by default; the device run script runs them with
//! `--ignored` (`BENCH_FILTER` picks some). Timing: `bench::time_ms` over CUDA graph replays;
//! weights rotate over >= 200 MB of copies, so without a prefetch every GEMV reads HBM.
#![cfg(feature = "cuda")]

use pocket_kernels::cuda::graph::StepGraph;
use pocket_kernels::cuda::CudaBackend;
use pocket_kernels::{Backend, DType, Tensor, Weight};
use pocket_quant::{GgmlType, QuantFormat};

#[path = "cuda_common/bench.rs"]
mod bench;

use bench::{
    backend_or_skip, bench_x, capture, random_bytes, random_fp8, time_ms, weight_copies, ROOF_TBPS,
};

/// The stand-in for the small kernels between two GEMVs: one busy thread, HBM idle.
const SPIN_NS: u64 = 10_000;

/// One GEMV shape: its weight copies, input and output.
struct Gemv {
    name: String,
    ws: Vec<Weight>,
    wbytes: usize,
    x: Tensor,
    out: Tensor,
}

impl Gemv {
    fn new(be: &CudaBackend, name: &str, f: QuantFormat, rows: usize, cols: usize) -> Gemv {
        let (bytes, scales) = match f {
            QuantFormat::Ggml(t) => (random_bytes(t, rows, cols, 7), None),
            _ => {
                let (b, s) = random_fp8(rows, cols);
                (b, Some(s))
            }
        };
        let wbytes = bytes.len() + scales.as_ref().map_or(0, |s| s.len());
        let ws = weight_copies(be, f, rows, cols, bytes, scales);
        let x = be.upload_f32(&bench_x(1, cols), &[1, cols]).unwrap();
        let out = be.alloc(DType::F32, &[1, rows]).unwrap();
        Gemv {
            name: format!("{name} {rows}x{cols}"),
            ws,
            wbytes,
            x,
            out,
        }
    }

    /// One graph per weight copy of what `f` launches for that copy.
    fn graphs(
        &mut self,
        be: &CudaBackend,
        mut f: impl FnMut(&CudaBackend, &Weight, &Tensor, &mut Tensor),
    ) -> Vec<StepGraph> {
        let mut gs = Vec::with_capacity(self.ws.len());
        for w in &self.ws {
            // Eager first: the GEMV grows its scratch outside the capture.
            f(be, w, &self.x, &mut self.out);
            let out = &mut self.out;
            gs.push(capture(be, || f(be, w, &self.x, out)));
        }
        gs
    }

    /// Median ms of one replay, rotating over the copies' graphs.
    fn time(&self, be: &CudaBackend, gs: &[StepGraph]) -> f64 {
        time_ms(be, 2 * gs.len(), 60.max(3 * gs.len()), |i| {
            gs[i % gs.len()].replay().unwrap()
        })
    }
}

fn shapes(be: &CudaBackend) -> Vec<Gemv> {
    let q4 = QuantFormat::Ggml(GgmlType::Q4_0);
    vec![
        Gemv::new(be, "q4_0 (8B o)", q4, 4096, 4096),
        Gemv::new(be, "q4_0 (8B qkv)", q4, 6144, 4096),
        Gemv::new(be, "q4_0 (8B gate_up)", q4, 28672, 4096),
        Gemv::new(be, "fp8 (27B)", QuantFormat::Fp8E4M3Block128, 5120, 5120),
    ]
}

/// Per shape: the plain GEMV; a spin of 10 us then the GEMV (the GEMV after the small kernels);
/// the same with the prefetch of the GEMV's weight forked before the spin (budgets of 8, 16 and
/// 32 MiB and the whole weight). The GEMV's share of a spin+GEMV graph is its time less the
/// spin-alone graph's. Look for: the prefetched GEMV's share below the plain one's (L2 hits),
/// most where the budget covers the whole weight.
#[test]
#[ignore = "GPU benchmark: run with --ignored on the device machine"]
fn bench_l2_prefetch_gemv() {
    let Some(be) = backend_or_skip() else {
        return;
    };
    let grid = be.l2_prefetch_grid();
    println!(
        "prefetch grid: <= {} blocks x 128 threads, {} B per piece ({:?})",
        grid.0,
        grid.1,
        be.artifact()
    );
    let spin = {
        let g = capture(&be, || be.spin_ns(SPIN_NS).unwrap());
        time_ms(&be, 3, 30, |_| g.replay().unwrap())
    };
    println!("spin alone: {:.2} us", spin * 1e3);
    let mut lines = Vec::new();
    for mut s in shapes(&be) {
        let plain = s.graphs(&be, |be, w, x, out| be.matmul(x, w, out).unwrap());
        let plain_ms = s.time(&be, &plain);
        drop(plain);
        let after = s.graphs(&be, |be, w, x, out| {
            be.spin_ns(SPIN_NS).unwrap();
            be.matmul(x, w, out).unwrap();
        });
        let after_ms = s.time(&be, &after) - spin;
        drop(after);
        let gbps = |ms: f64| s.wbytes as f64 / (ms * 1e-3) / 1e9;
        let mut line = format!(
            "gemv {:26} {:6.1} MB: plain {:6.1} us ({:5.1}% roof), after spin {:6.1} us",
            s.name,
            s.wbytes as f64 / 1e6,
            plain_ms * 1e3,
            100.0 * gbps(plain_ms) / 1e3 / ROOF_TBPS,
            after_ms * 1e3,
        );
        for mib in [8usize, 16, 32, usize::MAX >> 20] {
            let budget = if mib == usize::MAX >> 20 {
                usize::MAX
            } else {
                mib << 20
            };
            let pre = s.graphs(&be, |be, w, x, out| {
                be.prefetch_weight_l2(w, budget, true).unwrap();
                be.spin_ns(SPIN_NS).unwrap();
                be.matmul(x, w, out).unwrap();
            });
            let ms = s.time(&be, &pre) - spin;
            let label = if budget == usize::MAX {
                "all".to_string()
            } else {
                format!("{mib}M")
            };
            line += &format!(", pf {label} {:6.1} us ({:.2}x)", ms * 1e3, after_ms / ms);
        }
        println!("{line}");
        lines.push(line);
    }
    println!("\n==== summary: GEMV after a {SPIN_NS} ns spin, with / without the forked L2 prefetch ====");
    for l in lines {
        println!("{l}");
    }
}

/// The prefetch kernel alone (main stream, whole weight, copies rotating so it reads HBM) and
/// forked beside a spin (the graph ends when both have): bytes per second of the kernel, a bound
/// on how fast it can fill L2 (the bulk prefetch may retire before its data lands). Then a GEMV
/// right after a main-stream prefetch of its whole weight, against the plain GEMV: the L2 hit
/// effect with no overlap. Look for: prefetch rates near the HBM roof, and a spin graph with a
/// forked prefetch of ~10 MB no longer than the spin alone (the prefetch runs beside it).
#[test]
#[ignore = "GPU benchmark: run with --ignored on the device machine"]
fn bench_l2_prefetch_throughput() {
    let Some(be) = backend_or_skip() else {
        return;
    };
    let spin = {
        let g = capture(&be, || be.spin_ns(SPIN_NS).unwrap());
        time_ms(&be, 3, 30, |_| g.replay().unwrap())
    };
    let mut lines = Vec::new();
    for mut s in shapes(&be) {
        let alone = s.graphs(&be, |be, w, _, _| {
            be.prefetch_weight_l2(w, usize::MAX, false).unwrap()
        });
        let alone_ms = s.time(&be, &alone);
        drop(alone);
        let beside = s.graphs(&be, |be, w, _, _| {
            be.prefetch_weight_l2(w, usize::MAX, true).unwrap();
            be.spin_ns(SPIN_NS).unwrap();
        });
        let beside_ms = s.time(&be, &beside);
        drop(beside);
        let plain = s.graphs(&be, |be, w, x, out| be.matmul(x, w, out).unwrap());
        let plain_ms = s.time(&be, &plain);
        drop(plain);
        let warm = s.graphs(&be, |be, w, x, out| {
            be.prefetch_weight_l2(w, usize::MAX, false).unwrap();
            be.matmul(x, w, out).unwrap();
        });
        let warm_ms = s.time(&be, &warm);
        let tbps = s.wbytes as f64 / (alone_ms * 1e-3) / 1e12;
        let line = format!(
            "prefetch {:26} {:6.1} MB: alone {:6.1} us ({:5.2} TB/s), beside {:.1} us spin {:6.1} us, \
             gemv plain {:6.1} us, prefetch then gemv {:6.1} us",
            s.name,
            s.wbytes as f64 / 1e6,
            alone_ms * 1e3,
            tbps,
            spin * 1e3,
            beside_ms * 1e3,
            plain_ms * 1e3,
            warm_ms * 1e3,
        );
        println!("{line}");
        lines.push(line);
    }
    println!("\n==== summary: L2 prefetch kernel throughput ====");
    for l in lines {
        println!("{l}");
    }
}
