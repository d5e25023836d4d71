//! The attention-input op ([`crate::Backend::qkv_rope_kv_write`]): from the Q/K/V projection
//! output to rotated queries and K/V rows in the paged cache, in one pass.
//!
//! Unfused, an attention layer runs after its QKV GEMV a column split, up to three bias adds,
//! two RoPE launches and the cache write, each a ~2 us launch of a few KB of work on a GPU. This
//! op does them together; both backends validate their arguments here, in one place, so they
//! accept and reject the same inputs.
//!
//! [`crate::Backend::qkv_norm_rope_kv_write`] extends it to Qwen3 / Qwen3.5 attention: per-head
//! RMSNorm of q and k between the bias and RoPE ([`QkNorm`]), and for gated layers (per head
//! `[query | gate]` rows) the gate rows copied out for the attention's output gate.

use crate::error::shape_err;
use crate::rope::DeviceRope;
use crate::{Result, Tensor};

/// The op's name in errors.
pub(crate) const OP: &str = "qkv_rope_kv_write";

/// Where [`crate::Backend::qkv_rope_kv_write`] reads each token's Q, K and V.
#[derive(Clone, Copy)]
pub enum QkvSource<'a> {
    /// The output of a stacked QKV projection: one row `[q | k | v]` per token,
    /// `[n, heads * q_head_stride + 2 * kv_heads * head_dim]`.
    Stacked(&'a Tensor),
    /// Separate projections: q `[n, heads * q_head_stride]`, k and v `[n, kv_heads * head_dim]`.
    Separate {
        /// Query rows.
        q: &'a Tensor,
        /// Key rows.
        k: &'a Tensor,
        /// Value rows.
        v: &'a Tensor,
    },
}

/// Biases added to Q, K and V before RoPE, laid out as the projection's rows.
#[derive(Clone, Copy)]
pub enum QkvBias<'a> {
    /// No bias.
    None,
    /// One stacked bias `[heads * q_head_stride + 2 * kv_heads * head_dim]`.
    Stacked(&'a Tensor),
    /// One optional bias per projection (each as wide as its rows).
    Separate {
        /// Query bias.
        q: Option<&'a Tensor>,
        /// Key bias.
        k: Option<&'a Tensor>,
        /// Value bias.
        v: Option<&'a Tensor>,
    },
}

/// Per-head RMSNorm of the queries and keys (Qwen3 / Qwen3.5 QK-norm), applied after the bias and
/// before RoPE over each head's `head_dim` elements, as [`crate::Backend::rms_norm`] does.
#[derive(Clone, Copy, Default)]
pub struct QkNorm<'a> {
    /// Query norm: weight `[head_dim]` and eps.
    pub q: Option<(&'a Tensor, f32)>,
    /// Key norm: weight `[head_dim]` and eps.
    pub k: Option<(&'a Tensor, f32)>,
}

impl QkNorm<'_> {
    /// Whether neither norm is present.
    pub fn is_none(&self) -> bool {
        self.q.is_none() && self.k.is_none()
    }
}

/// Head geometry of [`crate::Backend::qkv_rope_kv_write`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QkvRopeParams {
    /// Query heads.
    pub heads: usize,
    /// Key/value heads.
    pub kv_heads: usize,
    /// Elements per head (even).
    pub head_dim: usize,
    /// Distance between consecutive query heads in a projection row: `head_dim`, or
    /// `2 * head_dim` for rows of `[query | gate]` per head (Qwen3.5's gated attention), whose
    /// gates this op skips.
    pub q_head_stride: usize,
}

impl QkvRopeParams {
    /// Plain GQA heads (`q_head_stride == head_dim`).
    pub fn new(heads: usize, kv_heads: usize, head_dim: usize) -> QkvRopeParams {
        QkvRopeParams {
            heads,
            kv_heads,
            head_dim,
            q_head_stride: head_dim,
        }
    }

