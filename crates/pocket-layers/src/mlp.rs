//! The SwiGLU feed-forward block: `down(silu(gate(x)) * up(x))`.

use pocket_kernels::{Device, Tensor};

use crate::scratch::{fit, workspace};
use crate::{Linear, Result};

/// Gate, up and down projections of a SwiGLU MLP.
pub struct Mlp {
    /// `[ff, hidden]`.
    pub gate: Linear,
    /// `[ff, hidden]`.
    pub up: Linear,
    /// `[hidden, ff]`.
    pub down: Linear,
}

/// Intermediate activations of [`Mlp::forward`], reused across steps.
pub struct MlpScratch {
    gate: Tensor,
    up: Tensor,
    act: Tensor,
}

impl MlpScratch {
    /// Workspaces for `rows` tokens of an MLP of width `ff` (grown on demand).
    pub fn new(dev: &Device, rows: usize, ff: usize) -> Result<Self> {
        Ok(MlpScratch {
            gate: workspace(dev, rows, ff)?,
            up: workspace(dev, rows, ff)?,
            act: workspace(dev, rows, ff)?,
        })
    }
}

impl Mlp {
    /// `out[n, hidden] = down(silu(gate(x)) * up(x))`.
    pub fn forward(
        &self,
        dev: &Device,
        x: &Tensor,
        s: &mut MlpScratch,
        out: &mut Tensor,
    ) -> Result<()> {
        let n = x.rows();
        for t in [&mut s.gate, &mut s.up, &mut s.act] {
            fit(dev, t, n)?;
        }
        self.gate.forward(dev, x, &mut s.gate)?;
        self.up.forward(dev, x, &mut s.up)?;
        dev.silu_mul(&s.gate, &s.up, &mut s.act)?;
        self.down.forward(dev, &s.act, out)
    }
}
