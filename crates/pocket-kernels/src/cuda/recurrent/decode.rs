//! The fused decode step of a Gated DeltaNet layer (`kernels/deltanet_decode.cu`): one launch in
//! place of the two column splits, the conv, the gates, the recurrent delta rule and the gated
//! RMSNorm. `POCKET_DELTANET_FUSED=0` keeps the unfused ops (the layer asks
//! [`fused_supported`] before choosing). With 16-bit `[b | a]` weights the kernel also computes
//! the in_ba projection of its heads (`BaInputs::Weights`, one GEMV launch fewer per layer);
//! `POCKET_DELTANET_BA_FUSED=0` keeps that GEMV separate (the layer asks [`fused_ba_supported`]).
//!
//! Three block layouts, picked per launch by the number of sequences ([`Layout`]):
//! - a block per (value head, sequence) below [`KEY_HEAD_FROM_SEQS`] sequences (the group's
//!   blocks share the q/k conv window through a self-resetting arrival counter, see the
//!   kernel's header);
//! - there, on the sm_90 cubin and where the cluster grid fits in one wave, a thread-block
//!   cluster of `POCKET_DELTANET_CLUSTER` (2, the default, or 4) blocks per value head, each
//!   owning a slice of its columns (`deltanet_decode_c2` / `_c4`); `POCKET_DELTANET_CLUSTER=1`
//!   runs that kernel's one-block form (`deltanet_decode_c1`, any GPU) wherever a block per value
//!   head runs, `=0` the previous value-head kernel (`deltanet_decode`) everywhere;
//! - a block per key head, all its value heads in turn, from [`KEY_HEAD_FROM_SEQS`] sequences.
//!
//! `POCKET_DELTANET_SPLIT=0` forces the key-head layout and `=1` the value-head one (A/B).

use super::super::kernels::Kernel;
use super::super::kernels::{Artifact, DevFormat};
use super::super::switch::{EnvChoice, EnvSwitch};
use super::super::CudaBackend;
use super::{check_meta, grid_seqs, CONV_MAX_K};
use crate::error::shape_err;
use crate::recurrent::{
    check_decode_inputs, conv_state_slots, seq_spans, BaInputs, DeltaNetDecodeInputs,
    DeltaRuleParams, HeadGrouping, RecurrentMeta, WeightRows,
};
use crate::{DType, KernelError, Result, Tensor, Weight, WeightStorage};

/// `POCKET_DELTANET_FUSED=0` turns the fused decode step off (A/B against the six launches).
static FUSED: EnvSwitch = EnvSwitch::on_unless_zero("POCKET_DELTANET_FUSED");
/// `POCKET_DELTANET_BA_FUSED=0` keeps the in_ba projection a separate GEMV (A/B).
static BA_FUSED: EnvSwitch = EnvSwitch::on_unless_zero("POCKET_DELTANET_BA_FUSED");
/// `POCKET_DELTANET_EARLY_STATE=0`: the cluster forms read the state, conv history and slot
/// metadata after `pdl_wait` instead of before it (kernels/deltanet_decode.cu `fd_early_state`;
/// A/B of the earlier loads).
pub(crate) static EARLY_STATE: EnvSwitch = EnvSwitch::on_unless_zero("POCKET_DELTANET_EARLY_STATE");
/// The forced layout: `POCKET_DELTANET_SPLIT=0` a block per key head (all its value heads in
/// turn), `=1` the value-head layout (cluster or not) at every batch size, else (`None`) by batch
/// size; or [`CudaBackend::set_deltanet_split`].
static SPLIT: EnvChoice<Option<bool>> = EnvChoice::new(
    "POCKET_DELTANET_SPLIT",
    &[None, Some(true), Some(false)],
    |v| match v {
        Some("0") => Some(false),
        Some("1") => Some(true),
        _ => None,
    },
);
/// `POCKET_DELTANET_CLUSTER`: blocks per value head in the cluster variant (2 or 4), 1 = its
/// one-block form, 0 = the previous value-head kernel. 2 is the default: each of 96 blocks of
/// 512 threads at 27B batch 1 moves 32 KB of state on its own SM; 4 (192 blocks of 256 threads,
/// two on some SMs) and 1 are there for the A/B. The value is the size and whether it is forced
/// at every batch size ([`CudaBackend::set_deltanet_cluster`]) or only where clusters are chosen.
static CLUSTER: EnvChoice<(usize, bool)> = EnvChoice::new(
    "POCKET_DELTANET_CLUSTER",
    &[(0, true), (1, true), (2, true), (4, true)],
    |v| (v.and_then(|v| v.trim().parse().ok()).unwrap_or(2), false),
);

