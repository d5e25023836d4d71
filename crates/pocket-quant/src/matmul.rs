//! GEMV / small-batch GEMM over quantized weights: `y[n, rows] = x[n, cols] · Wᵀ`.

use crate::act::{quantize_act_q8, quantize_act_q8k, BlockQ8, BlockQ8K};
use crate::codec::QuantMatrix;
use crate::dot::{scalar, Kernel};
use crate::error::{QuantError, Result};
use crate::format::ActFormat;
use rayon::prelude::*;
use std::cell::Cell;

pub use exact::matmul_exact;

mod exact;
#[cfg(target_arch = "x86_64")]
mod pool;
#[cfg(target_arch = "x86_64")]
mod tile;
#[cfg(target_arch = "x86_64")]
mod tile_k;
#[cfg(target_arch = "x86_64")]
mod tile_legacy;

/// A raw output pointer shared by the rayon tasks of one matmul; each task writes only the
/// columns of its own weight-row range.
#[cfg(target_arch = "x86_64")]
#[derive(Clone, Copy)]
struct OutPtr(*mut f32);
// SAFETY: tasks write disjoint elements (see `tiled`), and the pointer outlives the parallel region.
#[cfg(target_arch = "x86_64")]
unsafe impl Send for OutPtr {}
#[cfg(target_arch = "x86_64")]
unsafe impl Sync for OutPtr {}

/// Weight rows per rayon task of the tiled path: about `bytes` of weights (so a task's rows stay
/// in L2 while the activation tiles stream past), at least 4 tasks per thread when the matrix
/// allows it, a multiple of 4 rows.
#[cfg(target_arch = "x86_64")]
fn task_rows(rows: usize, rb: usize, threads: usize, bytes: usize) -> usize {
    let by_cache = (bytes / rb.max(1)).max(4);
    let by_balance = if threads > 1 {
        rows.div_ceil(threads * 2).max(4)
    } else {
        rows
    };
    by_cache.min(by_balance).div_ceil(4) * 4
}

/// The register-blocked path for the 32-element formats (see `tile`); `None` when it does not
/// apply to this matrix at this level.
#[cfg(target_arch = "x86_64")]
fn tiled(
    w: &QuantMatrix,
    rb: usize,
    x: &[BlockQ8],
    n: usize,
    y: &mut [f32],
    level: SimdLevel,
    parallel: bool,
) -> Option<()> {
    if level < SimdLevel::Avx2 || w.scales.is_some() {
        return None;
    }
    let f = tile::range_fn(w.format)?;
    // Interleaved tiles pay off from a few rows on; below that, row-at-a-time GEMV.
    thread_local! {
        /// Reused interleaved-activation buffer, one per calling thread.
        static TILES: Cell<Vec<tile::TileBlock>> = const { Cell::new(Vec::new()) };
    }
    let mut tiles = TILES.with(Cell::take);
    tiles.clear();
    if n >= 4 {
        tile::interleave(x, n, w.cols / 32, &mut tiles);
    }
    let job = tile::Job {
        w: w.data,
        rb,
        x,
        tiles: &tiles,
        n,
        nb: w.cols / 32,
        ys: w.rows,
        ts: w.tensor_scale.unwrap_or(1.0),
    };
    debug_assert_eq!(y.len(), n * w.rows);
    let out = OutPtr(y.as_mut_ptr());
    // SAFETY: `level >= Avx2` was clamped to what the CPU supports, `y` holds `n * rows` floats,
    // `job` was built from a validated matrix, and `run_row_ranges` hands out disjoint ranges.
    run_row_ranges(w.rows, rb, n, parallel, |r0, r1| {
        let o = out;
        unsafe { f(&job, r0, r1, o.0) }
    });
    TILES.with(|c| c.set(tiles));
    Some(())
}

