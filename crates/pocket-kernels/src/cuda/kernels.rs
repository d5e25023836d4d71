//! Typed kernel dispatch: every kernel the backend launches is a [`Kernel`] value, mapped once to
//! its module and `extern "C"` symbol by a table of literals. Call sites never build names.

use pocket_quant::{GgmlType, QuantFormat};

use super::artifacts::ModuleId;
use crate::DType;

mod pdl;
mod table;
pub use pdl::{pdl_aware, pdl_pattern_matches, PDL_AWARE};
pub(crate) use table::KernelTable;

/// A weight format with a device decoder (`kernels/common.cuh`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[allow(non_camel_case_types, missing_docs)]
pub enum DevFormat {
    F32,
    F16,
    BF16,
    Q4_0,
    Q4_1,
    Q5_0,
    Q5_1,
    Q8_0,
    Q2_K,
    Q3_K,
    Q4_K,
    Q5_K,
    Q6_K,
    IQ4_NL,
    IQ4_XS,
}

impl DevFormat {
    /// The device format of a weight format, if the GPU can read it.
    pub fn of(f: QuantFormat) -> Option<DevFormat> {
        use GgmlType as G;
        Some(match f.ggml_type()? {
            G::F32 => DevFormat::F32,
            G::F16 => DevFormat::F16,
            G::BF16 => DevFormat::BF16,
            G::Q4_0 => DevFormat::Q4_0,
            G::Q4_1 => DevFormat::Q4_1,
            G::Q5_0 => DevFormat::Q5_0,
            G::Q5_1 => DevFormat::Q5_1,
            G::Q8_0 => DevFormat::Q8_0,
            G::Q2_K => DevFormat::Q2_K,
            G::Q3_K => DevFormat::Q3_K,
            G::Q4_K => DevFormat::Q4_K,
            G::Q5_K => DevFormat::Q5_K,
            G::Q6_K => DevFormat::Q6_K,
            G::IQ4_NL => DevFormat::IQ4_NL,
            G::IQ4_XS => DevFormat::IQ4_XS,
            _ => return None,
        })
    }

    /// Elements of one 16-element device chunk grouping (every format's decoder works in 16s).
    pub fn block_elems(self) -> usize {
        match self {
            DevFormat::F32 | DevFormat::F16 | DevFormat::BF16 => 16,
            DevFormat::Q4_0
            | DevFormat::Q4_1
            | DevFormat::Q5_0
            | DevFormat::Q5_1
            | DevFormat::Q8_0
            | DevFormat::IQ4_NL => 32,
            _ => 256,
        }
    }

    /// The byte ranges (quants, companion) of a GGML block that upload splits apart, for the
    /// repacked formats: all quants of the matrix first (16-byte aligned), then all companions.
    pub fn split_scales(self) -> Option<(std::ops::Range<usize>, std::ops::Range<usize>)> {
        match self {
            DevFormat::Q4_0 => Some((2..18, 0..2)),
            DevFormat::Q8_0 => Some((2..34, 0..2)),
            DevFormat::Q6_K => Some((0..192, 192..210)),
            _ => None,
        }
    }

    /// The dp4a GEMV over 8-bit activations, where one exists for this format.
    pub fn q8_gemv(self) -> Option<Q8Gemv> {
        Some(match self {
            DevFormat::Q4_0 => Q8Gemv::Q4_0,
            DevFormat::Q4_1 => Q8Gemv::Q4_1,
            DevFormat::Q8_0 => Q8Gemv::Q8_0,
            DevFormat::Q5_0 => Q8Gemv::Q5_0,
            DevFormat::Q5_1 => Q8Gemv::Q5_1,
            DevFormat::IQ4_NL => Q8Gemv::IQ4_NL,
            DevFormat::Q2_K => Q8Gemv::Q2_K,
            DevFormat::Q3_K => Q8Gemv::Q3_K,
            DevFormat::Q4_K => Q8Gemv::Q4_K,
            DevFormat::Q5_K => Q8Gemv::Q5_K,
            DevFormat::Q6_K => Q8Gemv::Q6_K,
            DevFormat::IQ4_XS => Q8Gemv::IQ4_XS,
            _ => return None,
        })
    }
}