/// Key-head blocks from this many sequences, value-head blocks below: the session-5 H200 bench
/// at the 27B shape (docs/performance/logs/2026-11-30-s5-final/cuda_bench_deltanet.log) measured
/// per layer key-head 15.37 us vs value-head 18.49 us at 4 sequences, 13.95 vs 8.68 us at 1.
pub(crate) const KEY_HEAD_FROM_SEQS: usize = 4;

impl CudaBackend {
    /// Overrides `POCKET_DELTANET_SPLIT` for the fused DeltaNet decode launches that follow, in
    /// the whole process (`Some(true)`: a block per value head, `Some(false)`: per key head,
    /// `None`: the environment, else by batch size); benches capture both layouts in one process.
    pub fn set_deltanet_split(&self, split: Option<bool>) {
        SPLIT.set(split.map(Some));
    }

    /// Overrides `POCKET_DELTANET_CLUSTER` for the value-head launches that follow, in the whole
    /// process: `Some(n)` runs clusters of `n` blocks (2 or 4; 1 the one-block form, 0 the
    /// previous kernel; another size is ignored) at every batch size where they fit, `None` the
    /// environment; benches capture the variants in one process.
    pub fn set_deltanet_cluster(&self, size: Option<u8>) {
        CLUSTER.set(size.map(|n| (usize::from(n), true)));
    }
}

/// The forced layout (the override, else the environment): `Some(true)` value heads,
/// `Some(false)` key heads, `None` by batch size.
fn split_forced() -> Option<bool> {
    SPLIT.get()
}

/// The cluster size asked for and whether the override forces it at every batch size.
fn cluster_asked() -> (usize, bool) {
    CLUSTER.get()
}

/// How a launch spreads heads over blocks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Layout {
    /// A block per (key head, sequence), all the group's value heads in turn.
    KeyHead,
    /// A block per (value head, sequence).
    ValueHead,
    /// A cluster of this many blocks per (value head, sequence), each a slice of the columns
    /// (1: the cluster kernel's one-block form).
    Cluster(usize),
}

/// The layout and geometry for `seqs` sequences on `be`: the forced or batch-size layout
/// (key heads from [`KEY_HEAD_FROM_SEQS`]), the value-head one turned into clusters where the
/// sm_90 cubin runs and the cluster grid fits in one wave (or into the one-block form of the
/// cluster kernel when asked for), and the value-head layout where the key-head one does not
/// fit.
fn layout(
    be: &CudaBackend,
    p: &DeltaRuleParams,
    kernel: usize,
    seqs: usize,
) -> std::result::Result<(Layout, Geometry), String> {
    let split = split_forced().unwrap_or(seqs < KEY_HEAD_FROM_SEQS);
    if split {
        let (cs, forced) = cluster_asked();
        let usable = match cs {
            1 => true,
            2 | 4 => be.artifact() == Artifact::Sm90Cubin,
            _ => false,
        };
        if let Some(g) = usable
            .then(|| cluster_geometry(p, kernel, cs).ok())
            .flatten()
        {
            // One wave: the blocks of 128 registers per thread an SM holds (the kernels'
            // __launch_bounds__(512) cap), one of 512 threads or two of 256. A second wave would
            // cost a whole chain more than the value-head kernel's one.
            let per_sm = (65536 / (128 * g.threads)).max(1);
            if cs == 1 || forced || seqs * p.v_heads * cs <= per_sm * be.sm_count() as usize {
                return Ok((Layout::Cluster(cs), g));
            }
        }
    } else if let Ok(g) = geometry_for(p, kernel, false) {
        return Ok((Layout::KeyHead, g));
    }
    geometry_for(p, kernel, true).map(|g| (Layout::ValueHead, g))
}
/// Arrival counters allocated at least (u32s): key heads x sequences of any model we load fit,
/// so the buffer is not regrown (and re-zeroed) inside a graph capture.
const MIN_COUNTERS: usize = 4096;

