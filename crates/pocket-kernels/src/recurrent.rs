//! The recurrent-layer contract (Gated DeltaNet, and later other linear-attention or SSM layers):
//! varlen token batches whose per-sequence state lives in slots of a state pool.
//!
//! A batch stacks the new tokens of several sequences row-wise, as for attention: sequence `s`
//! owns rows `query_start[s]..query_start[s+1]`. Its recurrent state (the short-convolution window
//! and the delta-rule matrix) lives at slot `state_slots[s]` of each layer's state tensors. When
//! `has_state[s]` is 0 the sequence starts fresh: the ops read zeros instead of the slot, so a
//! reused slot never needs clearing, and they write the slot's new state either way.

use crate::error::shape_err;
use crate::{Result, Tensor};

/// Per-batch index tensors of a recurrent layer (all u32).
pub struct RecurrentMeta {
    /// `[num_seqs + 1]` prefix offsets of each sequence's rows.
    pub query_start: Tensor,
    /// `[num_seqs]` state slot of each sequence.
    pub state_slots: Tensor,
    /// `[num_seqs]` 1 if the slot holds the sequence's state so far, 0 to start from zeros.
    pub has_state: Tensor,
    /// Number of sequences in the batch (may be less than the tensors' capacity).
    pub num_seqs: usize,
    /// Most rows any one sequence has in this batch (1 for a pure decode step).
    pub max_rows: usize,
}

/// How value heads share query/key heads when there are fewer of the latter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeadGrouping {
    /// Value head `h` reads key head `h / (v_heads / k_heads)` (Hugging Face `repeat_interleave`).
    Grouped,
    /// Value head `h` reads key head `h % k_heads` (llama.cpp's GGUF, whose converter re-tiles the
    /// value heads so that `ggml_repeat` broadcasts them).
    Tiled,
}

impl HeadGrouping {
    /// The key head that value head `h` reads.
    pub fn key_head(self, h: usize, k_heads: usize, v_heads: usize) -> usize {
        match self {
            HeadGrouping::Grouped => h / (v_heads / k_heads).max(1),
            HeadGrouping::Tiled => h % k_heads.max(1),
        }
    }
}

/// Scalar settings of one gated delta rule layer.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DeltaRuleParams {
    /// Query/key heads.
    pub k_heads: usize,
    /// Value heads (a multiple of `k_heads`); the state has one `[k_dim, v_dim]` matrix per head.
    pub v_heads: usize,
    /// Query/key head dimension.
    pub k_dim: usize,
    /// Value head dimension.
    pub v_dim: usize,
    /// Which key head each value head reads.
    pub grouping: HeadGrouping,
    /// Epsilon of the L2 normalisation of queries and keys (`x * rsqrt(sum x² + eps)`).
    pub l2_eps: f32,
    /// Query scale, usually `1 / sqrt(k_dim)`.
    pub scale: f32,
}

impl DeltaRuleParams {
    /// Row width of the mixed `[q | k | v]` input: `2 * k_heads * k_dim + v_heads * v_dim`.
    pub fn qkv_width(&self) -> usize {
        2 * self.k_heads * self.k_dim + self.v_heads * self.v_dim
    }
}

// Shape and metadata validation shared by the backends, so each op rejects the same inputs with
// the same messages on CPU and CUDA. Each backend calls these in its own order around its
// backend-only checks (host storage, kernel limits).

/// One sequence of a recurrent batch, as read from [`RecurrentMeta`].
#[derive(Debug, Clone, Copy)]
pub(crate) struct SeqSpan {
    /// First row.
    pub start: usize,
    /// One past the last row.
    pub end: usize,
    /// State slot.
    pub slot: usize,
    /// Whether the slot holds prior state (else start from zeros).
    pub has_state: bool,
}