/// Formats with an integer-dot (dp4a) GEMV.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[allow(non_camel_case_types, missing_docs)]
pub enum Q8Gemv {
    Q4_0,
    Q4_1,
    Q5_0,
    Q5_1,
    Q8_0,
    IQ4_NL,
    Q2_K,
    Q3_K,
    Q4_K,
    Q5_K,
    Q6_K,
    IQ4_XS,
}

impl Q8Gemv {
    /// Whether the format's dot reads the Q8K activation kind (one scale per 256 elements, the
    /// CPU's `quantize_act_q8k`) rather than Q8 (per 32, `quantize_act_q8`): the K formats and
    /// IQ4_XS, as pocket-quant pairs them (`ActK` in kernels/gemv.cu).
    pub fn act_k(self) -> bool {
        matches!(
            self,
            Q8Gemv::Q2_K
                | Q8Gemv::Q3_K
                | Q8Gemv::Q4_K
                | Q8Gemv::Q5_K
                | Q8Gemv::Q6_K
                | Q8Gemv::IQ4_XS
        )
    }

    /// Whether the one-row GEMV should stay on the warp-per-row kernel: Q3_K, whose 2-byte
    /// loads ran slower in the multi-row layout on the H200 (run 8: 32.4 vs 38.0 us at 14336x4096).
    pub fn prefers_warp_per_row(self) -> bool {
        matches!(self, Q8Gemv::Q3_K)
    }

    /// dp4a work items in one weight row of `cols` (kernels/gemv.cu `D::TPB` per block): one per
    /// 32 columns, two for Q8_0 (half blocks of 16 bytes).
    pub fn items_per_row(self, cols: usize) -> usize {
        if self == Q8Gemv::Q8_0 {
            cols / 16
        } else {
            cols / 32
        }
    }

    /// Whether the opt-in fused variant (`gemv_q8s_*`, `POCKET_GEMV=fused`) exists: only for the
    /// five formats it was measured with.
    pub fn has_fused(self) -> bool {
        matches!(
            self,
            Q8Gemv::Q4_0 | Q8Gemv::Q4_1 | Q8Gemv::Q8_0 | Q8Gemv::Q4_K | Q8Gemv::Q6_K
        )
    }
}

/// The one-row (decode) dp4a GEMV kernel, process-wide (`POCKET_GEMV_Q8`, or
/// `CudaBackend::set_q8_gemv_variant`): `Auto` picks per shape (`gemv_q8.rs`), the others
/// force one kernel for A/B measurements, falling back to `gemv_q8r_*` where the forced one is
/// not built for the format or shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Q8Variant {
    /// Per shape (`gemv_q8::q8_one_row`): `gemv_q8w_*` for Q3_K and for Q5_0 rows of <= 64 work
    /// items in matrices of >= 4096 rows, `gemv_q8r1_*` for Q4_K matrices under 2048 rows with
    /// rows past 64 items, else `gemv_q8r_*` (`POCKET_GEMV_Q8=auto`, the default).
    Auto,
    /// The session-3 choice: `gemv_q8r64_*` for narrow Q4_0/Q4_1/Q8_0 rows, a warp per row for
    /// Q3_K (now the PDL-aware `gemv_q8w_*`, same arithmetic), else `gemv_q8r_*` (`legacy`).
    Legacy,
    /// `gemv_q8r_*`: 4 rows per 128-thread block (`r`).
    Rows,
    /// `gemv_q8r64_*`: 4 rows per 64-thread block, rows of one pass only (`r64`).
    Rows64,
    /// `gemv_q8w_*`: a warp per row, PDL-aware (`w`).
    Warp,
    /// `gemv_q8r1_*`: one row per 128-thread block (`r1`).
    Row1,
}

impl Q8Variant {
    /// Every variant, in the order of their `POCKET_GEMV_Q8` names.
    pub const ALL: [Q8Variant; 6] = [
        Q8Variant::Auto,
        Q8Variant::Legacy,
        Q8Variant::Rows,
        Q8Variant::Rows64,
        Q8Variant::Warp,
        Q8Variant::Row1,
    ];

