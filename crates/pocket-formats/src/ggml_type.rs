//! GGML tensor type ids with their block geometry, as the `gguf` Python package 0.19.0 defines them.

/// A tensor element type as stored in a GGUF file (`ggml_type`).
///
/// Ids, block sizes and bytes per block are format data reproduced from gguf-py 0.19.0
/// (`gguf/constants.py`, `GGMLQuantizationType` and `GGML_QUANT_SIZES`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[allow(non_camel_case_types)]
pub enum GgmlType {
    F32,
    F16,
    Q4_0,
    Q4_1,
    Q5_0,
    Q5_1,
    Q8_0,
    Q8_1,
    Q2_K,
    Q3_K,
    Q4_K,
    Q5_K,
    Q6_K,
    Q8_K,
    IQ2_XXS,
    IQ2_XS,
    IQ3_XXS,
    IQ1_S,
    IQ4_NL,
    IQ3_S,
    IQ2_S,
    IQ4_XS,
    I8,
    I16,
    I32,
    I64,
    F64,
    IQ1_M,
    BF16,
    TQ1_0,
    TQ2_0,
    MXFP4,
    NVFP4,
    Q1_0,
}

/// Elements per super-block of the K and IQ families.
pub const QK_K: usize = 256;

/// (type, id, elements per block, bytes per block, name) for every type gguf-py 0.19.0 knows.
const TABLE: &[(GgmlType, u32, usize, usize, &str)] = &[
    (GgmlType::F32, 0, 1, 4, "F32"),
    (GgmlType::F16, 1, 1, 2, "F16"),
    (GgmlType::Q4_0, 2, 32, 2 + 16, "Q4_0"),
    (GgmlType::Q4_1, 3, 32, 2 + 2 + 16, "Q4_1"),
    (GgmlType::Q5_0, 6, 32, 2 + 4 + 16, "Q5_0"),
    (GgmlType::Q5_1, 7, 32, 2 + 2 + 4 + 16, "Q5_1"),
    (GgmlType::Q8_0, 8, 32, 2 + 32, "Q8_0"),
    (GgmlType::Q8_1, 9, 32, 4 + 4 + 32, "Q8_1"),
    (
        GgmlType::Q2_K,
        10,
        QK_K,
        2 + 2 + QK_K / 16 + QK_K / 4,
        "Q2_K",
    ),
    (
        GgmlType::Q3_K,
        11,
        QK_K,
        2 + QK_K / 4 + QK_K / 8 + 12,
        "Q3_K",
    ),
    (GgmlType::Q4_K, 12, QK_K, 2 + 2 + QK_K / 2 + 12, "Q4_K"),
    (
        GgmlType::Q5_K,
        13,
        QK_K,
        2 + 2 + QK_K / 2 + QK_K / 8 + 12,
        "Q5_K",
    ),
    (
        GgmlType::Q6_K,
        14,
        QK_K,
        2 + QK_K / 2 + QK_K / 4 + QK_K / 16,
        "Q6_K",
    ),
    (GgmlType::Q8_K, 15, QK_K, 4 + QK_K + QK_K / 8, "Q8_K"),
    (GgmlType::IQ2_XXS, 16, QK_K, 2 + QK_K / 4, "IQ2_XXS"),
    (
        GgmlType::IQ2_XS,
        17,
        QK_K,
        2 + QK_K / 4 + QK_K / 32,
        "IQ2_XS",
    ),
    (
        GgmlType::IQ3_XXS,
        18,
        QK_K,
        2 + QK_K / 4 + QK_K / 8,
        "IQ3_XXS",
    ),
    (GgmlType::IQ1_S, 19, QK_K, 2 + QK_K / 8 + QK_K / 16, "IQ1_S"),
    (GgmlType::IQ4_NL, 20, 32, 2 + 16, "IQ4_NL"),
    (
        GgmlType::IQ3_S,
        21,
        QK_K,
        2 + QK_K / 4 + QK_K / 8 + QK_K / 32 + 4,
        "IQ3_S",
    ),
    (GgmlType::IQ2_S, 22, QK_K, 2 + QK_K / 4 + QK_K / 16, "IQ2_S"),
    (
        GgmlType::IQ4_XS,
        23,
        QK_K,
        2 + 2 + QK_K / 2 + QK_K / 64,
        "IQ4_XS",
    ),
    (GgmlType::I8, 24, 1, 1, "I8"),
    (GgmlType::I16, 25, 1, 2, "I16"),
    (GgmlType::I32, 26, 1, 4, "I32"),
    (GgmlType::I64, 27, 1, 8, "I64"),
    (GgmlType::F64, 28, 1, 8, "F64"),
    (
        GgmlType::IQ1_M,
        29,
        QK_K,
        QK_K / 8 + QK_K / 16 + QK_K / 32,
        "IQ1_M",
    ),
    (GgmlType::BF16, 30, 1, 2, "BF16"),
    (GgmlType::TQ1_0, 34, QK_K, 2 + 4 * 13, "TQ1_0"),
    (GgmlType::TQ2_0, 35, QK_K, 2 + 64, "TQ2_0"),
    (GgmlType::MXFP4, 39, 32, 1 + 16, "MXFP4"),
    (GgmlType::NVFP4, 40, 64, 4 + 32, "NVFP4"),
    (GgmlType::Q1_0, 41, 128, 2 + 16, "Q1_0"),
];

