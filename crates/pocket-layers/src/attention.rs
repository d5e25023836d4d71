//! The GQA self-attention block: Q/K/V projections (optional bias), optional per-head QK-norm,
//! RoPE, the paged-cache write, attention and the output projection.

use pocket_kernels::rope::DeviceRope;
use pocket_kernels::{AttentionParams, Device, Tensor};

use crate::batch::BatchTensors;
use crate::scratch::{fit, view, workspace};
use crate::{KvCache, LayerError, Linear, Result, RmsNorm};

/// One attention layer.
pub struct Attention {
    /// `[heads * head_dim, hidden]`.
    pub q: Linear,
    /// `[kv_heads * head_dim, hidden]`.
    pub k: Linear,
    /// `[kv_heads * head_dim, hidden]`.
    pub v: Linear,
    /// `[hidden, heads * head_dim]`.
    pub o: Linear,
    /// Per-head RMSNorm of the queries (Qwen3), applied before RoPE.
    pub q_norm: Option<RmsNorm>,
    /// Per-head RMSNorm of the keys (Qwen3), applied before RoPE.
    pub k_norm: Option<RmsNorm>,
    /// Heads, scale, window and softcap.
    pub params: AttentionParams,
    /// Index of this layer's K/V tensors in the cache.
    pub cache_layer: usize,
}

/// Intermediate activations of [`Attention::forward`], reused across steps.
pub struct AttentionScratch {
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
            q: workspace(dev, rows, qw)?,
            k: workspace(dev, rows, kw)?,
            v: workspace(dev, rows, kw)?,
            normed: workspace(dev, rows, qw)?,
            out: workspace(dev, rows, qw)?,
        })
    }
}

impl Attention {
    /// Checks that the projections agree with the params.
    pub fn validate(&self) -> Result<()> {
        let p = &self.params;
        let (qw, kw) = (p.num_heads * p.head_dim, p.num_kv_heads * p.head_dim);
        let ok = self.q.out_features() == qw
            && self.k.out_features() == kw
            && self.v.out_features() == kw
            && self.o.in_features() == qw
            && p.num_kv_heads > 0
            && p.num_heads.is_multiple_of(p.num_kv_heads)
            && self.q_norm.as_ref().is_none_or(|n| n.dim() == p.head_dim)
            && self.k_norm.as_ref().is_none_or(|n| n.dim() == p.head_dim);
        if !ok {
            return Err(LayerError::Shape(format!(
                "attention layer {}: projections q {} k {} v {} o {} do not fit {p:?}",
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
        s: &mut AttentionScratch,
        out: &mut Tensor,
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
        self.q.forward(dev, x, &mut s.q)?;
        self.k.forward(dev, x, &mut s.k)?;
        self.v.forward(dev, x, &mut s.v)?;
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
        self.o.forward(dev, &s.out, out)
    }
}