    /// The `POCKET_GEMV_Q8` name of this variant.
    pub fn name(self) -> &'static str {
        match self {
            Q8Variant::Auto => "auto",
            Q8Variant::Legacy => "legacy",
            Q8Variant::Rows => "r",
            Q8Variant::Rows64 => "r64",
            Q8Variant::Warp => "w",
            Q8Variant::Row1 => "r1",
        }
    }

    /// The variant of a `POCKET_GEMV_Q8` name.
    pub fn parse(s: &str) -> Option<Q8Variant> {
        Q8Variant::ALL.into_iter().find(|v| v.name() == s)
    }
}

/// Element type of a KV cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[allow(missing_docs)]
pub enum CacheType {
    F32,
    F16,
    BF16,
}

impl CacheType {
    /// The cache type of a tensor dtype.
    pub fn of(d: DType) -> Option<CacheType> {
        match d {
            DType::F32 => Some(CacheType::F32),
            DType::F16 => Some(CacheType::F16),
            DType::BF16 => Some(CacheType::BF16),
            DType::U32 => None,
        }
    }
}

/// GEMV variant by activation rows: `One` has no per-row guards; `UpTo8` loads each weight
/// block once for up to eight rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Rows {
    /// Exactly one activation row.
    One,
    /// One to eight rows.
    UpTo8,
}

/// Every kernel the CUDA backend launches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[allow(missing_docs)]
pub enum Kernel {
    RmsNorm,
    AddRmsNorm,
    /// `rms_norm` that also writes its output's 8-bit quantization (decode GEMV input).
    RmsNormQ8,
    /// `add_rms_norm` that also writes its output's 8-bit quantization.
    AddRmsNormQ8,
    /// A folded norm's output for a reader that is not a folding GEMV (cuda/rms_fold.rs).
    RmsFoldApply,
    /// Grid barriers only (cuda/persist_probe.rs, a measurement probe).
    PersistBarriers,
    /// Chained FP8 GEMVs in one persistent launch (cuda/persist_probe.rs, a measurement probe);
    /// `true`: each phase's first weights loaded before its barrier.
    PersistFp8Chain(bool),
    /// The one-row GEMV's weight reads alone (`probe_read_rows`) or the same bytes read
    /// grid-stride (`probe_read_stream`, `true`), no arithmetic (kernels/persist_probe.cu).
    ProbeRead(bool),
    /// A persistent byte stream through a shared-memory ring fed by bulk copies, phases split
    /// by grid barriers or dataflow waits (`probe_ring_stream`, kernels/persist_probe.cu).
    ProbeRingStream,
    AddBias,
    AddAssign,
    SiluMul,
    /// silu_mul that also writes its output's int8 quantization (decode, <= 8 rows).
    SiluMulQ8,
    GatherRows,
    Rope,
    F32ToF16,
    /// f32 -> f16 of the activations quantized as the CPU's Q8 (per-32) dot sees them.
    ActQ8F16,
    /// f32 -> f16 of the activations quantized as the CPU's Q8_K (per-256) dot sees them.
    ActQ8KF16,
    Argmax,
    /// Device sampling (greedy or temperature / top-k / top-p / min-p), one block per row.
    SampleRows,
    QuantizeQ8,
    AttnCombine,
    KvWrite(CacheType),
    Attention(CacheType),
    /// Decode attention (one query row per sequence) for GQA groups of up to 4 (`false`) or 8
    /// (`true`) query heads.
    AttnDecode(CacheType, bool),
    /// [`Kernel::AttnDecode`] (groups up to 4) with its 8 key splits merged inside a
    /// thread-block cluster (sm_90 cubin only; kernels/attention_cluster.cuh).
    AttnDecodeCluster(CacheType),
    /// Tiled flash-attention prefill (`kernels/attention_prefill.cu`) for a head size.
    AttnPrefill(CacheType, super::attn_prefill::PrefillDim),
    /// The TF32 tensor-core variant of [`Kernel::AttnPrefill`] (f32 caches).
    AttnPrefillTc(super::attn_prefill::PrefillTcDim),
    Embed(DevFormat),
    DequantF16(DevFormat),
    GemvF(DevFormat, Rows),
    GemvQ8(Q8Gemv, Rows),
    /// One activation row, four weight rows per block with the columns split over the block.
    GemvQ8Rows(Q8Gemv),
    /// One activation row, quantized per block into shared memory (no separate quantize launch).
    GemvQ8Fused(Q8Gemv),
    /// One activation row of F16 (`false`) or BF16 (`true`) weights, the columns split over the
    /// block: one row per 256-thread block (`false`) or four per 128-thread block (`true`).
    GemvHalf(bool, bool),
    /// [`Kernel::GemvQ8Rows`] with 64-thread blocks, for rows of one loop pass (Q4_0, Q4_1, Q8_0).
    GemvQ8Rows64(Q8Gemv),
    /// One activation row, a warp per weight row, PDL-aware (short rows).
    GemvQ8Warp(Q8Gemv),
    /// One activation row, one weight row per 128-thread block (small matrices).
    GemvQ8Row1(Q8Gemv),
    /// FP8 weight kernels (`kernels/gemv_fp8.cu`).
    Fp8(super::matmul_fp8::Fp8Kernel),
    /// Gated DeltaNet (`kernels/deltanet.cu`): short causal conv + SiLU with its state window.
    CausalConv1dSilu,
    /// Delta-rule gates (decay `g`, `beta`).
    DeltaGates,
    /// The gated delta rule, state on chip (decode and prefill).
    GatedDeltaRule,
    /// Chunked delta-rule prefill, part 1: per-chunk W, U, P (all chunks in parallel).
    DeltaChunkPrep,
    /// Chunked delta-rule prefill, part 2: the state carried across chunks.
    DeltaChunkScan,
    /// `x / rms(x) * w * silu(gate)`.
    GatedRmsNorm,
    /// The fused Gated DeltaNet decode step (`kernels/deltanet_decode.cu`).
    DeltanetDecode,
    /// Its cluster variant: a value head's columns over a cluster of `2` or `4` blocks (sm_90
    /// only), or its one-block form `1` (`kernels/deltanet_decode_cluster.cuh`).
    DeltanetDecodeCluster(u8),
    /// Row halves of `[rows, 2d]`.
    SplitHalves,
    /// Column split of a fused `[q | k | v]` row into up to three outputs (`kernels/split.cu`).
    SplitColumns3,
    /// SwiGLU over the halves of a fused `[gate | up]` row.
    SiluMulHalves,
    /// `SiluMulHalves` that also writes its output's int8 quantization (decode, <= 8 rows).
    SiluMulHalvesQ8,
    /// `x *= sigmoid(gate)`.
    SigmoidMul,
    /// Q/K/V bias, RoPE and the cache write in one launch (`kernels/qkv_rope.cu`).
    QkvRopeKvWrite(CacheType),
    /// `QkvRopeKvWrite` with per-head QK-norm and the gate copy: one block per head.
    QkvRopeKvWriteNorm(CacheType),
}

