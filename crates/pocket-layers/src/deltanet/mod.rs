//! The Gated DeltaNet token mixer (Qwen3.5 / Qwen3-Next linear attention): in-projections, the
//! short causal conv with its state, the gated delta rule (chunked for prefill, recurrent for
//! decode), the gated RMSNorm and the output projection. Its state lives in a
//! [`crate::StateCache`] layer with two tensors: the conv window and the delta-rule matrices.
//! The `[q | k | v]` and `z` projections, and the `b` and `a` ones, may each be one stacked
//! weight whose output row is split in two (`split_columns`), as attention's Q/K/V are.

use pocket_kernels::recurrent::{BaInputs, ColumnRange, DeltaNetDecodeInputs, WeightRows};
use pocket_kernels::{DeltaRuleParams, Device, RecurrentMeta, Tensor};

use crate::norm::{project_then, ResidualNorm};
use crate::scratch::{fit, view, workspace};
use crate::{LayerError, Linear, Result, StateCache};

/// Two projections of the same input: two weights, or one with the first's rows then the
/// second's (one GEMV, its output row split in two).
// One pair per layer, built once at load: the separate variant's size costs nothing worth a box.
#[allow(clippy::large_enum_variant)]
pub enum ProjPair {
    /// Two weights.
    Separate {
        /// The first projection.
        first: Linear,
        /// The second projection.
        second: Linear,
    },
    /// One weight `[rows_first + rows_second, hidden]`.
    Fused(Linear),
}

impl ProjPair {
    /// Output features of the two parts, for a layer expecting `first` rows first (a stacked
    /// weight reports `(first, total - first)`; one too small reports `(total, 0)`, failing
    /// checks).
    pub fn out_features(&self, first: usize) -> (usize, usize) {
        match self {
            ProjPair::Separate {
                first: a,
                second: b,
            } => (a.out_features(), b.out_features()),
            ProjPair::Fused(w) if w.out_features() > first => (first, w.out_features() - first),
            ProjPair::Fused(w) => (w.out_features(), 0),
        }
    }

    /// Input features of the two parts.
    pub fn in_features(&self) -> (usize, usize) {
        match self {
            ProjPair::Separate {
                first: a,
                second: b,
            } => (a.in_features(), b.in_features()),
            ProjPair::Fused(w) => (w.in_features(), w.in_features()),
        }
    }

    /// `x A^T` and `x B^T` where they land: the two column ranges of `both` for a stacked weight
    /// (no split), else `first` and `second` whole (`first_width`: the first part's columns).
    fn project<'t>(
        &self,
        dev: &Device,
        x: &Tensor,
        both: &'t mut Tensor,
        first: &'t mut Tensor,
        second: &'t mut Tensor,
        first_width: usize,
    ) -> Result<(ColumnRange<'t>, ColumnRange<'t>)> {
        let whole = |tensor: &'t Tensor, col| ColumnRange { tensor, col };
        match self {
            ProjPair::Separate {
                first: a,
                second: b,
            } => {
                a.forward(dev, x, first)?;
                b.forward(dev, x, second)?;
                Ok((whole(first, 0), whole(second, 0)))
            }
            ProjPair::Fused(w) => {
                w.forward(dev, x, both)?;
                let both: &'t Tensor = both;
                Ok((whole(both, 0), whole(both, first_width)))
            }
        }
    }

    /// The two parts' weights as row ranges (`first_rows`: the first part's rows of a stacked
    /// weight), when neither has a bias (an op computing the projection adds none).
    fn weight_rows(&self, first_rows: usize) -> Option<(WeightRows<'_>, WeightRows<'_>)> {
        fn rows(l: &Linear, row: usize) -> Option<WeightRows<'_>> {
            l.bias.is_none().then_some(WeightRows {
                weight: &l.weight,
                row,
            })
        }
        match self {
            ProjPair::Separate {
                first: a,
                second: b,
            } => Some((rows(a, 0)?, rows(b, 0)?)),
            ProjPair::Fused(w) => Some((rows(w, 0)?, rows(w, first_rows)?)),
        }
    }

    /// Whether the pair is one stacked weight.
    pub fn is_fused(&self) -> bool {
        matches!(self, ProjPair::Fused(_))
    }

    /// `first = x A^T`, `second = x B^T`; a stacked weight writes `both` (`[n, w_a + w_b]`)
    /// and splits it.
    fn forward(
        &self,
        dev: &Device,
        x: &Tensor,
        both: &mut Tensor,
        first: &mut Tensor,
        second: &mut Tensor,
    ) -> Result<()> {
        match self {
            ProjPair::Separate {
                first: a,
                second: b,
            } => {
                a.forward(dev, x, first)?;
                b.forward(dev, x, second)
            }
            ProjPair::Fused(w) => {
                w.forward(dev, x, both)?;
                Ok(dev.split_columns(both, &mut [first, second])?)
            }
        }
    }
}

