//! Launchers of the elementwise, norm, RoPE, gather and argmax kernels, with the same shape
//! checks as the CPU backend.

use super::kernels::Kernel;
use super::matmul::{q8_scratch_bytes, Q8Bufs, GEMV_MAX_ROWS};
use super::switch::EnvSwitch;
use super::{CudaBackend, Scratch};
use crate::error::shape_err;
use crate::rope::{DeviceRope, RopeLayout};
use crate::tensor::Storage;
use crate::{DType, Result, Tensor};

/// Threads per block of the elementwise kernels.
const TPB: u32 = 256;

fn blocks(total: usize) -> Result<u32> {
    u32::try_from(total.div_ceil(TPB as usize))
        .map_err(|_| shape_err("launch", format!("{total} elements exceed one grid")))
}

fn same_len(op: &'static str, what: &str, a: usize, b: usize) -> Result<()> {
    if a != b {
        return Err(shape_err(op, format!("{what}: {a} vs {b}")));
    }
    Ok(())
}

pub(crate) fn add_bias(be: &CudaBackend, x: &mut Tensor, bias: &Tensor) -> Result<()> {
    const OP: &str = "add_bias";
    let m = bias.numel();
    if m == 0 || x.row_len() != m {
        return Err(shape_err(
            OP,
            format!("x rows of {} vs bias of {m}", x.row_len()),
        ));
    }
    let b = be.ptr_of(OP, "bias", bias, DType::F32)?;
    let xp = be.ptr_of(OP, "x", x, DType::F32)?;
    let total = x.numel();
    be.launch(
        OP,
        Kernel::AddBias,
        (blocks(total)?, 1, 1),
        TPB,
        args![xp, b, total as u64, m as i32],
    )
}

/// Row length of a norm, checked against `x` and `out`.
fn norm_shapes(op: &'static str, x: &Tensor, w: &Tensor, out: &Tensor) -> Result<usize> {
    let d = w.numel();
    if d == 0 || !x.numel().is_multiple_of(d) {
        return Err(shape_err(
            op,
            format!("{} elements are not rows of {d}", x.numel()),
        ));
    }
    same_len(op, "x and out elements", x.numel(), out.numel())?;
    Ok(d)
}

pub(crate) fn rms_norm(
    be: &CudaBackend,
    x: &Tensor,
    w: &Tensor,
    eps: f32,
    out: &mut Tensor,
) -> Result<()> {
    const OP: &str = "rms_norm";
    let d = norm_shapes(OP, x, w, out)?;
    let (xp, wp) = (
        be.ptr_of(OP, "x", x, DType::F32)?,
        be.ptr_of(OP, "weight", w, DType::F32)?,
    );
    let op = be.ptr_of(OP, "out", out, DType::F32)?;
    let rows = (x.numel() / d) as u32;
    if let Some(b) = norm_q8_scratch(be, OP, op, rows as usize, d)? {
        let (threads, fast) = norm_q8_block(d, &[xp, wp, op]);
        return be
            .launch(
                OP,
                Kernel::RmsNormQ8,
                (rows, 1, 1),
                threads,
                args![xp, wp, op, d as i32, eps, b.q8.0, b.q8.1, b.q8.2, b.k.0, b.k.1, b.k.2, fast],
            )
            .inspect_err(|_| be.invalidate_q8());
    }
    be.launch(
        OP,
        Kernel::RmsNorm,
        (rows, 1, 1),
        norm_threads(d),
        args![xp, wp, op, d as i32, eps],
    )
}

/// Whether decode-sized norms and silu_mul write their output's int8 quantization (unless
/// `POCKET_NORM_Q8=0`).
fn norm_q8_on() -> bool {
    static ON: EnvSwitch = EnvSwitch::on_unless_zero("POCKET_NORM_Q8");
    ON.on()
}

/// Where a decode-sized norm or silu_mul (at most [`GEMV_MAX_ROWS`] rows of a multiple of 32)
/// should also write its output's 8-bit quantization: the q8 scratch, now recorded as holding `out`, so the
/// GEMVs that read `out` skip their quantize launch (a failed launch clears the record). `None`
/// for other shapes, or with `POCKET_NORM_Q8=0`. The caller has already cleared the previous
/// record.
pub(crate) fn norm_q8_scratch(
    be: &CudaBackend,
    op: &'static str,
    out: u64,
    rows: usize,
    d: usize,
) -> Result<Option<Q8Bufs>> {
    if !norm_q8_on() || rows == 0 || rows > GEMV_MAX_ROWS || !d.is_multiple_of(32) {
        return Ok(None);
    }
    let mut scratch = be
        .scratch
        .lock()
        .map_err(|_| shape_err(op, "scratch lock poisoned"))?;
    let base = Scratch::get(&mut scratch.q8, &be.pool, q8_scratch_bytes(rows, d))?;
    let mut cache = be
        .q8_cache
        .lock()
        .map_err(|_| shape_err(op, "q8 cache lock poisoned"))?;
    *cache = Some((out, rows, d));
    Ok(Some(Q8Bufs::at(base, rows, d)))
}

