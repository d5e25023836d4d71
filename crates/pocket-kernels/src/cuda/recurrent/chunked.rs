//! The chunked (WY / UT transform) prefill of the gated delta rule on the GPU: `delta_chunk_prep`
//! (every 64-token chunk of every sequence at once) then `delta_chunk_scan` (the state carried
//! across chunks), see kernels/deltanet.cu. Long batches run in pieces of chunks so the per-chunk
//! scratch stays bounded; the state written by one piece is the next piece's input.

use super::super::kernels::Kernel;
use super::super::CudaBackend;
use super::{check_meta, grid_seqs};
use crate::error::shape_err;
use crate::recurrent::{DeltaRuleParams, HeadGrouping, RecurrentMeta};
use crate::{DType, Result, Tensor};

/// Tokens per chunk (`DC_T`; transformers' default, so chunk boundaries match the CPU's).
const CHUNK: usize = 64;
/// Threads per block of both chunk kernels (`DC_THREADS`).
const THREADS: u32 = 256;
/// Largest k_dim / v_dim the chunk kernels hold (their register tiles assume <= 128 rounded to 32).
const MAX_DIM: usize = 128;
/// Below this many rows in the longest sequence the token scan is used: a prompt shorter than a
/// chunk gains nothing from the transform and pays a second launch. A first guess, to be set from
/// the `delta_rule_prefill` benchmark in tests/cuda_bench_decode.rs.
const MIN_ROWS: usize = 32;
/// Bound on the scratch one piece uses (W, U, P, e^γ q, e^(γlast-γ) k per chunk and head).
const SCRATCH_BYTES: usize = 256 << 20;

/// Which form the CUDA prefill of the delta rule runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PrefillForm {
    /// One token at a time with the state on chip (`gated_delta_rule`).
    Scan,
    /// 64-token chunks through the UT transform (`delta_chunk_prep` + `delta_chunk_scan`).
    Chunked,
}

/// `POCKET_DELTA_PREFILL=scan` or `=chunked` forces a form (read per call so tests and benchmarks
/// can switch); otherwise chunked for batches whose longest sequence has at least [`MIN_ROWS`]
/// rows. Head dims above [`MAX_DIM`] always scan.
pub(crate) fn prefill_form(p: &DeltaRuleParams, max_rows: usize) -> PrefillForm {
    if p.k_dim > MAX_DIM || p.v_dim > MAX_DIM {
        return PrefillForm::Scan;
    }
    match std::env::var("POCKET_DELTA_PREFILL").as_deref() {
        Ok("scan") => PrefillForm::Scan,
        Ok("chunked") => PrefillForm::Chunked,
        _ if max_rows >= MIN_ROWS => PrefillForm::Chunked,
        _ => PrefillForm::Scan,
    }
}

/// `x` rounded up to a multiple of 32 (the kernels' padded head dims).
fn pad32(x: usize) -> usize {
    x.next_multiple_of(32)
}

/// Floats of one (sequence, chunk, head) scratch item (`dc_item` in deltanet.cu).
fn item_floats(ldk: usize, ldv: usize) -> usize {
    CHUNK * (3 * ldk + ldv + CHUNK) + 4
}

/// Runs the chunked form; `None` when this GPU cannot give the kernels their shared memory (the
/// caller scans instead). Shapes were checked by the caller (`check_delta_rule`).
#[allow(clippy::too_many_arguments)]
pub(crate) fn delta_rule_chunked(
    be: &CudaBackend,
    op: &'static str,
    qkv: &Tensor,
    g: &Tensor,
    beta: &Tensor,
    state: &mut Tensor,
    meta: &RecurrentMeta,
    p: &DeltaRuleParams,
    out: &mut Tensor,
    slots: usize,
) -> Option<Result<()>> {
    let ldk = pad32(p.k_dim);
    let ks = ldk + 1;
    // K and Q [64][ldk + 1], A [64][64], γ, β and β e^γ [64] (delta_chunk_prep's layout).
    let prep_smem = (2 * CHUNK * ks + CHUNK * CHUNK + 3 * CHUNK) * 4;
    // The state slab [ldk][32], one staged [64][ldk] operand, P [64][64], vn [64][32].
    let scan_smem = (ldk * 32 + CHUNK * ldk + CHUNK * CHUNK + CHUNK * 32) * 4;
    match (
        be.allow_dynamic_smem(Kernel::DeltaChunkPrep, prep_smem),
        be.allow_dynamic_smem(Kernel::DeltaChunkScan, scan_smem),
    ) {
        (Ok(true), Ok(true)) => {}
        (Err(e), _) | (_, Err(e)) => return Some(Err(e)),
        _ => return None,
    }
    Some(run(
        be,
        op,
        qkv,
        g,
        beta,
        state,
        meta,
        p,
        out,
        slots,
        (prep_smem, scan_smem),
    ))
}