/// State rows each thread holds (`FD_RPT` in deltanet_decode.cu).
const RPT: usize = 8;
/// Longest conv kernel of the cluster kernels (`FDC_MAX_K`).
const CLUSTER_MAX_K: usize = 4;
/// Shared floats of the cluster kernel after its sized arrays (`pba`, `sba`, `sss`, `misc`).
const CLUSTER_FIXED_FLOATS: usize = 32 + 8 + 16 + 4;
/// The kernel's `__launch_bounds__`.
const MAX_THREADS: usize = 512;
/// Dynamic shared memory available without an opt-in.
const MAX_SMEM: usize = 48 * 1024;

/// Block geometry of one launch: threads, row groups `RG`, dynamic shared memory bytes and value
/// heads per block `hb`.
struct Geometry {
    threads: usize,
    row_groups: usize,
    smem: usize,
    heads_per_block: usize,
}

impl Geometry {
    /// The geometry with `floats` shared f32s, or why that much shared memory does not fit.
    fn fitting(
        threads: usize,
        row_groups: usize,
        floats: usize,
        heads_per_block: usize,
    ) -> std::result::Result<Geometry, String> {
        let smem = floats * 4;
        if smem > MAX_SMEM {
            return Err(format!("{smem} bytes of shared memory"));
        }
        Ok(Geometry {
            threads,
            row_groups,
            smem,
            heads_per_block,
        })
    }
}

/// The launch geometry with a block per value head (`split`) or per key head.
fn geometry_for(
    p: &DeltaRuleParams,
    kernel: usize,
    split: bool,
) -> std::result::Result<Geometry, String> {
    if p.k_heads == 0 || p.v_heads == 0 || !p.v_heads.is_multiple_of(p.k_heads) {
        return Err(format!(
            "{} value heads over {} key heads",
            p.v_heads, p.k_heads
        ));
    }
    if p.k_dim == 0 || p.v_dim == 0 || !p.v_dim.is_multiple_of(4) {
        return Err(format!("v_dim {} (a multiple of 4 is needed)", p.v_dim));
    }
    if kernel == 0 || kernel > CONV_MAX_K {
        return Err(format!("conv kernel of {kernel} taps (1..={CONV_MAX_K})"));
    }
    // Thread (rg, cg): cg one of v_dim / 4 float4 columns, rg one of the row groups that cover
    // k_dim with RPT rows each; at least one thread per v column for the norm.
    let row_groups = p.k_dim.div_ceil(RPT);
    let threads = (p.v_dim / 4 * row_groups).max(p.v_dim).next_multiple_of(32);
    if threads > MAX_THREADS {
        return Err(format!(
            "k_dim {} x v_dim {} needs {threads} threads",
            p.k_dim, p.v_dim
        ));
    }
    let hb = if split { 1 } else { p.v_heads / p.k_heads };
    let ch = 2 * p.k_dim + hb * p.v_dim;
    // The kernel's shared arrays in order (deltanet_decode.cu), the staged q/k window and the
    // last-block flag at the end.
    let floats = row_groups * p.v_dim
        + p.v_dim
        + 32
        + 2 * hb
        + 2 * p.k_dim
        + ch * kernel
        + ch
        + hb * p.v_dim
        + threads / 32 * 2 * hb
        + (kernel - 1) * 2 * p.k_dim
        + 1;
    Geometry::fitting(threads, row_groups, floats, hb)
}