/// One Gated DeltaNet layer.
pub struct GatedDeltaNet {
    /// The mixed `[q | k | v]` projection (`[2 * k_heads * k_dim + v_heads * v_dim, hidden]`)
    /// then the output gate `z` (`[v_heads * v_dim, hidden]`).
    pub in_qkvz: ProjPair,
    /// The write strength `b` (`[v_heads, hidden]`, beta = sigmoid(b)) then the decay input
    /// `a` (`[v_heads, hidden]`).
    pub in_ba: ProjPair,
    /// `[v_heads * v_dim, hidden]` output projection (stored `[hidden, v_heads * v_dim]`).
    pub out: Linear,
    /// `[channels, kernel]` f32 depthwise conv taps.
    pub conv_weight: Tensor,
    /// `[v_heads]` f32 `-exp(A_log)`.
    pub a_neg: Tensor,
    /// `[v_heads]` f32 decay bias.
    pub dt_bias: Tensor,
    /// `[v_dim]` f32 scale of the gated RMSNorm (applied as is).
    pub norm_weight: Tensor,
    /// Epsilon of the gated RMSNorm.
    pub norm_eps: f32,
    /// Heads, dims and head grouping of the delta rule.
    pub params: DeltaRuleParams,
    /// Index of this layer's tensors in the state cache.
    pub state_layer: usize,
}

/// Intermediate activations of [`GatedDeltaNet::forward`], reused across steps.
pub struct DeltaNetScratch {
    /// `[n, qkv_width + v_heads * v_dim]` output of a stacked `[q | k | v | z]` weight.
    qkvz: Tensor,
    /// `[n, 2 * v_heads]` output of a stacked `[b | a]` weight.
    ba: Tensor,
    qkv: Tensor,
    conv: Tensor,
    z: Tensor,
    a: Tensor,
    b: Tensor,
    g: Tensor,
    beta: Tensor,
    core: Tensor,
    normed: Tensor,
}

impl DeltaNetScratch {
    /// Workspaces for `rows` tokens of a layer with these params (grown on demand).
    pub fn new(dev: &Device, rows: usize, p: &DeltaRuleParams) -> Result<Self> {
        let (w, vw, h) = (p.qkv_width(), p.v_heads * p.v_dim, p.v_heads);
        Ok(DeltaNetScratch {
            qkvz: workspace(dev, rows, w + vw)?,
            ba: workspace(dev, rows, 2 * h)?,
            qkv: workspace(dev, rows, w)?,
            conv: workspace(dev, rows, w)?,
            z: workspace(dev, rows, vw)?,
            a: workspace(dev, rows, h)?,
            b: workspace(dev, rows, h)?,
            g: workspace(dev, rows, h)?,
            beta: workspace(dev, rows, h)?,
            core: workspace(dev, rows, vw)?,
            normed: workspace(dev, rows, vw)?,
        })
    }
}

impl GatedDeltaNet {
    /// The per-sequence state shapes of one layer: the conv window `[kernel - 1, channels]` and
    /// the delta-rule state `[v_heads, k_dim, v_dim]` (the [`crate::StateCacheConfig`] entry).
    pub fn slot_shapes(p: &DeltaRuleParams, kernel: usize) -> Vec<Vec<usize>> {
        vec![
            vec![kernel.saturating_sub(1), p.qkv_width()],
            vec![p.v_heads, p.k_dim, p.v_dim],
        ]
    }

    /// Conv kernel length.
    pub fn kernel(&self) -> usize {
        self.conv_weight.shape.get(1).copied().unwrap_or(0)
    }

