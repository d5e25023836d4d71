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
    /// The whole cache as f32 when it is stored as f32 (no conversion needed).
    fn as_f32(_s: &[Self]) -> Option<&[f32]> {
        None
    }
    /// `src` as f32: itself for an f32 cache, else converted into `buf` (`src.len()` long).
    fn row<'a>(src: &'a [Self], buf: &'a mut [f32]) -> &'a [f32] {
        for (o, &x) in buf.iter_mut().zip(src) {
            *o = x.to_f32();
        }
        &buf[..src.len()]
    }
}

impl CacheElem for f32 {
    fn from_f32(v: f32) -> Self {
        v
    }
    fn to_f32(self) -> f32 {
        self
    }
    fn row<'a>(src: &'a [Self], _buf: &'a mut [f32]) -> &'a [f32] {
        src
    }
    fn as_f32(s: &[Self]) -> Option<&[f32]> {
        Some(s)
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

/// Multiply-adds below which attention runs on the calling thread (a rayon fork/join costs more
/// than the work: a decode step over a short context).
const PAR_MIN_MACS: usize = 1 << 16;

/// The attention loop. A work unit is one query row and `hc` query heads of one KV group: the
/// whole group when there are many query rows (each K/V row is read once for the group), single
/// heads for decode (more units to spread over the threads).
fn run<T: CacheElem>(
    plan: &Plan<'_>,
    q: &[f32],
    k: &[T],
    v: &[T],
    p: &AttentionParams,
    out: &mut [f32],
) -> Result<()> {
    let hd = p.head_dim;
    let group = p.num_heads / p.num_kv_heads;
    let n = out.len() / (p.num_heads * hd);
    let hc = if n > 1 { group } else { 1 };
    let max_len = plan.seq_lens.iter().map(|&l| l as usize).max().unwrap_or(0);
    let macs = n * p.num_heads * hd * 2 * max_len;
    #[cfg(target_arch = "x86_64")]
    let simd = is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma");
    let unit = |i: usize, o: &mut [f32], s: &mut Scratch| {
        #[cfg(target_arch = "x86_64")]
        if simd {
            // SAFETY: AVX2 and FMA were detected above.
            unsafe { unit_avx2(plan, q, k, v, p, hc, i, o, s) };
            return;
        }
        unit_generic::<T, false>(plan, q, k, v, p, hc, i, o, s)
    };
    if macs >= PAR_MIN_MACS {
        out.par_chunks_mut(hc * hd)
            .enumerate()
            .for_each_init(Scratch::default, |s, (i, o)| unit(i, o, s));
    } else {
        let mut s = Scratch::default();
        for (i, o) in out.chunks_mut(hc * hd).enumerate() {
            unit(i, o, &mut s);
        }
    }
    Ok(())
}

/// Per-task buffers reused across units: scores per head, and K/V rows as f32.
#[derive(Default)]
struct Scratch {
    scores: Vec<f32>,
    rows: Vec<f32>,
    slots: Vec<usize>,
}

/// [`unit_generic`] compiled for AVX2 + FMA, with the explicit SIMD dot products.
///
/// # Safety
/// The CPU must support AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[allow(clippy::too_many_arguments)]
unsafe fn unit_avx2<T: CacheElem>(
    plan: &Plan<'_>,
    q: &[f32],
    k: &[T],
    v: &[T],
    p: &AttentionParams,
    hc: usize,
    i: usize,
    o: &mut [f32],
    s: &mut Scratch,
) {
    unit_generic::<T, true>(plan, q, k, v, p, hc, i, o, s)
}

/// `q . k[j]` for four rows `k[j]` (all `q.len()` long).
#[inline(always)]
fn dot4_scalar(q: &[f32], k: [&[f32]; 4]) -> [f32; 4] {
    k.map(|r| q.iter().zip(r).map(|(a, b)| a * b).sum())
}

/// [`dot4_scalar`] with 8-wide FMAs and one transposing horizontal reduction for the four sums.
///
/// # Safety
/// The CPU must support AVX2 and FMA; every `k[j]` must be at least `q.len()` long.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn dot4_avx2(q: &[f32], k: [&[f32]; 4]) -> [f32; 4] {
    use std::arch::x86_64::*;
    let d = q.len();
    let mut acc = [_mm256_setzero_ps(); 4];
    let mut i = 0;
    while i + 8 <= d {
        let qv = _mm256_loadu_ps(q.as_ptr().add(i));
        for j in 0..4 {
            acc[j] = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k[j].as_ptr().add(i)), acc[j]);
        }
        i += 8;
    }
    // hadd(hadd(a0, a1), hadd(a2, a3)) holds each row's partial sums per 128-bit half.
    let s = _mm256_hadd_ps(
        _mm256_hadd_ps(acc[0], acc[1]),
        _mm256_hadd_ps(acc[2], acc[3]),
    );
    let s = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
    let mut r = [0.0f32; 4];
    _mm_storeu_ps(r.as_mut_ptr(), s);
    while i < d {
        for j in 0..4 {
            r[j] += q[i] * k[j][i];
        }
        i += 1;
    }
    r
}