/// Validates the batch description read from a [`RecurrentMeta`] of `s` sequences (`qs`, `sl`,
/// `hs`: its `query_start`, `state_slots`, `has_state` values): rows in order within `rows`,
/// slots below `slots` and distinct (two sequences writing one slot would race).
pub(crate) fn seq_spans(
    op: &'static str,
    s: usize,
    qs: &[u32],
    sl: &[u32],
    hs: &[u32],
    rows: usize,
    slots: usize,
) -> Result<Vec<SeqSpan>> {
    if qs.len() < s + 1 || sl.len() < s || hs.len() < s {
        return Err(shape_err(
            op,
            format!("metadata shorter than {s} sequences"),
        ));
    }
    if qs[0] != 0 || qs[s] as usize != rows {
        return Err(shape_err(
            op,
            format!(
                "query_start spans {}..{}, the batch has {rows} rows",
                qs[0], qs[s]
            ),
        ));
    }
    let mut out = Vec::with_capacity(s);
    let mut seen = vec![false; slots];
    for i in 0..s {
        let (start, end, slot) = (qs[i] as usize, qs[i + 1] as usize, sl[i] as usize);
        if end < start {
            return Err(shape_err(
                op,
                format!("query_start decreases at sequence {i}"),
            ));
        }
        if slot >= slots {
            return Err(shape_err(
                op,
                format!("state slot {slot} of sequence {i} is outside the pool of {slots}"),
            ));
        }
        if std::mem::replace(&mut seen[slot], true) {
            return Err(shape_err(op, format!("state slot {slot} is used twice")));
        }
        out.push(SeqSpan {
            start,
            end,
            slot,
            has_state: hs[i] != 0,
        });
    }
    Ok(out)
}

/// Checks the causal conv's `weight` is `[c, k]` with `k > 0` and returns `k`.
pub(crate) fn conv_taps(op: &'static str, weight: &Tensor, c: usize) -> Result<usize> {
    if weight.shape.len() != 2 || weight.shape[0] != c || weight.shape[1] == 0 {
        return Err(shape_err(
            op,
            format!("weight {:?} does not fit {c} channels", weight.shape),
        ));
    }
    Ok(weight.shape[1])
}

/// Checks the conv state pool is `[slots, win, c]` and returns `slots`.
pub(crate) fn conv_state_slots(
    op: &'static str,
    conv_state: &Tensor,
    win: usize,
    c: usize,
) -> Result<usize> {
    if conv_state.shape.len() != 3 || conv_state.shape[1..] != [win, c] {
        return Err(shape_err(
            op,
            format!(
                "conv_state {:?} is not [slots, {win}, {c}]",
                conv_state.shape
            ),
        ));
    }
    Ok(conv_state.shape[0])
}

/// Checks the delta-rule gates' shapes: `h` heads (`a_neg`'s length, `dt_len` that of `dt_bias`)
/// matching `alpha`'s rows, and `b`, `g`, `beta` as large as `alpha`.
pub(crate) fn check_gates(
    op: &'static str,
    h: usize,
    dt_len: usize,
    alpha: &Tensor,
    b: &Tensor,
    g: &Tensor,
    beta: &Tensor,
) -> Result<()> {
    if h == 0 || dt_len != h || alpha.row_len() != h {
        return Err(shape_err(
            op,
            format!(
                "alpha rows of {}, a_neg of {h}, dt_bias of {dt_len}",
                alpha.row_len()
            ),
        ));
    }
    for (name, t) in [("b", b), ("g", g), ("beta", beta)] {
        if t.numel() != alpha.numel() {
            return Err(shape_err(
                op,
                format!(
                    "`{name}` has {} elements, alpha {}",
                    t.numel(),
                    alpha.numel()
                ),
            ));
        }
    }
    Ok(())
}

/// Validated geometry of a delta-rule call.
pub(crate) struct DeltaRuleGeometry {
    /// Token rows in the batch.
    pub n: usize,
    /// Slots of the state pool.
    pub slots: usize,
}