/// Runs `range(r0, r1)` over disjoint weight-row ranges covering `0..rows`, sized so a range's
/// rows stay in L2 while every activation tile passes over them (serial too); in parallel over
/// the helper pool (decode) or rayon (prefill, or when the pool is busy).
#[cfg(target_arch = "x86_64")]
fn run_row_ranges(
    rows: usize,
    rb: usize,
    n: usize,
    parallel: bool,
    range: impl Fn(usize, usize) + Sync,
) {
    let threads = if parallel {
        rayon::current_num_threads().max(1)
    } else {
        1
    };
    if n == 1 && threads > 1 && rows > 4 {
        // Decode (n = 1) reuses no activation tile across rows, so L2-sized ranges only add
        // range starts (each a claim on the shared counter and a prefetch burst): guided ranges
        // instead, in whole 8-row GEMV groups.
        let bounds = guided_bounds(rows, threads, 8, 32);
        let chunk = |c: usize| range(bounds[c], bounds[c + 1]);
        if !pool::run(bounds.len() - 1, threads, &chunk) {
            (0..bounds.len() - 1).into_par_iter().for_each(chunk);
        }
        return;
    }
    let per = if n == 1 {
        rows
    } else {
        task_rows(rows, rb, threads, 96 << 10)
    };
    let chunk = |c: usize| range(c * per, ((c + 1) * per).min(rows));
    let chunks = rows.div_ceil(per);
    if threads == 1 || rows <= 4 {
        (0..chunks).for_each(chunk);
    } else {
        (0..chunks).into_par_iter().for_each(chunk);
    }
}

/// Row boundaries (`0 = b[0] < b[1] < .. = rows`) of a decode GEMV's chunks for `threads`
/// threads that claim them in order: each chunk is a `1 / (2 * threads)` share of the rows not
/// yet handed out (at most `1 / (4 * threads)` of all), in whole `align`-row groups and at least
/// `min` rows ("guided" scheduling).
/// Why: the threads end within one small chunk of each other, where equal chunks (16 for two
/// threads) left one thread waiting up to a whole chunk (on the 151936-row output matrix, ~9500
/// rows) at the end of every GEMV; large first chunks keep the claims and range starts few.
#[cfg(target_arch = "x86_64")]
fn guided_bounds(rows: usize, threads: usize, align: usize, min: usize) -> Vec<usize> {
    let mut b = Vec::with_capacity(48);
    b.push(0);
    // A thread preempted inside a chunk it claimed holds up the GEMV until it runs again (the
    // box is shared), so no chunk exceeds a 1 / (4 * threads) share.
    let cap = rows / (4 * threads);
    let mut at = 0;
    while at < rows {
        let left = rows - at;
        let take = (left / (2 * threads)).min(cap).max(min).div_ceil(align) * align;
        at = (at + take).min(rows);
        b.push(at);
    }
    b
}

/// The register-blocked prefill path for Q4_K / Q6_K (see `tile_k`); `None` for decode-sized
/// `n` (the per-row kernels serve those) or where it does not apply.
#[cfg(target_arch = "x86_64")]
fn tiled_k(
    w: &QuantMatrix,
    rb: usize,
    x: &[BlockQ8K],
    n: usize,
    y: &mut [f32],
    level: SimdLevel,
    parallel: bool,
) -> Option<()> {
    if level < SimdLevel::Avx2 || w.scales.is_some() || n < 4 {
        return None;
    }
    let f = tile_k::range_fn_k(w.format)?;
    thread_local! {
        /// Reused interleaved-activation buffer, one per calling thread.
        static TILES: Cell<Vec<tile_k::TileBlockK>> = const { Cell::new(Vec::new()) };
    }
    let nb = w.cols / 256;
    let mut tiles = TILES.with(Cell::take);
    tile_k::interleave_k(x, n, nb, &mut tiles);
    let job = tile_k::JobK {
        w: w.data,
        rb,
        tiles: &tiles,
        n,
        nb,
        ys: w.rows,
        ts: w.tensor_scale.unwrap_or(1.0),
    };
    let out = OutPtr(y.as_mut_ptr());
    // SAFETY: as in `tiled`.
    run_row_ranges(w.rows, rb, n, parallel, |r0, r1| {
        let o = out;
        unsafe { f(&job, r0, r1, o.0) }
    });
    TILES.with(|c| c.set(tiles));
    Some(())
}

