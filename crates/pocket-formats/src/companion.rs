//! Companion tensors of quantized safetensors checkpoints, recognised by name and paired with the
//! weight they scale: FP8 block scales, NVFP4 scales and MXFP4 block scales.

use crate::format::TensorFormat;

/// What a companion tensor is to its weight.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CompanionRole {
    /// `X.weight_scale_inv`: per-block (usually 128x128) scales of an FP8 `X.weight` (DeepSeek, Qwen FP8).
    ScaleInv,
    /// `X.weight_scale`: NVFP4 per-16-element FP8 scales, or a per-tensor FP8 scale.
    WeightScale,
    /// `X.weight_scale_2`: NVFP4 per-tensor f32 global scale.
    WeightScale2,
    /// `X.input_scale`: activation scale (NVFP4, FP8 static).
    InputScale,
    /// `X_scales`: MXFP4 E8M0 block scales of `X_blocks` (gpt-oss).
    BlockScales,
}

/// (role, suffix of the companion, suffix of its weight).
const RULES: &[(CompanionRole, &str, &str)] = &[
    (CompanionRole::ScaleInv, ".weight_scale_inv", ".weight"),
    (CompanionRole::WeightScale2, ".weight_scale_2", ".weight"),
    (CompanionRole::WeightScale, ".weight_scale", ".weight"),
    (CompanionRole::InputScale, ".input_scale", ".weight"),
    (CompanionRole::BlockScales, "_scales", "_blocks"),
];

impl CompanionRole {
    /// The name suffix that marks this role (`.weight_scale_inv`, `_scales`, ...).
    pub fn suffix(self) -> &'static str {
        RULES
            .iter()
            .find(|r| r.0 == self)
            .map(|r| r.1)
            .unwrap_or("")
    }

    /// If `name` has a companion suffix: the role and the name of the weight it belongs to.
    pub fn classify(name: &str) -> Option<(CompanionRole, String)> {
        RULES.iter().find_map(|&(role, suffix, weight)| {
            name.strip_suffix(suffix)
                .filter(|base| !base.is_empty())
                .map(|base| (role, format!("{base}{weight}")))
        })
    }
}

/// How a weight is quantized, judged from its format and its companions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WeightScheme {
    /// No companions: the format says it all.
    Plain,
    /// FP8 weight with block scales (`weight_scale_inv`).
    Fp8BlockScaled,
    /// FP8 weight with a per-tensor (or per-channel) `weight_scale`.
    Fp8Scaled,
    /// NVFP4: packed E2M1 in U8 with FP8 E4M3 per-16 scales and an f32 global scale.
    Nvfp4,
    /// MXFP4: packed E2M1 `_blocks` with E8M0 `_scales` per 32 elements.
    Mxfp4,
    /// Companions present in a combination not recognised above.
    Other,
}

impl WeightScheme {
    /// Classifies a weight of `format` with companions of `roles`.
    pub fn classify(format: TensorFormat, roles: &[CompanionRole]) -> WeightScheme {
        let has = |r| roles.contains(&r);
        let fp8 = matches!(format, TensorFormat::F8E4M3 | TensorFormat::F8E5M2);
        if roles.is_empty() {
            WeightScheme::Plain
        } else if has(CompanionRole::BlockScales) {
            WeightScheme::Mxfp4
        } else if fp8 && has(CompanionRole::ScaleInv) {
            WeightScheme::Fp8BlockScaled
        } else if has(CompanionRole::WeightScale2) && has(CompanionRole::WeightScale) {
            WeightScheme::Nvfp4
        } else if fp8 && has(CompanionRole::WeightScale) {
            WeightScheme::Fp8Scaled
        } else {
            WeightScheme::Other
        }
    }

    /// A short name (`plain`, `fp8-block`, `nvfp4`, ...).
    pub fn name(self) -> &'static str {
        match self {
            WeightScheme::Plain => "plain",
            WeightScheme::Fp8BlockScaled => "fp8-block",
            WeightScheme::Fp8Scaled => "fp8-scaled",
            WeightScheme::Nvfp4 => "nvfp4",
            WeightScheme::Mxfp4 => "mxfp4",
            WeightScheme::Other => "other",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classify_names() {
        let c = |n| CompanionRole::classify(n);
        assert_eq!(
            c("model.layers.0.mlp.down_proj.weight_scale_inv"),
            Some((
                CompanionRole::ScaleInv,
                "model.layers.0.mlp.down_proj.weight".into()
            ))
        );
        assert_eq!(
            c("a.weight_scale_2"),
            Some((CompanionRole::WeightScale2, "a.weight".into()))
        );
        assert_eq!(
            c("a.weight_scale"),
            Some((CompanionRole::WeightScale, "a.weight".into()))
        );
        assert_eq!(
            c("a.input_scale"),
            Some((CompanionRole::InputScale, "a.weight".into()))
        );
        assert_eq!(
            c("experts.gate_up_proj_scales"),
            Some((
                CompanionRole::BlockScales,
                "experts.gate_up_proj_blocks".into()
            ))
        );
        assert_eq!(c("a.weight"), None);
        assert_eq!(c("_scales"), None);
    }
}
