//! The SwiGLU feed-forward block: `down(silu(gate(x)) * up(x))`. Gate and up may be one stacked
//! weight whose output row `[gate | up]` feeds `silu_mul_halves` directly (no split copy), through
//! `matmul_silu_halves`, which a backend may run as one kernel.

use pocket_kernels::{Device, Tensor};

use crate::norm::{project_then, ResidualNorm};
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
        self.run(dev, x, s, out, None)
    }

    /// [`Mlp::forward`], then `then.residual += out; then.normed = then.norm(residual)`, the
    /// down projection and the next norm in one op where the device folds them
    /// ([`RmsNorm::proj_add_forward`](crate::RmsNorm::proj_add_forward); CUDA decode).
    pub fn forward_add_norm(
        &self,
        dev: &Device,
        x: &Tensor,
        s: &mut MlpScratch,
        out: &mut Tensor,
        then: ResidualNorm<'_>,
    ) -> Result<()> {
        self.run(dev, x, s, out, Some(then))
    }

    fn run(
        &self,
        dev: &Device,
        x: &Tensor,
        s: &mut MlpScratch,
        out: &mut Tensor,
        then: Option<ResidualNorm<'_>>,
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
                if w.bias.is_some() {
                    w.forward(dev, x, fused)?;
                    dev.silu_mul_halves(fused, &mut s.act)?;
                } else {
                    // One launch where the backend fuses the SwiGLU into the GEMV (CUDA, one row
                    // of FP8 weights, unless POCKET_GATE_UP_FUSED=0); `fused` is its workspace.
                    dev.matmul_silu_halves(x, &w.weight, fused, &mut s.act)?;
                }
            }
        }
        project_then(dev, &self.down, &s.act, out, then)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::RmsNorm;
    use pocket_kernels::{DType, HostBytes, Weight};
    use pocket_quant::QuantFormat;

    /// Deterministic values in [-1, 1).
    fn values(n: usize, seed: u64) -> Vec<f32> {
        let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        (0..n)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                (s >> 40) as f32 / (1u64 << 23) as f32 - 1.0
            })
            .collect()
    }

    fn fp8(dev: &Device, rows: usize, cols: usize, data: Vec<u8>, scale: Option<f32>) -> Weight {
        dev.upload_weight(
            QuantFormat::Fp8E4M3,
            rows,
            cols,
            HostBytes::from_vec(data),
            None,
            scale,
        )
        .unwrap()
    }

    /// `forward_add_norm` (down projection, residual add and the next norm as one op where the
    /// device folds them) equals `forward` followed by `add_forward` of the same norm: the
    /// projection, the updated residual and the normed row, bit for bit, on every device (the
    /// CPU runs the composition; CUDA's fold is specified bit-identical to the unfused launches
    /// and falls back to them where it does not apply), for one row (the CUDA decode fold: Q8_0
    /// down weight, hidden a multiple of 32) and a batch.
    #[test]
    fn forward_add_norm_equals_forward_then_add_norm() {
        let (hidden, ff) = (256usize, 192usize);
        let q8 = QuantFormat::Ggml(pocket_quant::GgmlType::Q8_0);
        let quant = |rows, cols, seed, scale: f32| {
            let v: Vec<f32> = values(rows * cols, seed)
                .iter()
                .map(|v| v * scale)
                .collect();
            pocket_quant::quantize_matrix(q8, rows, cols, &v).unwrap()
        };
        let (qg, qu, qd) = (
            quant(ff, hidden, 4, 0.05),
            quant(ff, hidden, 5, 0.05),
            quant(hidden, ff, 6, 0.1),
        );
        for dev in Device::all_for_tests() {
            let lin = |q: &pocket_quant::QuantizedMatrix| {
                let w = dev
                    .upload_weight(
                        q8,
                        q.rows,
                        q.cols,
                        HostBytes::from_vec(q.data.clone()),
                        None,
                        None,
                    )
                    .unwrap();
                Linear::new(w, None).unwrap()
            };
            let mlp = Mlp::new(
                GateUp::Separate {
                    gate: lin(&qg),
                    up: lin(&qu),
                },
                lin(&qd),
            )
            .unwrap();
            let norm_w: Vec<f32> = values(hidden, 7).iter().map(|v| 1.0 + 0.5 * v).collect();
            let norm = RmsNorm::new(dev.upload_f32(&norm_w, &[hidden]).unwrap(), 1e-5);
            for n in [1usize, 3] {
                let x = dev
                    .upload_f32(&values(n * hidden, 8), &[n, hidden])
                    .unwrap();
                let res = values(n * hidden, 9);
                let mut s = MlpScratch::new(&dev, n, ff).unwrap();
                let alloc = || dev.alloc(DType::F32, &[n, hidden]).unwrap();
                let (mut d1, mut n1, mut d2, mut n2) = (alloc(), alloc(), alloc(), alloc());
                let mut r1 = dev.upload_f32(&res, &[n, hidden]).unwrap();
                let mut r2 = dev.upload_f32(&res, &[n, hidden]).unwrap();
                mlp.forward(&dev, &x, &mut s, &mut d1).unwrap();
                norm.add_forward(&dev, &mut r1, &d1, &mut n1).unwrap();
                let then = ResidualNorm {
                    norm: &norm,
                    residual: &mut r2,
                    normed: &mut n2,
                };
                mlp.forward_add_norm(&dev, &x, &mut s, &mut d2, then)
                    .unwrap();
                for (what, a, b) in [
                    ("delta", &d1, &d2),
                    ("residual", &r1, &r2),
                    ("normed", &n1, &n2),
                ] {
                    let (a, b) = (dev.read_f32(a).unwrap(), dev.read_f32(b).unwrap());
                    assert!(a.iter().any(|v| *v != 0.0), "{dev:?} n={n} {what} all zero");
                    for (i, (u, v)) in a.iter().zip(&b).enumerate() {
                        assert_eq!(
                            u.to_bits(),
                            v.to_bits(),
                            "{dev:?} n={n} {what}[{i}]: unfused {u}, folded {v}"
                        );
                    }
                }
            }
        }
    }

    /// The stacked `[gate; up]` MLP (which goes through `matmul_silu_halves`: on the CPU its
    /// default, on CUDA for one row the fused FP8 kernel) equals the MLP of the same codes as two
    /// weights (two matmuls and `silu_mul`), on every device, for one row and a batch. The two
    /// differ only in the order a GEMV sums a row (f32, 2^-24 relative per add over 256
    /// products of magnitude <= 0.05): 1e-5 of the largest output bounds it with margin.
    #[test]
    fn stacked_gate_up_equals_separate_projections() {
        let (hidden, ff) = (256usize, 192usize);
        let q = pocket_quant::quantize_matrix(
            QuantFormat::Fp8E4M3,
            2 * ff,
            hidden,
            &values(2 * ff * hidden, 1)
                .iter()
                .map(|v| v * 0.05)
                .collect::<Vec<_>>(),
        )
        .unwrap();
        let qd = pocket_quant::quantize_matrix(
            QuantFormat::Fp8E4M3,
            hidden,
            ff,
            &values(hidden * ff, 2),
        )
        .unwrap();
        for dev in Device::all_for_tests() {
            let half = ff * hidden;
            let lin = |w: Weight| Linear::new(w, None).unwrap();
            let down = || lin(fp8(&dev, hidden, ff, qd.data.clone(), qd.tensor_scale));
            let stacked = Mlp::new(
                GateUp::Fused(lin(fp8(
                    &dev,
                    2 * ff,
                    hidden,
                    q.data.clone(),
                    q.tensor_scale,
                ))),
                down(),
            )
            .unwrap();
            let separate = Mlp::new(
                GateUp::Separate {
                    gate: lin(fp8(
                        &dev,
                        ff,
                        hidden,
                        q.data[..half].to_vec(),
                        q.tensor_scale,
                    )),
                    up: lin(fp8(
                        &dev,
                        ff,
                        hidden,
                        q.data[half..].to_vec(),
                        q.tensor_scale,
                    )),
                },
                down(),
            )
            .unwrap();
            for n in [1usize, 3] {
                let x = dev
                    .upload_f32(&values(n * hidden, 3), &[n, hidden])
                    .unwrap();
                let mut s = MlpScratch::new(&dev, n, ff).unwrap();
                let mut a = dev.alloc(DType::F32, &[n, hidden]).unwrap();
                let mut b = dev.alloc(DType::F32, &[n, hidden]).unwrap();
                stacked.forward(&dev, &x, &mut s, &mut a).unwrap();
                separate.forward(&dev, &x, &mut s, &mut b).unwrap();
                let (a, b) = (dev.read_f32(&a).unwrap(), dev.read_f32(&b).unwrap());
                let max = b.iter().fold(0f32, |m, v| m.max(v.abs()));
                assert!(max > 0.0);
                for (i, (u, v)) in a.iter().zip(&b).enumerate() {
                    assert!(
                        (u - v).abs() <= 1e-5 * max,
                        "{dev:?} n={n} out[{i}]: stacked {u}, separate {v}"
                    );
                }
            }
        }
    }
}
