//! GPU microbenchmark of the one-row FP8 decode GEMV variants at the Qwen3.5-27B shapes (ignored
//! by default; the device run script runs it with `--ignored`). Timing: `bench::time_ms`.
#![cfg(feature = "cuda")]

use pocket_kernels::{Backend, DType};
use pocket_quant::QuantFormat;

#[path = "cuda_common/bench.rs"]
mod bench;

use bench::{backend_or_skip, bench_x, random_fp8, time_ms, weight_copies, ROOF_TBPS};

/// The FP8 E4M3 128x128 one-row decode GEMV at Qwen3.5-27B's FP8 projection shapes (stacked as
/// the model loads them on CUDA: MLP gate|up 34816x5120 and down 5120x17408, DeltaNet q|k|v|z
/// 16384x5120 and out 5120x6144, attention q|gate|k|v 14336x5120 and o 5120x6144; and the
/// unstacked 17408x5120 and 10240x5120), every variant of `gemv_fp8_row1` ([`Fp8Row1`]) with the
/// f16-conversion decode and with the previous integer decode (`int`, the session-3 kernels'
/// arithmetic), called directly through `fp8_gemv_row1`. Prints us, GB/s and % of the 4.26 TB/s
/// copy bandwidth per shape and variant, marks the per-shape default (`*`) and the fastest, and
/// sums the step's FP8 GEMV time (48 DeltaNet + 16 attention layers + 64 MLPs) for the default
/// and for the fastest variant per shape. Weights rotate over >= 200 MB of copies (HBM reads);
/// GB/s counts weight and tile-scale bytes.
#[test]
#[ignore = "GPU benchmark: run with --ignored on the device machine"]
fn bench_fp8_gemv_27b() {
    use pocket_kernels::cuda::Fp8Row1;
    let Some(be) = backend_or_skip() else {
        return;
    };
    let f = QuantFormat::Fp8E4M3Block128;
    // (rows, cols, uses per decode step of the 27B model).
    let shapes = [
        (34816usize, 5120usize, 64usize),
        (5120, 17408, 64),
        (16384, 5120, 48),
        (14336, 5120, 16),
        (5120, 6144, 64),
        (17408, 5120, 0),
        (10240, 5120, 0),
    ];
    // `POCKET_BENCH_FP8_SHAPES=5120x6144,...` keeps only those shapes (a profiler run that needs
    // one shape's launches; the step sums then cover only them).
    let only = std::env::var("POCKET_BENCH_FP8_SHAPES").ok();
    let wanted = |rows: usize, cols: usize| {
        only.as_deref()
            .is_none_or(|l| l.split(',').any(|s| s.trim() == format!("{rows}x{cols}")))
    };
    let mut lines = Vec::new();
    let (mut step_default, mut step_best, mut step_bytes) = (0f64, 0f64, 0f64);
    for &(rows, cols, uses) in shapes.iter().filter(|s| wanted(s.0, s.1)) {
        let (bytes, scales) = random_fp8(rows, cols);
        let wbytes = bytes.len() + scales.len();
        let ws = weight_copies(&be, f, rows, cols, bytes, Some(scales));
        let copies = ws.len();
        let x = bench_x(1, cols);
        let xt = be.upload_f32(&x, &[1, cols]).unwrap();
        let mut out = be.alloc(DType::F32, &[1, rows]).unwrap();
        let default = Fp8Row1::for_shape(rows, cols, be.sm_count() as usize);
        let mut results = Vec::new();
        for bits in [false, true] {
            for v in Fp8Row1::ALL {
                let ms = time_ms(&be, 5, 60, |i| {
                    be.fp8_gemv_row1(&xt, &ws[i % copies], &mut out, v, bits)
                        .unwrap()
                });
                results.push((v, bits, ms));
            }
        }
        let best = results
            .iter()
            .filter(|r| !r.1)
            .map(|r| r.2)
            .fold(f64::INFINITY, f64::min);
        let def_ms = results
            .iter()
            .find(|r| r.0 == default && !r.1)
            .map_or(f64::NAN, |r| r.2);
        for &(v, bits, ms) in &results {
            let gbps = wbytes as f64 / (ms * 1e-3) / 1e9;
            let line = format!(
                "gemv fp8-27B {rows:6}x{cols:5} {:6} {:4} {:8.1} us {:7.1} GB/s {:5.1}% of {ROOF_TBPS} TB/s{}{}",
                v.name(),
                if bits { "int" } else { "f16" },
                ms * 1e3,
                gbps,
                100.0 * gbps / 1e3 / ROOF_TBPS,
                if v == default && !bits { "  *default" } else { "" },
                if ms == best && !bits { "  (fastest)" } else { "" },
            );
            println!("{line}");
            lines.push(line);
        }
        step_default += uses as f64 * def_ms;
        step_best += uses as f64 * best;
        step_bytes += uses as f64 * wbytes as f64;
    }
    println!("\n==== summary: FP8 one-row GEMV, Qwen3.5-27B shapes ====");
    for l in lines {
        println!("{l}");
    }
    let pct = |ms: f64| 100.0 * step_bytes / (ms * 1e-3) / 1e12 / ROOF_TBPS;
    println!(
        "gemv fp8-27B step ({:.2} GB): default {:.3} ms ({:.1}%), fastest per shape {:.3} ms ({:.1}%)",
        step_bytes / 1e9,
        step_default,
        pct(step_default),
        step_best,
        pct(step_best)
    );
}
