//! GPU microbenchmark for docs/architecture/persistent-decode.md, plan step 1 (ignored by
//! default; the device run script runs it with `--ignored`): what one grid-wide barrier costs,
//! and whether one-row FP8 GEMVs chained in one persistent launch (each phase loading its first
//! weights before the barrier that publishes its input) beat the same chain as separate launches
//! in a CUDA graph with programmatic dependent launch (the engine's decode path), and how much of
//! the difference the preload makes (`persist-late`: the barrier before the first weight loads).
//! The chain alternates the Qwen3.5-27B o/out projection's shape (5120x6144) with its transpose
//! (6144x5120), distinct weights per layer (16 layers, 1 GB per chain: HBM reads, not L2). Both
//! forms are first checked against the launched GEMVs on one layer.
#![cfg(feature = "cuda")]

use pocket_kernels::cuda::RingProbe;
use pocket_kernels::{Backend, DType, HostBytes, Weight};
use pocket_quant::QuantFormat;

#[path = "cuda_common/bench.rs"]
mod bench;

use bench::{backend_or_skip, bench_x, capture, random_fp8, time_ms, weight_copies, ROOF_TBPS};

const F: QuantFormat = QuantFormat::Fp8E4M3Block128;

/// Uploads `rows x cols` FP8 codes and their tile scales.
fn upload(
    be: &pocket_kernels::cuda::CudaBackend,
    codes: &[u8],
    scales: &[u8],
    rows: usize,
    cols: usize,
) -> Weight {
    let (codes, scales) = (
        HostBytes::from_vec(codes.to_vec()),
        HostBytes::from_vec(scales.to_vec()),
    );
    be.upload_weight(F, rows, cols, codes, Some(scales), None)
        .unwrap()
}

/// Layer `l`'s own `rows x cols` weight out of stacked codes and scales (its rows and its rows
/// of tile scales).
fn layer(
    be: &pocket_kernels::cuda::CudaBackend,
    (codes, scales): &(Vec<u8>, Vec<u8>),
    l: usize,
    rows: usize,
    cols: usize,
) -> Weight {
    let tile_rows = rows / 128 * cols.div_ceil(128) * 4;
    upload(
        be,
        &codes[l * rows * cols..(l + 1) * rows * cols],
        &scales[l * tile_rows..(l + 1) * tile_rows],
        rows,
        cols,
    )
}

#[test]
#[ignore = "GPU benchmark: run with --ignored on the device machine"]
fn bench_persistent_fp8_chain() {
    let Some(be) = backend_or_skip() else {
        return;
    };
    let (r, c, layers) = (5120usize, 6144usize, 16usize);
    // Every layer's weights stacked (for the persistent launch) and each on its own.
    let s1 = random_fp8(layers * r, c);
    let s2 = random_fp8(layers * c, r);
    let w1 = upload(&be, &s1.0, &s1.1, layers * r, c);
    let w2 = upload(&be, &s2.0, &s2.1, layers * c, r);
    let w1s: Vec<Weight> = (0..layers).map(|l| layer(&be, &s1, l, r, c)).collect();
    let w2s: Vec<Weight> = (0..layers).map(|l| layer(&be, &s2, l, c, r)).collect();
    let x0 = bench_x(1, c);
    // The grid barrier's words, once for every launch below.
    let bar = be.probe_barrier_words().unwrap();
    let mut xa = be.upload_f32(&x0, &[1, c]).unwrap();
    let mut xb = be.alloc(DType::F32, &[1, r]).unwrap();

    // One layer both ways, from the same input: the same values up to summation order.
    be.matmul(&xa, &w1s[0], &mut xb).unwrap();
    be.matmul(&xb, &w2s[0], &mut xa).unwrap();
    let want = be.read_f32(&xa).unwrap();
    let (mut pa, mut pb) = (
        be.upload_f32(&x0, &[1, c]).unwrap(),
        be.alloc(DType::F32, &[1, r]).unwrap(),
    );
    let scale = want.iter().fold(0f32, |m, v| m.max(v.abs()));
    // A one-layer stack is that layer's own weights.
    for preload in [true, false] {
        be.write_f32(&mut pa, &x0, &[1, c]).unwrap();
        be.probe_fp8_chain(&w1s[0], &w2s[0], &mut pa, &mut pb, 1, preload, &bar)
            .unwrap();
        let got = be.read_f32(&pa).unwrap();
        let worst = got
            .iter()
            .zip(&want)
            .map(|(g, w)| (g - w).abs())
            .fold(0f32, f32::max);
        assert!(
            worst <= 1e-5 * scale,
            "persistent chain (preload {preload}) differs from the launched one: max |d| {worst} of max |x| {scale}"
        );
    }

    // The launched chain as the engine runs it: a graph with programmatic dependent launch.
    let graph = capture(&be, || {
        for l in 0..layers {
            be.matmul(&xa, &w1s[l], &mut xb).unwrap();
            be.matmul(&xb, &w2s[l], &mut xa).unwrap();
        }
    });
    let launched = time_ms(&be, 3, 30, |_| graph.replay().unwrap());
    let mut persistent = [0f64; 2];
    for (i, preload) in [true, false].into_iter().enumerate() {
        persistent[i] = time_ms(&be, 3, 30, |_| {
            be.probe_fp8_chain(&w1, &w2, &mut xa, &mut xb, layers, preload, &bar)
                .unwrap()
        });
    }
    let blocks = 3 * be.sm_count() as usize;
    let rounds = 1000;
    let barrier_us = time_ms(&be, 2, 10, |_| {
        be.probe_grid_barriers(blocks, rounds, &bar).unwrap()
    }) * 1e3
        / rounds as f64;

    let phases = 2 * layers;
    let bytes = (s1.0.len() + s1.1.len() + s2.0.len() + s2.1.len()) as f64;
    let line = |what: &str, ms: f64| {
        format!(
            "gemv persist fp8 {r}x{c}+{c}x{r} x{layers} {what:10}: {:7.1} us per GEMV, {:7.1} GB/s, {:5.1}% of {ROOF_TBPS} TB/s",
            ms * 1e3 / phases as f64,
            bytes / (ms * 1e-3) / 1e9,
            100.0 * bytes / (ms * 1e-3) / 1e12 / ROOF_TBPS
        )
    };
    println!("\n==== summary: persistent chain against launches ====");
    println!("{}", line("launched", launched));
    println!("{}", line("persistent", persistent[0]));
    println!("{}", line("persist-late", persistent[1]));
    println!("gemv persist grid barrier ({blocks} blocks): {barrier_us:.2} us each");
}

