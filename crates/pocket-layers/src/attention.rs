//! The GQA self-attention block: Q/K/V projections (optional bias), optional per-head QK-norm,
//! RoPE, the paged-cache write, attention, an optional sigmoid output gate (Qwen3.5/Qwen3-Next:
//! the query projection yields `[query | gate]` per head) and the output projection. Q, K and V
//! may be one stacked weight whose output row `[q | k | v]` is split into the three.

use pocket_kernels::qkv_rope::QkNorm;
use pocket_kernels::rope::DeviceRope;
use pocket_kernels::{
    AttentionParams, Device, DeviceKind, QkvBias, QkvRopeParams, QkvSource, Tensor,
};

use crate::batch::BatchTensors;
use crate::norm::{project_then, ResidualNorm};
use crate::scratch::{fit, view, workspace};
use crate::{KvCache, LayerError, Linear, Result, RmsNorm};

/// The Q, K and V projections of an attention layer.
// One per layer, built once at load: the size of the separate variant costs nothing worth a box.
#[allow(clippy::large_enum_variant)]
pub enum QkvProj {
    /// Three weights.
    Separate {
        /// `[heads * head_dim, hidden]`, or `[heads * 2 * head_dim, hidden]` with an output gate
        /// (per head, `head_dim` query rows then `head_dim` gate rows).
        q: Linear,
        /// `[kv_heads * head_dim, hidden]`.
        k: Linear,
        /// `[kv_heads * head_dim, hidden]`.
        v: Linear,
    },
    /// One weight, the rows of q, k and v stacked (`[q_rows + 2 * kv_heads * head_dim, hidden]`,
    /// biases stacked alike): one GEMV, its output row `[q | k | v]` split by `split_columns`.
    Fused(Linear),
}

impl QkvProj {
    /// Output features of q, k and v, for a layer expecting `q_rows` and `kv_rows` (a stacked
    /// weight of that total is split by them; another total reports as all q, failing checks).
    pub fn out_features(&self, q_rows: usize, kv_rows: usize) -> (usize, usize, usize) {
        match self {
            QkvProj::Separate { q, k, v } => (q.out_features(), k.out_features(), v.out_features()),
            QkvProj::Fused(w) if w.out_features() == q_rows + 2 * kv_rows => {
                (q_rows, kv_rows, kv_rows)
            }
            QkvProj::Fused(w) => (w.out_features(), 0, 0),
        }
    }

    /// Input features (all three read the same input).
    pub fn in_features(&self) -> (usize, usize, usize) {
        match self {
            QkvProj::Separate { q, k, v } => (q.in_features(), k.in_features(), v.in_features()),
            QkvProj::Fused(w) => (w.in_features(), w.in_features(), w.in_features()),
        }
    }
}

/// One attention layer.
pub struct Attention {
    /// The Q, K and V projections.
    pub qkv: QkvProj,
    /// `[hidden, heads * head_dim]`.
    pub o: Linear,
    /// Per-head RMSNorm of the queries (Qwen3), applied before RoPE.
    pub q_norm: Option<RmsNorm>,
    /// Per-head RMSNorm of the keys (Qwen3), applied before RoPE.
    pub k_norm: Option<RmsNorm>,
    /// Whether the query projection also yields an output gate: `attn * sigmoid(gate)` goes into
    /// the output projection.
    pub output_gate: bool,
    /// Heads, scale, window and softcap.
    pub params: AttentionParams,
    /// Index of this layer's K/V tensors in the cache.
    pub cache_layer: usize,
}

/// Intermediate activations of [`Attention::forward`], reused across steps.
pub struct AttentionScratch {
    /// `[query | gate]` rows and the split-off gates, for gated layers only.
    gated: Option<(Tensor, Tensor)>,
    /// The `[q | k | v]` output of a stacked projection (`[query | gate]` rows in place of q for
    /// gated layers; allocated up front so a graph-captured step never allocates).
    fused: Tensor,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    normed: Tensor,
    out: Tensor,
}

impl AttentionScratch {
    /// Workspaces for `rows` tokens of attention with these params (grown on demand).
    pub fn new(dev: &Device, rows: usize, p: &AttentionParams) -> Result<Self> {
        let (qw, kw) = (p.num_heads * p.head_dim, p.num_kv_heads * p.head_dim);
        Ok(AttentionScratch {
            gated: None,
            fused: workspace(dev, rows, qw + 2 * kw)?,
            q: workspace(dev, rows, qw)?,
            k: workspace(dev, rows, kw)?,
            v: workspace(dev, rows, kw)?,
            normed: workspace(dev, rows, qw)?,
            out: workspace(dev, rows, qw)?,
        })
    }

