//! Shared by the GPU benchmark binaries (every tests/cuda_bench*.rs): the copy-bandwidth
//! ceiling, random weight blocks, CUDA-graph capture, and the one CUDA-event timing loop
//! (`time_ms`) that every bench times with.
#![allow(dead_code)]

use pocket_kernels::cuda::graph::StepGraph;
use pocket_kernels::cuda::CudaBackend;
use pocket_kernels::{Backend, HostBytes, Weight};
use pocket_quant::{GgmlType, QuantFormat};

/// Copy bandwidth of the H200 measured on the device machine (read + write), docs/…/cuda-kernels.md.
pub const ROOF_TBPS: f64 = 4.26;

/// Random blocks of format `t` for a `rows x cols` weight, with small finite scales (f16 0.01).
pub fn random_bytes(t: GgmlType, rows: usize, cols: usize, seed: u64) -> Vec<u8> {
    let f = QuantFormat::Ggml(t);
    let nb = rows * cols / f.block_size();
    let bb = f.block_bytes();
    let mut s = seed | 1;
    let mut out = vec![0u8; nb * bb];
    for c in out.chunks_mut(8) {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        let b = s.to_le_bytes();
        c.copy_from_slice(&b[..c.len()]);
    }
    // Finite scales: f16 0.01 at each block's scale fields, and float formats as small values.
    let one = half::f16::from_f32(0.01).to_le_bytes();
    let offs: &[usize] = match t {
        GgmlType::Q4_0 | GgmlType::Q5_0 | GgmlType::Q8_0 | GgmlType::IQ4_NL | GgmlType::IQ4_XS => {
            &[0]
        }
        GgmlType::Q4_1 | GgmlType::Q5_1 | GgmlType::Q4_K | GgmlType::Q5_K => &[0, 2],
        GgmlType::Q2_K => &[80, 82],
        GgmlType::Q3_K => &[108],
        GgmlType::Q6_K => &[208],
        GgmlType::F16 => {
            for c in out.chunks_exact_mut(2) {
                c.copy_from_slice(&one);
            }
            &[]
        }
        GgmlType::BF16 => {
            for c in out.chunks_exact_mut(2) {
                c.copy_from_slice(&half::bf16::from_f32(0.01).to_le_bytes());
            }
            &[]
        }
        GgmlType::F32 => {
            for c in out.chunks_exact_mut(4) {
                c.copy_from_slice(&0.01f32.to_le_bytes());
            }
            &[]
        }
        _ => &[],
    };
    for b in out.chunks_exact_mut(bb) {
        for &o in offs {
            b[o..o + 2].copy_from_slice(&one);
        }
    }
    out
}

/// The decode variant the environment selects (`POCKET_GEMV`, `POCKET_ATTN`), for the labels.
pub fn variant_label() -> &'static str {
    match std::env::var("POCKET_GEMV").as_deref() {
        Ok("fused") => "fused",
        Ok("warp") => "warp",
        _ => "",
    }
}

/// The median of `v`.
pub fn median(mut v: Vec<f32>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2] as f64
}

/// Times `f` with CUDA events: `warm` untimed calls, then `batches` batches of `per` calls
/// between one event pair each (so host enqueue overhead overlaps device work, as in a real
/// step); the median batch time over `per`, in ms.
pub fn time_ms(be: &CudaBackend, warm: usize, reps: usize, mut f: impl FnMut(usize)) -> f64 {
    let ctx = be.stream().context().clone();
    for i in 0..warm {
        f(i);
    }
    let per = 10;
    let batches = reps.div_ceil(per).max(3);
    let timing = Some(cudarc::driver::sys::CUevent_flags::CU_EVENT_DEFAULT);
    let mut times = Vec::with_capacity(batches);
    let mut k = warm;
    for _ in 0..batches {
        let a = ctx.new_event(timing).unwrap();
        let b = ctx.new_event(timing).unwrap();
        a.record(be.stream()).unwrap();
        for _ in 0..per {
            f(k);
            k += 1;
        }
        b.record(be.stream()).unwrap();
        b.synchronize().unwrap();
        times.push(a.elapsed_ms(&b).unwrap() / per as f32);
    }
    median(times)
}

/// The ops `f` launches, captured into one CUDA graph; the stream is drained first so no earlier
/// launch is still in flight when capture starts. Time its replays with `time_ms`.
pub fn capture(be: &CudaBackend, f: impl FnOnce()) -> StepGraph {
    be.synchronize().unwrap();
    be.begin_capture().unwrap();
    f();
    be.end_capture().unwrap()
}

/// Enough device copies of one weight (codes `bytes`, optional tile `scales`) to exceed 200 MB,
/// so a bench that rotates through them reads HBM, not the 50 MB L2.
pub fn weight_copies(
    be: &CudaBackend,
    f: QuantFormat,
    rows: usize,
    cols: usize,
    bytes: Vec<u8>,
    scales: Option<Vec<u8>>,
) -> Vec<Weight> {
    let wbytes = bytes.len() + scales.as_ref().map_or(0, |s| s.len());
    let copies = (200usize << 20).div_ceil(wbytes.max(1)).max(1);
    let data = HostBytes::from_vec(bytes);
    let sc = scales.map(HostBytes::from_vec);
    (0..copies)
        .map(|_| {
            be.upload_weight(f, rows, cols, data.clone(), sc.clone(), None)
                .unwrap()
        })
        .collect()
}

/// The benches' activation values: `n` rows of `cols`, a fixed ramp in [-0.5, 0.5).
pub fn bench_x(n: usize, cols: usize) -> Vec<f32> {
    (0..n * cols)
        .map(|i| ((i * 7919) % 1000) as f32 / 1000.0 - 0.5)
        .collect()
}

/// Random FP8 codes for a `rows x cols` weight with the NaN codes (0x7f, 0xff) cleared, and its
/// 128x128 tile scales (all 1e-3), as f32 bytes.
pub fn random_fp8(rows: usize, cols: usize) -> (Vec<u8>, Vec<u8>) {
    let mut s = 0x9E37_79B9_7F4A_7C15u64 ^ rows as u64;
    let bytes: Vec<u8> = (0..rows * cols)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s >> 24) as u8 & 0xf7
        })
        .collect();
    let scales: Vec<u8> = (0..rows.div_ceil(128) * cols.div_ceil(128))
        .flat_map(|_| 1e-3f32.to_le_bytes())
        .collect();
    (bytes, scales)
}

/// The CUDA backend on device 0, or `None` after printing why a bench is skipped.
pub fn backend_or_skip() -> Option<CudaBackend> {
    match CudaBackend::new(0) {
        Ok(b) => Some(b),
        Err(e) => {
            eprintln!("skipped: {e}");
            None
        }
    }
}