/// One shape's weights and buffers for the read benches: random FP8 codes (their byte count),
/// rotating copies of them (HBM reads), an activation row, the output row and a one-float sink.
struct ReadSetup {
    code_bytes: f64,
    ws: Vec<Weight>,
    xt: pocket_kernels::Tensor,
    out: pocket_kernels::Tensor,
    sink: pocket_kernels::Tensor,
}

fn read_setup(be: &pocket_kernels::cuda::CudaBackend, rows: usize, cols: usize) -> ReadSetup {
    let (bytes, scales) = random_fp8(rows, cols);
    ReadSetup {
        code_bytes: bytes.len() as f64,
        ws: weight_copies(be, F, rows, cols, bytes, Some(scales)),
        xt: be.upload_f32(&bench_x(1, cols), &[1, cols]).unwrap(),
        out: be.alloc(DType::F32, &[1, rows]).unwrap(),
        sink: be.alloc(DType::F32, &[1, 1]).unwrap(),
    }
}

/// The memory system's time for one weight read at the 27B's FP8 GEMV shapes (session 12): the
/// default one-row GEMV against the same bytes read with its pattern and no arithmetic
/// (`probe_read_rows`) and read grid-stride (`probe_read_stream`, 4 and 16 blocks of 256 threads
/// per SM), each over >= 200 MB of rotating copies (HBM reads); then the GEMV and the pattern
/// read on one copy every call (`-same`: from L2 where the weight fits). Look for: whether the
/// reads alone take the GEMV's time at 5120 rows (then the memory system, not the kernel, sets
/// it), and whether an L2-resident weight is much faster (then prefetching it is worth it).
#[test]
#[ignore = "GPU benchmark: run with --ignored on the device machine"]
fn bench_fp8_read_ceiling() {
    let Some(be) = backend_or_skip() else {
        return;
    };
    let sms = be.sm_count() as usize;
    println!("\n==== summary: FP8 weight reads without arithmetic ====");
    for (rows, cols) in [
        (5120usize, 6144usize),
        (5120, 17408),
        (34816, 5120),
        (16384, 5120),
    ] {
        let mut r = read_setup(&be, rows, cols);
        let n = r.ws.len();
        let gemv = time_ms(&be, 5, 60, |i| {
            be.matmul(&r.xt, &r.ws[i % n], &mut r.out).unwrap()
        });
        let rows_read = time_ms(&be, 5, 60, |i| {
            be.probe_read(&r.ws[i % n], false, 0, &mut r.sink).unwrap()
        });
        let stream4 = time_ms(&be, 5, 60, |i| {
            be.probe_read(&r.ws[i % n], true, 4 * sms, &mut r.sink)
                .unwrap()
        });
        let stream16 = time_ms(&be, 5, 60, |i| {
            be.probe_read(&r.ws[i % n], true, 16 * sms, &mut r.sink)
                .unwrap()
        });
        // The same weight every call: L2-resident where it fits (the 5120x6144 one, 31.5 MB, in
        // the H200's 50 MB), to tell whether bytes already on chip make the GEMV faster (what
        // an L2 prefetch during the kernels before it could give).
        let gemv_hot = time_ms(&be, 5, 60, |_| {
            be.matmul(&r.xt, &r.ws[0], &mut r.out).unwrap()
        });
        let rows_hot = time_ms(&be, 5, 60, |_| {
            be.probe_read(&r.ws[0], false, 0, &mut r.sink).unwrap()
        });
        for (what, ms) in [
            ("gemv", gemv),
            ("read-rows", rows_read),
            ("stream-4", stream4),
            ("stream-16", stream16),
            ("gemv-same", gemv_hot),
            ("rows-same", rows_hot),
        ] {
            println!(
                "gemv read fp8 {rows:6}x{cols:5} {what:10} {:7.1} us {:7.1} GB/s of codes {:5.1}% of {ROOF_TBPS} TB/s",
                ms * 1e3,
                r.code_bytes / (ms * 1e-3) / 1e9,
                100.0 * r.code_bytes / (ms * 1e-3) / 1e12 / ROOF_TBPS
            );
        }
    }
}

