//! Rotary position embedding: scaling variants folded into a precomputed cos/sin table.
//!
//! Every scaling rule (linear, YaRN, Llama-3) only changes the per-dimension inverse frequencies
//! and a magnitude factor, so it is resolved once on the host into a table; the device kernels
//! just rotate pairs, and one kernel serves every variant.

/// How the pairs that rotate together are laid out within a head.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RopeLayout {
    /// Adjacent pairs `(x[2i], x[2i+1])` (llama.cpp's "normal" mode, GGUF Llama after permute).
    Interleaved,
    /// Halves `(x[i], x[i + rot_dim/2])` (NeoX / Hugging Face `rotate_half`).
    NeoX,
}

/// Frequency scaling rule of a model's RoPE.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum RopeScaling {
    /// Plain RoPE.
    None,
    /// Positions divided by `factor`.
    Linear {
        /// Scale factor.
        factor: f32,
    },
    /// Llama-3.1 frequency-dependent scaling.
    Llama3 {
        /// Scale factor.
        factor: f32,
        /// Low-frequency factor.
        low_freq_factor: f32,
        /// High-frequency factor.
        high_freq_factor: f32,
        /// Context length the model was trained at before scaling.
        original_max_position: usize,
    },
    /// YaRN (NTK-by-parts with attention temperature).
    Yarn {
        /// Scale factor.
        factor: f32,
        /// Context length before scaling.
        original_max_position: usize,
        /// Ramp start, in rotations.
        beta_fast: f32,
        /// Ramp end, in rotations.
        beta_slow: f32,
        /// Attention magnitude factor override (`None`: 0.1 ln(factor) + 1).
        attn_factor: Option<f32>,
    },
}

/// RoPE settings of a model.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RopeConfig {
    /// Base frequency θ.
    pub theta: f32,
    /// Leading dimensions of each head that rotate (partial rotary: less than head_dim).
    pub rot_dim: usize,
    /// Pair layout.
    pub layout: RopeLayout,
    /// Frequency scaling.
    pub scaling: RopeScaling,
}

/// Host-side table of `cos` and `sin` for positions `0..max_pos`, `rot_dim / 2` values each.
#[derive(Debug, Clone)]
pub struct RopeTable {
    /// The settings the table was built from.
    pub config: RopeConfig,
    /// Positions covered.
    pub max_pos: usize,
    /// `[max_pos, rot_dim / 2]` cosines (times the magnitude factor).
    pub cos: Vec<f32>,
    /// `[max_pos, rot_dim / 2]` sines (times the magnitude factor).
    pub sin: Vec<f32>,
}

impl RopeConfig {
    /// Inverse frequency of each rotating pair after scaling, and the magnitude factor.
    pub fn inv_freqs(&self) -> (Vec<f32>, f32) {
        let half = self.rot_dim / 2;
        let base: Vec<f64> = (0..half)
            .map(|i| 1.0 / (self.theta as f64).powf(2.0 * i as f64 / self.rot_dim as f64))
            .collect();
        match self.scaling {
            RopeScaling::None => (base.iter().map(|&f| f as f32).collect(), 1.0),
            RopeScaling::Linear { factor } => (
                base.iter().map(|&f| (f / factor as f64) as f32).collect(),
                1.0,
            ),
            RopeScaling::Llama3 {
                factor,
                low_freq_factor,
                high_freq_factor,
                original_max_position,
            } => {
                let (factor, lo, hi) = (
                    factor as f64,
                    low_freq_factor as f64,
                    high_freq_factor as f64,
                );
                let old = original_max_position as f64;
                let low_wavelen = old / lo;
                let high_wavelen = old / hi;
                let freqs = base
                    .iter()
                    .map(|&f| {
                        let wavelen = 2.0 * std::f64::consts::PI / f;
                        let out = if wavelen < high_wavelen {
                            f
                        } else if wavelen > low_wavelen {
                            f / factor
                        } else {
                            let smooth = (old / wavelen - lo) / (hi - lo);
                            (1.0 - smooth) * f / factor + smooth * f
                        };
                        out as f32
                    })
                    .collect();
                (freqs, 1.0)
            }
            RopeScaling::Yarn {
                factor,
                original_max_position,
                beta_fast,
                beta_slow,
                attn_factor,
            } => {
                let dim = self.rot_dim as f64;
                let theta = self.theta as f64;
                let old = original_max_position as f64;
                // Dimension index at which a frequency completes `rotations` turns over `old`.
                let corr = |rotations: f64| {
                    dim * (old / (rotations * 2.0 * std::f64::consts::PI)).ln() / (2.0 * theta.ln())
                };
                let low = corr(beta_fast as f64).floor().max(0.0);
                let high = corr(beta_slow as f64).ceil().min(dim - 1.0);
                let freqs = base
                    .iter()
                    .enumerate()
                    .map(|(i, &f)| {
                        let span = if high == low { 0.001 } else { high - low };
                        let ramp = ((i as f64 - low) / span).clamp(0.0, 1.0);
                        let extrapolation = 1.0 - ramp;
                        let interp = f / factor as f64;
                        (interp * (1.0 - extrapolation) + f * extrapolation) as f32
                    })
                    .collect();
                let mscale = attn_factor.unwrap_or(0.1 * factor.ln() + 1.0);
                (freqs, mscale)
            }
        }
    }
}

