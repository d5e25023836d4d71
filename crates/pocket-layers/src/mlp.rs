//! The SwiGLU feed-forward block: `down(silu(gate(x)) * up(x))`. Gate and up may be one stacked
//! weight whose output row `[gate | up]` feeds `silu_mul_halves` directly (no split copy).

use pocket_kernels::{Device, Tensor};

use crate::scratch::{fit, view, workspace};
use crate::{LayerError, Linear, Result};

/// The gate and up projections of a SwiGLU MLP.
pub enum GateUp {
    /// Two weights, each `[ff, hidden]`.
    Separate {
        /// `[ff, hidden]`.
        gate: Linear,
        /// `[ff, hidden]`.
        up: Linear,
    },
    /// One `[2 * ff, hidden]` weight: the gate rows, then the up rows.
    Fused(Linear),
}

/// Gate, up and down projections of a SwiGLU MLP.
pub struct Mlp {
    /// Gate and up.
    pub gate_up: GateUp,
    /// `[hidden, ff]`.
    pub down: Linear,
}

/// Intermediate activations of [`Mlp::forward`], reused across steps.
pub struct MlpScratch {
    gate: Tensor,
    up: Tensor,
    act: Tensor,
    /// The `[gate | up]` output of a stacked projection (allocated up front, like the others, so
    /// a graph-captured step never allocates).
    fused: Tensor,
}

impl MlpScratch {
    /// Workspaces for `rows` tokens of an MLP of width `ff` (grown on demand).
    pub fn new(dev: &Device, rows: usize, ff: usize) -> Result<Self> {
        Ok(MlpScratch {
            gate: workspace(dev, rows, ff)?,
            up: workspace(dev, rows, ff)?,
            act: workspace(dev, rows, ff)?,
            fused: workspace(dev, rows, 2 * ff)?,
        })
    }
}

impl Mlp {
    /// An MLP of the given projections; `gate_up`'s width must be `down`'s input width (twice it,
    /// stacked).
    pub fn new(gate_up: GateUp, down: Linear) -> Result<Mlp> {
        let ff = down.in_features();
        let ok = match &gate_up {
            GateUp::Separate { gate, up } => {
                gate.out_features() == ff
                    && up.out_features() == ff
                    && gate.in_features() == up.in_features()
            }
            GateUp::Fused(w) => w.out_features() == 2 * ff,
        };
        if !ok {
            return Err(LayerError::Shape(format!(
                "mlp: gate/up projections do not fit a down projection of {ff} inputs"
            )));
        }
        Ok(Mlp { gate_up, down })
    }

    /// `out[n, hidden] = down(silu(gate(x)) * up(x))`.
    pub fn forward(
        &self,
        dev: &Device,
        x: &Tensor,
        s: &mut MlpScratch,
        out: &mut Tensor,
    ) -> Result<()> {
        let n = x.rows();
        fit(dev, &mut s.act, n)?;
        match &self.gate_up {
            GateUp::Separate { gate, up } => {
                for t in [&mut s.gate, &mut s.up] {
                    fit(dev, t, n)?;
                }
                gate.forward(dev, x, &mut s.gate)?;
                up.forward(dev, x, &mut s.up)?;
                dev.silu_mul(&s.gate, &s.up, &mut s.act)?;
            }
            GateUp::Fused(w) => {
                let width = w.out_features();
                let fused = &mut s.fused;
                view(fused, &[fused.capacity() / width, width])?;
                fit(dev, fused, n)?;
                w.forward(dev, x, fused)?;
                dev.silu_mul_halves(fused, &mut s.act)?;
            }
        }
        self.down.forward(dev, &s.act, out)
    }
}
