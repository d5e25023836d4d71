//! [`QuantFormat`]: the one place a format is defined (geometry, activation pairing, codecs, dots).

use crate::dot::{scalar, scalar_iq, Kernel};
use crate::error::{QuantError, Result};
use crate::formats::{float, fp4, fp8, iq4, iquants, kquants, kquants_quant, legacy, ternary};
use pocket_formats::ggml_type::GgmlType;

/// Every weight/activation format the engine can hold, GGUF and safetensors-native alike.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum QuantFormat {
    /// A GGUF tensor type (self-contained blocks).
    Ggml(GgmlType),
    /// FP8 E4M3 (`F8_E4M3`, "fn": no infinities) with one f32 scale per tensor.
    Fp8E4M3,
    /// FP8 E5M2 (`F8_E5M2`) with one f32 scale per tensor.
    Fp8E5M2,
    /// FP8 E4M3 with f32 scales per 128x128 tile (`weight_scale_inv`, DeepSeek-V3 style).
    Fp8E4M3Block128,
    /// FP8 E5M2 with f32 scales per 128x128 tile.
    Fp8E5M2Block128,
    /// Safetensors NVFP4: packed E2M1 (low nibble first), an E4M3 scale per 16, an f32 tensor scale.
    NvFp4,
    /// Safetensors MXFP4 `_blocks` (packed E2M1, low nibble first) with E8M0 `_scales` per 32.
    MxFp4Blocks,
}

/// The activation format a weight format is dotted against.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[allow(non_camel_case_types)]
pub enum ActFormat {
    /// Plain f32 activations (float and FP8 weights).
    F32,
    /// Symmetric int8 blocks of 32 ([`crate::BlockQ8`]).
    Q8_0,
    /// Int8 blocks of 32 with their sum ([`crate::BlockQ8`], the `s` field is used).
    Q8_1,
    /// Int8 super-blocks of 256 with per-16 sums ([`crate::BlockQ8K`]).
    Q8_K,
}

/// Where a format keeps its scales when they are not inside the blocks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ScaleLayout {
    /// Scales live inside the blocks (every GGUF type) or there are none.
    Inline,
    /// One scale of `bytes` bytes per `group` consecutive elements of a row.
    PerGroup {
        /// Elements per scale.
        group: usize,
        /// Bytes per scale.
        bytes: usize,
    },
    /// One f32 per 128x128 tile, row-major over `[ceil(rows/128), ceil(cols/128)]`.
    Tile128,
}

pub(crate) type DequantFn = fn(&[u8], &[u8], &mut [f32]);
pub(crate) type QuantFn = fn(&[f32], &mut [u8]);

/// The static description of one format.
pub(crate) struct Spec {
    pub name: &'static str,
    pub block_size: usize,
    pub block_bytes: usize,
    pub scales: ScaleLayout,
    pub act: ActFormat,
    pub dequant: Option<DequantFn>,
    pub quant: Option<QuantFn>,
    /// The scalar reference dot; `None` dots a dequantized row against the quantized activations.
    pub dot: Option<Kernel>,
}

const fn spec(
    name: &'static str,
    block_size: usize,
    block_bytes: usize,
    act: ActFormat,
    dequant: Option<DequantFn>,
    quant: Option<QuantFn>,
    dot: Option<Kernel>,
) -> Spec {
    Spec {
        name,
        block_size,
        block_bytes,
        scales: ScaleLayout::Inline,
        act,
        dequant,
        quant,
        dot,
    }
}

use ActFormat::{F32 as A32, Q8_0 as A80, Q8_1 as A81, Q8_K as A8K};

macro_rules! s {
    ($name:literal, $bs:expr, $bb:expr, $act:expr, $dq:expr, $q:expr, $dot:expr) => {{
        const S: Spec = spec($name, $bs, $bb, $act, $dq, $q, $dot);
        &S
    }};
}