    /// Workspaces for a layer with an output gate.
    pub fn new_gated(dev: &Device, rows: usize, p: &AttentionParams) -> Result<Self> {
        let qw = p.num_heads * p.head_dim;
        let mut s = Self::new(dev, rows, p)?;
        s.gated = Some((workspace(dev, rows, 2 * qw)?, workspace(dev, rows, qw)?));
        s.fused = workspace(dev, rows, 2 * qw + 2 * p.num_kv_heads * p.head_dim)?;
        Ok(s)
    }
}

impl Attention {
    /// Checks that the projections agree with the params.
    pub fn validate(&self) -> Result<()> {
        let p = &self.params;
        let (qw, kw) = (p.num_heads * p.head_dim, p.num_kv_heads * p.head_dim);
        let q_rows = if self.output_gate { 2 * qw } else { qw };
        let (qo, ko, vo) = self.qkv.out_features(q_rows, kw);
        let (qi, ki, vi) = self.qkv.in_features();
        let ok = qo == q_rows
            && ko == kw
            && vo == kw
            && qi == ki
            && ki == vi
            && self.o.in_features() == qw
            && p.num_kv_heads > 0
            && p.num_heads.is_multiple_of(p.num_kv_heads)
            && self.q_norm.as_ref().is_none_or(|n| n.dim() == p.head_dim)
            && self.k_norm.as_ref().is_none_or(|n| n.dim() == p.head_dim);
        if !ok {
            return Err(LayerError::Shape(format!(
                "attention layer {}: projections q {} k {} v {} o {} do not fit {p:?}",
                self.cache_layer,
                qo,
                ko,
                vo,
                self.o.in_features()
            )));
        }
        Ok(())
    }

    /// `out[n, hidden] = attention(x[n, hidden])`, writing this step's K/V into `cache`.
    #[allow(clippy::too_many_arguments)]
    pub fn forward(
        &self,
        dev: &Device,
        x: &Tensor,
        batch: &BatchTensors,
        rope: &DeviceRope,
        cache: &mut KvCache,
        s: &mut AttentionScratch,
        out: &mut Tensor,
    ) -> Result<()> {
        self.run(dev, x, batch, rope, cache, s, out, None)
    }

    /// [`Attention::forward`], then `then.residual += out; then.normed = then.norm(residual)`:
    /// the output projection and the norm after the block in one op where the device folds them
    /// ([`RmsNorm::proj_add_forward`]; CUDA decode). `then.normed` is a second buffer, not `x`'s
    /// (models ping-pong two normed buffers).
    #[allow(clippy::too_many_arguments)]
    pub fn forward_add_norm(
        &self,
        dev: &Device,
        x: &Tensor,
        batch: &BatchTensors,
        rope: &DeviceRope,
        cache: &mut KvCache,
        s: &mut AttentionScratch,
        out: &mut Tensor,
        then: ResidualNorm<'_>,
    ) -> Result<()> {
        self.run(dev, x, batch, rope, cache, s, out, Some(then))
    }

