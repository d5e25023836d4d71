//! KV-cache write and paged attention launchers. Batch metadata is validated on the host from the
//! u32 shadows the host wrote (no device round trip), exactly as the CPU backend validates it.

use super::attn_plan::{
    choose_decode_splits, choose_splits, cluster_merge, decode_head_split, decode_kernel,
    fused_q8_output, short_iter_keys, stage_keys, DecodeKernel, CLUSTER_SPLITS, DECODE_MIN_KEYS,
    HEAD_SPLIT_MAX_KEYS, SHORT_MAX_ITERS, STAGE_BYTES_PER_KEY,
};
use super::kernels::{CacheType, Kernel};
use super::switch::EnvSwitch;
use super::{CudaBackend, Scratch};
use crate::error::shape_err;
use crate::{AttentionMeta, AttentionParams, DType, KernelError, Result, Tensor};

/// Kernel argument block of `attn_*` (mirrors `AttnArgs` in kernels/attention.cu).
#[repr(C)]
#[derive(Clone, Copy)]
struct AttnArgs {
    q: u64,
    k_cache: u64,
    v_cache: u64,
    query_start: u64,
    seq_lens: u64,
    block_tables: u64,
    out: u64,
    part_acc: u64,
    part_ml: u64,
    num_seqs: i32,
    heads: i32,
    kv_heads: i32,
    head_dim: i32,
    block_size: i32,
    max_blocks: i32,
    window: i32,
    splits: i32,
    scale: f32,
    softcap: f32,
    min_keys: i32,
    heads_per_block: i32,
    xq: u64,
    xd: u64,
    xs: u64,
    gate: u64,
    stage_keys: i32,
}

/// Longest head the kernel holds in registers (8 values per lane).
const MAX_HEAD_DIM: usize = 256;

fn cache_dims(op: &'static str, c: &Tensor) -> Result<(usize, usize, usize, usize)> {
    match c.shape[..] {
        [a, b, h, d] => Ok((a, b, h, d)),
        _ => Err(shape_err(
            op,
            format!(
                "cache must be [num_blocks, block_size, kv_heads, head_dim], is {:?}",
                c.shape
            ),
        )),
    }
}

fn cache_type(op: &'static str, c: &Tensor) -> Result<CacheType> {
    CacheType::of(c.dtype).ok_or_else(|| shape_err(op, "cache must be f32, f16 or bf16"))
}

pub(crate) fn kv_write(
    be: &CudaBackend,
    k: &Tensor,
    v: &Tensor,
    k_cache: &mut Tensor,
    v_cache: &mut Tensor,
    meta: &AttentionMeta,
) -> Result<()> {
    const OP: &str = "kv_write";
    let dims = cache_dims(OP, k_cache)?;
    if cache_dims(OP, v_cache)? != dims || k_cache.dtype != v_cache.dtype {
        return Err(shape_err(OP, "k and v caches differ in shape or dtype"));
    }
    let ct = cache_type(OP, k_cache)?;
    let (blocks, bs, kvh, hd) = dims;
    let row = kvh * hd;
    let slots = be.host_u32(OP, "slot_mapping", &meta.slot_mapping)?;
    let n = slots.len();
    if k.numel() != n * row || v.numel() != n * row {
        return Err(shape_err(
            OP,
            format!(
                "k/v hold {}/{} elements for {n} tokens of {row}",
                k.numel(),
                v.numel()
            ),
        ));
    }
    if let Some(&s) = slots.iter().find(|&&s| s as usize >= blocks * bs) {
        return Err(shape_err(
            OP,
            format!("slot {s} beyond the cache's {}", blocks * bs),
        ));
    }
    let kp = be.ptr_of(OP, "k", k, DType::F32)?;
    let vp = be.ptr_of(OP, "v", v, DType::F32)?;
    let sp = be.ptr_of(OP, "slot_mapping", &meta.slot_mapping, DType::U32)?;
    let kc = be.ptr(OP, "k_cache", k_cache)?;
    let vc = be.ptr(OP, "v_cache", v_cache)?;
    let total = n * row;
    be.launch(
        OP,
        Kernel::KvWrite(ct),
        (total.div_ceil(256) as u32, 1, 1),
        256,
        args![kp, vp, kc, vc, sp, n as i32, row as i32],
    )
}

