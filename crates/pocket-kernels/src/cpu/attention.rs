//! Paged-cache ops: the K/V write and varlen causal GQA attention over f32/f16/bf16 caches.

use half::{bf16, f16};
use rayon::prelude::*;

use super::host::{f32s, f32s_mut, same_len, u32s};
use crate::error::shape_err;
use crate::tensor::{HostData, Storage};
use crate::{AttentionMeta, AttentionParams, KernelError, Result, Tensor};

/// Elements of a cache that can be read as f32 one at a time.
trait CacheElem: Copy + Send + Sync {
    /// Converts from f32 (round to nearest even).
    fn from_f32(v: f32) -> Self;
    /// Converts to f32 (exact).
    fn to_f32(self) -> f32;
}

impl CacheElem for f32 {
    fn from_f32(v: f32) -> Self {
        v
    }
    fn to_f32(self) -> f32 {
        self
    }
}

impl CacheElem for f16 {
    fn from_f32(v: f32) -> Self {
        f16::from_f32(v)
    }
    fn to_f32(self) -> f32 {
        f16::to_f32(self)
    }
}

impl CacheElem for bf16 {
    fn from_f32(v: f32) -> Self {
        bf16::from_f32(v)
    }
    fn to_f32(self) -> f32 {
        bf16::to_f32(self)
    }
}

/// `(num_blocks, block_size, kv_heads, head_dim)` of a cache tensor.
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

/// Writes each new token's K and V at its slot.
pub(crate) fn kv_write(
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
    let (blocks, bs, kvh, hd) = dims;
    let row = kvh * hd;
    let slots = u32s(OP, "slot_mapping", &meta.slot_mapping)?;
    let n = slots.len();
    same_len(
        OP,
        "k elements vs tokens * kv_heads * head_dim",
        k.numel(),
        n * row,
    )?;
    same_len(
        OP,
        "v elements vs tokens * kv_heads * head_dim",
        v.numel(),
        n * row,
    )?;
    if let Some(&s) = slots.iter().find(|&&s| s as usize >= blocks * bs) {
        return Err(shape_err(
            OP,
            format!("slot {s} beyond the cache's {}", blocks * bs),
        ));
    }
    let (ks, vs) = (f32s(OP, "k", k)?, f32s(OP, "v", v)?);
    write_one(OP, ks, slots, row, k_cache)?;
    write_one(OP, vs, slots, row, v_cache)
}

/// Stores rows of `src` at `slots` of one cache, converting to its dtype.
fn write_one(
    op: &'static str,
    src: &[f32],
    slots: &[u32],
    row: usize,
    c: &mut Tensor,
) -> Result<()> {
    fn put<T: CacheElem>(src: &[f32], slots: &[u32], row: usize, dst: &mut [T]) {
        for (r, &s) in src.chunks_exact(row).zip(slots) {
            let d = &mut dst[s as usize * row..(s as usize + 1) * row];
            for (o, &x) in d.iter_mut().zip(r) {
                *o = T::from_f32(x);
            }
        }
    }
    let need = c.numel();
    match &mut c.storage {
        Storage::Host(HostData::F32(d)) if d.len() >= need => put(src, slots, row, d),
        Storage::Host(HostData::F16(d)) if d.len() >= need => put(src, slots, row, d),
        Storage::Host(HostData::BF16(d)) if d.len() >= need => put(src, slots, row, d),
        _ => return Err(shape_err(op, "cache must be a host f32/f16/bf16 tensor")),
    }
    Ok(())
}

/// Host views of the batch description, validated against the cache geometry.
struct Plan<'a> {
    query_start: &'a [u32],
    seq_lens: &'a [u32],
    block_tables: &'a [u32],
    max_blocks: usize,
    block_size: usize,
}

