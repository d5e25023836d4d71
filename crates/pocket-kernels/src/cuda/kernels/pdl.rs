//! The kernels launched with programmatic dependent launch (PDL): the [`PDL_AWARE`] table of
//! module and symbol patterns, checked against the sm_90 SASS by `tests/pdl_marking.rs`.

use super::super::artifacts::ModuleId;
use super::Kernel;

/// Kernels that may be launched with programmatic dependent launch: each calls `pdl_wait()`
/// (kernels/common.cuh) in every block that does work, before it reads anything an earlier
/// kernel of the step wrote and before any global write (only weights and shapes are read
/// before it). An entry is a module and a symbol, where one `*` matches any run of characters.
/// `tests/pdl_marking.rs` checks every matching kernel of the sm_90 cubin: it must execute the
/// wait and store nothing to global memory before it.
pub const PDL_AWARE: &[(ModuleId, &str)] = &[
    (ModuleId::Elementwise, "add_bias"),
    (ModuleId::Elementwise, "add_assign"),
    (ModuleId::Elementwise, "silu_mul"),
    (ModuleId::Elementwise, "silu_mul_q8"),
    (ModuleId::Elementwise, "gather_rows"),
    (ModuleId::Elementwise, "rope"),
    (ModuleId::Elementwise, "kv_write_*"),
    (ModuleId::Elementwise, "embed_*"),
    (ModuleId::Elementwise, "dequant_f16_*"),
    (ModuleId::Elementwise, "f32_to_f16"),
    (ModuleId::Elementwise, "act_q8_f16"),
    (ModuleId::Elementwise, "act_q8k_f16"),
    (ModuleId::QkvRope, "qkv_rope_kv_write_*"),
    (ModuleId::Norm, "rms_norm"),
    (ModuleId::Norm, "add_rms_norm"),
    (ModuleId::Norm, "rms_norm_q8"),
    (ModuleId::Norm, "add_rms_norm_q8"),
    (ModuleId::Norm, "rms_fold_apply"),
    (ModuleId::Split, "split_columns3"),
    (ModuleId::Split, "silu_mul_halves"),
    (ModuleId::Split, "silu_mul_halves_q8"),
    (ModuleId::Argmax, "argmax_rows"),
    (ModuleId::Sample, "sample_rows"),
    // attn_<cache>, attn_dec_* and attn_combine.
    (ModuleId::Attention, "attn_*"),
    (ModuleId::AttentionPrefill, "attn_prefill_*"),
    // gemv_q8r_*, gemv_q8r64_* and gemv_q8r1_*.
    (ModuleId::Gemv, "gemv_q8r*"),
    (ModuleId::Gemv, "gemv_q8w_*"),
    (ModuleId::Gemv, "gemv_h_*"),
    // The one-row FP8 variants (one template): `_n1`, `_n1w8`, their deep forms `_n1d`,
    // `_n1w8d`, `_n1d6`, the column-split `_n1w8s2`, and the `_bits` decode of all of them.
    (ModuleId::GemvFp8, "gemv_fp8_*_n1"),
    (ModuleId::GemvFp8, "gemv_fp8_*_n1w8"),
    (ModuleId::GemvFp8, "gemv_fp8_*_n1d"),
    (ModuleId::GemvFp8, "gemv_fp8_*_n1w8d"),
    (ModuleId::GemvFp8, "gemv_fp8_*_n1d6"),
    (ModuleId::GemvFp8, "gemv_fp8_*_n1w8s2"),
    (ModuleId::GemvFp8, "gemv_fp8_*_bits"),
    // The one-row [gate; up] GEMV with the SwiGLU epilogue (`_gu1`, `_gu2`, `_gu4`).
    (ModuleId::GemvFp8, "gemv_fp8_silu_*"),
    (ModuleId::Deltanet, "causal_conv1d_silu"),
    (ModuleId::Deltanet, "delta_gates"),
    (ModuleId::Deltanet, "gated_delta_rule"),
    (ModuleId::Deltanet, "gated_rms_norm"),
    (ModuleId::Deltanet, "split_halves"),
    (ModuleId::Deltanet, "sigmoid_mul"),
    (ModuleId::Deltanet, "delta_chunk_prep"),
    (ModuleId::Deltanet, "delta_chunk_scan"),
    (ModuleId::DeltanetDecode, "deltanet_decode"),
    // The cluster variants deltanet_decode_c2 and _c4 (sm_90 cubin only) and _c1.
    (ModuleId::DeltanetDecode, "deltanet_decode_c*"),
];

/// Whether kernel `symbol` of module `m` is in [`PDL_AWARE`].
pub fn pdl_aware(m: ModuleId, symbol: &str) -> bool {
    PDL_AWARE
        .iter()
        .any(|&(em, pat)| em == m && pdl_pattern_matches(pat, symbol))
}

/// Whether a [`PDL_AWARE`] pattern (a symbol, or one with a single `*`) matches `symbol`.
pub fn pdl_pattern_matches(pat: &str, symbol: &str) -> bool {
    match pat.split_once('*') {
        Some((head, tail)) => {
            symbol.len() >= head.len() + tail.len()
                && symbol.starts_with(head)
                && symbol.ends_with(tail)
        }
        None => symbol == pat,
    }
}

impl Kernel {
    /// Whether this kernel may be launched with programmatic dependent launch ([`PDL_AWARE`]).
    pub fn pdl_aware(self) -> bool {
        let (m, sym) = self.symbol();
        pdl_aware(m, sym)
    }
}
