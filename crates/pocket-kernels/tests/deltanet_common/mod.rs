//! Scaffolding shared by the Gated DeltaNet CUDA tests (cuda_deltanet.rs, cuda_deltanet_decode.rs):
//! the generator, the recurrent batch metadata, one device's copy of a layer and the CUDA-vs-CPU
//! bound.

use pocket_kernels::{Device, Tensor};

#[path = "../ops_support/mod.rs"]
mod ops_support;
/// The op tests' deterministic generator (xorshift64*), values in [-1, 1), and the recurrent
/// batch metadata.
pub use ops_support::{meta, Rng};

/// One device's copy of a layer's weights and state pools.
pub struct Layer {
    pub d: Device,
    pub conv_w: Tensor,
    pub a_neg: Tensor,
    pub dt_bias: Tensor,
    pub norm_w: Tensor,
    pub conv_state: Tensor,
    pub state: Tensor,
}

/// CUDA against the CPU: both are f32 evaluations of the same formulas in different summation
/// orders (the delta rule's 128-term dots and the norms reduced in another grouping on the GPU;
/// the GPU prefill is the chunked WY/UT form from 32 rows; `expf`/`rsqrtf` an ulp or two off the
/// CPU's), with the state carried over steps; each side stays within 1e-4 of the f64 reference
/// in tests/ops_deltanet.rs, so they may differ by twice that.
pub fn assert_close(what: &str, got: &[f32], want: &[f32]) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g - w).abs() <= 2e-4 * (1.0 + w.abs()),
            "{what}[{i}]: got {g}, reference {w}"
        );
    }
}
