//! The one-row (decode) dp4a GEMV's kernel choice: the process-wide variant (`POCKET_GEMV_Q8`,
//! [`CudaBackend::set_q8_gemv_variant`]) and the per-shape `auto` rule, for `matmul.rs`'s GEMV.

use super::kernels::{DevFormat, Kernel, Q8Gemv, Q8Variant, Rows};
use super::matmul::{rows64_max_cols, split_gemv, warp_per_row, GEMVR_ROWS, GEMV_WARPS};
use super::CudaBackend;

/// Weight rows per group of the persistent one-row GEMV `gemv_q8p_*` (kernels/gemv.cu).
const GEMVP_ROWS: usize = 4;
/// Threads of a `gemv_q8p_*` block and the blocks resident per SM (GEMVP_THREADS,
/// GEMVP_BLOCKS_PER_SM in kernels/gemv.cu: its launch bounds guarantee them).
const GEMVP_THREADS: u32 = 64;
const GEMVP_BLOCKS_PER_SM: usize = 8;
/// Work items a `gemv_q8p_*` block covers per row in one pass (64 threads x 2).
const GEMVP_PASS_ITEMS: usize = 128;
/// Rows below which a matrix takes the small-matrix kernels (`gemv_q8r1_*`), and from which
/// `gemv_q8p_*` may serve it.
const SMALL_MATRIX_ROWS: usize = 2048;
/// Widest rows (in work items) the warp-per-row `gemv_q8w_*` serves by default: two per lane.
const WARP_MAX_ITEMS: usize = 64;
/// Rows from which short-row matrices (LM heads of 576..896 columns) keep the legacy choice:
/// bandwidth-bound there, where 4 rows per thread keep more bytes in flight than a warp per row.
const WARP_MAX_ROWS: usize = 16384;

/// Process-wide one-row dp4a GEMV choice: 0 = not read yet, else 1 + the index of a
/// [`Q8Variant`] in [`Q8Variant::ALL`].
static Q8_VARIANT: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(0);

/// The one-row dp4a GEMV variant: [`CudaBackend::set_q8_gemv_variant`], else `POCKET_GEMV_Q8`
/// (auto, legacy, r, r64, p, w, r1; an unknown name is `auto`).
pub(crate) fn q8_variant() -> Q8Variant {
    use std::sync::atomic::Ordering::Relaxed;
    match Q8_VARIANT.load(Relaxed) {
        0 => {
            let v = std::env::var("POCKET_GEMV_Q8")
                .ok()
                .and_then(|s| Q8Variant::parse(&s))
                .unwrap_or(Q8Variant::Auto);
            set_q8_variant(v);
            v
        }
        i => Q8Variant::ALL[i as usize - 1],
    }
}

fn set_q8_variant(v: Q8Variant) {
    let i = Q8Variant::ALL.iter().position(|&x| x == v).unwrap_or(0);
    Q8_VARIANT.store(i as u8 + 1, std::sync::atomic::Ordering::Relaxed);
}

impl CudaBackend {
    /// Selects the one-row (decode) dp4a GEMV kernel, process-wide, as `POCKET_GEMV_Q8` does:
    /// for A/B benchmarks and tests. Every variant gives results within the same bounds.
    pub fn set_q8_gemv_variant(&self, v: Q8Variant) {
        set_q8_variant(v);
    }

    /// The one-row dp4a GEMV variant in force.
    pub fn q8_gemv_variant(&self) -> Q8Variant {
        q8_variant()
    }

    /// The kernel a one-row GEMV of a `rows x cols` matrix of `format` launches under the
    /// current variant (`None` where the format has no dp4a GEMV): for benchmark labels.
    /// Ignores `POCKET_GEMV=fused`.
    pub fn one_row_q8_gemv_symbol(
        &self,
        format: pocket_quant::QuantFormat,
        rows: usize,
        cols: usize,
    ) -> Option<&'static str> {
        let q = DevFormat::of(format)?.q8_gemv()?;
        let k = if warp_per_row() {
            Kernel::GemvQ8(q, Rows::One)
        } else {
            q8_one_row(self, q, rows, cols).0
        };
        Some(k.symbol().1)
    }

    /// Caps the grid of the persistent GEMV `gemv_q8p_*` at `blocks` (0: one resident wave, the
    /// default), process-wide: lets tests give each block several row groups on small matrices.
    pub fn set_q8p_max_blocks(&self, blocks: usize) {
        Q8P_MAX_BLOCKS.store(blocks, std::sync::atomic::Ordering::Relaxed);
    }
}