/// Threads per norm block: enough for the row, a multiple of 32, at most 1024.
fn norm_threads(d: usize) -> u32 {
    (d.div_ceil(4).next_multiple_of(32)).clamp(32, 1024) as u32
}

/// Whether `POCKET_SMALL_KERNELS=old` selects the previous launch shapes of the small decode
/// kernels (strided decode norms, 256-thread silu_mul_halves_q8 blocks, one-block greedy
/// sampling and argmax), kept for A/B timing on the device.
pub(crate) fn small_kernels_legacy() -> bool {
    static OLD: super::switch::EnvChoice<bool> =
        super::switch::EnvChoice::flag("POCKET_SMALL_KERNELS", |v| v == Some("old"));
    OLD.get()
}

/// Chunks of 256 elements a warp of the one-pass decode norm holds (`NORM_CH` in kernels/norm.cu).
const NORM_CH: usize = 2;

/// Block size and `fast` flag of `rms_norm_q8` / `add_rms_norm_q8` for rows of `d` (a multiple
/// of 32): the one-pass path (one warp per 256 elements, 16-byte loads) where the row fits
/// 32 warps of `NORM_CH` chunks and every pointer is 16-byte aligned, else the strided one.
fn norm_q8_block(d: usize, ptrs: &[u64]) -> (u32, i32) {
    let chunks = d.div_ceil(256);
    if small_kernels_legacy() || chunks > 32 * NORM_CH || ptrs.iter().any(|p| p % 16 != 0) {
        return (norm_threads(d), 0);
    }
    (32 * chunks.min(32) as u32, 1)
}

pub(crate) fn add_rms_norm(
    be: &CudaBackend,
    residual: &mut Tensor,
    delta: &Tensor,
    w: &Tensor,
    eps: f32,
    out: &mut Tensor,
) -> Result<()> {
    const OP: &str = "add_rms_norm";
    let d = norm_shapes(OP, residual, w, out)?;
    same_len(
        OP,
        "residual and delta elements",
        residual.numel(),
        delta.numel(),
    )?;
    let rp = be.ptr_of(OP, "residual", residual, DType::F32)?;
    let dp = be.ptr_of(OP, "delta", delta, DType::F32)?;
    let wp = be.ptr_of(OP, "weight", w, DType::F32)?;
    let op = be.ptr_of(OP, "out", out, DType::F32)?;
    let rows = (residual.numel() / d) as u32;
    if let Some(b) = norm_q8_scratch(be, OP, op, rows as usize, d)? {
        let (threads, fast) = norm_q8_block(d, &[rp, dp, wp, op]);
        return be
            .launch(
                OP,
                Kernel::AddRmsNormQ8,
                (rows, 1, 1),
                threads,
                args![
                    rp, dp, wp, op, d as i32, eps, b.q8.0, b.q8.1, b.q8.2, b.k.0, b.k.1, b.k.2,
                    fast
                ],
            )
            .inspect_err(|_| be.invalidate_q8());
    }
    be.launch(
        OP,
        Kernel::AddRmsNorm,
        (rows, 1, 1),
        norm_threads(d),
        args![rp, dp, wp, op, d as i32, eps],
    )
}

pub(crate) fn add_assign(be: &CudaBackend, x: &mut Tensor, y: &Tensor) -> Result<()> {
    const OP: &str = "add_assign";
    same_len(OP, "x and y elements", x.numel(), y.numel())?;
    let yp = be.ptr_of(OP, "y", y, DType::F32)?;
    let xp = be.ptr_of(OP, "x", x, DType::F32)?;
    let total = x.numel();
    be.launch(
        OP,
        Kernel::AddAssign,
        (blocks(total)?, 1, 1),
        TPB,
        args![xp, yp, total as u64],
    )
}

