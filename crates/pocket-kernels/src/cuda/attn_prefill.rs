//! Tiled flash-attention prefill launcher (kernels/attention_prefill.cu). `attn::attention` sends
//! a batch here when some sequence brings many new rows; the batch was validated there. The row
//! kernel (`attn_<cache>`) stays for short chunks, other head sizes, GPUs without the shared memory
//! and `POCKET_ATTN_PREFILL=rows`.

use super::switch::EnvChoice;

use super::kernels::{Artifact, CacheType, Kernel};
use super::CudaBackend;
use crate::error::shape_err;
use crate::{AttentionMeta, AttentionParams, DType, Result};

/// Kernel argument block of `attn_prefill_*` (mirrors `PrefillArgs` in the .cu file).
#[repr(C)]
#[derive(Clone, Copy)]
struct PrefillArgs {
    q: u64,
    k_cache: u64,
    v_cache: u64,
    query_start: u64,
    seq_lens: u64,
    block_tables: u64,
    out: u64,
    heads: i32,
    kv_heads: i32,
    block_size: i32,
    max_blocks: i32,
    window: i32,
    scale: f32,
    softcap: f32,
}

/// Head sizes the tiled kernel is compiled for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[allow(missing_docs)]
pub enum PrefillDim {
    D64,
    D128,
    D256,
}

impl PrefillDim {
    /// The compiled head size for `hd`, if any.
    pub fn of(hd: usize) -> Option<PrefillDim> {
        match hd {
            64 => Some(PrefillDim::D64),
            128 => Some(PrefillDim::D128),
            256 => Some(PrefillDim::D256),
            _ => None,
        }
    }

    /// (query rows per block, keys per tile): `APF_CFG_<D>` in the .cu file (16 * TR, 8 * TK).
    fn tile(self) -> (usize, usize) {
        match self {
            PrefillDim::D64 | PrefillDim::D128 => (32, 64),
            PrefillDim::D256 => (32, 32),
        }
    }

    fn hd(self) -> usize {
        match self {
            PrefillDim::D64 => 64,
            PrefillDim::D128 => 128,
            PrefillDim::D256 => 256,
        }
    }

    /// Dynamic shared memory of one block (`ApfShape::FLOATS` in the .cu file), in bytes.
    fn smem_bytes(self) -> usize {
        let (bm, bn) = self.tile();
        let d = self.hd();
        (bm * (d + 4) + bn * (d + 4) + bn * d + bn * (bm + 4)) * 4
    }
}

/// The `extern "C"` symbol of the tiled kernel for a cache type and head size.
pub(crate) fn symbol(c: CacheType, d: PrefillDim) -> &'static str {
    use CacheType as C;
    use PrefillDim as P;
    match (c, d) {
        (C::F32, P::D64) => "attn_prefill_f32_d64",
        (C::F32, P::D128) => "attn_prefill_f32_d128",
        (C::F32, P::D256) => "attn_prefill_f32_d256",
        (C::F16, P::D64) => "attn_prefill_f16_d64",
        (C::F16, P::D128) => "attn_prefill_f16_d128",
        (C::F16, P::D256) => "attn_prefill_f16_d256",
        (C::BF16, P::D64) => "attn_prefill_bf16_d64",
        (C::BF16, P::D128) => "attn_prefill_bf16_d128",
        (C::BF16, P::D256) => "attn_prefill_bf16_d256",
    }
}

/// Head sizes of the tensor-core (TF32) variant, which reads f32 caches only.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[allow(missing_docs)]
pub enum PrefillTcDim {
    D64,
    D128,
}

/// The `extern "C"` symbol of the tensor-core variant for a head size.
pub(crate) fn tc_symbol(d: PrefillTcDim) -> &'static str {
    match d {
        PrefillTcDim::D64 => "attn_prefill_tc_f32_d64",
        PrefillTcDim::D128 => "attn_prefill_tc_f32_d128",
    }
}

/// Threads of a tensor-core block (`APF_TC_WARPS` warps of 16 rows each).
const TC_THREADS: usize = 64;

/// Dynamic shared memory of a tensor-core block (`ApfTcShape::FLOATS`: 32 rows, 64 keys), bytes.
fn tc_smem_bytes(d: usize) -> usize {
    let (bm, bn) = (32, 64);
    (bm * (d + 4) + bn * (d + 4) + bn * (d + 8) + bm * (bn + 4)) * 4
}

/// Which kernel serves non-decode attention batches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PrefillKernel {
    /// The tiled kernel whenever the head size and alignment allow (any rows per sequence).
    Tiled,
    /// The row-per-block kernel (`attn_<cache>`), as before the tiled kernel existed.
    Rows,
    /// The tiled kernel's TF32 tensor-core variant where it exists (f32 caches, head_dim 64 or
    /// 128, the sm_90 cubin), else the tiled kernel. Q, K, V and P are rounded to TF32 (10-bit
    /// mantissa), so results differ from the f32 kernels by about 2^-11 relative per operand.
    TensorCore,
}