/// [`CudaBackend::set_q8p_max_blocks`]'s cap (0: none).
static Q8P_MAX_BLOCKS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// The one-row dp4a GEMV launch for a `rows x cols` matrix of `q`: kernel, grid, block threads.
/// `Auto` (the reasoning, to be confirmed on the H200 with `bench_gemv_q8_variants`):
/// * rows of <= 64 work items (576..2048 columns) in matrices under 16384 rows: a warp per row
///   (`gemv_q8w_*`): each lane holds at most two items, so a row costs one round of loads and a
///   shuffle reduction, where a 4-row block leaves most of its threads idle and chains 4 rows'
///   loads in one thread. Taller ones (LM heads) keep the legacy kernel.
/// * at least 2048 rows whose 4-row groups exceed one resident wave (8 x 64-thread blocks per
///   SM) or whose rows take several passes (> 128 items): the persistent `gemv_q8p_*`, which
///   keeps its loads in flight across groups and passes (gate/up 28672, QKV 6144, down 14336
///   columns, the LM head) instead of retiring and relaunching blocks with empty pipelines.
/// * other matrices under 2048 rows: one row per block (`gemv_q8r1_*`), every row one pass.
/// * else `gemv_q8r_*` (4096 x 4096: one wave of 128-thread blocks, which measured faster
///   than `gemv_q8r64_*` on the H200: 5.2 vs 5.7 us, docs/performance/logs/2026-11-30-s3-run1).
///
/// `POCKET_GEMV_SPLIT=0` keeps the legacy choice.
pub(super) fn q8_one_row(
    be: &CudaBackend,
    q: Q8Gemv,
    rows: usize,
    cols: usize,
) -> (Kernel, u32, u32) {
    let items = q.items_per_row(cols);
    let groups = rows.div_ceil(GEMVR_ROWS);
    let rows4 = (Kernel::GemvQ8Rows(q), groups as u32, 128);
    let warp = (Kernel::GemvQ8Warp(q), rows.div_ceil(GEMV_WARPS) as u32, 128);
    let row1 = (Kernel::GemvQ8Row1(q), rows as u32, 128);
    let resident = GEMVP_BLOCKS_PER_SM * be.sm_count().max(1) as usize;
    let cap = match Q8P_MAX_BLOCKS.load(std::sync::atomic::Ordering::Relaxed) {
        0 => resident,
        c => c,
    };
    let persist = (
        Kernel::GemvQ8Persist(q),
        rows.div_ceil(GEMVP_ROWS).min(cap) as u32,
        GEMVP_THREADS,
    );
    let legacy = if q.prefers_warp_per_row() {
        warp
    } else if cols <= rows64_max_cols(q) && split_gemv() {
        (Kernel::GemvQ8Rows64(q), groups as u32, 64)
    } else {
        rows4
    };
    let mut v = q8_variant();
    if v == Q8Variant::Auto && !split_gemv() {
        v = Q8Variant::Legacy;
    }
    match v {
        Q8Variant::Legacy => legacy,
        Q8Variant::Rows => rows4,
        Q8Variant::Rows64 if cols <= rows64_max_cols(q) => {
            (Kernel::GemvQ8Rows64(q), groups as u32, 64)
        }
        Q8Variant::Rows64 => rows4,
        Q8Variant::Persistent if q.has_persistent() => persist,
        Q8Variant::Persistent => rows4,
        Q8Variant::Warp => warp,
        Q8Variant::Row1 => row1,
        Q8Variant::Auto => {
            if q.prefers_warp_per_row() || (items <= WARP_MAX_ITEMS && rows < WARP_MAX_ROWS) {
                warp
            } else if items <= WARP_MAX_ITEMS {
                legacy
            } else if q.has_persistent()
                && rows >= SMALL_MATRIX_ROWS
                && (rows.div_ceil(GEMVP_ROWS) > resident || items > GEMVP_PASS_ITEMS)
            {
                persist
            } else if rows < SMALL_MATRIX_ROWS {
                row1
            } else {
                rows4
            }
        }
    }
}
