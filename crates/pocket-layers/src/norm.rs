//! RMSNorm, plain and fused with the residual add.

use pocket_kernels::{Device, Tensor};

use crate::Result;

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
}