/// Which instruction-set path the dot kernels use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SimdLevel {
    /// Portable scalar reference kernels.
    Scalar,
    /// AVX2 + FMA + F16C kernels (x86-64).
    Avx2,
}

/// The best level this CPU supports (detected at run time).
pub fn simd_level() -> SimdLevel {
    #[cfg(target_arch = "x86_64")]
    {
        if crate::simd::avx2_available() {
            return SimdLevel::Avx2;
        }
    }
    SimdLevel::Scalar
}

/// The kernel for `format` at `level`, falling back to the scalar reference, or `None` for formats
/// whose dot dequantizes the weight row first.
fn kernel(w: &QuantMatrix, level: SimdLevel) -> Option<Kernel> {
    if level >= SimdLevel::Avx2 {
        if let Some(k) = crate::simd::avx2_kernel(w.format) {
            return Some(k);
        }
    }
    w.format.spec().dot
}

enum Act<'a> {
    F32(&'a [f32]),
    Q8(Vec<BlockQ8>),
    Q8K(Vec<BlockQ8K>),
}

/// `y[n, rows] = x[n, cols] · Wᵀ` for `n` activation rows (n = 1 is decode GEMV, n > 1 small-batch
/// GEMM). Quantizes `x` to the format's paired activation format once per call and splits the
/// weight rows over the rayon pool.
pub fn matmul(w: &QuantMatrix, x: &[f32], n: usize, y: &mut [f32]) -> Result<()> {
    matmul_with(w, x, n, y, simd_level(), true)
}

/// [`matmul`] on the calling thread only (for callers that parallelise themselves, and for
/// single-thread measurements).
pub fn matmul_serial(w: &QuantMatrix, x: &[f32], n: usize, y: &mut [f32]) -> Result<()> {
    matmul_with(w, x, n, y, simd_level(), false)
}

/// Validates `w` and the lengths of `x` (`[n, cols]`) and `y` (`[n, rows]`) for a matmul;
/// returns the matrix's row bytes. Shared by the int8 path and [`matmul_exact`].
pub(crate) fn check_shapes(w: &QuantMatrix, x: &[f32], n: usize, y: &[f32]) -> Result<usize> {
    let rb = w.validate()?;
    let (rows, cols) = (w.rows, w.cols);
    if n == 0 {
        return Err(QuantError::BadShape("n = 0 activation rows".into()));
    }
    let nx = n
        .checked_mul(cols)
        .ok_or_else(|| QuantError::BadShape("n * cols overflows".into()))?;
    if x.len() != nx {
        return Err(QuantError::LengthMismatch {
            what: "activations",
            expected: nx,
            got: x.len(),
        });
    }
    let ny = n
        .checked_mul(rows)
        .ok_or_else(|| QuantError::BadShape("n * rows overflows".into()))?;
    if y.len() != ny {
        return Err(QuantError::LengthMismatch {
            what: "output",
            expected: ny,
            got: y.len(),
        });
    }
    Ok(rb)
}