    /// Width of the query part of a projection row.
    pub fn q_width(&self) -> usize {
        self.heads * self.q_head_stride
    }

    /// Width of the key (and of the value) part of a projection row.
    pub fn kv_width(&self) -> usize {
        self.kv_heads * self.head_dim
    }
}

/// One of Q, K, V as the kernels read it: element `e` of token `t` is
/// `tensor[t * stride + col + e]`.
#[derive(Clone, Copy)]
pub(crate) struct Part<'a> {
    pub tensor: &'a Tensor,
    pub col: usize,
    pub stride: usize,
}

/// A bias of one part: element `e` is `tensor[col + e]`.
pub(crate) type BiasPart<'a> = Option<(&'a Tensor, usize)>;

/// The validated arguments: token count, the three parts and their biases, the cache geometry.
pub(crate) struct Plan<'a> {
    pub n: usize,
    pub parts: [Part<'a>; 3],
    pub bias: [BiasPart<'a>; 3],
    /// Rotating pairs per head (`rot_dim / 2`).
    pub half: usize,
    /// Positions the rope table covers.
    pub max_pos: usize,
}

fn cache_dims(c: &Tensor) -> Result<[usize; 4]> {
    match c.shape[..] {
        [a, b, h, d] => Ok([a, b, h, d]),
        _ => Err(shape_err(
            OP,
            format!(
                "cache must be [num_blocks, block_size, kv_heads, head_dim], is {:?}",
                c.shape
            ),
        )),
    }
}

fn width(what: &str, t: &Tensor, want: usize) -> Result<()> {
    if t.row_len() != want {
        return Err(shape_err(
            OP,
            format!("{what} rows of {} vs {want} expected", t.row_len()),
        ));
    }
    Ok(())
}

fn bias_len(what: &str, t: &Tensor, want: usize) -> Result<()> {
    if t.numel() != want {
        return Err(shape_err(
            OP,
            format!("{what} bias of {} vs {want} expected", t.numel()),
        ));
    }
    Ok(())
}

/// Checks every argument's shape (not its device or dtype, which each backend checks as it
/// takes pointers) and the host copies of `positions` and `slots` against the table and cache.
#[allow(clippy::too_many_arguments)]
pub(crate) fn plan<'a>(
    src: QkvSource<'a>,
    bias: QkvBias<'a>,
    p: &QkvRopeParams,
    positions: &[u32],
    rope: &DeviceRope,
    q_out: &Tensor,
    k_cache: &Tensor,
    v_cache: &Tensor,
    slots: &[u32],
) -> Result<Plan<'a>> {
    let (h, kvh, hd) = (p.heads, p.kv_heads, p.head_dim);
    if h == 0 || kvh == 0 || hd == 0 || !hd.is_multiple_of(2) || p.q_head_stride < hd {
        return Err(shape_err(OP, format!("bad head geometry {p:?}")));
    }
    let (qw, kw) = (p.q_width(), p.kv_width());
    let (n, parts) = match src {
        QkvSource::Stacked(x) => {
            width("stacked qkv", x, qw + 2 * kw)?;
            let s = qw + 2 * kw;
            let part = |col| Part {
                tensor: x,
                col,
                stride: s,
            };
            (x.rows(), [part(0), part(qw), part(qw + kw)])
        }
        QkvSource::Separate { q, k, v } => {
            width("q", q, qw)?;
            width("k", k, kw)?;
            width("v", v, kw)?;
            let n = q.rows();
            if k.rows() != n || v.rows() != n {
                return Err(shape_err(
                    OP,
                    format!("q/k/v of {n}/{}/{} rows", k.rows(), v.rows()),
                ));
            }
            let part = |tensor, stride| Part {
                tensor,
                col: 0,
                stride,
            };
            (n, [part(q, qw), part(k, kw), part(v, kw)])
        }
    };
    let bias = match bias {
        QkvBias::None => [None, None, None],
        QkvBias::Stacked(b) => {
            bias_len("stacked", b, qw + 2 * kw)?;
            [Some((b, 0)), Some((b, qw)), Some((b, qw + kw))]
        }
        QkvBias::Separate { q, k, v } => {
            let mut out = [None, None, None];
            for ((o, b), (what, w)) in
                out.iter_mut()
                    .zip([q, k, v])
                    .zip([("q", qw), ("k", kw), ("v", kw)])
            {
                if let Some(b) = b {
                    bias_len(what, b, w)?;
                    *o = Some((b, 0));
                }
            }
            out
        }
    };
    if q_out.shape[..] != [n, h, hd] {
        return Err(shape_err(
            OP,
            format!("q_out must be [{n}, {h}, {hd}], is {:?}", q_out.shape),
        ));
    }
    let rot = rope.config.rot_dim;
    if rot == 0 || !rot.is_multiple_of(2) || rot > hd {
        return Err(shape_err(
            OP,
            format!("rot_dim {rot} does not fit head_dim {hd}"),
        ));
    }
    let half = rot / 2;
    let max_pos = rope.cos.numel() / half;
    if rope.sin.numel() != rope.cos.numel() {
        return Err(shape_err(OP, "rope cos and sin tables differ in size"));
    }
    if positions.len() != n {
        return Err(shape_err(
            OP,
            format!("{} positions for {n} tokens", positions.len()),
        ));
    }
    if let Some(&pos) = positions.iter().find(|&&x| x as usize >= max_pos) {
        return Err(shape_err(
            OP,
            format!("position {pos} beyond the table's {max_pos}"),
        ));
    }
    let dims = cache_dims(k_cache)?;
    if cache_dims(v_cache)? != dims || k_cache.dtype != v_cache.dtype {
        return Err(shape_err(OP, "k and v caches differ in shape or dtype"));
    }
    if dims[2] != kvh || dims[3] != hd {
        return Err(shape_err(
            OP,
            format!("cache heads {:?} vs {kvh} kv heads of {hd}", &dims[2..]),
        ));
    }
    let cache_slots = dims[0] * dims[1];
    if slots.len() != n {
        return Err(shape_err(
            OP,
            format!("{} cache slots for {n} tokens", slots.len()),
        ));
    }
    if let Some(&s) = slots.iter().find(|&&s| s as usize >= cache_slots) {
        return Err(shape_err(
            OP,
            format!("slot {s} beyond the cache's {cache_slots}"),
        ));
    }
    Ok(Plan {
        n,
        parts,
        bias,
        half,
        max_pos,
    })
}