pub(crate) fn silu_mul(
    be: &CudaBackend,
    gate: &Tensor,
    up: &Tensor,
    out: &mut Tensor,
) -> Result<()> {
    const OP: &str = "silu_mul";
    same_len(OP, "gate and up elements", gate.numel(), up.numel())?;
    same_len(OP, "gate and out elements", gate.numel(), out.numel())?;
    let g = be.ptr_of(OP, "gate", gate, DType::F32)?;
    let u = be.ptr_of(OP, "up", up, DType::F32)?;
    let o = be.ptr_of(OP, "out", out, DType::F32)?;
    let total = gate.numel();
    let (rows, d) = (out.rows(), out.row_len());
    if rows * d == total {
        if let Some(b) = norm_q8_scratch(be, OP, o, rows, d)? {
            let total32 = total / 32;
            return be
                .launch(
                    OP,
                    Kernel::SiluMulQ8,
                    (total32.div_ceil(8).div_ceil(8) as u32, 1, 1),
                    256,
                    args![
                        g,
                        u,
                        o,
                        total32 as i32,
                        d as i32,
                        b.q8.0,
                        b.q8.1,
                        b.q8.2,
                        b.k.0,
                        b.k.1,
                        b.k.2
                    ],
                )
                .inspect_err(|_| be.invalidate_q8());
        }
    }
    be.launch(
        OP,
        Kernel::SiluMul,
        (blocks(total)?, 1, 1),
        TPB,
        args![g, u, o, total as u64],
    )
}

pub(crate) fn rope(
    be: &CudaBackend,
    x: &mut Tensor,
    positions: &Tensor,
    rope: &DeviceRope,
) -> Result<()> {
    const OP: &str = "rope";
    if x.shape.len() != 3 {
        return Err(shape_err(
            OP,
            format!("x must be [n, heads, head_dim], is {:?}", x.shape),
        ));
    }
    let (n, heads, hd) = (x.shape[0], x.shape[1], x.shape[2]);
    let rot = rope.config.rot_dim;
    if rot == 0 || !rot.is_multiple_of(2) || rot > hd {
        return Err(shape_err(
            OP,
            format!("rot_dim {rot} does not fit head_dim {hd}"),
        ));
    }
    let half = rot / 2;
    same_len(OP, "positions vs tokens", positions.numel(), n)?;
    let max_pos = rope.cos.numel() / half;
    let pos = be.host_u32(OP, "positions", positions)?;
    if let Some(&p) = pos.iter().find(|&&p| p as usize >= max_pos) {
        return Err(shape_err(
            OP,
            format!("position {p} beyond the table's {max_pos}"),
        ));
    }
    let pp = be.ptr_of(OP, "positions", positions, DType::U32)?;
    let c = be.ptr_of(OP, "cos", &rope.cos, DType::F32)?;
    let s = be.ptr_of(OP, "sin", &rope.sin, DType::F32)?;
    let xp = be.ptr_of(OP, "x", x, DType::F32)?;
    let neox = matches!(rope.config.layout, RopeLayout::NeoX) as i32;
    let total = n * heads * half;
    be.launch(
        OP,
        Kernel::Rope,
        (blocks(total)?, 1, 1),
        TPB,
        args![
            xp,
            pp,
            c,
            s,
            n as i32,
            heads as i32,
            hd as i32,
            rot as i32,
            neox,
            max_pos as i32
        ],
    )
}

pub(crate) fn argmax(be: &CudaBackend, logits: &Tensor, out: &mut Tensor) -> Result<()> {
    const OP: &str = "argmax";
    let v = logits.row_len();
    let n = logits.rows();
    same_len(OP, "rows vs out", n, out.numel())?;
    let lp = be.ptr_of(OP, "logits", logits, DType::F32)?;
    let op = be.ptr_of(OP, "out", out, DType::U32)?;
    for (r0, rows, g) in greedy_launches(n, v) {
        be.launch(
            OP,
            Kernel::Argmax,
            g.grid(rows),
            g.threads,
            args![
                lp + (r0 * v * 4) as u64,
                op + (r0 * 4) as u64,
                v as i32,
                g.multi
            ],
        )?;
    }
    if let Storage::Cuda(c) = &mut out.storage {
        c.shadow = None; // written by the device now
    }
    Ok(())
}

/// Launch shape of a greedy pick (`argmax_rows`, greedy `sample_rows`): several blocks per row
/// (kernels/greedy.cuh), or with `POCKET_SMALL_KERNELS=old` one block of 1024 threads per row.
#[derive(Clone, Copy)]
pub(crate) struct GreedyShape {
    /// Blocks per row (the grid's x).
    pub(crate) slices: u32,
    /// Threads per block.
    pub(crate) threads: u32,
    /// The kernels' `multi` flag.
    pub(crate) multi: i32,
}