/// [`matmul`] with an explicit kernel level (clamped to what the CPU supports) and threading
/// choice; used by tests to compare SIMD paths with the scalar reference.
pub fn matmul_with(
    w: &QuantMatrix,
    x: &[f32],
    n: usize,
    y: &mut [f32],
    level: SimdLevel,
    parallel: bool,
) -> Result<()> {
    let rb = check_shapes(w, x, n, y)?;
    let cols = w.cols;
    let level = level.min(simd_level());
    let spec = w.format.spec();
    let act_block = match spec.act {
        ActFormat::F32 => 1,
        ActFormat::Q8_0 | ActFormat::Q8_1 => 32,
        ActFormat::Q8_K => 256,
    };
    if !cols.is_multiple_of(act_block) {
        return Err(QuantError::NotBlockMultiple {
            format: format!("{} activations", spec.name),
            elements: cols,
            block_size: act_block,
        });
    }
    let act = match spec.act {
        ActFormat::F32 => Act::F32(x),
        ActFormat::Q8_0 | ActFormat::Q8_1 => {
            let mut v = Q8_SCRATCH.with(Cell::take);
            quantize_act_q8(x, &mut v);
            Act::Q8(v)
        }
        ActFormat::Q8_K => {
            let mut v = Q8K_SCRATCH.with(Cell::take);
            quantize_act_q8k(x, &mut v);
            Act::Q8K(v)
        }
    };
    multiply(w, rb, &act, n, y, level, parallel);
    // Keep the buffers for the next call (a decode step makes hundreds of these calls).
    match act {
        Act::Q8(v) => Q8_SCRATCH.with(|c| c.set(v)),
        Act::Q8K(v) => Q8K_SCRATCH.with(|c| c.set(v)),
        Act::F32(_) => {}
    }
    Ok(())
}

thread_local! {
    /// Reused quantized-activation buffers of [`matmul_with`], one per calling thread.
    static Q8_SCRATCH: Cell<Vec<BlockQ8>> = const { Cell::new(Vec::new()) };
    static Q8K_SCRATCH: Cell<Vec<BlockQ8K>> = const { Cell::new(Vec::new()) };
}

