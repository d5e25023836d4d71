//! RMSNorm, plain and fused with the residual add.

use pocket_kernels::{Device, Tensor};

use crate::{Linear, Result};

/// Where a block's last projection lands when the next norm is folded into it: the projection is
/// added into `residual` and `norm(residual)` written to `normed` (the next sublayer's input), in
/// one op where the device folds the norm into the GEMV ([`RmsNorm::proj_add_forward`]).
pub struct ResidualNorm<'a> {
    /// The norm after the projection (the next sublayer's input norm).
    pub norm: &'a RmsNorm,
    /// `[n, dim]` residual stream; the projection's output is added into it.
    pub residual: &'a mut Tensor,
    /// `[n, dim]` receives the normalized residual; must not alias the projection's input.
    pub normed: &'a mut Tensor,
}

/// `out = proj(x)`, then with `then` `residual += out; normed = norm(residual)`: the end of an
/// attention or MLP block, folded into one op for a projection without a bias.
pub fn project_then(
    dev: &Device,
    proj: &Linear,
    x: &Tensor,
    out: &mut Tensor,
    then: Option<ResidualNorm<'_>>,
) -> Result<()> {
    match then {
        None => proj.forward(dev, x, out),
        Some(t) => t
            .norm
            .proj_add_forward(dev, proj, x, out, t.residual, t.normed),
    }
}

/// Root-mean-square normalization with a learned f32 scale.
pub struct RmsNorm {
    /// `[dim]` scale.
    pub weight: Tensor,
    /// Added to the mean square before the square root.
    pub eps: f32,
}

impl RmsNorm {
    /// A norm over rows of `weight.numel()`.
    pub fn new(weight: Tensor, eps: f32) -> RmsNorm {
        RmsNorm { weight, eps }
    }

    /// Normalized length.
    pub fn dim(&self) -> usize {
        self.weight.numel()
    }

    /// `out = x / rms(x) * weight`, per row.
    pub fn forward(&self, dev: &Device, x: &Tensor, out: &mut Tensor) -> Result<()> {
        Ok(dev.rms_norm(x, &self.weight, self.eps, out)?)
    }

    /// `residual += delta; out = norm(residual)`.
    pub fn add_forward(
        &self,
        dev: &Device,
        residual: &mut Tensor,
        delta: &Tensor,
        out: &mut Tensor,
    ) -> Result<()> {
        Ok(dev.add_rms_norm(residual, delta, &self.weight, self.eps, out)?)
    }

    /// `delta = proj(x); residual += delta; out = norm(residual)`: a projection and the norm
    /// after it in one op where the device folds the norm into the GEMV
    /// ([`pocket_kernels::Backend::matmul_add_rms_norm`]; CUDA one-row FP8 decode,
    /// `POCKET_RMS_FOLD`).
    /// A projection with a bias takes the separate ops.
    pub fn proj_add_forward(
        &self,
        dev: &Device,
        proj: &Linear,
        x: &Tensor,
        delta: &mut Tensor,
        residual: &mut Tensor,
        out: &mut Tensor,
    ) -> Result<()> {
        if proj.bias.is_some() {
            proj.forward(dev, x, delta)?;
            return self.add_forward(dev, residual, delta, out);
        }
        Ok(dev.matmul_add_rms_norm(
            x,
            &proj.weight,
            delta,
            residual,
            &self.weight,
            self.eps,
            out,
        )?)
    }
}