pub(crate) fn attention(
    be: &CudaBackend,
    q: &Tensor,
    k_cache: &Tensor,
    v_cache: &Tensor,
    meta: &AttentionMeta,
    p: &AttentionParams,
    out: &mut Tensor,
) -> Result<()> {
    attention_impl(be, q, None, k_cache, v_cache, meta, p, out)
}

/// Whether gated attention applies its gate in the attention kernels' epilogue
/// (`POCKET_ATTN_GATE_FUSED=0`: attention, then a `sigmoid_mul` launch, as before).
fn fused_gate() -> bool {
    static ON: EnvSwitch = EnvSwitch::on_unless_zero("POCKET_ATTN_GATE_FUSED");
    ON.on()
}

/// `out = attention(q) * sigmoid(gate)` (see [`crate::Backend::attention_gated`]): the decode and
/// generic kernels (and the split combine) gate what they write, and quantize the gated values
/// where they write the Q8 copy; the tiled prefill kernel is followed by `sigmoid_mul`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn attention_gated(
    be: &CudaBackend,
    q: &Tensor,
    gate: &Tensor,
    k_cache: &Tensor,
    v_cache: &Tensor,
    meta: &AttentionMeta,
    p: &AttentionParams,
    out: &mut Tensor,
) -> Result<()> {
    if gate.numel() != out.numel() {
        return Err(shape_err(
            "attention_gated",
            format!(
                "gate of {} elements vs out of {}",
                gate.numel(),
                out.numel()
            ),
        ));
    }
    if fused_gate() {
        return attention_impl(be, q, Some(gate), k_cache, v_cache, meta, p, out);
    }
    attention_impl(be, q, None, k_cache, v_cache, meta, p, out)?;
    be.invalidate_q8(); // the attention's Q8 copy of `out` is of the ungated values
    super::recurrent::sigmoid_mul(be, out, gate)
}