/// The format table: adding a format means adding a variant and its row here.
fn spec_of(f: QuantFormat) -> &'static Spec {
    use GgmlType as G;
    match f {
        QuantFormat::Ggml(t) => match t {
            G::F32 => s!(
                "F32",
                1,
                4,
                A32,
                Some(float::dequant_f32),
                Some(float::quant_f32),
                Some(Kernel::F32(scalar::dot_f32))
            ),
            G::F16 => s!(
                "F16",
                1,
                2,
                A32,
                Some(float::dequant_f16),
                Some(float::quant_f16),
                Some(Kernel::F32(scalar::dot_f16))
            ),
            G::BF16 => s!(
                "BF16",
                1,
                2,
                A32,
                Some(float::dequant_bf16),
                Some(float::quant_bf16),
                Some(Kernel::F32(scalar::dot_bf16))
            ),
            G::F64 => s!("F64", 1, 8, A32, Some(float::dequant_f64), None, None),
            G::I8 => s!("I8", 1, 1, A32, Some(float::dequant_i8), None, None),
            G::I16 => s!("I16", 1, 2, A32, Some(float::dequant_i16), None, None),
            G::I32 => s!("I32", 1, 4, A32, Some(float::dequant_i32), None, None),
            G::I64 => s!("I64", 1, 8, A32, Some(float::dequant_i64), None, None),
            G::Q4_0 => s!(
                "Q4_0",
                32,
                18,
                A80,
                Some(legacy::dequant_q4_0),
                Some(legacy::quant_q4_0),
                Some(Kernel::Q8(scalar::dot_q4_0))
            ),
            G::Q4_1 => s!(
                "Q4_1",
                32,
                20,
                A81,
                Some(legacy::dequant_q4_1),
                Some(legacy::quant_q4_1),
                Some(Kernel::Q8(scalar::dot_q4_1))
            ),
            G::Q5_0 => s!(
                "Q5_0",
                32,
                22,
                A80,
                Some(legacy::dequant_q5_0),
                Some(legacy::quant_q5_0),
                Some(Kernel::Q8(scalar::dot_q5_0))
            ),
            G::Q5_1 => s!(
                "Q5_1",
                32,
                24,
                A81,
                Some(legacy::dequant_q5_1),
                Some(legacy::quant_q5_1),
                Some(Kernel::Q8(scalar::dot_q5_1))
            ),
            G::Q8_0 => s!(
                "Q8_0",
                32,
                34,
                A80,
                Some(legacy::dequant_q8_0),
                Some(legacy::quant_q8_0),
                Some(Kernel::Q8(scalar::dot_q8_0))
            ),
            G::Q8_1 => s!(
                "Q8_1",
                32,
                36,
                A80,
                Some(legacy::dequant_q8_1),
                Some(legacy::quant_q8_1),
                None
            ),
            G::Q2_K => s!(
                "Q2_K",
                256,
                84,
                A8K,
                Some(kquants::dequant_q2_k),
                Some(kquants_quant::quant_q2_k),
                Some(Kernel::Q8K(scalar::dot_q2_k))
            ),
            G::Q3_K => s!(
                "Q3_K",
                256,
                110,
                A8K,
                Some(kquants::dequant_q3_k),
                Some(kquants_quant::quant_q3_k),
                Some(Kernel::Q8K(scalar::dot_q3_k))
            ),
            G::Q4_K => s!(
                "Q4_K",
                256,
                144,
                A8K,
                Some(kquants::dequant_q4_k),
                Some(kquants_quant::quant_q4_k),
                Some(Kernel::Q8K(scalar::dot_q4_k))
            ),
            G::Q5_K => s!(
                "Q5_K",
                256,
                176,
                A8K,
                Some(kquants::dequant_q5_k),
                Some(kquants_quant::quant_q5_k),
                Some(Kernel::Q8K(scalar::dot_q5_k))
            ),
            G::Q6_K => s!(
                "Q6_K",
                256,
                210,
                A8K,
                Some(kquants::dequant_q6_k),
                Some(kquants_quant::quant_q6_k),
                Some(Kernel::Q8K(scalar::dot_q6_k))
            ),
            G::Q8_K => s!(
                "Q8_K",
                256,
                292,
                A8K,
                Some(kquants::dequant_q8_k),
                Some(kquants::quant_q8_k),
                None
            ),
            G::IQ2_XXS => s!(
                "IQ2_XXS",
                256,
                66,
                A8K,
                Some(iquants::dequant_iq2_xxs),
                None,
                Some(Kernel::Q8K(scalar_iq::dot_iq2_xxs))
            ),
            G::IQ2_XS => s!(
                "IQ2_XS",
                256,
                74,
                A8K,
                Some(iquants::dequant_iq2_xs),
                None,
                Some(Kernel::Q8K(scalar_iq::dot_iq2_xs))
            ),
            G::IQ2_S => s!(
                "IQ2_S",
                256,
                82,
                A8K,
                Some(iquants::dequant_iq2_s),
                None,
                Some(Kernel::Q8K(scalar_iq::dot_iq2_s))
            ),
            G::IQ3_XXS => s!(
                "IQ3_XXS",
                256,
                98,
                A8K,
                Some(iquants::dequant_iq3_xxs),
                None,
                Some(Kernel::Q8K(scalar_iq::dot_iq3_xxs))
            ),
            G::IQ3_S => s!(
                "IQ3_S",
                256,
                110,
                A8K,
                Some(iquants::dequant_iq3_s),
                None,
                Some(Kernel::Q8K(scalar_iq::dot_iq3_s))
            ),
            G::IQ1_S => s!(
                "IQ1_S",
                256,
                50,
                A8K,
                Some(iquants::dequant_iq1_s),
                None,
                Some(Kernel::Q8K(scalar_iq::dot_iq1_s))
            ),
            G::IQ1_M => s!(
                "IQ1_M",
                256,
                56,
                A8K,
                Some(iquants::dequant_iq1_m),
                None,
                Some(Kernel::Q8K(scalar_iq::dot_iq1_m))
            ),
            G::IQ4_NL => s!(
                "IQ4_NL",
                32,
                18,
                A80,
                Some(iq4::dequant_iq4_nl),
                None,
                Some(Kernel::Q8(scalar::dot_iq4_nl))
            ),
            G::IQ4_XS => s!(
                "IQ4_XS",
                256,
                136,
                A8K,
                Some(iq4::dequant_iq4_xs),
                None,
                Some(Kernel::Q8K(scalar::dot_iq4_xs))
            ),
            G::TQ1_0 => s!(
                "TQ1_0",
                256,
                54,
                A8K,
                Some(ternary::dequant_tq1_0),
                Some(ternary::quant_tq1_0),
                Some(Kernel::Q8K(scalar_iq::dot_tq1_0))
            ),
            G::TQ2_0 => s!(
                "TQ2_0",
                256,
                66,
                A8K,
                Some(ternary::dequant_tq2_0),
                Some(ternary::quant_tq2_0),
                Some(Kernel::Q8K(scalar_iq::dot_tq2_0))
            ),
            G::MXFP4 => s!(
                "MXFP4",
                32,
                17,
                A80,
                Some(fp4::dequant_mxfp4),
                Some(fp4::quant_mxfp4),
                Some(Kernel::Q8(scalar::dot_mxfp4))
            ),
            G::NVFP4 => s!(
                "NVFP4",
                64,
                36,
                A80,
                Some(fp4::dequant_nvfp4),
                Some(fp4::quant_nvfp4),
                Some(Kernel::Q8(scalar::dot_nvfp4))
            ),
            G::Q1_0 => s!("Q1_0", 128, 18, A80, None, None, None),
        },
        QuantFormat::Fp8E4M3 => s!(
            "F8_E4M3",
            1,
            1,
            A32,
            Some(fp8::dequant_e4m3),
            Some(fp8::quant_e4m3),
            Some(Kernel::F32(fp8::dot_e4m3))
        ),
        QuantFormat::Fp8E5M2 => s!(
            "F8_E5M2",
            1,
            1,
            A32,
            Some(fp8::dequant_e5m2),
            Some(fp8::quant_e5m2),
            Some(Kernel::F32(fp8::dot_e5m2))
        ),
        QuantFormat::Fp8E4M3Block128 => {
            const S: Spec = Spec {
                scales: ScaleLayout::Tile128,
                ..spec(
                    "F8_E4M3_B128",
                    1,
                    1,
                    A32,
                    Some(fp8::dequant_e4m3_tiles),
                    Some(fp8::quant_e4m3),
                    Some(Kernel::F32(fp8::dot_e4m3_tiles)),
                )
            };
            &S
        }
        QuantFormat::Fp8E5M2Block128 => {
            const S: Spec = Spec {
                scales: ScaleLayout::Tile128,
                ..spec(
                    "F8_E5M2_B128",
                    1,
                    1,
                    A32,
                    Some(fp8::dequant_e5m2_tiles),
                    Some(fp8::quant_e5m2),
                    Some(Kernel::F32(fp8::dot_e5m2_tiles)),
                )
            };
            &S
        }
        QuantFormat::NvFp4 => {
            const S: Spec = Spec {
                scales: ScaleLayout::PerGroup {
                    group: 16,
                    bytes: 1,
                },
                ..spec(
                    "NVFP4_ST",
                    16,
                    8,
                    A80,
                    Some(fp4::dequant_nvfp4_st),
                    None,
                    Some(Kernel::Q8(fp4::dot_nvfp4_st)),
                )
            };
            &S
        }
        QuantFormat::MxFp4Blocks => {
            const S: Spec = Spec {
                scales: ScaleLayout::PerGroup {
                    group: 32,
                    bytes: 1,
                },
                ..spec(
                    "MXFP4_ST",
                    32,
                    16,
                    A80,
                    Some(fp4::dequant_mxfp4_st),
                    None,
                    Some(Kernel::Q8(fp4::dot_mxfp4_st)),
                )
            };
            &S
        }
    }
}

