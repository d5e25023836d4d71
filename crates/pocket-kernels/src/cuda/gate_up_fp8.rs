//! The fused one-row FP8 `[gate; up]` GEMV with the SwiGLU epilogue on CUDA
//! (`gemv_fp8_silu_*` of kernels/gemv_fp8.cu): `matmul_silu_halves` of an FP8 weight and one
//! activation row in one launch, its variants ([`Fp8GateUp`]) following the plain one-row
//! GEMV's choice for the stacked shape.

use super::gemv_fp8::{row1_variant, Fp8Row1, GEMV_BLOCK_THREADS};
use super::kernels::Kernel;
use super::matmul_fp8::{weight_ptrs, Fp8Kernel, Fp8Kind};
use super::rms_fold::{self, RmsFoldArgs};
use super::switch::EnvSwitch;
use super::CudaBackend;
use crate::error::shape_err;
use crate::{DType, Result, Tensor, Weight};

impl CudaBackend {
    /// The fused one-row `[gate; up]` GEMV + SwiGLU of an FP8 weight (see
    /// [`crate::Backend::matmul_silu_halves`]) with `outputs_per_warp` outputs per warp (1, 2 or
    /// 4; `None`: the per-shape choice), whatever `POCKET_GATE_UP_FUSED` says: for tests and
    /// benchmarks that compare variants. `outputs_per_warp` must divide the output width.
    pub fn fp8_gate_up_silu_row1(
        &self,
        x: &Tensor,
        w: &Weight,
        out: &mut Tensor,
        outputs_per_warp: Option<usize>,
    ) -> Result<()> {
        let v = match outputs_per_warp {
            None => None,
            Some(n) => Some(Fp8GateUp::with_outputs(n).ok_or_else(|| {
                shape_err(
                    "fp8_gate_up_silu_row1",
                    format!("{n} outputs per warp (1, 2 or 4)"),
                )
            })?),
        };
        gate_up_silu(self, x, w, out, v)
    }
}

/// The one-row GEMV of a stacked `[gate; up]` FP8 weight with the SwiGLU epilogue
/// (`gemv_fp8_silu_*` in kernels/gemv_fp8.cu): one warp per 1, 2 or 4 outputs, each output's
/// gate and up rows read together, so a warp streams 2, 4 or 8 weight rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Fp8GateUp {
    /// One output (2 rows) per warp, 4 steps in flight (`_gu1`): any intermediate width.
    Warp1,
    /// Two outputs (4 rows) per warp, 2 steps in flight (`_gu2`): the loads of [`Fp8Row1::Warp4`].
    Warp2,
    /// Four outputs (8 rows) per warp, 1 step in flight (`_gu4`): the loads of [`Fp8Row1::Warp8`].
    Warp4,
}

impl Fp8GateUp {
    /// Outputs one warp computes.
    pub fn outputs_per_warp(self) -> usize {
        match self {
            Fp8GateUp::Warp1 => 1,
            Fp8GateUp::Warp2 => 2,
            Fp8GateUp::Warp4 => 4,
        }
    }

    /// The variant of `n` outputs per warp.
    pub fn with_outputs(n: usize) -> Option<Fp8GateUp> {
        [Fp8GateUp::Warp1, Fp8GateUp::Warp2, Fp8GateUp::Warp4]
            .into_iter()
            .find(|v| v.outputs_per_warp() == n)
    }

    /// The variant for `inter` outputs over `cols` columns given the plain GEMV's variant for the
    /// stacked `[2 inter, cols]` matrix: the same 16-byte loads in flight per thread (the plain
    /// kernel's 4 rows x 2 steps or 8 rows x 1 step become 2 or 4 outputs of 2 rows each) and the
    /// same blocks (16 or 32 rows each), since the bytes in flight per SM are what the one-row
    /// GEMV's speed follows. The 27B MLP (inter 17408 = 34816 stacked rows) takes 2 per warp like
    /// its stacked GEMV; the 8B-class ones (14336 or 12288: 24-28K stacked rows) 4. The up rows
    /// of a warp must share a 128-row tile, so the outputs per warp must divide `inter`: smaller
    /// groups where not.
    pub fn for_plain(plain: Fp8Row1, inter: usize) -> Fp8GateUp {
        let mut v = match plain {
            Fp8Row1::Warp8 | Fp8Row1::Warp8Deep => Fp8GateUp::Warp4,
            Fp8Row1::Warp4 | Fp8Row1::Warp4Deep | Fp8Row1::Warp4Deep6 => Fp8GateUp::Warp2,
            // Same loads in flight per thread as n1d6 (no split form of the fused kernel).
            Fp8Row1::Warp8Split2 => Fp8GateUp::Warp2,
        };
        while !inter.is_multiple_of(v.outputs_per_warp()) {
            v = match v {
                Fp8GateUp::Warp4 => Fp8GateUp::Warp2,
                _ => Fp8GateUp::Warp1,
            };
        }
        v
    }
}

/// `POCKET_GATE_UP_FUSED=0`: the one-row FP8 `matmul_silu_halves` runs the stacked GEMV and
/// `silu_mul_halves` (two launches) instead of the fused kernel.
static GATE_UP_FUSED: EnvSwitch = EnvSwitch::on_unless_zero("POCKET_GATE_UP_FUSED");

