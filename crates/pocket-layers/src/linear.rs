//! `Linear`: `y = x · Wᵀ (+ b)`, the one seam through which every weight format and device is
//! reached (and, later, where a weight is split across devices).

use pocket_kernels::{Device, DeviceKind, Tensor, Weight};

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

/// Whether models stack the projections that read one input (Q/K/V; gate/up) into one weight on
/// `dev`: one GEMV instead of three (two) per layer, each bigger and so nearer the memory
/// bandwidth (small decode GEMVs are launch- and latency-bound on a GPU).
///
/// On by default on CUDA, where weights are copied to the device anyway. Off on the CPU: there a
/// weight is a zero-copy window of the mapped checkpoint, and stacking would copy most of the
/// model (Q/K/V and gate/up are ~80% of a dense model's bytes) into anonymous memory, costing
/// load time and resident memory, for a CPU matmul that already streams each weight once per
/// call. `POCKET_FUSED_PROJ=1` (or `=0`) forces it on (off) on any device, for A/B runs.
pub fn stack_projections(dev: &Device) -> bool {
    match std::env::var("POCKET_FUSED_PROJ").as_deref() {
        Ok("1") => true,
        Ok("0") => false,
        _ => !matches!(dev.kind(), DeviceKind::Cpu),
    }
}