/// Checks the norm weights and the gate output of [`crate::Backend::qkv_norm_rope_kv_write`]
/// for `n` tokens: each weight `[head_dim]` with a finite eps >= 0; a gate output needs the
/// `[query | gate]` layout (`q_head_stride == 2 * head_dim`) and holds `n * heads * head_dim`.
pub(crate) fn check_extras(
    p: &QkvRopeParams,
    n: usize,
    norm: &QkNorm<'_>,
    gate_out: Option<&Tensor>,
) -> Result<()> {
    for (what, w) in [("q_norm", norm.q), ("k_norm", norm.k)] {
        if let Some((t, eps)) = w {
            if t.numel() != p.head_dim {
                return Err(shape_err(
                    OP,
                    format!("{what} weight of {} vs head_dim {}", t.numel(), p.head_dim),
                ));
            }
            if !eps.is_finite() || eps < 0.0 {
                return Err(shape_err(OP, format!("{what} eps {eps}")));
            }
        }
    }
    if let Some(g) = gate_out {
        if p.q_head_stride != 2 * p.head_dim {
            return Err(shape_err(
                OP,
                format!("a gate output needs [query | gate] heads, not {p:?}"),
            ));
        }
        let want = n * p.heads * p.head_dim;
        if g.numel() != want {
            return Err(shape_err(
                OP,
                format!("gate_out holds {} elements vs {want}", g.numel()),
            ));
        }
    }
    Ok(())
}