/// Checks a delta-rule call's params and tensor shapes against each other.
pub(crate) fn check_delta_rule(
    op: &'static str,
    qkv: &Tensor,
    g: &Tensor,
    beta: &Tensor,
    state: &Tensor,
    p: &DeltaRuleParams,
    out: &Tensor,
) -> Result<DeltaRuleGeometry> {
    if p.k_heads == 0 || p.v_heads == 0 || !p.v_heads.is_multiple_of(p.k_heads) {
        return Err(shape_err(
            op,
            format!(
                "{} value heads cannot share {} key heads",
                p.v_heads, p.k_heads
            ),
        ));
    }
    if p.k_dim == 0 || p.v_dim == 0 {
        return Err(shape_err(op, "zero head dimension"));
    }
    if qkv.row_len() != p.qkv_width() {
        return Err(shape_err(
            op,
            format!(
                "qkv rows of {}, params need {}",
                qkv.row_len(),
                p.qkv_width()
            ),
        ));
    }
    let n = qkv.rows();
    for (name, t, want) in [
        ("g", g, n * p.v_heads),
        ("beta", beta, n * p.v_heads),
        ("out", out, n * p.v_heads * p.v_dim),
    ] {
        if t.numel() != want {
            return Err(shape_err(
                op,
                format!("`{name}` has {} elements, expected {want}", t.numel()),
            ));
        }
    }
    if state.shape.len() != 4 || state.shape[1..] != [p.v_heads, p.k_dim, p.v_dim] {
        return Err(shape_err(
            op,
            format!(
                "state {:?} is not [slots, {}, {}, {}]",
                state.shape, p.v_heads, p.k_dim, p.v_dim
            ),
        ));
    }
    Ok(DeltaRuleGeometry {
        n,
        slots: state.shape[0],
    })
}

/// Checks `numel` elements form whole rows of a `d`-wide gated RMSNorm weight.
pub(crate) fn check_norm_rows(op: &'static str, numel: usize, d: usize) -> Result<()> {
    if d == 0 || !numel.is_multiple_of(d) {
        return Err(shape_err(
            op,
            format!("{numel} elements are not rows of {d}"),
        ));
    }
    Ok(())
}

/// Checks a row of `w` splits into two halves and returns the half width.
pub(crate) fn half_width(op: &'static str, w: usize) -> Result<usize> {
    if w == 0 || !w.is_multiple_of(2) {
        return Err(shape_err(op, format!("row of {w} cannot be halved")));
    }
    Ok(w / 2)
}

// ---- the fused decode step of a Gated DeltaNet layer ------------------------------------------

/// Columns `col..col + width` of every row of `tensor`, the width implied by the use: one part of
/// a stacked projection's output read in place (`col` 0 and the whole row for a separate one).
#[derive(Clone, Copy)]
pub struct ColumnRange<'a> {
    /// The `[n, row_len]` f32 tensor holding the columns.
    pub tensor: &'a Tensor,
    /// First column.
    pub col: usize,
}

/// Rows `row..row + v_heads` of a projection weight `[rows, hidden]`: one part of a stacked
/// `[b | a]` weight (`row` 0 and the whole weight for a separate one).
#[derive(Clone, Copy)]
pub struct WeightRows<'a> {
    /// The weight holding the rows.
    pub weight: &'a crate::Weight,
    /// First row.
    pub row: usize,
}

/// Where the decode step takes the gate inputs `b` and `a` from.
#[derive(Clone, Copy)]
pub enum BaInputs<'a> {
    /// The in_ba projection's outputs, `v_heads` columns each.
    Projected {
        /// The write strength `b` (beta = sigmoid(b)).
        b: ColumnRange<'a>,
        /// The decay input `a`.
        a: ColumnRange<'a>,
    },
    /// The projection itself, computed by the op: `b = x W_bᵀ`, `a = x W_aᵀ` (no bias). A
    /// backend takes this form where [`crate::Backend::fused_deltanet_decode_ba`] says so; the
    /// default composition takes any weight `matmul` takes.
    Weights {
        /// `[n, hidden]` f32 layer input (the in-projections' input).
        x: &'a Tensor,
        /// The `b` rows.
        b: WeightRows<'a>,
        /// The `a` rows.
        a: WeightRows<'a>,
    },
}