macro_rules! fmt_table {
    ($k:expr, $prefix:literal, $suffix:literal) => {
        match $k {
            DevFormat::F32 => concat!($prefix, "f32", $suffix),
            DevFormat::F16 => concat!($prefix, "f16", $suffix),
            DevFormat::BF16 => concat!($prefix, "bf16", $suffix),
            DevFormat::Q4_0 => concat!($prefix, "q4_0", $suffix),
            DevFormat::Q4_1 => concat!($prefix, "q4_1", $suffix),
            DevFormat::Q5_0 => concat!($prefix, "q5_0", $suffix),
            DevFormat::Q5_1 => concat!($prefix, "q5_1", $suffix),
            DevFormat::Q8_0 => concat!($prefix, "q8_0", $suffix),
            DevFormat::Q2_K => concat!($prefix, "q2_k", $suffix),
            DevFormat::Q3_K => concat!($prefix, "q3_k", $suffix),
            DevFormat::Q4_K => concat!($prefix, "q4_k", $suffix),
            DevFormat::Q5_K => concat!($prefix, "q5_k", $suffix),
            DevFormat::Q6_K => concat!($prefix, "q6_k", $suffix),
            DevFormat::IQ4_NL => concat!($prefix, "iq4_nl", $suffix),
            DevFormat::IQ4_XS => concat!($prefix, "iq4_xs", $suffix),
        }
    };
}