/// The geometry of the cluster kernel with `cs` blocks per value head, or why it cannot take
/// these params: the value-head kernel's conditions, plus `v_dim / cs / 4` float4 column groups a
/// power of two <= 32 (a warp's lanes of one column reduce by xor shuffles).
fn cluster_geometry(
    p: &DeltaRuleParams,
    kernel: usize,
    cs: usize,
) -> std::result::Result<Geometry, String> {
    geometry_for(p, kernel, true)?;
    if kernel > CLUSTER_MAX_K {
        return Err(format!(
            "conv kernel of {kernel} taps (the cluster kernels take up to {CLUSTER_MAX_K})"
        ));
    }
    let groups = p.v_dim / cs / 4;
    if !p.v_dim.is_multiple_of(4 * cs) || !groups.is_power_of_two() || groups > 32 {
        return Err(format!("v_dim {} over {cs} blocks", p.v_dim));
    }
    let dvb = p.v_dim / cs;
    // Rows per thread: 8 in deltanet_decode_c1, 4 in _c2 and _c4 (512, 512 and 256 threads at
    // 128 x 128).
    let rpt = if cs == 1 { 8 } else { 4 };
    let row_groups = p.k_dim.div_ceil(rpt);
    let threads = (groups * row_groups).max(dvb).next_multiple_of(32);
    if threads > MAX_THREADS {
        return Err(format!(
            "k_dim {} x {dvb} columns needs {threads} threads",
            p.k_dim
        ));
    }
    let ch = 2 * p.k_dim + dvb;
    // deltanet_decode_cluster.cuh's shared arrays in order.
    let floats = threads / 32 * 2 * dvb
        + dvb
        + 2 * p.k_dim
        + ch * kernel
        + ch
        + (kernel - 1) * 2 * p.k_dim
        + CLUSTER_FIXED_FLOATS;
    Geometry::fitting(threads, row_groups, floats, 1)
}

/// The arrival counters for `n` (key head, sequence) pairs, zeroed on the stream when first
/// allocated (inside a capture a memset node: harmless, every launch leaves them zero).
fn counters(be: &CudaBackend, op: &'static str, n: usize) -> Result<u64> {
    let mut scratch = be
        .scratch
        .lock()
        .map_err(|_| shape_err(op, "scratch lock poisoned"))?;
    be.zeroed_scratch(op, &mut scratch.deltanet_counters, 4 * n.max(MIN_COUNTERS))
}

/// Whether the fused step is on (`POCKET_DELTANET_FUSED`) and takes these params (the
/// value-head layout, which every launch falls back to, fits).
pub(crate) fn fused_supported(p: &DeltaRuleParams, kernel: usize) -> bool {
    FUSED.on() && geometry_for(p, kernel, true).is_ok()
}

/// The kernel's `wfmt` code of an in_ba weight it can read in place (1 F16, 2 BF16: row-major
/// 16-bit floats on this device, rows of a multiple of 8 elements), or why not.
fn ba_format(be: &CudaBackend, w: &Weight) -> std::result::Result<i32, String> {
    let code = match DevFormat::of(w.format) {
        Some(DevFormat::F16) => 1,
        Some(DevFormat::BF16) => 2,
        _ => return Err(format!("in_ba weight format {}", w.format)),
    };
    match &w.storage {
        WeightStorage::Cuda(c)
            if c.ordinal() == be.ctx.ordinal()
                && c.layout() == super::super::WeightLayout::Ggml => {}
        _ => return Err("in_ba weight not on this device as row-major floats".into()),
    }
    if w.cols == 0 || !w.cols.is_multiple_of(8) || w.cols > i32::MAX as usize / 2 {
        return Err(format!("in_ba rows of {} columns", w.cols));
    }
    Ok(code)
}