impl<'a> Plan<'a> {
    /// Validates `meta` for `n` query rows over a cache of `blocks` x `block_size`.
    fn new(meta: &'a AttentionMeta, n: usize, blocks: usize, block_size: usize) -> Result<Self> {
        const OP: &str = "attention";
        let s = meta.num_seqs;
        let qs = u32s(OP, "query_start", &meta.query_start)?;
        let sl = u32s(OP, "seq_lens", &meta.seq_lens)?;
        let bt = u32s(OP, "block_tables", &meta.block_tables)?;
        if qs.len() < s + 1 || sl.len() < s {
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
        let max_blocks = if meta.block_tables.shape.len() == 2 {
            meta.block_tables.shape[1]
        } else {
            return Err(shape_err(OP, "block_tables must be [num_seqs, max_blocks]"));
        };
        if bt.len() < s * max_blocks {
            return Err(shape_err(
                OP,
                "block_tables holds fewer rows than sequences",
            ));
        }
        for i in 0..s {
            let new = (qs[i + 1] - qs[i]) as usize;
            let len = sl[i] as usize;
            if len < new || len > max_blocks * block_size {
                return Err(shape_err(
                    OP,
                    format!(
                        "sequence {i}: length {len} with {new} new tokens does not fit its table"
                    ),
                ));
            }
            let used = len.div_ceil(block_size);
            let row = &bt[i * max_blocks..i * max_blocks + used];
            if let Some(&b) = row.iter().find(|&&b| b as usize >= blocks) {
                return Err(shape_err(
                    OP,
                    format!("sequence {i}: block {b} out of {blocks}"),
                ));
            }
        }
        Ok(Plan {
            query_start: qs,
            seq_lens: sl,
            block_tables: bt,
            max_blocks,
            block_size,
        })
    }

    /// `(sequence, position)` of query row `t`.
    fn locate(&self, t: usize) -> (usize, usize) {
        let s = self.query_start.partition_point(|&q| q as usize <= t) - 1;
        let new = (self.query_start[s + 1] - self.query_start[s]) as usize;
        let pos = self.seq_lens[s] as usize - new + (t - self.query_start[s] as usize);
        (s, pos)
    }

    /// Cache slot of token `t` of sequence `s`.
    #[inline]
    fn slot(&self, s: usize, t: usize) -> usize {
        let b = self.block_tables[s * self.max_blocks + t / self.block_size] as usize;
        b * self.block_size + t % self.block_size
    }
}

/// Causal (optionally windowed, soft-capped) GQA attention over the paged caches.
pub(crate) fn attention(
    q: &Tensor,
    k_cache: &Tensor,
    v_cache: &Tensor,
    meta: &AttentionMeta,
    p: &AttentionParams,
    out: &mut Tensor,
) -> Result<()> {
    const OP: &str = "attention";
    let (blocks, bs, kvh, hd) = cache_dims(OP, k_cache)?;
    if cache_dims(OP, v_cache)? != (blocks, bs, kvh, hd) || k_cache.dtype != v_cache.dtype {
        return Err(shape_err(OP, "k and v caches differ in shape or dtype"));
    }
    if kvh != p.num_kv_heads || hd != p.head_dim || kvh == 0 || !p.num_heads.is_multiple_of(kvh) {
        return Err(shape_err(
            OP,
            format!(
                "params ({} heads, {} kv heads, dim {}) vs cache ({kvh} kv heads, dim {hd})",
                p.num_heads, p.num_kv_heads, p.head_dim
            ),
        ));
    }
    let width = p.num_heads * hd;
    if !q.numel().is_multiple_of(width) {
        return Err(shape_err(
            OP,
            format!("q has {} elements, not rows of {width}", q.numel()),
        ));
    }
    let n = q.numel() / width;
    same_len(OP, "q and out elements", q.numel(), out.numel())?;
    let plan = Plan::new(meta, n, blocks, bs)?;
    let qs = f32s(OP, "q", q)?;
    let os = f32s_mut(OP, "out", out)?;
    match (&k_cache.storage, &v_cache.storage) {
        (Storage::Host(HostData::F32(k)), Storage::Host(HostData::F32(v))) => {
            run(&plan, qs, k, v, p, os)
        }
        (Storage::Host(HostData::F16(k)), Storage::Host(HostData::F16(v))) => {
            run(&plan, qs, k, v, p, os)
        }
        (Storage::Host(HostData::BF16(k)), Storage::Host(HostData::BF16(v))) => {
            run(&plan, qs, k, v, p, os)
        }
        _ => Err(KernelError::Unsupported {
            op: OP,
            device: "cpu".into(),
            what: format!("cache dtype {:?}", k_cache.dtype),
        }),
    }
}

/// The attention loop, parallel over (query row, head).
fn run<T: CacheElem>(
    plan: &Plan<'_>,
    q: &[f32],
    k: &[T],
    v: &[T],
    p: &AttentionParams,
    out: &mut [f32],
) -> Result<()> {
    let hd = p.head_dim;
    let kv_row = p.num_kv_heads * hd;
    let group = p.num_heads / p.num_kv_heads;
    out.par_chunks_mut(hd).enumerate().for_each(|(i, o)| {
        let (t, h) = (i / p.num_heads, i % p.num_heads);
        let kvh = h / group;
        let (s, pos) = plan.locate(t);
        let first = match p.sliding_window {
            Some(w) if w > 0 => (pos + 1).saturating_sub(w),
            _ => 0,
        };
        let qv = &q[i * hd..(i + 1) * hd];
        let mut scores = Vec::with_capacity(pos + 1 - first);
        let mut max = f32::NEG_INFINITY;
        for key in first..=pos {
            let base = plan.slot(s, key) * kv_row + kvh * hd;
            let kr = &k[base..base + hd];
            let mut dot = 0.0f32;
            for (a, b) in qv.iter().zip(kr) {
                dot += a * b.to_f32();
            }
            let mut sc = dot * p.scale;
            if let Some(cap) = p.softcap {
                sc = cap * (sc / cap).tanh();
            }
            max = max.max(sc);
            scores.push(sc);
        }
        let mut denom = 0.0f32;
        for sc in scores.iter_mut() {
            *sc = (*sc - max).exp();
            denom += *sc;
        }
        o.fill(0.0);
        for (key, &w) in (first..=pos).zip(&scores) {
            let base = plan.slot(s, key) * kv_row + kvh * hd;
            let w = w / denom;
            for (a, b) in o.iter_mut().zip(&v[base..base + hd]) {
                *a += w * b.to_f32();
            }
        }
    });
    Ok(())
}
