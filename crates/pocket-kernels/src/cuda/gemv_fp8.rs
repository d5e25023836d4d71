//! The FP8 decode GEMV (n <= 8 activation rows) on CUDA: `gemv_fp8_*` of kernels/gemv_fp8.cu,
//! 16-byte weight loads, f32 activations and accumulation, so it reads 1 byte per weight and is
//! exact up to f32 rounding. One row of activations takes one of the [`Fp8Row1`] variants of one
//! template, chosen per shape ([`Fp8Row1::for_shape`]) unless `POCKET_GEMV_FP8` forces one; 2..4
//! and 5..8 rows the `n4`/`n8` kernels, which stage x in shared memory so every weight byte is
//! read and decoded once for all rows. Weight upload, checks and the prefill GEMM are in
//! `matmul_fp8.rs`.

use super::kernels::Kernel;
use super::matmul_fp8::{prepare, Fp8Call, Fp8Kernel, Fp8Kind};
use super::rms_fold::{self, RmsFoldArgs};
use super::switch::{EnvChoice, EnvSwitch};
use super::CudaBackend;
use crate::error::shape_err;
use crate::{Result, Tensor, Weight};

/// Weight rows one GEMV block covers (4 warps x 4 rows, the `n4`/`n8` kernels).
const GEMV_BLOCK_ROWS: usize = 16;
/// Threads per GEMV block (4 warps; FP8R_THREADS of the one-row kernels too).
pub(crate) const GEMV_BLOCK_THREADS: u32 = 128;

/// The one-row (n = 1) FP8 GEMV variants: one template (`gemv_fp8_row1` in kernels/gemv_fp8.cu)
/// that differs in the weight rows per warp and the steps in flight, each thread refilling a
/// slot of 16-byte weight loads as it is used. (The whole-block row groups, 2 or 4 rows per
/// block, won no shape in sessions 4 and 5 and were removed; so was the tensor-core form,
/// measured slower than [`Fp8Row1::Warp4Deep6`] in session 11:
/// docs/architecture/fp8-mma-gemv.md.)
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Fp8Row1 {
    /// One warp per 4 rows, 16 rows per block (`_n1`).
    Warp4,
    /// One warp per 8 rows, 32 rows per block (`_n1w8`): half the activation reads per weight.
    Warp8,
    /// [`Fp8Row1::Warp4`] with 4 steps in flight (16 loads per thread, `_n1d`): for matrices
    /// with few rows, whose few warps per SM leave too few bytes in flight.
    Warp4Deep,
    /// [`Fp8Row1::Warp8`] with 2 steps in flight (16 loads per thread, `_n1w8d`).
    Warp8Deep,
    /// [`Fp8Row1::Warp4`] with 6 steps in flight (24 loads per thread, `_n1d6`; 3 blocks per SM).
    Warp4Deep6,
    /// 8 rows per pair of warps, each warp half of every row's columns, 3 steps in flight (24
    /// loads per thread, `_n1w8s2`; 16 rows per block, 3 blocks per SM): n1d6's warps per SM
    /// with half its activation loads per weight byte. [`Fp8Row1::for_shape`] takes it where
    /// n1d6 would run (session 14: the 27B FP8 decode 124.1-124.9 against 121.4-121.9 tok/s).
    Warp8Split2,
}

impl Fp8Row1 {
    /// Every variant, in the order the benchmarks print them.
    pub const ALL: [Fp8Row1; 6] = [
        Fp8Row1::Warp4,
        Fp8Row1::Warp8,
        Fp8Row1::Warp4Deep,
        Fp8Row1::Warp8Deep,
        Fp8Row1::Warp4Deep6,
        Fp8Row1::Warp8Split2,
    ];

    /// Weight rows one 128-thread block covers.
    pub fn rows_per_block(self) -> usize {
        match self {
            Fp8Row1::Warp4 | Fp8Row1::Warp4Deep | Fp8Row1::Warp4Deep6 | Fp8Row1::Warp8Split2 => 16,
            Fp8Row1::Warp8 | Fp8Row1::Warp8Deep => 32,
        }
    }

