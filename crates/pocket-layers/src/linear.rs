//! `Linear`: `y = x · Wᵀ (+ b)`, the one seam through which every weight format and device is
//! reached (and, later, where a weight is split across devices).

use pocket_kernels::{Device, Tensor, Weight};

use crate::{LayerError, Result};

/// A linear layer: a weight in any block format on one device and an optional f32 bias.
pub struct Linear {
    /// `[out_features, in_features]` weight.
    pub weight: Weight,
    /// `[out_features]` bias.
    pub bias: Option<Tensor>,
}

impl Linear {
    /// A linear layer; the bias, if any, must have `weight.rows` elements.
    pub fn new(weight: Weight, bias: Option<Tensor>) -> Result<Linear> {
        if let Some(b) = &bias {
            if b.numel() != weight.rows {
                return Err(LayerError::Shape(format!(
                    "bias of {} for a weight of {} rows",
                    b.numel(),
                    weight.rows
                )));
            }
        }
        Ok(Linear { weight, bias })
    }

    /// Input features.
    pub fn in_features(&self) -> usize {
        self.weight.cols
    }

    /// Output features.
    pub fn out_features(&self) -> usize {
        self.weight.rows
    }

    /// `out[n, out_features] = x[n, in_features] · Wᵀ + b`.
    pub fn forward(&self, dev: &Device, x: &Tensor, out: &mut Tensor) -> Result<()> {
        dev.matmul(x, &self.weight, out)?;
        if let Some(b) = &self.bias {
            dev.add_bias(out, b)?;
        }
        Ok(())
    }
}