/// Bytes of the synthetic Llama-3-8B Q4_0 layer's four weights in decode order (QKV 6144x4096,
/// o 4096x4096, gate|up 28672x4096, down 4096x14336; 18 bytes per 32 weights).
const Q4_0_8B_LAYER: [usize; 4] = [
    6144 * 4096 / 32 * 18,
    4096 * 4096 / 32 * 18,
    28672 * 4096 / 32 * 18,
    4096 * 14336 / 32 * 18,
];

/// Unit limits in 16-byte words: each phase (a size in bytes, a multiple of 16) split into
/// `waves` units.
fn unit_bounds(sizes: &[usize], waves: usize) -> Vec<u32> {
    let mut b = vec![0u32];
    for s in sizes {
        assert!(s.is_multiple_of(16), "phase of {s} bytes");
        let (lo, n) = (*b.last().unwrap() as usize, s / 16);
        for w in 1..=waves {
            b.push(u32::try_from(lo + n * w / waves).unwrap());
        }
    }
    b
}

/// Ring shapes measured: (bytes per stage, stages).
const RINGS: [(usize, usize); 3] = [(49152, 4), (32768, 6), (16384, 12)];

/// A ring read: `waves` units per phase, barriers, run-ahead, dataflow.
fn ring(
    (stage_bytes, stages): (usize, usize),
    waves: usize,
    barriers: bool,
    ahead: bool,
    dataflow: bool,
) -> RingProbe {
    RingProbe {
        stage_bytes,
        stages,
        waves,
        barriers,
        ahead,
        dataflow_epoch: dataflow.then_some(0),
    }
}