    #[allow(clippy::too_many_arguments)]
    fn run(
        &self,
        dev: &Device,
        x: &Tensor,
        batch: &BatchTensors,
        rope: &DeviceRope,
        cache: &mut KvCache,
        s: &mut AttentionScratch,
        out: &mut Tensor,
        then: Option<ResidualNorm<'_>>,
    ) -> Result<()> {
        let p = &self.params;
        let (h, kvh, hd) = (p.num_heads, p.num_kv_heads, p.head_dim);
        let n = x.rows();
        for t in [&mut s.q, &mut s.normed, &mut s.out] {
            view(t, &[t.capacity() / (h * hd), h * hd])?;
            fit(dev, t, n)?;
        }
        for t in [&mut s.k, &mut s.v] {
            view(t, &[t.capacity() / (kvh * hd), kvh * hd])?;
            fit(dev, t, n)?;
        }
        let extras = self.output_gate || self.q_norm.is_some() || self.k_norm.is_some();
        if fused_qkv(dev) && (!extras || dev.fused_qkv_norm()) {
            return self.forward_fused(dev, x, batch, rope, cache, s, out, then);
        }
        let q_rows = if self.output_gate { 2 * h * hd } else { h * hd };
        if let QkvProj::Fused(w) = &self.qkv {
            let width = q_rows + 2 * kvh * hd;
            let fused = &mut s.fused;
            view(fused, &[fused.capacity() / width, width])?;
            fit(dev, fused, n)?;
            w.forward(dev, x, fused)?;
        }
        if self.output_gate {
            let Some((qg, gate)) = s.gated.as_mut() else {
                return Err(LayerError::Shape(format!(
                    "attention layer {}: gated layer given ungated scratch (use AttentionScratch::new_gated)",
                    self.cache_layer
                )));
            };
            view(qg, &[qg.capacity() / (2 * h * hd), 2 * h * hd])?;
            fit(dev, qg, n)?;
            view(gate, &[gate.capacity() / (h * hd), h * hd])?;
            fit(dev, gate, n)?;
            self.project(dev, x, qg, &mut s.k, &mut s.v, &s.fused)?;
            // Each head's row is [query | gate]: split them.
            view(qg, &[n * h, 2 * hd])?;
            view(&mut s.q, &[n * h, hd])?;
            view(gate, &[n * h, hd])?;
            dev.split_halves(qg, &mut s.q, gate)?;
        } else {
            self.project(dev, x, &mut s.q, &mut s.k, &mut s.v, &s.fused)?;
        }
        if let Some(norm) = &self.q_norm {
            view(&mut s.q, &[n * h, hd])?;
            view(&mut s.normed, &[n * h, hd])?;
            norm.forward(dev, &s.q, &mut s.normed)?;
            std::mem::swap(&mut s.q, &mut s.normed);
        }
        if let Some(norm) = &self.k_norm {
            view(&mut s.k, &[n * kvh, hd])?;
            view(&mut s.normed, &[n * kvh, hd])?;
            norm.forward(dev, &s.k, &mut s.normed)?;
            std::mem::swap(&mut s.k, &mut s.normed);
        }
        view(&mut s.q, &[n, h, hd])?;
        view(&mut s.k, &[n, kvh, hd])?;
        view(&mut s.v, &[n, kvh, hd])?;
        dev.rope(&mut s.q, &batch.positions, rope)?;
        dev.rope(&mut s.k, &batch.positions, rope)?;
        let (kc, vc) = cache.layer_mut(self.cache_layer)?;
        dev.kv_write(&s.k, &s.v, kc, vc, &batch.meta)?;
        view(&mut s.out, &[n, h, hd])?;
        dev.attention(&s.q, kc, vc, &batch.meta, p, &mut s.out)?;
        view(&mut s.out, &[n, h * hd])?;
        if let (true, Some((_, gate))) = (self.output_gate, s.gated.as_mut()) {
            view(gate, &[n, h * hd])?;
            dev.sigmoid_mul(&mut s.out, gate)?;
        }
        project_then(dev, &self.o, &s.out, out, then)
    }

    /// [`Attention::forward`] through the one-pass attention-input op
    /// ([`pocket_kernels::Backend::qkv_norm_rope_kv_write`]): the projection GEMV(s) without their
    /// bias, then bias, QK-norm, RoPE, the gate split and the cache write in one op (one CUDA
    /// launch instead of up to nine), then attention with the output gate in its epilogue
    /// ([`pocket_kernels::Backend::attention_gated`]). Scratch tensors are the unfused path's and
    /// keep their roles from step to step, so a captured decode graph stays valid.
    #[allow(clippy::too_many_arguments)]
    fn forward_fused(
        &self,
        dev: &Device,
        x: &Tensor,
        batch: &BatchTensors,
        rope: &DeviceRope,
        cache: &mut KvCache,
        s: &mut AttentionScratch,
        out: &mut Tensor,
        then: Option<ResidualNorm<'_>>,
    ) -> Result<()> {
        let p = &self.params;
        let (h, kvh, hd) = (p.num_heads, p.num_kv_heads, p.head_dim);
        let n = x.rows();
        let gated = self.output_gate;
        let qp = QkvRopeParams {
            q_head_stride: if gated { 2 * hd } else { hd },
            ..QkvRopeParams::new(h, kvh, hd)
        };
        let norm = QkNorm {
            q: self.q_norm.as_ref().map(|m| (&m.weight, m.eps)),
            k: self.k_norm.as_ref().map(|m| (&m.weight, m.eps)),
        };
        let (qw, kw) = (qp.q_width(), qp.kv_width());
        let (gate_rows, gate) = match (gated, s.gated.as_mut()) {
            (false, _) => (None, None),
            (true, Some((qg, gate))) => {
                view(qg, &[qg.capacity() / qw, qw])?;
                fit(dev, qg, n)?;
                view(gate, &[gate.capacity() / (h * hd), h * hd])?;
                fit(dev, gate, n)?;
                (Some(qg), Some(gate))
            }
            (true, None) => {
                return Err(LayerError::Shape(format!(
                    "attention layer {}: gated layer given ungated scratch (use AttentionScratch::new_gated)",
                    self.cache_layer
                )))
            }
        };
        // `s.q` (viewed [n, heads, head_dim]) receives the rotated queries.
        let rows = s.q.capacity() / (h * hd);
        view(&mut s.q, &[rows, h, hd])?;
        fit(dev, &mut s.q, n)?;
        let (kc, vc) = cache.layer_mut(self.cache_layer)?;
        // The projection(s) first; then one op call for either source.
        let (src, bias) = match &self.qkv {
            QkvProj::Fused(w) => {
                let width = qw + 2 * kw;
                let fused = &mut s.fused;
                view(fused, &[fused.capacity() / width, width])?;
                fit(dev, fused, n)?;
                dev.matmul(x, &w.weight, fused)?;
                let bias = w.bias.as_ref().map_or(QkvBias::None, QkvBias::Stacked);
                (QkvSource::Stacked(fused), bias)
            }
            QkvProj::Separate { q, k, v } => {
                // Projection rows without their bias (the op adds it): the query rows go to the
                // `[query | gate]` scratch of a gated layer, else to `normed` (free here).
                let q_rows = match gate_rows {
                    Some(qg) => qg,
                    None => {
                        let t = &mut s.normed;
                        view(t, &[t.capacity() / qw, qw])?;
                        fit(dev, t, n)?;
                        t
                    }
                };
                dev.matmul(x, &q.weight, q_rows)?;
                dev.matmul(x, &k.weight, &mut s.k)?;
                dev.matmul(x, &v.weight, &mut s.v)?;
                let bias = QkvBias::Separate {
                    q: q.bias.as_ref(),
                    k: k.bias.as_ref(),
                    v: v.bias.as_ref(),
                };
                let src = QkvSource::Separate {
                    q: q_rows,
                    k: &s.k,
                    v: &s.v,
                };
                (src, bias)
            }
        };
        dev.qkv_norm_rope_kv_write(
            src,
            bias,
            &qp,
            norm,
            &batch.positions,
            rope,
            &mut s.q,
            gate,
            kc,
            vc,
            &batch.meta,
        )?;
        self.attend(dev, &batch.meta, cache, s, out, then)
    }