macro_rules! q8_table {
    ($k:expr, $prefix:literal, $suffix:literal) => {
        match $k {
            Q8Gemv::Q4_0 => concat!($prefix, "q4_0", $suffix),
            Q8Gemv::Q4_1 => concat!($prefix, "q4_1", $suffix),
            Q8Gemv::Q5_0 => concat!($prefix, "q5_0", $suffix),
            Q8Gemv::Q5_1 => concat!($prefix, "q5_1", $suffix),
            Q8Gemv::Q8_0 => concat!($prefix, "q8_0", $suffix),
            Q8Gemv::IQ4_NL => concat!($prefix, "iq4_nl", $suffix),
            Q8Gemv::Q2_K => concat!($prefix, "q2_k", $suffix),
            Q8Gemv::Q3_K => concat!($prefix, "q3_k", $suffix),
            Q8Gemv::Q4_K => concat!($prefix, "q4_k", $suffix),
            Q8Gemv::Q5_K => concat!($prefix, "q5_k", $suffix),
            Q8Gemv::Q6_K => concat!($prefix, "q6_k", $suffix),
            Q8Gemv::IQ4_XS => concat!($prefix, "iq4_xs", $suffix),
        }
    };
}

impl Kernel {
    /// The module and symbol of this kernel (string literals, resolved at compile time).
    pub fn symbol(self) -> (ModuleId, &'static str) {
        use ModuleId as M;
        match self {
            Kernel::RmsNorm => (M::Norm, "rms_norm"),
            Kernel::AddRmsNorm => (M::Norm, "add_rms_norm"),
            Kernel::RmsNormQ8 => (M::Norm, "rms_norm_q8"),
            Kernel::AddRmsNormQ8 => (M::Norm, "add_rms_norm_q8"),
            Kernel::RmsFoldApply => (M::Norm, "rms_fold_apply"),
            Kernel::PersistBarriers => (M::PersistProbe, "persist_barriers"),
            Kernel::PersistFp8Chain(true) => (M::PersistProbe, "persist_fp8_chain"),
            Kernel::PersistFp8Chain(false) => (M::PersistProbe, "persist_fp8_chain_late"),
            Kernel::ProbeRead(false) => (M::PersistProbe, "probe_read_rows"),
            Kernel::ProbeRead(true) => (M::PersistProbe, "probe_read_stream"),
            Kernel::ProbeRingStream => (M::PersistProbe, "probe_ring_stream"),
            Kernel::AddBias => (M::Elementwise, "add_bias"),
            Kernel::AddAssign => (M::Elementwise, "add_assign"),
            Kernel::SiluMul => (M::Elementwise, "silu_mul"),
            Kernel::SiluMulQ8 => (M::Elementwise, "silu_mul_q8"),
            Kernel::GatherRows => (M::Elementwise, "gather_rows"),
            Kernel::Rope => (M::Elementwise, "rope"),
            Kernel::F32ToF16 => (M::Elementwise, "f32_to_f16"),
            Kernel::ActQ8F16 => (M::Elementwise, "act_q8_f16"),
            Kernel::ActQ8KF16 => (M::Elementwise, "act_q8k_f16"),
            Kernel::Argmax => (M::Argmax, "argmax_rows"),
            Kernel::SampleRows => (M::Sample, "sample_rows"),
            Kernel::QuantizeQ8 => (M::Gemv, "quantize_q8"),
            Kernel::AttnCombine => (M::Attention, "attn_combine"),
            Kernel::KvWrite(c) => (
                M::Elementwise,
                match c {
                    CacheType::F32 => "kv_write_f32",
                    CacheType::F16 => "kv_write_f16",
                    CacheType::BF16 => "kv_write_bf16",
                },
            ),
            Kernel::Attention(c) => (
                M::Attention,
                match c {
                    CacheType::F32 => "attn_f32",
                    CacheType::F16 => "attn_f16",
                    CacheType::BF16 => "attn_bf16",
                },
            ),
            Kernel::AttnDecode(c, g8) => (
                M::Attention,
                match (c, g8) {
                    (CacheType::F32, false) => "attn_dec_f32_g4",
                    (CacheType::F32, true) => "attn_dec_f32_g8",
                    (CacheType::F16, false) => "attn_dec_f16_g4",
                    (CacheType::F16, true) => "attn_dec_f16_g8",
                    (CacheType::BF16, false) => "attn_dec_bf16_g4",
                    (CacheType::BF16, true) => "attn_dec_bf16_g8",
                },
            ),
            Kernel::AttnDecodeCluster(c) => (
                M::Attention,
                match c {
                    CacheType::F32 => "attn_dec_c8_f32_g4",
                    CacheType::F16 => "attn_dec_c8_f16_g4",
                    CacheType::BF16 => "attn_dec_c8_bf16_g4",
                },
            ),
            Kernel::AttnPrefill(c, d) => (M::AttentionPrefill, super::attn_prefill::symbol(c, d)),
            Kernel::AttnPrefillTc(d) => (M::AttentionPrefill, super::attn_prefill::tc_symbol(d)),
            Kernel::Embed(f) => (M::Elementwise, fmt_table!(f, "embed_", "")),
            Kernel::DequantF16(f) => (M::Elementwise, fmt_table!(f, "dequant_f16_", "")),
            Kernel::GemvF(f, Rows::One) => (M::Gemv, fmt_table!(f, "gemv_f_", "_n1")),
            Kernel::GemvF(f, Rows::UpTo8) => (M::Gemv, fmt_table!(f, "gemv_f_", "_n8")),
            Kernel::GemvQ8(f, Rows::One) => (M::Gemv, q8_table!(f, "gemv_q8_", "_n1")),
            Kernel::GemvQ8(f, Rows::UpTo8) => (M::Gemv, q8_table!(f, "gemv_q8_", "_n8")),
            Kernel::GemvQ8Rows(f) => (M::Gemv, q8_table!(f, "gemv_q8r_", "")),
            Kernel::GemvQ8Fused(f) => (M::Gemv, q8_table!(f, "gemv_q8s_", "")),
            Kernel::GemvHalf(bf16, r4) => (M::Gemv, super::matmul::half_gemv_symbol(bf16, r4)),
            Kernel::GemvQ8Rows64(f) => (M::Gemv, q8_table!(f, "gemv_q8r64_", "")),
            Kernel::GemvQ8Warp(f) => (M::Gemv, q8_table!(f, "gemv_q8w_", "")),
            Kernel::GemvQ8Row1(f) => (M::Gemv, q8_table!(f, "gemv_q8r1_", "")),
            Kernel::Fp8(k) => (M::GemvFp8, k.symbol()),
            Kernel::CausalConv1dSilu => (M::Deltanet, "causal_conv1d_silu"),
            Kernel::DeltaGates => (M::Deltanet, "delta_gates"),
            Kernel::GatedDeltaRule => (M::Deltanet, "gated_delta_rule"),
            Kernel::DeltaChunkPrep => (M::Deltanet, "delta_chunk_prep"),
            Kernel::DeltaChunkScan => (M::Deltanet, "delta_chunk_scan"),
            Kernel::GatedRmsNorm => (M::Deltanet, "gated_rms_norm"),
            Kernel::DeltanetDecode => (M::DeltanetDecode, "deltanet_decode"),
            Kernel::DeltanetDecodeCluster(cs) => (
                M::DeltanetDecode,
                match cs {
                    1 => "deltanet_decode_c1",
                    4 => "deltanet_decode_c4",
                    _ => "deltanet_decode_c2",
                },
            ),
            Kernel::SplitHalves => (M::Deltanet, "split_halves"),
            Kernel::SplitColumns3 => (M::Split, "split_columns3"),
            Kernel::SiluMulHalves => (M::Split, "silu_mul_halves"),
            Kernel::SiluMulHalvesQ8 => (M::Split, "silu_mul_halves_q8"),
            Kernel::SigmoidMul => (M::Deltanet, "sigmoid_mul"),
            Kernel::QkvRopeKvWrite(c) => (
                M::QkvRope,
                match c {
                    CacheType::F32 => "qkv_rope_kv_write_f32",
                    CacheType::F16 => "qkv_rope_kv_write_f16",
                    CacheType::BF16 => "qkv_rope_kv_write_bf16",
                },
            ),
            Kernel::QkvRopeKvWriteNorm(c) => (
                M::QkvRope,
                match c {
                    CacheType::F32 => "qkv_rope_kv_write_norm_f32",
                    CacheType::F16 => "qkv_rope_kv_write_norm_f16",
                    CacheType::BF16 => "qkv_rope_kv_write_norm_bf16",
                },
            ),
        }
    }
}

/// Which compiled artifact a device runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Artifact {
    /// sm_90 machine code (compute capability 9.0 exactly).
    Sm90Cubin,
    /// compute_75 PTX, JIT-compiled by the driver (every other GPU from Turing on).
    Ptx75,
}