    /// Blocks of the variant one SM is guaranteed to hold at once: the second argument of its
    /// kernels' `__launch_bounds__` (gemv_fp8.cu), which caps their registers so (the PTX's
    /// `.minnctapersm`; a unit test reads it there).
    pub fn blocks_per_sm(self) -> usize {
        match self {
            Fp8Row1::Warp4 => 6,
            Fp8Row1::Warp8 => 7,
            Fp8Row1::Warp4Deep | Fp8Row1::Warp8Deep => 4,
            Fp8Row1::Warp4Deep6 | Fp8Row1::Warp8Split2 => 3,
        }
    }

    /// The name `POCKET_GEMV_FP8` takes and the benchmarks print.
    pub fn name(self) -> &'static str {
        match self {
            Fp8Row1::Warp4 => "warp4",
            Fp8Row1::Warp8 => "warp8",
            Fp8Row1::Warp4Deep => "warp4d",
            Fp8Row1::Warp8Deep => "warp8d",
            Fp8Row1::Warp4Deep6 => "warp4d6",
            Fp8Row1::Warp8Split2 => "warp8s2",
        }
    }

    /// The variant named `s` (see [`Fp8Row1::name`]).
    pub fn parse(s: &str) -> Option<Fp8Row1> {
        Fp8Row1::ALL.into_iter().find(|v| v.name() == s)
    }

    /// The default for a `rows x cols` weight on a GPU of `sms` multiprocessors, from the H200
    /// measurements of every variant at the 27B shapes (`bench_fp8_gemv_27b`): the 8-row warp
    /// kernels at 12K..32K rows (session 4: 14336..17408 rows faster than the 4-row ones), the
    /// 4-row ones elsewhere; the deep form of that kernel where its grid fits in one wave (at
    /// most [`Fp8Row1::blocks_per_sm`] blocks per SM). Session 6 (H200, 132 SMs,
    /// docs/performance/logs/2026-11-30-s6-final/cuda_bench_decode.log): deep 5120x17408 25.7
    /// against 27.2 us, 5120x6144 11.5 / 11.8, 16384x5120 22.9 / 23.3, 14336x5120 20.6 / 20.9,
    /// and the whole 27B FP8 decode 120.4 against 115.9 tok/s; past one wave slower (17408 rows:
    /// 544 blocks, 30.1 against 24.3 us; 10240 rows: 640 blocks, 20.5 against 15.4).
    /// Where the 6-step n1d6 would run, the column-split [`Fp8Row1::Warp8Split2`] (session 14:
    /// 5120x6144 10.7 against 12.5 us, 5120x17408 24.5 / 27.3, the 27B FP8 decode 124.1-124.9
    /// against 121.4-121.9 tok/s; `POCKET_FP8_SPLIT8=0` keeps n1d6).
    /// `POCKET_FP8_DEEP=0` keeps the session-5 choice (no deep forms), for A/B runs.
    pub fn for_shape(rows: usize, _cols: usize, sms: usize) -> Fp8Row1 {
        let (plain, deep) = if rows >= WARP8_END_ROWS {
            return Fp8Row1::Warp4;
        } else if rows >= WARP8_MIN_ROWS {
            (Fp8Row1::Warp8, Fp8Row1::Warp8Deep)
        } else {
            (Fp8Row1::Warp4, Fp8Row1::Warp4Deep)
        };
        let blocks = rows.div_ceil(deep.rows_per_block());
        if !DEEP.on() || blocks > deep.blocks_per_sm() * sms {
            plain
        } else if deep == Fp8Row1::Warp4Deep
            && DEEP6.on()
            && blocks <= Fp8Row1::Warp4Deep6.blocks_per_sm() * sms
        {
            if SPLIT8.on() {
                Fp8Row1::Warp8Split2
            } else {
                Fp8Row1::Warp4Deep6
            }
        } else {
            deep
        }
    }
}