/// The byte stream a persistent decode layer would read (docs/architecture/persistent-decode.md,
/// session 19): `probe_ring_stream` over the 8B Q4_0 layer's four weights x 32 layers (3.9 GB),
/// each block's share read through a shared-memory ring fed by bulk copies, against the same
/// bytes as one phase (no synchronization). Look for: whether the stream keeps near its one-phase
/// rate when each GEMV-sized phase waits for the previous one, by a grid barrier (with the ring's
/// loads running on across it or not) or by dataflow waits on the previous phase's waves of
/// output rows, i.e. whether a persistent layer could hide its boundaries at all. The launched
/// GEMV-only step (session 19, call 1) took 40.0 us per layer against 28.8 at 4.26 TB/s.
/// First, every mode on small odd phases: each word read exactly once (the sums).
#[test]
#[ignore = "GPU benchmark: run with --ignored on the device machine"]
fn bench_ring_stream() {
    let Some(be) = backend_or_skip() else {
        return;
    };
    let sms = be.sm_count() as usize;
    let bar = be.probe_barrier_words().unwrap();
    let mut sums = be.alloc(DType::U32, &[sms]).unwrap();
    // One launch of `r`; a dataflow launch takes the next epoch of its `ready` words, which
    // must serve launches over the same units only (each launch counts every unit once).
    let launch = |w: &pocket_kernels::Tensor,
                  bounds: &pocket_kernels::Tensor,
                  r: &RingProbe,
                  (ready, epoch): (&pocket_kernels::Tensor, &mut u32),
                  sums: &mut pocket_kernels::Tensor| {
        let mut r = *r;
        if r.dataflow_epoch.is_some() {
            *epoch += 1;
            r.dataflow_epoch = Some(*epoch);
        }
        be.probe_ring_stream(w, bounds, &r, &bar, ready, sums)
            .unwrap()
    };
    // Zeroed ready words for the units of `bounds`.
    let fresh_ready = |bounds: &[u32]| {
        be.upload_u32(&vec![0u32; bounds.len()], &[bounds.len()])
            .unwrap()
    };

    // Odd phase sizes: a few stages plus a word, shares shorter than a stage, an empty phase.
    let sizes = [(3 * 3072 + 5) * 16, 7 * 16, 0, (65536 + 123) * 16, 16];
    let words: usize = sizes.iter().sum::<usize>() / 4;
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let host: Vec<u32> = (0..words)
        .map(|_| {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            (state >> 32) as u32
        })
        .collect();
    let want = host.iter().fold(0u32, |a, &v| a.wrapping_add(v));
    let w = be.upload_u32(&host, &[words]).unwrap();
    let modes = [
        (1, false, false, false),
        (1, true, false, false),
        (1, true, true, false),
        (3, true, false, false),
        (3, false, false, false),
        (1, false, true, true),
        (4, false, true, true),
    ];
    for shape in RINGS {
        for (waves, barriers, ahead, dataflow) in modes {
            let r = ring(shape, waves, barriers, ahead, dataflow);
            let b = unit_bounds(&sizes, waves);
            let bounds = be.upload_u32(&b, &[b.len()]).unwrap();
            let (ready, mut epoch) = (fresh_ready(&b), 0);
            launch(&w, &bounds, &r, (&ready, &mut epoch), &mut sums);
            let got = be
                .read_u32(&sums)
                .unwrap()
                .iter()
                .fold(0u32, |a, &v| a.wrapping_add(v));
            assert_eq!(
                got, want,
                "{r:?}: the words read sum to {got:#x}, the buffer to {want:#x}"
            );
        }
    }

    let layers = 32;
    let sizes: Vec<usize> = (0..layers).flat_map(|_| Q4_0_8B_LAYER).collect();
    let total: usize = sizes.iter().sum();
    let w = be.alloc(DType::U32, &[total / 4]).unwrap();
    let barrier_us = time_ms(&be, 2, 10, |_| {
        be.probe_grid_barriers(sms, 1000, &bar).unwrap()
    }) * 1e3
        / 1000.0;
    println!("\n==== summary: the 8B Q4_0 layer's bytes through a shared-memory ring ====");
    println!("ring stream grid barrier ({sms} blocks of 128): {barrier_us:.2} us each");
    for shape in RINGS {
        let runs = [
            ("one phase", 0, false, false, false),
            ("phases", 1, false, false, false),
            ("barriers", 1, true, false, false),
            ("barr+ahead", 1, true, true, false),
            ("dataflow 1", 1, false, true, true),
            ("dataflow 4", 4, false, true, true),
            ("dataflow 8", 8, false, true, true),
            ("dataflow 16", 16, false, true, true),
        ];
        for (what, waves, barriers, ahead, dataflow) in runs {
            let b = if waves == 0 {
                unit_bounds(&[total], 1)
            } else {
                unit_bounds(&sizes, waves)
            };
            let bounds = be.upload_u32(&b, &[b.len()]).unwrap();
            let r = ring(shape, waves.max(1), barriers, ahead, dataflow);
            let (ready, mut epoch) = (fresh_ready(&b), 0);
            let ms = time_ms(&be, 3, 20, |_| {
                launch(&w, &bounds, &r, (&ready, &mut epoch), &mut sums)
            });
            let tbps = total as f64 / (ms * 1e-3) / 1e12;
            println!(
                "ring stream {:2} x {:2} KiB {what:11}: {:6.1} us per layer, {tbps:5.2} TB/s, {:5.1}% of {ROOF_TBPS} TB/s",
                shape.1,
                shape.0 / 1024,
                ms * 1e3 / layers as f64,
                100.0 * tbps / ROOF_TBPS
            );
        }
    }
}
