//! Qwen3.5's gated full attention: one projection yields each head's query and an output gate
//! (`[q | gate]` per head), per-head QK RMSNorm, partial rotary on the leading dims, GQA over the
//! paged cache, then `attn * sigmoid(gate)` before the output projection.

use pocket_kernels::rope::DeviceRope;
use pocket_kernels::{AttentionParams, Device, Tensor};
use pocket_layers::scratch::{fit, view, workspace};
use pocket_layers::{BatchTensors, KvCache, LayerError, Linear, Result, RmsNorm};

/// One gated attention layer.
pub struct GatedAttention {
    /// `[heads * 2 * head_dim, hidden]`: per head, `head_dim` query rows then `head_dim` gate rows.
    pub q: Linear,
    /// `[kv_heads * head_dim, hidden]`.
    pub k: Linear,
    /// `[kv_heads * head_dim, hidden]`.
    pub v: Linear,
    /// `[hidden, heads * head_dim]`.
    pub o: Linear,
    /// Per-head query norm (scale already `1 + w`).
    pub q_norm: RmsNorm,
    /// Per-head key norm (scale already `1 + w`).
    pub k_norm: RmsNorm,
    /// Heads and scale.
    pub params: AttentionParams,
    /// Index of this layer's K/V tensors in the cache.
    pub cache_layer: usize,
}

/// Intermediate activations of [`GatedAttention::forward`], reused across steps.
pub struct GatedAttentionScratch {
    qg: Tensor,
    q: Tensor,
    gate: Tensor,
    k: Tensor,
    v: Tensor,
    normed: Tensor,
    out: Tensor,
}

impl GatedAttentionScratch {
    /// Workspaces for `rows` tokens (grown on demand).
    pub fn new(dev: &Device, rows: usize, p: &AttentionParams) -> Result<Self> {
        let (qw, kw) = (p.num_heads * p.head_dim, p.num_kv_heads * p.head_dim);
        Ok(GatedAttentionScratch {
            qg: workspace(dev, rows, 2 * qw)?,
            q: workspace(dev, rows, qw)?,
            gate: workspace(dev, rows, qw)?,
            k: workspace(dev, rows, kw)?,
            v: workspace(dev, rows, kw)?,
            normed: workspace(dev, rows, qw)?,
            out: workspace(dev, rows, qw)?,
        })
    }
}

impl GatedAttention {
    /// Checks that the projections agree with the params.
    pub fn validate(&self) -> Result<()> {
        let p = &self.params;
        let (qw, kw) = (p.num_heads * p.head_dim, p.num_kv_heads * p.head_dim);
        let ok = self.q.out_features() == 2 * qw
            && self.k.out_features() == kw
            && self.v.out_features() == kw
            && self.o.in_features() == qw
            && p.num_kv_heads > 0
            && p.num_heads.is_multiple_of(p.num_kv_heads)
            && self.q_norm.dim() == p.head_dim
            && self.k_norm.dim() == p.head_dim;
        if !ok {
            return Err(LayerError::Shape(format!(
                "gated attention layer {}: projections q {} k {} v {} o {} do not fit {p:?}",
                self.cache_layer,
                self.q.out_features(),
                self.k.out_features(),
                self.v.out_features(),
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
        s: &mut GatedAttentionScratch,
        out: &mut Tensor,
    ) -> Result<()> {
        let p = &self.params;
        let (h, kvh, hd) = (p.num_heads, p.num_kv_heads, p.head_dim);
        let n = x.rows();
        let cap = s.qg.capacity() / (2 * h * hd);
        view(&mut s.qg, &[cap, 2 * h * hd])?;
        fit(dev, &mut s.qg, n)?;
        for t in [&mut s.q, &mut s.gate, &mut s.normed, &mut s.out] {
            view(t, &[t.capacity() / (h * hd), h * hd])?;
            fit(dev, t, n)?;
        }
        for t in [&mut s.k, &mut s.v] {
            view(t, &[t.capacity() / (kvh * hd), kvh * hd])?;
            fit(dev, t, n)?;
        }
        self.q.forward(dev, x, &mut s.qg)?;
        self.k.forward(dev, x, &mut s.k)?;
        self.v.forward(dev, x, &mut s.v)?;
        // Each head's row is [query | gate]: split them, then normalise the query per head.
        view(&mut s.qg, &[n * h, 2 * hd])?;
        view(&mut s.q, &[n * h, hd])?;
        view(&mut s.gate, &[n * h, hd])?;
        dev.split_halves(&s.qg, &mut s.q, &mut s.gate)?;
        view(&mut s.normed, &[n * h, hd])?;
        self.q_norm.forward(dev, &s.q, &mut s.normed)?;
        std::mem::swap(&mut s.q, &mut s.normed);
        view(&mut s.k, &[n * kvh, hd])?;
        view(&mut s.normed, &[n * kvh, hd])?;
        self.k_norm.forward(dev, &s.k, &mut s.normed)?;
        std::mem::swap(&mut s.k, &mut s.normed);
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
        view(&mut s.gate, &[n, h * hd])?;
        dev.sigmoid_mul(&mut s.out, &s.gate)?;
        self.o.forward(dev, &s.out, out)
    }
}