/// `POCKET_FP8_SPLIT8=0`: [`Fp8Row1::for_shape`] takes [`Fp8Row1::Warp4Deep6`] where it would
/// take [`Fp8Row1::Warp8Split2`] (A/B).
static SPLIT8: EnvSwitch = EnvSwitch::on_unless_zero("POCKET_FP8_SPLIT8");

/// `POCKET_FP8_DEEP6=0`: [`Fp8Row1::for_shape`] stops at the 4-step deep form (A/B).
static DEEP6: EnvSwitch = EnvSwitch::on_unless_zero("POCKET_FP8_DEEP6");

/// `POCKET_FP8_DEEP=0`: [`Fp8Row1::for_shape`] never picks the deep forms.
static DEEP: EnvSwitch = EnvSwitch::on_unless_zero("POCKET_FP8_DEEP");

/// The row range in which [`Fp8Row1::for_shape`] takes the 8-row warp kernel (10240 rows
/// measured slower with it, 14336..17408 faster, 34816 slower).
const WARP8_MIN_ROWS: usize = 12 * 1024;
const WARP8_END_ROWS: usize = 32 * 1024;

/// Process-wide one-row variant, `None` for the per-shape choice: `POCKET_GEMV_FP8` =
/// warp4|warp8|warp4d|warp8d|warp4d6|warp8s2 forces one (anything else, or unset, is per shape);
/// `POCKET_GEMV_SPLIT=0` (the previous one-row kernels of every format) means warp4; or
/// [`CudaBackend::set_fp8_gemv`].
static ROW1: EnvChoice<Option<Fp8Row1>> = EnvChoice::new(
    "POCKET_GEMV_FP8",
    &[
        None,
        Some(Fp8Row1::Warp4),
        Some(Fp8Row1::Warp8),
        Some(Fp8Row1::Warp4Deep),
        Some(Fp8Row1::Warp8Deep),
        Some(Fp8Row1::Warp4Deep6),
        Some(Fp8Row1::Warp8Split2),
    ],
    |v| match v.and_then(Fp8Row1::parse) {
        Some(f) => Some(f),
        None if !super::matmul::split_gemv() => Some(Fp8Row1::Warp4),
        None => None,
    },
);
/// Whether the one-row E4M3 GEMV runs the previous integer decode (`_bits` kernels;
/// `POCKET_GEMV_FP8_DECODE=bits`) instead of the f16 conversion.
static ROW1_BITS: EnvChoice<bool> =
    EnvChoice::flag("POCKET_GEMV_FP8_DECODE", |v| v == Some("bits"));

impl CudaBackend {
    /// Forces the one-row FP8 GEMV variant (`None`: the per-shape choice), as `POCKET_GEMV_FP8`.
    /// Process-wide, for A/B benchmarks.
    pub fn set_fp8_gemv(&self, v: Option<Fp8Row1>) {
        ROW1.set(Some(v));
    }

    /// Selects the previous integer E4M3 decode for the one-row FP8 GEMV (`true`) or the f16
    /// conversion (`false`, the default), as `POCKET_GEMV_FP8_DECODE=bits`. Process-wide.
    pub fn set_fp8_int_decode(&self, on: bool) {
        ROW1_BITS.set(Some(on));
    }

    /// `out [1, rows] = x [1, cols] · Wᵀ` for an FP8 weight through one given one-row variant
    /// and decode (`int_decode`: the `_bits` kernels; E5M2 has none and ignores it), whatever the
    /// process-wide choice: for tests and benchmarks that compare variants side by side.
    pub fn fp8_gemv_row1(
        &self,
        x: &Tensor,
        w: &Weight,
        out: &mut Tensor,
        variant: Fp8Row1,
        int_decode: bool,
    ) -> Result<()> {
        const OP: &str = "fp8_gemv_row1";
        let kind = Fp8Kind::of(w.format)
            .ok_or_else(|| shape_err(OP, format!("{} is not an FP8 weight format", w.format)))?;
        if x.rows() != 1 {
            return Err(shape_err(OP, format!("x {:?} is not one row", x.shape)));
        }
        let p = prepare(self, OP, kind, x, w, out)?;
        launch_row1(self, kind, variant, int_decode, &p, RmsFoldArgs::default())
    }
}