/// `o = sum_i w[i] * v[slots[i] * kv_row + off..][..o.len()]`, 64 columns at a time held in
/// registers across all rows (no load/store of `o` per row).
///
/// # Safety
/// The CPU must support AVX2 and FMA; `o.len()` is a multiple of 8; every row lies inside `v`.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn weighted_rows_avx2(
    o: &mut [f32],
    w: &[f32],
    v: &[f32],
    slots: &[usize],
    kv_row: usize,
    off: usize,
) {
    use std::arch::x86_64::*;
    let hd = o.len();
    let mut c0 = 0;
    while c0 < hd {
        let lanes = ((hd - c0) / 8).min(8);
        let mut acc = [_mm256_setzero_ps(); 8];
        for (&wi, &slot) in w.iter().zip(slots) {
            let wv = _mm256_set1_ps(wi);
            let r = v.as_ptr().add(slot * kv_row + off + c0);
            for (l, a) in acc.iter_mut().enumerate().take(lanes) {
                *a = _mm256_fmadd_ps(wv, _mm256_loadu_ps(r.add(8 * l)), *a);
            }
        }
        for (l, a) in acc.iter().enumerate().take(lanes) {
            _mm256_storeu_ps(o.as_mut_ptr().add(c0 + 8 * l), *a);
        }
        c0 += 8 * lanes;
    }
}

/// `o += w * b`.
#[inline(always)]
fn axpy(o: &mut [f32], w: f32, b: &[f32]) {
    for (a, b) in o.iter_mut().zip(b) {
        *a += w * b;
    }
}

/// Calls `f(index, slot)` for the cache slots of tokens `first..=last` of sequence `sq`, one
/// block-table run at a time (slots inside a block are consecutive: no division per token).
#[inline(always)]
fn for_slots(
    plan: &Plan<'_>,
    sq: usize,
    first: usize,
    last: usize,
    mut f: impl FnMut(usize, usize),
) {
    let bs = plan.block_size;
    let mut t = first;
    while t <= last {
        let (b, off) = (t / bs, t % bs);
        let run = (bs - off).min(last + 1 - t);
        let base = plan.block_tables[sq * plan.max_blocks + b] as usize * bs + off;
        for j in 0..run {
            f(t + j - first, base + j);
        }
        t += run;
    }
}

/// Unit `i`: query row `i / (heads / hc)`, heads `hc * (i % (heads / hc))..` + hc, into `o`.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn unit_generic<T: CacheElem, const SIMD: bool>(
    plan: &Plan<'_>,
    q: &[f32],
    k: &[T],
    v: &[T],
    p: &AttentionParams,
    hc: usize,
    i: usize,
    o: &mut [f32],
    s: &mut Scratch,
) {
    let hd = p.head_dim;
    let kv_row = p.num_kv_heads * hd;
    let group = p.num_heads / p.num_kv_heads;
    let per_row = p.num_heads / hc;
    let (t, h0) = (i / per_row, (i % per_row) * hc);
    let kvh = h0 / group;
    let (sq, pos) = plan.locate(t);
    let first = match p.sliding_window {
        Some(w) if w > 0 => (pos + 1).saturating_sub(w),
        _ => 0,
    };
    let len = pos + 1 - first;
    let qrow = &q[(t * p.num_heads + h0) * hd..(t * p.num_heads + h0 + hc) * hd];
    s.scores.clear();
    s.scores.resize(hc * len, 0.0);
    s.rows.resize(4 * hd, 0.0);
    s.slots.clear();
    for_slots(plan, sq, first, pos, |_, slot| s.slots.push(slot));
    let Scratch {
        scores,
        rows,
        slots,
    } = s;
    // Scores, four keys at a time (no closures here: they would not inherit the caller's
    // target features, and the intrinsics would not inline).
    for (c, quad) in slots.chunks(4).enumerate() {
        let mut kr: [&[f32]; 4] = [&[]; 4];
        for (j, buf) in rows.chunks_exact_mut(hd).enumerate() {
            let base = quad[j.min(quad.len() - 1)] * kv_row + kvh * hd;
            kr[j] = T::row(&k[base..base + hd], buf);
        }
        for (hh, qv) in qrow.chunks_exact(hd).enumerate() {
            #[cfg(target_arch = "x86_64")]
            let d = if SIMD {
                // SAFETY: SIMD is only true in `unit_avx2`; every row is `hd` long.
                unsafe { dot4_avx2(qv, kr) }
            } else {
                dot4_scalar(qv, kr)
            };
            #[cfg(not(target_arch = "x86_64"))]
            let d = dot4_scalar(qv, kr);
            let out = &mut scores[hh * len + 4 * c..hh * len + 4 * c + quad.len()];
            for (o, &dj) in out.iter_mut().zip(&d) {
                *o = dj * p.scale;
            }
        }
    }
    for sc in scores.chunks_exact_mut(len) {
        if let Some(cap) = p.softcap {
            for x in sc.iter_mut() {
                *x = cap * (*x / cap).tanh();
            }
        }
        let max = sc.iter().fold(f32::NEG_INFINITY, |m, &x| m.max(x));
        let mut denom = 0.0f32;
        for x in sc.iter_mut() {
            *x = (*x - max).exp();
            denom += *x;
        }
        for x in sc.iter_mut() {
            *x /= denom;
        }
    }
    #[cfg(target_arch = "x86_64")]
    if let (true, Some(vf)) = (SIMD, T::as_f32(v)) {
        if hd.is_multiple_of(8) {
            for (hh, oh) in o.chunks_exact_mut(hd).enumerate() {
                let w = &scores[hh * len..(hh + 1) * len];
                // SAFETY: SIMD is only true in `unit_avx2`; slots were validated by `Plan`.
                unsafe { weighted_rows_avx2(oh, w, vf, slots, kv_row, kvh * hd) };
            }
            return;
        }
    }
    o.fill(0.0);
    let row = &mut rows[..hd];
    for (idx, &slot) in slots.iter().enumerate() {
        let base = slot * kv_row + kvh * hd;
        let vr = T::row(&v[base..base + hd], row);
        for (hh, oh) in o.chunks_exact_mut(hd).enumerate() {
            axpy(oh, scores[hh * len + idx], vr);
        }
    }
}
