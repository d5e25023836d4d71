//! Block quantization formats: codecs, reference dequantizers and CPU dot products.