/// Which GEMV variant serves a number of activation rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GemvRows {
    /// Exactly one row (`_n1`).
    One,
    /// 2..4 rows (`_n4`, x staged in shared memory).
    Four,
    /// 5..8 rows (`_n8`, x staged in shared memory).
    Eight,
}

impl GemvRows {
    /// The variant for `m` activation rows (`1..=8`).
    pub fn for_rows(m: usize) -> GemvRows {
        match m {
            0 | 1 => GemvRows::One,
            2..=4 => GemvRows::Four,
            _ => GemvRows::Eight,
        }
    }
}

/// The one-row variant for a `rows x cols` weight on `be`: the forced one, else the per-shape
/// choice.
pub(crate) fn row1_variant(be: &CudaBackend, rows: usize, cols: usize) -> Fp8Row1 {
    ROW1.get()
        .unwrap_or_else(|| Fp8Row1::for_shape(rows, cols, be.sm_count() as usize))
}

/// The producer half of a folded norm (cuda/rms_fold.rs): `out = x · Wᵀ` for one row through
/// `variant`, whose epilogue also does the fold's residual add and partial sums (`fold`).
pub(crate) fn launch_row1_fold(
    be: &CudaBackend,
    kind: Fp8Kind,
    variant: Fp8Row1,
    x: &Tensor,
    w: &Weight,
    out: &mut Tensor,
    fold: RmsFoldArgs,
) -> Result<()> {
    let p = prepare(be, "matmul_add_rms_norm", kind, x, w, out)?;
    launch_row1(be, kind, variant, ROW1_BITS.get(), &p, fold)
}

/// One launch of a one-row GEMV variant, with the folded norm's halves in `fold` (all null:
/// none).
fn launch_row1(
    be: &CudaBackend,
    kind: Fp8Kind,
    variant: Fp8Row1,
    int_decode: bool,
    p: &Fp8Call,
    fold: RmsFoldArgs,
) -> Result<()> {
    if p.rows == 0 {
        return Ok(());
    }
    be.launch(
        "matmul",
        Kernel::Fp8(Fp8Kernel::Row1(kind, variant, int_decode)),
        (p.rows.div_ceil(variant.rows_per_block()) as u32, 1, 1),
        GEMV_BLOCK_THREADS,
        args![
            p.w,
            p.scales,
            p.tscale,
            p.x,
            p.out,
            p.rows as i32,
            p.cols as i32,
            1i32,
            fold
        ],
    )
}