/// Whether the fused step is on, takes these params and computes the projection of these
/// in_ba weights itself (`POCKET_DELTANET_BA_FUSED`, both weights 16-bit of one format).
pub(crate) fn fused_ba_supported(
    be: &CudaBackend,
    p: &DeltaRuleParams,
    kernel: usize,
    b: &Weight,
    a: &Weight,
) -> bool {
    BA_FUSED.on()
        && fused_supported(p, kernel)
        && b.cols == a.cols
        && matches!((ba_format(be, b), ba_format(be, a)), (Ok(fb), Ok(fa)) if fb == fa)
}

/// Device address of the first of `r`'s rows.
fn weight_rows(be: &CudaBackend, r: WeightRows<'_>) -> std::result::Result<u64, String> {
    match &r.weight.storage {
        WeightStorage::Cuda(c) => Ok(c.storage.ptr() + (r.row * r.weight.cols * 2) as u64),
        WeightStorage::Host { .. } => Err(format!("in_ba weight on the host, not {}", be.name)),
    }
}

/// Device address of `r`'s first column and its row stride in floats.
fn source(
    be: &CudaBackend,
    op: &'static str,
    name: &'static str,
    r: crate::recurrent::ColumnRange<'_>,
) -> Result<(u64, i32)> {
    let base = be.ptr_of(op, name, r.tensor, DType::F32)?;
    let stride = i32::try_from(r.tensor.row_len())
        .map_err(|_| shape_err(op, format!("`{name}` rows of {}", r.tensor.row_len())))?;
    Ok((base + 4 * r.col as u64, stride))
}