impl GreedyShape {
    /// The grid for `rows` rows (the grid's y).
    pub(crate) fn grid(self, rows: usize) -> (u32, u32, u32) {
        (self.slices, rows as u32, 1)
    }
}

/// Threads per block of the multi-block greedy pick (`GREEDY_THREADS`).
const GREEDY_THREADS: u32 = 256;
/// Most blocks per row and rows per launch of the multi-block pick (`GREEDY_MAX_SLICES` and
/// `GREEDY_MAX_ROWS` in kernels/greedy.cuh, the sizes of its partials).
const GREEDY_MAX_SLICES: usize = 128;
const GREEDY_MAX_ROWS: usize = 64;

/// The launches of a greedy pick over `n` rows of `vocab` logits: (first row, rows, shape).
pub(crate) fn greedy_launches(
    n: usize,
    vocab: usize,
) -> impl Iterator<Item = (usize, usize, GreedyShape)> {
    multi_block_launches(n, vocab, GREEDY_THREADS, 1)
}

/// Threads per block of the sampler's draws (`SAMPLE_THREADS` in kernels/sample.cu).
const SAMPLE_THREADS: u32 = 1024;

/// The launches of the device sampler over `n` rows of `vocab` logits. Without per-row
/// parameters, [`greedy_launches`]. With them (`multi` 2 in kernels/sample.cu): blocks of
/// `SAMPLE_THREADS`, as many per row as the greedy pick of that block size takes; a greedy row is
/// picked by all of them, any other row drawn by its first block. One block per row under
/// `POCKET_SMALL_KERNELS=old` (the previous launch).
pub(crate) fn sample_launches(
    n: usize,
    vocab: usize,
    per_row_params: bool,
) -> impl Iterator<Item = (usize, usize, GreedyShape)> {
    if per_row_params {
        multi_block_launches(n, vocab, SAMPLE_THREADS, 2)
    } else {
        multi_block_launches(n, vocab, GREEDY_THREADS, 1)
    }
}

/// Multi-block row launches of `threads`-thread blocks with the kernels' `multi` flag, or the
/// one-block shape (`SAMPLE_THREADS`, flag 0) under `POCKET_SMALL_KERNELS=old`.
fn multi_block_launches(
    n: usize,
    vocab: usize,
    threads: u32,
    multi: i32,
) -> impl Iterator<Item = (usize, usize, GreedyShape)> {
    let shape = if small_kernels_legacy() {
        GreedyShape {
            slices: 1,
            threads: SAMPLE_THREADS,
            multi: 0,
        }
    } else {
        // Two 16-byte loads per thread at least.
        let per_block = threads as usize * 8;
        GreedyShape {
            slices: vocab.div_ceil(per_block).clamp(1, GREEDY_MAX_SLICES) as u32,
            threads,
            multi,
        }
    };
    // The grid's y is at most 65535; the multi-block partials hold GREEDY_MAX_ROWS rows.
    let step = if shape.multi != 0 {
        GREEDY_MAX_ROWS
    } else {
        65535
    };
    (0..n)
        .step_by(step)
        .map(move |r0| (r0, step.min(n - r0), shape))
}

pub(crate) fn gather_rows(
    be: &CudaBackend,
    src: &Tensor,
    src_rows: &Tensor,
    out: &mut Tensor,
) -> Result<()> {
    const OP: &str = "gather_rows";
    let d = src.row_len();
    let m = src.rows();
    let n = src_rows.numel();
    if out.row_len() != d || out.rows() != n {
        return Err(shape_err(
            OP,
            format!("out {:?} vs {n} rows of {d}", out.shape),
        ));
    }
    let idx = be.host_u32(OP, "src_rows", src_rows)?;
    if let Some(&r) = idx.iter().find(|&&r| r as usize >= m) {
        return Err(shape_err(OP, format!("row {r} beyond the source's {m}")));
    }
    let sp = be.ptr_of(OP, "src", src, DType::F32)?;
    let ip = be.ptr_of(OP, "src_rows", src_rows, DType::U32)?;
    let op = be.ptr_of(OP, "out", out, DType::F32)?;
    let gx = (d.div_ceil(TPB as usize)).min(64) as u32;
    be.launch(
        OP,
        Kernel::GatherRows,
        (gx.max(1), n as u32, 1),
        TPB,
        args![sp, ip, op, d as i32, m as i32],
    )
}