/// One GEMV launch for `m <= 8` activation rows.
#[allow(clippy::too_many_arguments)]
pub(crate) fn gemv(
    be: &CudaBackend,
    kind: Fp8Kind,
    w: u64,
    scales: u64,
    tscale: f32,
    x: u64,
    out: u64,
    rows: usize,
    cols: usize,
    m: usize,
) -> Result<()> {
    if m == 1 {
        let variant = row1_variant(be, rows, cols);
        // The consumer half of a folded norm whose output is x (cuda/rms_fold.rs): read x * g
        // from the fold scratch instead.
        let whole = rms_fold::fold_blocks(variant, rows).is_some();
        let (x, fold) = rms_fold::take_for_consumer(be, x, cols, whole, (out, 4 * rows))?
            .unwrap_or((x, RmsFoldArgs::default()));
        let p = Fp8Call {
            w,
            scales,
            tscale,
            x,
            out,
            rows,
            cols,
            n: 1,
        };
        return launch_row1(be, kind, variant, ROW1_BITS.get(), &p, fold);
    }
    be.launch(
        "matmul",
        Kernel::Fp8(Fp8Kernel::Gemv(kind, GemvRows::for_rows(m))),
        (rows.div_ceil(GEMV_BLOCK_ROWS) as u32, 1, 1),
        GEMV_BLOCK_THREADS,
        args![
            w,
            scales,
            tscale,
            x,
            out,
            rows as i32,
            cols as i32,
            m as i32
        ],
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn row1_variant_per_shape_and_by_name() {
        use Fp8Row1::{Warp4, Warp8, Warp8Deep, Warp8Split2};
        // The FP8 projections of Qwen3.5-27B (MLP gate|up and down, DeltaNet qkv|z and out,
        // attention q|gate|k|v and o) and two more on the H200's 132 SMs: the deep forms where
        // their grid fits in one wave (528 blocks), the column-split one where n1d6's would.
        let shapes = [
            (34816, 5120, Warp4),
            (16384, 5120, Warp8Deep),
            (14336, 5120, Warp8Deep),
            (17408, 5120, Warp8),
            (10240, 5120, Warp4),
            (5120, 17408, Warp8Split2),
            (5120, 6144, Warp8Split2),
        ];
        for (r, c, want) in shapes {
            assert_eq!(Fp8Row1::for_shape(r, c, 132), want, "{r}x{c}");
        }
        // A smaller GPU (46 SMs, an RTX 2080 Ti-class part): 5120 rows are past one wave.
        assert_eq!(Fp8Row1::for_shape(5120, 6144, 46), Warp4);
        for v in Fp8Row1::ALL {
            assert_eq!(Fp8Row1::parse(v.name()), Some(v));
            assert_eq!(128 % v.rows_per_block().min(128), 0);
        }
        assert_eq!(Fp8Row1::parse("auto"), None);
    }

    #[test]
    fn row1_blocks_per_sm_are_the_kernels_launch_bounds() {
        let ptx = crate::cuda::artifacts::ModuleId::GemvFp8.ptx();
        for e5m2 in [false, true] {
            for v in Fp8Row1::ALL {
                let k = Fp8Kernel::Row1(Fp8Kind { e5m2, tiled: true }, v, false).symbol();
                let entry = ptx.find(&format!(".entry {k}(")).expect("entry in the PTX");
                let head = &ptx[entry..entry + ptx[entry..].find('{').unwrap()];
                let n: usize = head
                    .split(".minnctapersm")
                    .nth(1)
                    .and_then(|t| t.split_whitespace().next())
                    .and_then(|t| t.parse().ok())
                    .unwrap_or_else(|| panic!("{k}: no .minnctapersm"));
                assert_eq!(v.blocks_per_sm(), n, "{k}");
            }
        }
    }

    #[test]
    fn row1_symbols_are_distinct_and_built() {
        let ptx = crate::cuda::artifacts::ModuleId::GemvFp8.ptx();
        let mut seen = std::collections::HashSet::new();
        for e5m2 in [false, true] {
            for tiled in [false, true] {
                for v in Fp8Row1::ALL {
                    for bits in [false, true] {
                        let k = Fp8Kernel::Row1(Fp8Kind { e5m2, tiled }, v, bits).symbol();
                        assert!(ptx.contains(&format!(".entry {k}(")), "{k} not in the PTX");
                        // E5M2 has no integer-decode kernels: both map to one symbol.
                        assert!(seen.insert(k) || e5m2, "{k} twice");
                    }
                }
            }
        }
        // Per variant: E4M3 tiled or not, with or without the integer decode; E5M2 tiled or not.
        assert_eq!(seen.len(), 6 * Fp8Row1::ALL.len());
    }

    #[test]
    fn gemv_variant_by_rows() {
        let v: Vec<GemvRows> = (1..=8).map(GemvRows::for_rows).collect();
        use GemvRows::{Eight, Four, One};
        assert_eq!(v, [One, Four, Four, Four, Eight, Eight, Eight, Eight]);
    }
}
