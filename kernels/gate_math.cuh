// Scalar activations written once, so every kernel that applies one evaluates the same
// expression, hence the same bits: the Gated DeltaNet gates (deltanet.cu, deltanet_decode.cu)
// and SwiGLU (split.cu, elementwise.cu, gemv_fp8.cu; the CPU's silu(a) * u).
#pragma once
#include "common.cuh"

DEVI float silu_f(float x) { return x / (1.f + expf(-x)); }
// silu(a) * u, as a / (1 + exp(-a)) * u.
DEVI float swiglu_f(float a, float u) { return a / (1.f + expf(-a)) * u; }
DEVI float sigmoid_f(float x) { return 1.f / (1.f + expf(-x)); }
// torch's softplus (beta 1, threshold 20: linear above it).
DEVI float softplus_f(float x) { return x > 20.f ? x : log1pf(expf(x)); }