impl QuantFormat {
    pub(crate) fn spec(&self) -> &'static Spec {
        spec_of(*self)
    }

    /// The format of a GGUF tensor type.
    pub fn from_ggml(t: GgmlType) -> QuantFormat {
        QuantFormat::Ggml(t)
    }

    /// The element format of a safetensors dtype name ("F32", "F16", "BF16", "F8_E4M3", "F8_E5M2",
    /// "I8", ...). Packed FP4 tensors are stored as "U8" and are recognised by their companions, not
    /// by dtype, so they are not returned here.
    pub fn from_safetensors_dtype(dtype: &str) -> Option<QuantFormat> {
        Some(match dtype {
            "F32" => QuantFormat::Ggml(GgmlType::F32),
            "F16" => QuantFormat::Ggml(GgmlType::F16),
            "BF16" => QuantFormat::Ggml(GgmlType::BF16),
            "F64" => QuantFormat::Ggml(GgmlType::F64),
            "I8" => QuantFormat::Ggml(GgmlType::I8),
            "I16" => QuantFormat::Ggml(GgmlType::I16),
            "I32" => QuantFormat::Ggml(GgmlType::I32),
            "I64" => QuantFormat::Ggml(GgmlType::I64),
            "F8_E4M3" | "F8_E4M3FN" => QuantFormat::Fp8E4M3,
            "F8_E5M2" => QuantFormat::Fp8E5M2,
            _ => return None,
        })
    }

    /// The GGUF type, for formats that are one.
    pub fn ggml_type(&self) -> Option<GgmlType> {
        match self {
            QuantFormat::Ggml(t) => Some(*t),
            _ => None,
        }
    }

    /// Every format this crate knows (all GGUF types, then the safetensors-native ones).
    pub fn all() -> impl Iterator<Item = QuantFormat> {
        GgmlType::all().map(QuantFormat::Ggml).chain([
            QuantFormat::Fp8E4M3,
            QuantFormat::Fp8E5M2,
            QuantFormat::Fp8E4M3Block128,
            QuantFormat::Fp8E5M2Block128,
            QuantFormat::NvFp4,
            QuantFormat::MxFp4Blocks,
        ])
    }

    /// Elements per block.
    pub fn block_size(&self) -> usize {
        self.spec().block_size
    }

    /// Bytes per block in the data buffer (companion scales not counted).
    pub fn block_bytes(&self) -> usize {
        self.spec().block_bytes
    }

    /// The activation format this weight format is dotted against in [`crate::matmul`].
    pub fn activation_format(&self) -> ActFormat {
        self.spec().act
    }

    /// A short name (`Q4_K`, `F8_E4M3`, `NVFP4_ST`, ...).
    pub fn name(&self) -> &'static str {
        self.spec().name
    }

    /// Where the scales live.
    pub fn scale_layout(&self) -> ScaleLayout {
        self.spec().scales
    }

    /// Whether [`crate::quantize`] is defined for this format.
    pub fn has_quantizer(&self) -> bool {
        self.spec().quant.is_some()
    }

    /// Whether this format can be dequantized (and therefore multiplied).
    pub fn has_dequantizer(&self) -> bool {
        self.spec().dequant.is_some()
    }

    /// Bytes of one row of `cols` elements (data only), or an error if `cols` is not whole blocks.
    pub fn row_bytes(&self, cols: usize) -> Result<usize> {
        let s = self.spec();
        if !cols.is_multiple_of(s.block_size) {
            return Err(QuantError::NotBlockMultiple {
                format: s.name.to_string(),
                elements: cols,
                block_size: s.block_size,
            });
        }
        (cols / s.block_size)
            .checked_mul(s.block_bytes)
            .ok_or_else(|| QuantError::BadShape(format!("{cols} columns overflow")))
    }

    /// Bytes of companion scales for a `[rows, cols]` matrix (0 for inline formats).
    pub fn scale_bytes(&self, rows: usize, cols: usize) -> usize {
        match self.scale_layout() {
            ScaleLayout::Inline => 0,
            ScaleLayout::PerGroup { group, bytes } => rows * (cols / group) * bytes,
            ScaleLayout::Tile128 => rows.div_ceil(128) * cols.div_ceil(128) * 4,
        }
    }
}

impl std::fmt::Display for QuantFormat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl From<GgmlType> for QuantFormat {
    fn from(t: GgmlType) -> Self {
        QuantFormat::Ggml(t)
    }
}