    /// Checks that the parts agree with the params.
    pub fn validate(&self) -> Result<()> {
        let p = &self.params;
        let (w, vw) = (p.qkv_width(), p.v_heads * p.v_dim);
        let (qkv_out, z_out) = self.in_qkvz.out_features(w);
        let (b_out, a_out) = self.in_ba.out_features(p.v_heads);
        let (hidden, z_in) = self.in_qkvz.in_features();
        let (b_in, a_in) = self.in_ba.in_features();
        let ok = qkv_out == w
            && z_out == vw
            && b_out == p.v_heads
            && a_out == p.v_heads
            && [z_in, b_in, a_in].iter().all(|&c| c == hidden)
            && self.out.in_features() == vw
            && self.out.out_features() == hidden
            && self.conv_weight.shape.len() == 2
            && self.conv_weight.shape[0] == w
            && self.kernel() >= 2
            && self.a_neg.numel() == p.v_heads
            && self.dt_bias.numel() == p.v_heads
            && self.norm_weight.numel() == p.v_dim
            && p.k_heads > 0
            && p.v_heads.is_multiple_of(p.k_heads);
        if !ok {
            return Err(LayerError::Shape(format!(
                "gated deltanet layer {}: parts do not fit {p:?} (qkv {}x{}, z {}, conv {:?})",
                self.state_layer, qkv_out, hidden, z_out, self.conv_weight.shape
            )));
        }
        Ok(())
    }

    /// `out[n, hidden] = deltanet(x[n, hidden])`, continuing and updating each sequence's state.
    /// Batches where every sequence has one row take the recurrent (decode) form of the delta
    /// rule, as one fused op between the projections where the backend has one
    /// ([`pocket_kernels::Backend::fused_deltanet_decode`]; CUDA, unless
    /// `POCKET_DELTANET_FUSED=0`); any longer sequence takes the chunked (prefill) form for the
    /// whole batch.
    pub fn forward(
        &self,
        dev: &Device,
        x: &Tensor,
        meta: &RecurrentMeta,
        states: &mut StateCache,
        s: &mut DeltaNetScratch,
        out: &mut Tensor,
    ) -> Result<()> {
        self.run(dev, x, meta, states, s, out, None)
    }

    /// [`GatedDeltaNet::forward`], then `then.residual += out; then.normed = then.norm(residual)`:
    /// the out projection and the norm after the block in one op where the device folds them
    /// ([`crate::RmsNorm::proj_add_forward`]; CUDA decode).
    #[allow(clippy::too_many_arguments)]
    pub fn forward_add_norm(
        &self,
        dev: &Device,
        x: &Tensor,
        meta: &RecurrentMeta,
        states: &mut StateCache,
        s: &mut DeltaNetScratch,
        out: &mut Tensor,
        then: ResidualNorm<'_>,
    ) -> Result<()> {
        self.run(dev, x, meta, states, s, out, Some(then))
    }

    #[allow(clippy::too_many_arguments)]
    fn run(
        &self,
        dev: &Device,
        x: &Tensor,
        meta: &RecurrentMeta,
        states: &mut StateCache,
        s: &mut DeltaNetScratch,
        out: &mut Tensor,
        then: Option<ResidualNorm<'_>>,
    ) -> Result<()> {
        let p = &self.params;
        if meta.max_rows <= 1 && dev.fused_deltanet_decode(p, self.kernel()) {
            return self.forward_decode_fused(dev, x, meta, states, s, out, then);
        }
        let n = x.rows();
        let vw = p.v_heads * p.v_dim;
        if self.in_qkvz.is_fused() {
            fit(dev, &mut s.qkvz, n)?;
        }
        if self.in_ba.is_fused() {
            fit(dev, &mut s.ba, n)?;
        }
        for t in [
            &mut s.qkv,
            &mut s.conv,
            &mut s.z,
            &mut s.a,
            &mut s.b,
            &mut s.g,
            &mut s.beta,
            &mut s.core,
            &mut s.normed,
        ] {
            fit(dev, t, n)?;
        }
        self.in_qkvz
            .forward(dev, x, &mut s.qkvz, &mut s.qkv, &mut s.z)?;
        self.in_ba.forward(dev, x, &mut s.ba, &mut s.b, &mut s.a)?;
        let layer = states.layer_mut(self.state_layer)?;
        let [conv_state, ssm_state] = layer else {
            return Err(LayerError::Config(format!(
                "state layer {} holds {} tensors, a deltanet layer needs 2",
                self.state_layer,
                layer.len()
            )));
        };
        dev.causal_conv1d_silu(&s.qkv, &self.conv_weight, conv_state, meta, &mut s.conv)?;
        dev.delta_gates(
            &s.a,
            &s.b,
            &self.a_neg,
            &self.dt_bias,
            &mut s.g,
            &mut s.beta,
        )?;
        if meta.max_rows <= 1 {
            dev.gated_delta_rule_recurrent(
                &s.conv,
                &s.g,
                &s.beta,
                ssm_state,
                meta,
                p,
                &mut s.core,
            )?;
        } else {
            dev.gated_delta_rule_chunked(&s.conv, &s.g, &s.beta, ssm_state, meta, p, &mut s.core)?;
        }
        view(&mut s.core, &[n * p.v_heads, p.v_dim])?;
        view(&mut s.z, &[n * p.v_heads, p.v_dim])?;
        view(&mut s.normed, &[n * p.v_heads, p.v_dim])?;
        dev.gated_rms_norm(
            &s.core,
            &s.z,
            &self.norm_weight,
            self.norm_eps,
            &mut s.normed,
        )?;
        for t in [&mut s.core, &mut s.z, &mut s.normed] {
            view(t, &[n, vw])?;
        }
        project_then(dev, &self.out, &s.normed, out, then)
    }

