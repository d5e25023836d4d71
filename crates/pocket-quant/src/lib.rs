//! Block quantization formats: codecs, reference dequantizers and CPU dot products.
//!
//! [`QuantFormat`] names every format (GGUF types and safetensors-native FP8/FP4 layouts) and is
//! the one table that defines its geometry, activation pairing and functions. [`matmul`] multiplies
//! a quantized weight matrix by f32 activations, quantizing the activations once per call to the
//! format's paired [`ActFormat`] and picking a SIMD kernel at run time where one exists.

// Block codecs index several parallel arrays by the same position; index loops read clearer.
#![allow(clippy::needless_range_loop)]

mod act;
mod codec;
mod device_layout;
mod dot;
mod error;
mod format;
mod formats;
mod grids;
mod matmul;
mod simd;
mod util;

pub use act::{quantize_act_q8, quantize_act_q8k, BlockQ8, BlockQ8K};
pub use codec::{
    dequantize, dequantize_matrix, dequantize_row, quantize, quantize_matrix, QuantMatrix,
    QuantizedMatrix,
};
pub use device_layout::fp8_tile_lanes;
pub use error::{QuantError, Result};
pub use format::{ActFormat, QuantFormat, ScaleLayout};
pub use matmul::{matmul, matmul_exact, matmul_serial, matmul_with, simd_level, SimdLevel};
pub use pocket_formats::ggml_type::GgmlType;
