//! [`TensorFormat`]: the element format of a tensor in either file format — every GGML type plus
//! the safetensors dtypes that GGML lacks (FP8, FP6, FP4, unsigned integers, bool, complex).

use crate::ggml_type::GgmlType;

/// Element format of a stored tensor, across GGUF and safetensors.
///
/// Formats both files share (F32, F16, BF16, F64, I8..I64) are always [`TensorFormat::Ggml`], so a
/// safetensors `BF16` tensor and a GGUF `BF16` tensor compare equal.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TensorFormat {
    /// A GGML type (scalars and every block-quantized format).
    Ggml(GgmlType),
    /// Boolean, one byte each (safetensors `BOOL`).
    Bool,
    /// Unsigned 8-bit integer (`U8`); also carries packed 4-bit weights (NVFP4, MXFP4 blocks, GPTQ).
    U8,
    /// Unsigned 16-bit integer (`U16`).
    U16,
    /// Unsigned 32-bit integer (`U32`).
    U32,
    /// Unsigned 64-bit integer (`U64`).
    U64,
    /// FP8 with 4 exponent and 3 mantissa bits, no infinities (`F8_E4M3`, torch `float8_e4m3fn`).
    F8E4M3,
    /// FP8 with 5 exponent and 2 mantissa bits (`F8_E5M2`).
    F8E5M2,
    /// FP8 power-of-two scale, 8 exponent bits (`F8_E8M0`, the MX scale format).
    F8E8M0,
    /// FP6 E2M3, packed (`F6_E2M3`).
    F6E2M3,
    /// FP6 E3M2, packed (`F6_E3M2`).
    F6E3M2,
    /// FP4 E2M1, two per byte (`F4`).
    F4E2M1,
    /// Complex of two f32 (`C64`).
    C64,
}

/// (format, safetensors name, bits per element) for the safetensors dtypes.
const SAFETENSORS: &[(TensorFormat, &str, u32)] = &[
    (TensorFormat::Bool, "BOOL", 8),
    (TensorFormat::F4E2M1, "F4", 4),
    (TensorFormat::F6E2M3, "F6_E2M3", 6),
    (TensorFormat::F6E3M2, "F6_E3M2", 6),
    (TensorFormat::U8, "U8", 8),
    (TensorFormat::Ggml(GgmlType::I8), "I8", 8),
    (TensorFormat::F8E5M2, "F8_E5M2", 8),
    (TensorFormat::F8E4M3, "F8_E4M3", 8),
    (TensorFormat::F8E8M0, "F8_E8M0", 8),
    (TensorFormat::Ggml(GgmlType::I16), "I16", 16),
    (TensorFormat::U16, "U16", 16),
    (TensorFormat::Ggml(GgmlType::F16), "F16", 16),
    (TensorFormat::Ggml(GgmlType::BF16), "BF16", 16),
    (TensorFormat::Ggml(GgmlType::I32), "I32", 32),
    (TensorFormat::U32, "U32", 32),
    (TensorFormat::Ggml(GgmlType::F32), "F32", 32),
    (TensorFormat::C64, "C64", 64),
    (TensorFormat::Ggml(GgmlType::F64), "F64", 64),
    (TensorFormat::Ggml(GgmlType::I64), "I64", 64),
    (TensorFormat::U64, "U64", 64),
];

impl TensorFormat {
    /// The format of a safetensors dtype string (`BF16`, `F8_E4M3`, ...), case-sensitive as the spec.
    pub fn from_safetensors(dtype: &str) -> Option<Self> {
        SAFETENSORS.iter().find(|r| r.1 == dtype).map(|r| r.0)
    }

    /// The safetensors dtype string, `None` for GGML block formats.
    pub fn safetensors_name(self) -> Option<&'static str> {
        SAFETENSORS.iter().find(|r| r.0 == self).map(|r| r.1)
    }

    /// Every safetensors dtype this crate knows.
    pub fn all_safetensors() -> impl Iterator<Item = TensorFormat> {
        SAFETENSORS.iter().map(|r| r.0)
    }

    /// The GGML type, when the format is one.
    pub fn ggml(self) -> Option<GgmlType> {
        match self {
            TensorFormat::Ggml(t) => Some(t),
            _ => None,
        }
    }

    /// A display name: the GGML name for GGML types, the safetensors name otherwise.
    pub fn name(self) -> &'static str {
        match self {
            TensorFormat::Ggml(t) => t.name(),
            other => other.safetensors_name().unwrap_or("?"),
        }
    }

    /// The format for a display name as [`Self::name`] gives it (GGML or safetensors spelling).
    pub fn from_name(name: &str) -> Option<Self> {
        Self::from_safetensors(name).or_else(|| GgmlType::from_name(name).map(TensorFormat::Ggml))
    }

    /// Elements per block (1 except for GGML block formats).
    pub fn block_size(self) -> usize {
        match self {
            TensorFormat::Ggml(t) => t.block_size(),
            _ => 1,
        }
    }

    /// Bytes for `elements` values, `None` when not a whole number of blocks or bytes, or overflowing.
    pub fn bytes_for(self, elements: u64) -> Option<u64> {
        match self {
            TensorFormat::Ggml(t) => t.bytes_for(elements),
            other => {
                let bits = elements.checked_mul(other.bits_per_element() as u64)?;
                (bits % 8 == 0).then_some(bits / 8)
            }
        }
    }

    /// Bits per element for non-block formats (for block formats, the average per weight, rounded).
    fn bits_per_element(self) -> u32 {
        match SAFETENSORS.iter().find(|r| r.0 == self) {
            Some(r) => r.2,
            None => self.bits_per_weight().round() as u32,
        }
    }

    /// Average bits per element, block scales included.
    pub fn bits_per_weight(self) -> f64 {
        match self {
            TensorFormat::Ggml(t) => t.bits_per_weight(),
            other => other.bits_per_element() as f64,
        }
    }
}

impl From<GgmlType> for TensorFormat {
    fn from(t: GgmlType) -> Self {
        TensorFormat::Ggml(t)
    }
}

impl std::fmt::Display for TensorFormat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn safetensors_names_round_trip() {
        for f in TensorFormat::all_safetensors() {
            let n = f.safetensors_name().unwrap();
            assert_eq!(TensorFormat::from_safetensors(n), Some(f));
            assert_eq!(TensorFormat::from_name(f.name()), Some(f));
        }
        assert_eq!(TensorFormat::from_safetensors("bf16"), None);
        assert_eq!(
            TensorFormat::from_safetensors("BF16"),
            Some(TensorFormat::Ggml(GgmlType::BF16))
        );
    }

    #[test]
    fn sizes() {
        assert_eq!(TensorFormat::F8E4M3.bytes_for(10), Some(10));
        assert_eq!(TensorFormat::F4E2M1.bytes_for(10), Some(5));
        assert_eq!(TensorFormat::F4E2M1.bytes_for(3), None);
        assert_eq!(TensorFormat::F6E2M3.bytes_for(4), Some(3));
        assert_eq!(TensorFormat::C64.bytes_for(2), Some(16));
        assert_eq!(TensorFormat::Ggml(GgmlType::Q4_0).bytes_for(32), Some(18));
        assert_eq!(TensorFormat::U64.bytes_for(u64::MAX), None);
    }
}