    /// Attention of the rotated queries in `s.q` (`[n, heads, head_dim]`) over the cache (gated
    /// by the gate rows in the scratch for gated layers), then the output projection (and `then`).
    fn attend(
        &self,
        dev: &Device,
        meta: &pocket_kernels::AttentionMeta,
        cache: &mut KvCache,
        s: &mut AttentionScratch,
        out: &mut Tensor,
        then: Option<ResidualNorm<'_>>,
    ) -> Result<()> {
        let p = &self.params;
        let (h, hd) = (p.num_heads, p.head_dim);
        let n = s.q.shape[0];
        let (kc, vc) = cache.layer_mut(self.cache_layer)?;
        let rows = s.out.capacity() / (h * hd);
        view(&mut s.out, &[rows, h, hd])?;
        fit(dev, &mut s.out, n)?;
        match (self.output_gate, s.gated.as_ref()) {
            (true, Some((_, gate))) => {
                dev.attention_gated(&s.q, gate, kc, vc, meta, p, &mut s.out)?;
            }
            _ => dev.attention(&s.q, kc, vc, meta, p, &mut s.out)?,
        }
        view(&mut s.out, &[n, h * hd])?;
        project_then(dev, &self.o, &s.out, out, then)
    }

    /// Writes the q (or `[query | gate]`), k and v rows of `x`: three GEMVs, or the column split
    /// of the stacked projection's output `fused` (already computed by the caller).
    fn project(
        &self,
        dev: &Device,
        x: &Tensor,
        q: &mut Tensor,
        k: &mut Tensor,
        v: &mut Tensor,
        fused: &Tensor,
    ) -> Result<()> {
        match &self.qkv {
            QkvProj::Separate {
                q: wq,
                k: wk,
                v: wv,
            } => {
                wq.forward(dev, x, q)?;
                wk.forward(dev, x, k)?;
                wv.forward(dev, x, v)
            }
            QkvProj::Fused(_) => Ok(dev.split_columns(fused, &mut [q, k, v])?),
        }
    }
}

/// Whether layers take the one-pass attention-input op or the unfused split / bias / (norm) /
/// rope / kv_write sequence. On by default on CUDA, where it replaces 4-9 launches by one; off on
/// the CPU, where there is no launch to save and the op's reference implementation gathers K/V
/// into temporaries. `POCKET_FUSED_QKV=1` (or `=0`) forces it on (off) on any device, for A/B runs.
/// Layers with QK-norm or an output gate also need the backend's consent
/// ([`pocket_kernels::Backend::fused_qkv_norm`]; CUDA: `POCKET_QKV_NORM_FUSED=0` declines).
fn fused_qkv(dev: &Device) -> bool {
    static ENV: std::sync::OnceLock<Option<bool>> = std::sync::OnceLock::new();
    let forced = *ENV.get_or_init(|| match std::env::var("POCKET_FUSED_QKV").as_deref() {
        Ok("1") => Some(true),
        Ok("0") => Some(false),
        _ => None,
    });
    forced.unwrap_or(!matches!(dev.kind(), DeviceKind::Cpu))
}