/// Fewest new rows in some sequence of the batch for the tiled kernel to take it by default:
/// below that a tile of 32 rows is mostly GQA heads of a few positions and the row kernel's one
/// block per (row, head) spreads better.
pub const MIN_ROWS: usize = 16;

/// `POCKET_ATTN_PREFILL=tiled|rows|tc`, or what [`force_prefill_kernel`] forced.
static CHOSEN: EnvChoice<Option<PrefillKernel>> = EnvChoice::new(
    "POCKET_ATTN_PREFILL",
    &[
        Some(PrefillKernel::Tiled),
        Some(PrefillKernel::Rows),
        Some(PrefillKernel::TensorCore),
    ],
    |v| match v {
        Some("tiled") => Some(PrefillKernel::Tiled),
        Some("rows") => Some(PrefillKernel::Rows),
        Some("tc") => Some(PrefillKernel::TensorCore),
        _ => None,
    },
);

/// Forces the prefill kernel for this process (`None`: back to `POCKET_ATTN_PREFILL` and the
/// [`MIN_ROWS`] rule), so a test or benchmark can compare both kernels in one run.
pub fn force_prefill_kernel(k: Option<PrefillKernel>) {
    CHOSEN.set(k.map(Some));
}

/// The choice forced by [`force_prefill_kernel`], else by `POCKET_ATTN_PREFILL=tiled|rows|tc`.
fn chosen() -> Option<PrefillKernel> {
    CHOSEN.get()
}

/// Launches the tiled kernel for a validated non-decode batch when it should serve it; `Ok(false)`
/// leaves the batch to the row kernel (head size, alignment, few rows, `rows` forced, or a GPU
/// without the shared memory). `ptrs` are q, k cache, v cache and out; `qs` the host copy of
/// `query_start` (num_seqs + 1 entries).
#[allow(clippy::too_many_arguments)]
pub(crate) fn launch_if_wanted(
    be: &CudaBackend,
    op: &'static str,
    ct: CacheType,
    ptrs: [u64; 4],
    meta: &AttentionMeta,
    p: &AttentionParams,
    qs: &[u32],
    block_size: usize,
    max_blocks: usize,
    window: i32,
) -> Result<bool> {
    let Some(dim) = PrefillDim::of(p.head_dim) else {
        return Ok(false);
    };
    let most_rows = qs.windows(2).map(|w| (w[1] - w[0]) as usize).max();
    let choice = chosen();
    let wanted = match choice {
        Some(PrefillKernel::Tiled | PrefillKernel::TensorCore) => true,
        Some(PrefillKernel::Rows) => false,
        None => most_rows.unwrap_or(0) >= MIN_ROWS,
    };
    if !wanted || ptrs.iter().any(|&a| a % 16 != 0) || p.num_kv_heads == 0 {
        return Ok(false);
    }
    // The TF32 variant needs sm_80; only the sm_90 cubin is known to run it (PTX elsewhere).
    let tc = match (choice, ct, dim) {
        (Some(PrefillKernel::TensorCore), CacheType::F32, PrefillDim::D64) => {
            Some(PrefillTcDim::D64)
        }
        (Some(PrefillKernel::TensorCore), CacheType::F32, PrefillDim::D128) => {
            Some(PrefillTcDim::D128)
        }
        _ => None,
    }
    .filter(|_| be.kernels.artifact == Artifact::Sm90Cubin);
    let (k, smem, threads) = match tc {
        Some(d) => (
            Kernel::AttnPrefillTc(d),
            tc_smem_bytes(p.head_dim),
            TC_THREADS,
        ),
        None => (Kernel::AttnPrefill(ct, dim), dim.smem_bytes(), 128),
    };
    if !be.allow_dynamic_smem(k, smem)? {
        return Ok(false); // this GPU has less shared memory per block
    }
    let group = p.num_heads / p.num_kv_heads;
    // Both kernels take 32 rows per block.
    let (bm, _) = dim.tile();
    let tiles = (most_rows.unwrap_or(0) * group).div_ceil(bm);
    let seqs = qs.len() - 1;
    let [q, k_cache, v_cache, out] = ptrs;
    let args = PrefillArgs {
        q,
        k_cache,
        v_cache,
        query_start: be.ptr_of(op, "query_start", &meta.query_start, DType::U32)?,
        seq_lens: be.ptr_of(op, "seq_lens", &meta.seq_lens, DType::U32)?,
        block_tables: be.ptr_of(op, "block_tables", &meta.block_tables, DType::U32)?,
        out,
        heads: p.num_heads as i32,
        kv_heads: p.num_kv_heads as i32,
        block_size: block_size as i32,
        max_blocks: max_blocks as i32,
        window,
        scale: p.scale,
        softcap: p.softcap.unwrap_or(0.0),
    };
    if tiles > i32::MAX as usize || seqs > 65535 {
        return Err(shape_err(op, format!("{tiles} tiles x {seqs} sequences")));
    }
    be.launch_smem(
        op,
        k,
        (tiles as u32, p.num_kv_heads as u32, seqs as u32),
        threads as u32,
        smem as u32,
        args![args],
    )?;
    Ok(true)
}
