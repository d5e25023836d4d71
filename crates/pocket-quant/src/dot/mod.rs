//! Row dot products of weight formats against activations: scalar references and SIMD paths.

use crate::act::{BlockQ8, BlockQ8K};

pub(crate) mod scalar;
pub(crate) mod scalar_iq;

/// A row kernel: (weight row data, weight row companion scales, activations) -> dot.
#[derive(Clone, Copy)]
pub(crate) enum Kernel {
    /// Against plain f32 activations.
    F32(fn(&[u8], &[u8], &[f32]) -> f32),
    /// Against 32-element int8 blocks.
    Q8(fn(&[u8], &[u8], &[BlockQ8]) -> f32),
    /// Against 256-element int8 super-blocks.
    Q8K(fn(&[u8], &[u8], &[BlockQ8K]) -> f32),
}

#[cfg(test)]
mod tests;