/// Whether the CUDA backend's `matmul_silu_halves` takes the fused FP8 kernel for `w` and `x`:
/// an FP8 weight, one activation row, and `POCKET_GATE_UP_FUSED` not `0`.
pub(crate) fn gate_up_fused_applies(x: &Tensor, w: &Weight) -> bool {
    Fp8Kind::of(w.format).is_some() && x.rows() == 1 && GATE_UP_FUSED.on()
}

/// `out [1, inter] = silu(x · W[..inter]ᵀ) * (x · W[inter..]ᵀ)` for a stacked FP8 `[gate; up]`
/// weight `W` `[2 inter, cols]` and one activation row, in one launch of `variant` (`None`: the
/// per-shape choice, [`Fp8GateUp::for_plain`] of the plain GEMV's variant for the stacked
/// shape, which `POCKET_GEMV_FP8` may force).
pub(crate) fn gate_up_silu(
    be: &CudaBackend,
    x: &Tensor,
    w: &Weight,
    out: &mut Tensor,
    variant: Option<Fp8GateUp>,
) -> Result<()> {
    const OP: &str = "matmul_silu_halves";
    // `out` may hold the input whose quantization the q8 scratch caches; the fused kernel
    // writes no quantization of its own output (the FP8 down projection reads f32), so a GGML
    // down projection after it quantizes `out` itself.
    be.invalidate_q8();
    let kind = Fp8Kind::of(w.format)
        .ok_or_else(|| shape_err(OP, format!("{} is not an FP8 weight format", w.format)))?;
    let inter = out.row_len();
    if inter == 0 || w.rows != 2 * inter {
        return Err(shape_err(
            OP,
            format!(
                "weight of {} rows is not [gate; up] for {inter} outputs",
                w.rows
            ),
        ));
    }
    if x.rows() != 1 || out.rows() != 1 {
        return Err(shape_err(
            OP,
            format!("x {:?} and out {:?} are not one row", x.shape, out.shape),
        ));
    }
    if x.row_len() != w.cols {
        return Err(shape_err(
            OP,
            format!(
                "x rows of {} for a weight of {} columns",
                x.row_len(),
                w.cols
            ),
        ));
    }
    let (wp, sp) = weight_ptrs(be, OP, kind, w)?;
    let xp = be.ptr_of(OP, "x", x, DType::F32)?;
    let op = be.ptr_of(OP, "out", out, DType::F32)?;
    let v =
        variant.unwrap_or_else(|| Fp8GateUp::for_plain(row1_variant(be, w.rows, w.cols), inter));
    if !inter.is_multiple_of(v.outputs_per_warp()) {
        return Err(shape_err(
            OP,
            format!(
                "{} outputs per warp do not divide {inter} outputs (up rows would straddle tiles)",
                v.outputs_per_warp()
            ),
        ));
    }
    // 4 warps per block.
    let per_block = 4 * v.outputs_per_warp();
    let blocks = u32::try_from(inter.div_ceil(per_block))
        .map_err(|_| shape_err(OP, format!("{inter} outputs exceed one grid")))?;
    // The consumer half of a folded norm whose output is x (cuda/rms_fold.rs); its barriers
    // need whole blocks.
    let whole = inter.is_multiple_of(per_block);
    let (xp, fold) = rms_fold::take_for_consumer(be, xp, w.cols, whole, (op, 4 * inter))?
        .unwrap_or((xp, RmsFoldArgs::default()));
    be.launch(
        OP,
        Kernel::Fp8(Fp8Kernel::SiluRow1(kind, v)),
        (blocks, 1, 1),
        GEMV_BLOCK_THREADS,
        args![
            wp,
            sp,
            w.tensor_scale.unwrap_or(1.0),
            xp,
            op,
            inter as i32,
            w.cols as i32,
            fold
        ],
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gate_up_variant_follows_the_plain_one_and_divides_the_width() {
        use Fp8GateUp as G;
        // 27B (inter 17408: 34816 stacked rows, the 4-row warp kernel), 8B-class (14336, 12288:
        // the 8-row one), and widths the larger groups do not divide.
        for (inter, want) in [
            (17408, G::Warp2),
            (14336, G::Warp4),
            (12288, G::Warp4),
            (2048, G::Warp2),
            (1030, G::Warp2),
            (1031, G::Warp1),
        ] {
            let plain = Fp8Row1::for_shape(2 * inter, 5120, 132);
            assert_eq!(G::for_plain(plain, inter), want, "inter {inter}");
        }
        assert_eq!(G::for_plain(Fp8Row1::Warp8, 14338), G::Warp2);
        for v in [G::Warp1, G::Warp2, G::Warp4] {
            assert_eq!(G::with_outputs(v.outputs_per_warp()), Some(v));
        }
        assert_eq!(G::with_outputs(3), None);
    }

    #[test]
    fn gate_up_symbols_are_built() {
        let ptx = crate::cuda::artifacts::ModuleId::GemvFp8.ptx();
        for e5m2 in [false, true] {
            for tiled in [false, true] {
                for v in [Fp8GateUp::Warp1, Fp8GateUp::Warp2, Fp8GateUp::Warp4] {
                    let k = Fp8Kernel::SiluRow1(Fp8Kind { e5m2, tiled }, v).symbol();
                    assert!(ptx.contains(&format!(".entry {k}(")), "{k} not in the PTX");
                }
            }
        }
    }
}