/// The multiply of [`matmul_with`] once the shapes are checked and `x` is quantized.
fn multiply(
    w: &QuantMatrix,
    rb: usize,
    act: &Act,
    n: usize,
    y: &mut [f32],
    level: SimdLevel,
    parallel: bool,
) {
    let (rows, cols) = (w.rows, w.cols);
    let ny = n * rows;
    let spec = w.format.spec();
    #[cfg(target_arch = "x86_64")]
    match act {
        Act::Q8(a) if tiled(w, rb, a, n, y, level, parallel).is_some() => return,
        Act::Q8K(a) if tiled_k(w, rb, a, n, y, level, parallel).is_some() => return,
        _ => {}
    }
    let k = kernel(w, level);
    let ts = w.tensor_scale.unwrap_or(1.0);
    let dq = spec.dequant;
    let (bs, bb) = (spec.block_size, spec.block_bytes);
    let row = |r: usize, out: &mut [f32], tmp: &mut Vec<f32>| {
        let (wd, ws) = w.row_parts(r, rb);
        for (j, o) in out.iter_mut().enumerate() {
            let v = match (act, k) {
                (Act::F32(x), Some(Kernel::F32(f))) => f(wd, ws, &x[j * cols..(j + 1) * cols]),
                (Act::Q8(a), Some(Kernel::Q8(f))) => {
                    f(wd, ws, &a[j * cols / 32..(j + 1) * cols / 32])
                }
                (Act::Q8K(a), Some(Kernel::Q8K(f))) => {
                    f(wd, ws, &a[j * cols / 256..(j + 1) * cols / 256])
                }
                (act, _) => {
                    let Some(dq) = dq else { return };
                    if tmp.len() < bs.max(1024) {
                        tmp.resize(bs.max(1024), 0.0);
                    }
                    match act {
                        Act::F32(x) => scalar::dot_dequant_f32(
                            dq,
                            bs,
                            bb,
                            wd,
                            &x[j * cols..(j + 1) * cols],
                            tmp,
                        ),
                        Act::Q8(a) => scalar::dot_dequant_q8(
                            dq,
                            bs,
                            bb,
                            wd,
                            &a[j * cols / 32..(j + 1) * cols / 32],
                            tmp,
                        ),
                        Act::Q8K(a) => scalar::dot_dequant_q8k(
                            dq,
                            bb,
                            wd,
                            &a[j * cols / 256..(j + 1) * cols / 256],
                            tmp,
                        ),
                    }
                }
            };
            *o = v * ts;
        }
    };
    let mut yt_store = Vec::new();
    let yt: &mut [f32] = if n == 1 {
        &mut *y
    } else {
        yt_store = vec![0.0f32; ny];
        &mut yt_store
    };
    let threads = rayon::current_num_threads().max(1);
    // Decode: the helper pool (see `pool`), each task writing its own rows of `y` (n = 1).
    #[cfg(target_arch = "x86_64")]
    if parallel && rows > 8 && n == 1 && threads > 1 {
        let bounds = guided_bounds(rows, threads, 1, 4);
        let out = OutPtr(yt.as_mut_ptr());
        let task = |c: usize| {
            let o = out;
            let mut tmp = Vec::new();
            for r in bounds[c]..bounds[c + 1] {
                // SAFETY: `yt` holds `rows` floats (n = 1) and tasks own disjoint rows.
                row(
                    r,
                    unsafe { std::slice::from_raw_parts_mut(o.0.add(r), 1) },
                    &mut tmp,
                );
            }
        };
        if pool::run(bounds.len() - 1, threads, &task) {
            return;
        }
    }
    // One thread: run here (a rayon call would hand every GEMV to the pool's one worker and
    // wait for it to wake).
    if parallel && rows > 1 && threads > 1 {
        let per = (rows / (threads * 8)).clamp(4, 256);
        yt.par_chunks_mut(per * n)
            .enumerate()
            .for_each_init(Vec::new, |tmp, (ci, chunk)| {
                for (i, out) in chunk.chunks_mut(n).enumerate() {
                    row(ci * per + i, out, tmp);
                }
            });
    } else {
        let mut tmp = Vec::new();
        for (r, out) in yt.chunks_mut(n).enumerate() {
            row(r, out, &mut tmp);
        }
    }
    if n > 1 {
        for r in 0..rows {
            for j in 0..n {
                y[j * rows + r] = yt_store[r * n + j];
            }
        }
    }
}

#[cfg(all(test, target_arch = "x86_64"))]
mod tests {
    use super::guided_bounds;

    /// Guided chunks cover `0..rows` in order, each a whole number of `align` groups (but the
    /// last) and at least `min` rows (but the last), none above a `1 / (4 * threads)` share
    /// (rounded up to a group), shrinking toward the end.
    #[test]
    fn guided_bounds_cover_rows_in_aligned_shrinking_chunks() {
        for rows in [1usize, 5, 31, 32, 33, 128, 896, 4864, 151_936] {
            for threads in [2usize, 3, 8] {
                for (align, min) in [(8, 32), (1, 4)] {
                    let b = guided_bounds(rows, threads, align, min);
                    assert_eq!((b[0], *b.last().unwrap()), (0, rows), "{rows} {threads}");
                    let sizes: Vec<usize> = b.windows(2).map(|w| w[1] - w[0]).collect();
                    let (last, body) = sizes.split_last().unwrap();
                    assert!(*last > 0);
                    for (i, s) in body.iter().enumerate() {
                        assert!(s % align == 0 && *s >= min, "{rows} {threads}: {sizes:?}");
                        let cap = (rows / (4 * threads)).max(min).div_ceil(align) * align;
                        assert!(*s <= cap, "{rows} {threads}: {sizes:?}");
                        assert!(i == 0 || *s <= body[i - 1], "{rows} {threads}: {sizes:?}");
                    }
                    if rows >= 4 * threads * min {
                        assert!(sizes[0] >= rows / (4 * threads) && sizes.len() <= 20 * threads);
                    }
                }
            }
        }
    }
}