impl GgmlType {
    /// Every type, in id order.
    pub fn all() -> impl Iterator<Item = GgmlType> {
        TABLE.iter().map(|row| row.0)
    }

    fn row(self) -> &'static (GgmlType, u32, usize, usize, &'static str) {
        TABLE
            .iter()
            .find(|row| row.0 == self)
            .expect("every variant has a table row")
    }

    /// The type for a GGUF type id, or `None` for an id gguf-py 0.19.0 does not define.
    pub fn from_id(id: u32) -> Option<GgmlType> {
        TABLE.iter().find(|row| row.1 == id).map(|row| row.0)
    }

    /// The GGUF type id.
    pub fn id(self) -> u32 {
        self.row().1
    }

    /// Elements per block (1 for plain scalar types).
    pub fn block_size(self) -> usize {
        self.row().2
    }

    /// Bytes per block.
    pub fn block_bytes(self) -> usize {
        self.row().3
    }

    /// The name gguf-py uses (`Q4_K`, `BF16`, ...).
    pub fn name(self) -> &'static str {
        self.row().4
    }

    /// The type for a gguf-py name, case-insensitive.
    pub fn from_name(name: &str) -> Option<GgmlType> {
        TABLE
            .iter()
            .find(|row| row.4.eq_ignore_ascii_case(name))
            .map(|row| row.0)
    }

    /// Bytes needed for `elements` values, or `None` when `elements` is not a whole number of
    /// blocks or the size overflows.
    pub fn bytes_for(self, elements: u64) -> Option<u64> {
        let bs = self.block_size() as u64;
        if !elements.is_multiple_of(bs) {
            return None;
        }
        (elements / bs).checked_mul(self.block_bytes() as u64)
    }

    /// Average bits per weight of this type.
    pub fn bits_per_weight(self) -> f64 {
        self.block_bytes() as f64 * 8.0 / self.block_size() as f64
    }
}

impl std::fmt::Display for GgmlType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_round_trip_and_are_unique() {
        let mut ids: Vec<u32> = GgmlType::all().map(|t| t.id()).collect();
        for t in GgmlType::all() {
            assert_eq!(GgmlType::from_id(t.id()), Some(t));
            assert_eq!(GgmlType::from_name(t.name()), Some(t));
        }
        ids.sort();
        ids.dedup();
        assert_eq!(ids.len(), TABLE.len());
        assert_eq!(GgmlType::from_id(4), None, "Q4_2 was removed from ggml");
    }

    #[test]
    fn known_sizes() {
        assert_eq!(GgmlType::Q4_K.block_bytes(), 144);
        assert_eq!(GgmlType::Q6_K.block_bytes(), 210);
        assert_eq!(GgmlType::IQ4_XS.block_bytes(), 136);
        assert_eq!(GgmlType::Q4_0.bytes_for(64), Some(36));
        assert_eq!(GgmlType::Q4_0.bytes_for(33), None);
    }
}