#[allow(clippy::too_many_arguments)]
fn attention_impl(
    be: &CudaBackend,
    q: &Tensor,
    gate: Option<&Tensor>,
    k_cache: &Tensor,
    v_cache: &Tensor,
    meta: &AttentionMeta,
    p: &AttentionParams,
    out: &mut Tensor,
) -> Result<()> {
    const OP: &str = "attention";
    let gate_ptr = match gate {
        Some(g) => be.ptr_of(OP, "gate", g, DType::F32)?,
        None => 0,
    };
    let (blocks, bs, kvh, hd) = cache_dims(OP, k_cache)?;
    if cache_dims(OP, v_cache)? != (blocks, bs, kvh, hd) || k_cache.dtype != v_cache.dtype {
        return Err(shape_err(OP, "k and v caches differ in shape or dtype"));
    }
    let ct = cache_type(OP, k_cache)?;
    if kvh != p.num_kv_heads
        || hd != p.head_dim
        || p.num_kv_heads == 0
        || !p.num_heads.is_multiple_of(p.num_kv_heads)
    {
        return Err(shape_err(
            OP,
            format!("params {p:?} do not match cache [{blocks}, {bs}, {kvh}, {hd}]"),
        ));
    }
    if hd > MAX_HEAD_DIM {
        return Err(KernelError::Unsupported {
            op: OP,
            device: be.name.clone(),
            what: format!("head_dim {hd} > {MAX_HEAD_DIM}"),
        });
    }
    let row = p.num_heads * hd;
    if !q.numel().is_multiple_of(row.max(1)) || out.numel() != q.numel() {
        return Err(shape_err(
            OP,
            format!(
                "q {:?} / out {:?} are not [n, {}, {hd}]",
                q.shape, out.shape, p.num_heads
            ),
        ));
    }
    let n = q.numel() / row.max(1);
    // Validate the batch description (mirrors the CPU backend's plan).
    let s = meta.num_seqs;
    let qs = be.host_u32(OP, "query_start", &meta.query_start)?;
    let sl = be.host_u32(OP, "seq_lens", &meta.seq_lens)?;
    let bt = be.host_u32(OP, "block_tables", &meta.block_tables)?;
    if qs.len() < s + 1 || sl.len() < s || s == 0 {
        return Err(shape_err(
            OP,
            format!("meta holds fewer than {s} sequences"),
        ));
    }
    let (qs, sl) = (&qs[..s + 1], &sl[..s]);
    if qs[0] != 0 || qs[s] as usize != n || qs.windows(2).any(|w| w[0] > w[1]) {
        return Err(shape_err(
            OP,
            format!("query_start {qs:?} does not cover {n} rows"),
        ));
    }
    let max_blocks = match meta.block_tables.shape[..] {
        [_, mb] => mb,
        _ => return Err(shape_err(OP, "block_tables must be [num_seqs, max_blocks]")),
    };
    if bt.len() < s * max_blocks {
        return Err(shape_err(
            OP,
            "block_tables holds fewer rows than sequences",
        ));
    }
    let mut max_len = 0;
    for i in 0..s {
        let new = (qs[i + 1] - qs[i]) as usize;
        let len = sl[i] as usize;
        if len < new || len > max_blocks * bs {
            return Err(shape_err(
                OP,
                format!("sequence {i}: length {len} with {new} new tokens does not fit its table"),
            ));
        }
        let used = len.div_ceil(bs);
        if let Some(&b) = bt[i * max_blocks..i * max_blocks + used]
            .iter()
            .find(|&&b| b as usize >= blocks)
        {
            return Err(shape_err(
                OP,
                format!("sequence {i}: block {b} out of {blocks}"),
            ));
        }
        max_len = max_len.max(len);
    }
    let window = match p.sliding_window {
        Some(0) => return Err(shape_err(OP, "sliding window of 0 keys")),
        Some(w) => w.min(i32::MAX as usize) as i32,
        None => 0,
    };
    // The split count is a launch argument: a captured decode graph keeps it for every replay.
    // The kernels read each sequence's length from `seq_lens` on the device and give empty
    // splits a zero-weight partial, so any split count is correct; the caller may pass a larger
    // `max_seq_len` (a bucket) so the count chosen at capture stays sensible as contexts grow.
    let bound = max_len.max(meta.max_seq_len);
    let keys = if window > 0 {
        bound.min(window as usize)
    } else {
        bound
    };
    let group = p.num_heads / p.num_kv_heads;
    let kc_ptr = be.ptr(OP, "k_cache", k_cache)?;
    let vc_ptr = be.ptr(OP, "v_cache", v_cache)?;
    let q_ptr = be.ptr_of(OP, "q", q, DType::F32)?;
    let mode = decode_kernel();
    // The decode kernel: exactly one query row per sequence, GQA groups of at most 8, 16-byte
    // aligned q and cache rows; head_dim 64, 128 or 256.
    let dims_ok = mode == DecodeKernel::Current && matches!(hd, 64 | 128 | 256);
    let decode = qs.windows(2).all(|w| w[1] - w[0] == 1)
        && group <= 8
        && dims_ok
        && (kc_ptr | vc_ptr | q_ptr) % 16 == 0;
    // Prefill (many new rows in a sequence): the tiled kernel, unless it declines the batch.
    if !decode {
        let ptrs = [
            q_ptr,
            kc_ptr,
            vc_ptr,
            be.ptr_of(OP, "out", out, DType::F32)?,
        ];
        let (mb, w) = (max_blocks, window);
        if super::attn_prefill::launch_if_wanted(be, OP, ct, ptrs, meta, p, qs, bs, mb, w)? {
            // The tiled kernel has no gate epilogue (prefill: one launch more is noise).
            if let Some(g) = gate {
                super::recurrent::sigmoid_mul(be, out, g)?;
            }
            return Ok(());
        }
    }
    // Current decode kernel: heads per block (0: the whole group) and blocks per KV head.
    let (hpb, nhb) = if decode {
        decode_head_split(group, keys)
    } else {
        (0, 1)
    };
    let big_group = if hpb > 0 { hpb > 4 } else { group > 4 };
    let splits = match decode {
        // One or two heads per block cover `short_iter_keys` keys per iteration: where every
        // bound of the head split (<= 256 keys, the smallest graph bucket) is a few iterations
        // (head_dim 64), the kernel runs unsplit, with no combine launch. Decided for the whole
        // head-split range, not per bound, so an eager step (exact length) and a graph replay
        // (its bucket) run the same split count and give the same bits.
        true if (1..=2).contains(&hpb)
            && HEAD_SPLIT_MAX_KEYS <= SHORT_MAX_ITERS * short_iter_keys(hd) =>
        {
            1
        }
        true => choose_decode_splits(be.sm_count, s * p.num_kv_heads * nhb, keys, big_group),
        false => choose_splits(be.sm_count, n, p.num_heads, keys),
    };
    // Short enough contexts on sm_90: the splits merge inside a cluster, no combine launch.
    let cluster = decode && cluster_merge(be, splits, keys, big_group);
    let splits = if cluster { CLUSTER_SPLITS } else { splits };

    // Decode rows whose output projection needs only Q8 activations (no Q8K: the row is not a
    // multiple of 256): the kernel that writes `out` also quantizes it (AttnArgs::xq), recorded
    // in the q8 cache as the decode norms' outputs are, so the GEMV skips its quantize launch.
    let fuse_q8 = decode && !row.is_multiple_of(256);
    let q8 = if fuse_q8 && fused_q8_output() {
        let op_ptr = be.ptr_of(OP, "out", out, DType::F32)?;
        super::ops::norm_q8_scratch(be, OP, op_ptr, n, row)?
    } else {
        None
    };
    let (xq, xd, xs) = q8.map_or((0, 0, 0), |b| b.q8);
    let mut scratch = be
        .scratch
        .lock()
        .map_err(|_| shape_err(OP, "scratch lock poisoned"))?;
    let (part_acc, part_ml) = if splits > 1 && !cluster {
        let acc_bytes = n * p.num_heads * splits * hd * 4;
        let ml_bytes = n * p.num_heads * splits * 2 * 4;
        let base = Scratch::get(&mut scratch.attn, &be.pool, acc_bytes + ml_bytes)?;
        (base, base + acc_bytes as u64)
    } else {
        (0, 0)
    };
    let args = AttnArgs {
        q: q_ptr,
        k_cache: kc_ptr,
        v_cache: vc_ptr,
        query_start: be.ptr_of(OP, "query_start", &meta.query_start, DType::U32)?,
        seq_lens: be.ptr_of(OP, "seq_lens", &meta.seq_lens, DType::U32)?,
        block_tables: be.ptr_of(OP, "block_tables", &meta.block_tables, DType::U32)?,
        out: be.ptr_of(OP, "out", out, DType::F32)?,
        part_acc,
        part_ml,
        num_seqs: s as i32,
        heads: p.num_heads as i32,
        kv_heads: p.num_kv_heads as i32,
        head_dim: hd as i32,
        block_size: bs as i32,
        max_blocks: max_blocks as i32,
        window,
        splits: splits as i32,
        scale: p.scale,
        softcap: p.softcap.unwrap_or(0.0),
        min_keys: DECODE_MIN_KEYS as i32,
        heads_per_block: hpb as i32,
        xq,
        xd,
        xs,
        gate: gate_ptr,
        stage_keys: 0,
    };
    let out_ptr = args.out;
    if decode {
        let kernel = match cluster {
            true => Kernel::AttnDecodeCluster(ct),
            false => Kernel::AttnDecode(ct, big_group),
        };
        let half = matches!(ct, CacheType::F16 | CacheType::BF16);
        let stage = stage_keys(be, half, hd, keys, splits);
        let args = AttnArgs {
            stage_keys: stage as i32,
            ..args
        };
        be.launch_smem(
            OP,
            kernel,
            (s as u32, (p.num_kv_heads * nhb) as u32, splits as u32),
            128,
            (stage * STAGE_BYTES_PER_KEY) as u32,
            args![args],
        )
        .inspect_err(|_| be.invalidate_q8())?;
    } else {
        be.launch(
            OP,
            Kernel::Attention(ct),
            (n as u32, p.num_heads as u32, splits as u32),
            128,
            args![args],
        )?;
    }
    if splits > 1 && !cluster {
        be.launch(
            OP,
            Kernel::AttnCombine,
            (n as u32, p.num_heads as u32, 1),
            hd.next_multiple_of(32).min(256) as u32,
            args![
                part_acc,
                part_ml,
                out_ptr,
                p.num_heads as i32,
                hd as i32,
                splits as i32,
                // The decode kernel may leave the combine nothing to do (see DECODE_MIN_KEYS).
                if decode { args.seq_lens } else { 0u64 },
                window,
                DECODE_MIN_KEYS as i32,
                xq,
                xd,
                xs,
                gate_ptr
            ],
        )
        .inspect_err(|_| be.invalidate_q8())?;
    }
    Ok(())
}