/// Inputs of [`crate::Backend::gated_deltanet_decode`]: the projections' outputs of one decode
/// step (one row per sequence) and the layer's weights.
pub struct DeltaNetDecodeInputs<'a> {
    /// The mixed `[q | k | v]` row, `params.qkv_width()` columns, before the conv.
    pub qkv: ColumnRange<'a>,
    /// The output gate `z`, `v_heads * v_dim` columns.
    pub z: ColumnRange<'a>,
    /// The gate inputs `b` and `a`: projected, or the in_ba weights and the layer input.
    pub ba: BaInputs<'a>,
    /// `[qkv_width, kernel]` f32 depthwise conv taps.
    pub conv_weight: &'a Tensor,
    /// `[v_heads]` f32 `-exp(A_log)`.
    pub a_neg: &'a Tensor,
    /// `[v_heads]` f32 decay bias.
    pub dt_bias: &'a Tensor,
    /// `[v_dim]` f32 scale of the gated RMSNorm.
    pub norm_weight: &'a Tensor,
    /// Epsilon of the gated RMSNorm.
    pub norm_eps: f32,
    /// Heads, dims and grouping of the delta rule.
    pub params: DeltaRuleParams,
}

/// Checks the fused decode step's inputs against each other and `out`, and returns the number of
/// rows `n` (all four sources have `n` rows; `out` is `[n, v_heads * v_dim]`).
pub(crate) fn check_decode_inputs(
    op: &'static str,
    inp: &DeltaNetDecodeInputs<'_>,
    out: &Tensor,
) -> Result<usize> {
    let p = &inp.params;
    if p.k_heads == 0 || p.v_heads == 0 || !p.v_heads.is_multiple_of(p.k_heads) {
        return Err(shape_err(
            op,
            format!(
                "{} value heads cannot share {} key heads",
                p.v_heads, p.k_heads
            ),
        ));
    }
    let vw = p.v_heads * p.v_dim;
    let n = inp.qkv.tensor.rows();
    let mut ranges = vec![("qkv", inp.qkv, p.qkv_width()), ("z", inp.z, vw)];
    match inp.ba {
        BaInputs::Projected { b, a } => {
            ranges.extend([("b", b, p.v_heads), ("a", a, p.v_heads)]);
        }
        BaInputs::Weights { x, b, a } => {
            for (name, r) in [("b", b), ("a", a)] {
                let w = r.weight;
                if r.row + p.v_heads > w.rows || w.cols != x.row_len() || x.rows() != n {
                    return Err(shape_err(
                        op,
                        format!(
                            "`{name}` rows {}..{} of a [{}, {}] weight for x {:?} (the batch has \
                             {n} rows)",
                            r.row,
                            r.row + p.v_heads,
                            w.rows,
                            w.cols,
                            x.shape
                        ),
                    ));
                }
            }
        }
    }
    for (name, r, width) in ranges {
        if r.tensor.rows() != n || r.col + width > r.tensor.row_len() {
            return Err(shape_err(
                op,
                format!(
                    "`{name}`: columns {}..{} of {:?} (the batch has {n} rows)",
                    r.col,
                    r.col + width,
                    r.tensor.shape
                ),
            ));
        }
    }
    conv_taps(op, inp.conv_weight, p.qkv_width())?;
    for (name, t, want) in [
        ("a_neg", inp.a_neg, p.v_heads),
        ("dt_bias", inp.dt_bias, p.v_heads),
        ("norm_weight", inp.norm_weight, p.v_dim),
        ("out", out, n * vw),
    ] {
        if t.numel() != want {
            return Err(shape_err(
                op,
                format!("`{name}` has {} elements, expected {want}", t.numel()),
            ));
        }
    }
    Ok(n)
}