#[allow(clippy::too_many_arguments)]
fn run(
    be: &CudaBackend,
    op: &'static str,
    qkv: &Tensor,
    g: &Tensor,
    beta: &Tensor,
    state: &mut Tensor,
    meta: &RecurrentMeta,
    p: &DeltaRuleParams,
    out: &mut Tensor,
    slots: usize,
    (prep_smem, scan_smem): (usize, usize),
) -> Result<()> {
    let (ldk, ldv) = (pad32(p.k_dim), pad32(p.v_dim));
    let (qs, sl, hs) = check_meta(be, op, meta, qkv.rows(), slots)?;
    // The longest sequence, from the validated host offsets (not `max_rows`, which only steers).
    let starts = be.host_u32(op, "query_start", &meta.query_start)?;
    let longest = starts[..=meta.num_seqs]
        .windows(2)
        .map(|w| (w[1] - w[0]) as usize)
        .max()
        .unwrap_or(0);
    let chunks = longest.div_ceil(CHUNK);
    let seqs = grid_seqs(op, meta)?;
    let heads =
        u32::try_from(p.v_heads).map_err(|_| shape_err(op, format!("{} heads", p.v_heads)))?;
    let item_bytes = item_floats(ldk, ldv) * 4;
    let per_chunk = meta.num_seqs.max(1) * p.v_heads * item_bytes;
    let piece = (SCRATCH_BYTES / per_chunk).clamp(1, chunks.max(1));
    let scratch = be
        .pool
        .alloc(meta.num_seqs.max(1) * piece * p.v_heads * item_bytes)?;
    let scr = scratch.ptr();
    let xp = be.ptr_of(op, "qkv", qkv, DType::F32)?;
    let gp = be.ptr_of(op, "g", g, DType::F32)?;
    let bp = be.ptr_of(op, "beta", beta, DType::F32)?;
    let sp = be.ptr_of(op, "state", state, DType::F32)?;
    let outp = be.ptr_of(op, "out", out, DType::F32)?;
    let tiled = i32::from(p.grouping == HeadGrouping::Tiled);
    let slabs = (p.v_dim.div_ceil(32)) as u32;
    let (hk, hv, dk, dv) = (
        p.k_heads as i32,
        p.v_heads as i32,
        p.k_dim as i32,
        p.v_dim as i32,
    );
    // At least one piece, so a batch of empty sequences still writes (zeroes) fresh slots as the
    // scan does.
    let mut c0 = 0;
    loop {
        let pc = piece.min(chunks - c0.min(chunks)).max(1);
        be.launch_smem(
            op,
            Kernel::DeltaChunkPrep,
            (pc as u32, heads, seqs),
            THREADS,
            prep_smem as u32,
            args![
                xp, gp, bp, scr, qs, hk, hv, dk, dv, tiled, p.l2_eps, p.scale, c0 as i32, pc as i32
            ],
        )?;
        be.launch_smem(
            op,
            Kernel::DeltaChunkScan,
            (seqs, heads, slabs),
            THREADS,
            scan_smem as u32,
            args![
                scr,
                sp,
                outp,
                qs,
                sl,
                hs,
                hv,
                dk,
                dv,
                c0 as i32,
                pc as i32,
                i32::from(c0 == 0)
            ],
        )?;
        c0 += pc;
        if c0 >= chunks {
            break;
        }
    }
    // The scratch goes back to the pool; later work on this stream is ordered after these kernels.
    drop(scratch);
    Ok(())
}