    /// The decode form through [`pocket_kernels::Backend::gated_deltanet_decode`]: the two
    /// projections, one op reading their outputs in place, the out projection. Where the backend
    /// computes the in_ba projection inside the op
    /// ([`pocket_kernels::Backend::fused_deltanet_decode_ba`]: CUDA with BF16/F16 weights, unless
    /// `POCKET_DELTANET_BA_FUSED=0`), the op gets its weights and `x` instead of its output.
    #[allow(clippy::too_many_arguments)]
    fn forward_decode_fused(
        &self,
        dev: &Device,
        x: &Tensor,
        meta: &RecurrentMeta,
        states: &mut StateCache,
        s: &mut DeltaNetScratch,
        out: &mut Tensor,
        then: Option<ResidualNorm<'_>>,
    ) -> Result<()> {
        let p = &self.params;
        let n = x.rows();
        if self.in_qkvz.is_fused() {
            fit(dev, &mut s.qkvz, n)?;
        } else {
            fit(dev, &mut s.qkv, n)?;
            fit(dev, &mut s.z, n)?;
        }
        let in_ba = self
            .in_ba
            .weight_rows(p.v_heads)
            .filter(|(b, a)| dev.fused_deltanet_decode_ba(p, self.kernel(), b.weight, a.weight));
        if in_ba.is_none() {
            if self.in_ba.is_fused() {
                fit(dev, &mut s.ba, n)?;
            } else {
                fit(dev, &mut s.b, n)?;
                fit(dev, &mut s.a, n)?;
            }
        }
        fit(dev, &mut s.normed, n)?;
        let (qkv, z) =
            self.in_qkvz
                .project(dev, x, &mut s.qkvz, &mut s.qkv, &mut s.z, p.qkv_width())?;
        let ba = match in_ba {
            Some((b, a)) => BaInputs::Weights { x, b, a },
            None => {
                let (b, a) = self
                    .in_ba
                    .project(dev, x, &mut s.ba, &mut s.b, &mut s.a, p.v_heads)?;
                BaInputs::Projected { b, a }
            }
        };
        let layer = states.layer_mut(self.state_layer)?;
        let [conv_state, ssm_state] = layer else {
            return Err(LayerError::Config(format!(
                "state layer {} holds {} tensors, a deltanet layer needs 2",
                self.state_layer,
                layer.len()
            )));
        };
        let inputs = DeltaNetDecodeInputs {
            qkv,
            z,
            ba,
            conv_weight: &self.conv_weight,
            a_neg: &self.a_neg,
            dt_bias: &self.dt_bias,
            norm_weight: &self.norm_weight,
            norm_eps: self.norm_eps,
            params: *p,
        };
        dev.gated_deltanet_decode(&inputs, conv_state, ssm_state, meta, &mut s.normed)?;
        project_then(dev, &self.out, &s.normed, out, then)
    }
}