impl RopeTable {
    /// Builds the table for positions `0..max_pos`.
    pub fn new(config: RopeConfig, max_pos: usize) -> RopeTable {
        let (freqs, mscale) = config.inv_freqs();
        Self::from_freqs(config, max_pos, &freqs, mscale)
    }

    /// Builds the table with per-pair frequency factors, as llama.cpp applies a GGUF's
    /// `rope_freqs.weight` (Llama-3.1's converter stores its llama3 scaling this way instead of
    /// metadata): pair `i` rotates at `inv_freq[i] / factors[i]`, on top of `config.scaling`.
    /// Fails unless there is one finite, positive factor per rotating pair.
    pub fn with_freq_factors(
        config: RopeConfig,
        max_pos: usize,
        factors: &[f32],
    ) -> crate::Result<RopeTable> {
        let (freqs, mscale) = config.inv_freqs();
        if factors.len() != freqs.len() {
            return Err(crate::error::shape_err(
                "rope",
                format!(
                    "{} frequency factors for {} rotating pairs (rot_dim {})",
                    factors.len(),
                    freqs.len(),
                    config.rot_dim
                ),
            ));
        }
        if let Some(bad) = factors.iter().find(|f| !(f.is_finite() && **f > 0.0)) {
            return Err(crate::error::shape_err(
                "rope",
                format!("frequency factor {bad} is not a positive number"),
            ));
        }
        let scaled: Vec<f32> = freqs
            .iter()
            .zip(factors)
            .map(|(&f, &k)| (f as f64 / k as f64) as f32)
            .collect();
        Ok(Self::from_freqs(config, max_pos, &scaled, mscale))
    }

    /// The table of `cos`/`sin` of `p * freqs[i]`, times `mscale`.
    fn from_freqs(config: RopeConfig, max_pos: usize, freqs: &[f32], mscale: f32) -> RopeTable {
        let half = freqs.len();
        let mut cos = Vec::with_capacity(max_pos * half);
        let mut sin = Vec::with_capacity(max_pos * half);
        for p in 0..max_pos {
            for &f in freqs {
                let angle = p as f64 * f as f64;
                cos.push((angle.cos() * mscale as f64) as f32);
                sin.push((angle.sin() * mscale as f64) as f32);
            }
        }
        RopeTable {
            config,
            max_pos,
            cos,
            sin,
        }
    }
}

/// A [`RopeTable`] uploaded to a device, ready for [`crate::Backend::rope`].
pub struct DeviceRope {
    /// The settings.
    pub config: RopeConfig,
    /// `[max_pos, rot_dim / 2]` f32 cosines.
    pub cos: crate::Tensor,
    /// `[max_pos, rot_dim / 2]` f32 sines.
    pub sin: crate::Tensor,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(scaling: RopeScaling) -> RopeConfig {
        RopeConfig {
            theta: 10000.0,
            rot_dim: 32,
            layout: RopeLayout::NeoX,
            scaling,
        }
    }

    /// llama.cpp's converter turns llama3 scaling into per-pair factors
    /// (`convert_hf_to_gguf.py`, `LlamaModel.generate_extra_tensors`); applied to plain RoPE
    /// they must give the table that the llama3 rule gives directly.
    #[test]
    fn llama3_factors_match_llama3_scaling() {
        let (factor, lo, hi, old) = (8.0f64, 1.0f64, 4.0f64, 32.0f64);
        let factors: Vec<f32> = (0..16)
            .map(|i| {
                let freq = 1.0 / 10000f64.powf(2.0 * i as f64 / 32.0);
                let wavelen = 2.0 * std::f64::consts::PI / freq;
                let k = if wavelen < old / hi {
                    1.0
                } else if wavelen > old / lo {
                    factor
                } else {
                    let smooth = (old / wavelen - lo) / (hi - lo);
                    1.0 / ((1.0 - smooth) / factor + smooth)
                };
                k as f32
            })
            .collect();
        // All three regimes occur for this head.
        assert!(factors.contains(&1.0));
        assert!(factors.contains(&8.0));
        assert!(factors.iter().any(|&k| k > 1.0 && k < 8.0));
        let a = RopeTable::with_freq_factors(cfg(RopeScaling::None), 64, &factors).unwrap();
        let b = RopeTable::new(
            cfg(RopeScaling::Llama3 {
                factor: 8.0,
                low_freq_factor: 1.0,
                high_freq_factor: 4.0,
                original_max_position: 32,
            }),
            64,
        );
        for (x, y) in a.cos.iter().chain(&a.sin).zip(b.cos.iter().chain(&b.sin)) {
            assert!((x - y).abs() < 1e-5, "{x} vs {y}");
        }
    }

    #[test]
    fn freq_factors_are_checked() {
        assert!(RopeTable::with_freq_factors(cfg(RopeScaling::None), 4, &[1.0; 15]).is_err());
        let mut f = [1.0f32; 16];
        f[3] = 0.0;
        assert!(RopeTable::with_freq_factors(cfg(RopeScaling::None), 4, &f).is_err());
        f[3] = f32::NAN;
        assert!(RopeTable::with_freq_factors(cfg(RopeScaling::None), 4, &f).is_err());
        let ones = RopeTable::with_freq_factors(cfg(RopeScaling::None), 4, &[1.0; 16]).unwrap();
        let plain = RopeTable::new(cfg(RopeScaling::None), 4);
        assert_eq!((ones.cos, ones.sin), (plain.cos, plain.sin));
    }
}
