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
        let half = freqs.len();
        let mut cos = Vec::with_capacity(max_pos * half);
        let mut sin = Vec::with_capacity(max_pos * half);
        for p in 0..max_pos {
            for &f in &freqs {
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