/// The fused decode step as the composition of the unfused ops (the default of
/// [`crate::Backend::gated_deltanet_decode`] and the reference its fused kernels are tested
/// against): column ranges are copied out with `split_columns`, then `causal_conv1d_silu`,
/// `delta_gates`, `gated_delta_rule_recurrent` and `gated_rms_norm`. It allocates its
/// intermediates, so it is for backends that do not capture graphs (the CPU) and for tests.
pub fn deltanet_decode_composed<B: crate::Backend + ?Sized>(
    be: &B,
    inp: &DeltaNetDecodeInputs<'_>,
    conv_state: &mut Tensor,
    state: &mut Tensor,
    meta: &RecurrentMeta,
    out: &mut Tensor,
) -> Result<()> {
    const OP: &str = "gated_deltanet_decode";
    let n = check_decode_inputs(OP, inp, out)?;
    let p = &inp.params;
    let (w, vw, h) = (p.qkv_width(), p.v_heads * p.v_dim, p.v_heads);
    let qkv = columns(be, inp.qkv, w)?;
    let z = columns(be, inp.z, vw)?;
    // The projection form: each weight's whole product, then the rows' columns of it.
    let product = |r: WeightRows<'_>, x: &Tensor| -> Result<Tensor> {
        let mut t = be.alloc(crate::DType::F32, &[n, r.weight.rows])?;
        be.matmul(x, r.weight, &mut t)?;
        Ok(t)
    };
    let owned;
    let (b, a) = match inp.ba {
        BaInputs::Projected { b, a } => (b, a),
        BaInputs::Weights { x, b, a } => {
            owned = [product(b, x)?, product(a, x)?];
            let r = |tensor, col| ColumnRange { tensor, col };
            (r(&owned[0], b.row), r(&owned[1], a.row))
        }
    };
    let (bt, at) = (columns(be, b, h)?, columns(be, a, h)?);
    let qkv = qkv.as_ref().unwrap_or(inp.qkv.tensor);
    let z = z.as_ref().unwrap_or(inp.z.tensor);
    let b = bt.as_ref().unwrap_or(b.tensor);
    let a = at.as_ref().unwrap_or(a.tensor);
    let mut conv = be.alloc(crate::DType::F32, &[n, w])?;
    be.causal_conv1d_silu(qkv, inp.conv_weight, conv_state, meta, &mut conv)?;
    let mut g = be.alloc(crate::DType::F32, &[n, h])?;
    let mut beta = be.alloc(crate::DType::F32, &[n, h])?;
    be.delta_gates(a, b, inp.a_neg, inp.dt_bias, &mut g, &mut beta)?;
    let mut core = be.alloc(crate::DType::F32, &[n, vw])?;
    be.gated_delta_rule_recurrent(&conv, &g, &beta, state, meta, p, &mut core)?;
    be.gated_rms_norm(&core, z, inp.norm_weight, inp.norm_eps, out)
}

/// A copy of `width` columns of `r` when they are not the whole row (`None`: use `r.tensor`).
fn columns<B: crate::Backend + ?Sized>(
    be: &B,
    r: ColumnRange<'_>,
    width: usize,
) -> Result<Option<Tensor>> {
    let (n, row) = (r.tensor.rows(), r.tensor.row_len());
    if r.col == 0 && width == row {
        return Ok(None);
    }
    let part = |w: usize| -> Result<Option<Tensor>> {
        (w > 0)
            .then(|| be.alloc(crate::DType::F32, &[n, w]))
            .transpose()
    };
    let mut before = part(r.col)?;
    let mut mid = be.alloc(crate::DType::F32, &[n, width])?;
    let mut after = part(row - r.col - width)?;
    let mut outs: Vec<&mut Tensor> = Vec::with_capacity(3);
    outs.extend(before.as_mut());
    outs.push(&mut mid);
    outs.extend(after.as_mut());
    be.split_columns(r.tensor, &mut outs)?;
    Ok(Some(mid))
}