/// Launches `deltanet_decode` after the checks the composed ops make.
pub(crate) fn gated_deltanet_decode(
    be: &CudaBackend,
    inp: &DeltaNetDecodeInputs<'_>,
    conv_state: &mut Tensor,
    state: &mut Tensor,
    meta: &RecurrentMeta,
    out: &mut Tensor,
) -> Result<()> {
    const OP: &str = "gated_deltanet_decode";
    let p = &inp.params;
    let n = check_decode_inputs(OP, inp, out)?;
    let kernel = inp.conv_weight.shape[1];
    let (lay, geo) =
        layout(be, p, kernel, meta.num_seqs).map_err(|what| KernelError::Unsupported {
            op: OP,
            device: be.name.clone(),
            what,
        })?;
    let w = p.qkv_width();
    let slots = conv_state_slots(OP, conv_state, kernel - 1, w)?;
    if state.shape.len() != 4 || state.shape[1..] != [p.v_heads, p.k_dim, p.v_dim] {
        return Err(shape_err(
            OP,
            format!(
                "state {:?} is not [slots, {}, {}, {}]",
                state.shape, p.v_heads, p.k_dim, p.v_dim
            ),
        ));
    }
    if state.shape[0] != slots {
        return Err(shape_err(
            OP,
            format!("{} conv slots, {} state slots", slots, state.shape[0]),
        ));
    }
    let (qs, sl, hs) = check_meta(be, OP, meta, n, slots)?;
    // One row per sequence: the kernel reads row query_start[s] only.
    let qsv = be.host_u32(OP, "query_start", &meta.query_start)?;
    let slv = be.host_u32(OP, "state_slots", &meta.state_slots)?;
    let hsv = be.host_u32(OP, "has_state", &meta.has_state)?;
    let spans = seq_spans(OP, meta.num_seqs, &qsv, &slv, &hsv, n, slots)?;
    if let Some(i) = spans.iter().position(|s| s.end - s.start > 1) {
        return Err(shape_err(
            OP,
            format!(
                "sequence {i} has {} rows (decode takes one)",
                spans[i].end - spans[i].start
            ),
        ));
    }
    let (qkvp, qkv_stride) = source(be, OP, "qkv", inp.qkv)?;
    let (zp, z_stride) = source(be, OP, "z", inp.z)?;
    let unsupported = |what: String| KernelError::Unsupported {
        op: OP,
        device: be.name.clone(),
        what,
    };
    // The projected columns, or the in_ba weights, x and the weight format (then `b`/`a` unused).
    let (bp, b_stride, ap, a_stride, wbp, wap, xp, x_stride, hidden, wfmt) = match inp.ba {
        BaInputs::Projected { b, a } => {
            let (bp, bs) = source(be, OP, "b", b)?;
            let (ap, as_) = source(be, OP, "a", a)?;
            (bp, bs, ap, as_, 0, 0, 0, 0, 0, 0)
        }
        BaInputs::Weights { x, b, a } => {
            let fb = ba_format(be, b.weight).map_err(unsupported)?;
            let fa = ba_format(be, a.weight).map_err(unsupported)?;
            if fb != fa {
                return Err(unsupported("in_ba weights of two formats".into()));
            }
            let xp = be.ptr_of(OP, "x", x, DType::F32)?;
            if xp % 16 != 0 {
                return Err(shape_err(OP, "x is not 16-byte aligned"));
            }
            let wbp = weight_rows(be, b).map_err(unsupported)?;
            let wap = weight_rows(be, a).map_err(unsupported)?;
            let cols = x.row_len() as i32;
            (0, 0, 0, 0, wbp, wap, xp, cols, cols, fb)
        }
    };
    let cwp = be.ptr_of(OP, "conv_weight", inp.conv_weight, DType::F32)?;
    let anp = be.ptr_of(OP, "a_neg", inp.a_neg, DType::F32)?;
    let dtp = be.ptr_of(OP, "dt_bias", inp.dt_bias, DType::F32)?;
    let nwp = be.ptr_of(OP, "norm_weight", inp.norm_weight, DType::F32)?;
    let csp = be.ptr_of(OP, "conv_state", conv_state, DType::F32)?;
    let sp = be.ptr_of(OP, "state", state, DType::F32)?;
    let outp = be.ptr_of(OP, "out", out, DType::F32)?;
    if sp % 16 != 0 {
        return Err(shape_err(OP, "state is not 16-byte aligned"));
    }
    let tiled = i32::from(p.grouping == HeadGrouping::Tiled);
    let hb = geo.heads_per_block;
    let seqs = grid_seqs(OP, meta)?;
    // Both kernels take the same arguments but for the plain one's heads per block before the
    // counters.
    macro_rules! launch {
        ($kernel:expr, $bx:expr, $($tail:expr),+) => {
            be.launch_smem(
                OP,
                $kernel,
                ($bx, seqs, 1),
                geo.threads as u32,
                geo.smem as u32,
                args![
                    qkvp,
                    zp,
                    bp,
                    ap,
                    qkv_stride,
                    z_stride,
                    b_stride,
                    a_stride,
                    cwp,
                    anp,
                    dtp,
                    nwp,
                    csp,
                    sp,
                    outp,
                    qs,
                    sl,
                    hs,
                    p.k_heads as i32,
                    p.v_heads as i32,
                    p.k_dim as i32,
                    p.v_dim as i32,
                    kernel as i32,
                    tiled,
                    geo.row_groups as i32,
                    p.l2_eps,
                    p.scale,
                    inp.norm_eps,
                    wbp,
                    wap,
                    xp,
                    x_stride,
                    hidden,
                    wfmt,
                    $($tail),+
                ],
            )
        };
    }
    if let Layout::Cluster(cs) = lay {
        // Groups span hpg x cs blocks: the counters are used (also by a lone block).
        let cnt = counters(be, OP, p.k_heads * meta.num_seqs)?;
        let blocks = p.v_heads * cs;
        let bx =
            u32::try_from(blocks).map_err(|_| shape_err(OP, format!("{blocks} head blocks")))?;
        return launch!(Kernel::DeltanetDecodeCluster(cs as u8), bx, cnt);
    }
    let blocks = p.v_heads / hb;
    let bx = u32::try_from(blocks).map_err(|_| shape_err(OP, format!("{blocks} head blocks")))?;
    // Counters only when a group spans several blocks (its q/k window is then shared).
    let cnt = if blocks > p.k_heads {
        counters(be, OP, p.k_heads * meta.num_seqs)?
    } else {
        0
    };
    launch!(Kernel::DeltanetDecode, bx, hb as i32, cnt)
}
