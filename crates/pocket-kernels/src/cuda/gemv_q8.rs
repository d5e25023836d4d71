//! The one-row (decode) dp4a GEMV's kernel choice: the process-wide variant (`POCKET_GEMV_Q8`,
//! [`CudaBackend::set_q8_gemv_variant`]) and the per-shape `auto` rule, for `matmul.rs`'s GEMV.

use super::kernels::{DevFormat, Kernel, Q8Gemv, Q8Variant, Rows};
use super::matmul::{rows64_max_cols, split_gemv, warp_per_row, GEMVR_ROWS, GEMV_WARPS};
use super::switch::EnvChoice;
use super::CudaBackend;

/// Rows below which a Q4_K matrix takes one row per block (`gemv_q8r1_*`).
const SMALL_MATRIX_ROWS: usize = 2048;
/// Widest rows (in work items) the warp-per-row `gemv_q8w_*` serves by default: two per lane.
const WARP_MAX_ITEMS: usize = 64;
/// Rows from which short Q5_0 rows take a warp per row.
const WARP_MIN_ROWS: usize = 4096;

/// Process-wide one-row dp4a GEMV choice: `POCKET_GEMV_Q8` (auto, legacy, r, r64, w, r1; an
/// unknown name is `auto`), or [`CudaBackend::set_q8_gemv_variant`].
static Q8_VARIANT: EnvChoice<Q8Variant> = EnvChoice::new("POCKET_GEMV_Q8", &Q8Variant::ALL, |v| {
    v.and_then(Q8Variant::parse).unwrap_or(Q8Variant::Auto)
});

/// The one-row dp4a GEMV variant in force.
pub(crate) fn q8_variant() -> Q8Variant {
    Q8_VARIANT.get()
}

impl CudaBackend {
    /// Selects the one-row (decode) dp4a GEMV kernel, process-wide, as `POCKET_GEMV_Q8` does:
    /// for A/B benchmarks and tests. Every variant gives results within the same bounds.
    pub fn set_q8_gemv_variant(&self, v: Q8Variant) {
        Q8_VARIANT.set(Some(v));
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
            q8_one_row(q, rows, cols).0
        };
        Some(k.symbol().1)
    }
}

/// The one-row dp4a GEMV launch for a `rows x cols` matrix of `q`: kernel, grid, block threads.
/// `Auto` follows the H200 measurement of every variant on the 8B, Qwen2.5-0.5B and SmolLM2
/// shapes (`bench_gemv_q8_variants`, docs/performance/logs/2026-11-30-s4-run1/cuda_bench.log,
/// graph column):
/// * `gemv_q8r_*` (4 rows per 128-thread block) by default: it matched or beat every other
///   variant on the 8B shapes of Q4_0, Q4_K, Q8_0 and the Q6_K LM head (1.06-1.12x the 64-thread
///   `gemv_q8r64_*` on Q4_0, 1.07-1.11x on Qwen2.5's Q8_0), and on the small models' square
///   matrices. A persistent grid over row groups (`gemv_q8p_*`, measured there) lost on every
///   shape (0.56-0.91x): one resident wave of blocks walking groups kept fewer bytes in flight
///   than a grid of short-lived blocks; it was removed.
/// * Q5_0 rows of <= 64 work items in tall matrices (>= 4096 rows): a warp per row, 7.1 against
///   9.6 us on Qwen2.5's 9728 x 896 gate|up (the Q5_0 item is not a 16-byte load, so 4 rows per
///   thread chain slow loads).
/// * Q4_K matrices under 2048 rows with rows past one warp's items: one row per block, 2.6
///   against 3.5 us on Qwen2.5's 896 x 4864 down projection. Measured with the previous Q4_K
///   work item (two half sub-blocks a thread); the sub-block-ordered one (`repack.rs`) keeps 8
///   items per super-block, so the item counts these rules read are unchanged, and its 64
///   registers (no spill) keep `gemv_q8r_*` at 8 blocks per SM.
///
/// `POCKET_GEMV_SPLIT=0` keeps the legacy choice (session 3's, `POCKET_GEMV_Q8=legacy`).
pub(super) fn q8_one_row(q: Q8Gemv, rows: usize, cols: usize) -> (Kernel, u32, u32) {
    let items = q.items_per_row(cols);
    let groups = rows.div_ceil(GEMVR_ROWS);
    let rows4 = (Kernel::GemvQ8Rows(q), groups as u32, 128);
    let warp = (Kernel::GemvQ8Warp(q), rows.div_ceil(GEMV_WARPS) as u32, 128);
    let row1 = (Kernel::GemvQ8Row1(q), rows as u32, 128);
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
        Q8Variant::Warp => warp,
        Q8Variant::Row1 => row1,
        Q8Variant::Auto => {
            if q.prefers_warp_per_row()
                || (q == Q8Gemv::Q5_0 && items <= WARP_MAX_ITEMS && rows >= WARP_MIN_ROWS)
            {
                warp
            } else if q == Q8Gemv::Q4_K && items > WARP_MAX_ITEMS && rows < SMALL_MATRIX_ROWS {
                row1
            } else {
                rows4
            }
        }
    }
}
