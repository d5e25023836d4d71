// Scalar activations of the Gated DeltaNet gates, written once so the fused decode kernel
// (deltanet_decode.cu) evaluates them with the same expressions, hence the same bits, as the
// unfused kernels (deltanet.cu).
#pragma once
#include "common.cuh"

DEVI float silu_f(float x) { return x / (1.f + expf(-x)); }
DEVI float sigmoid_f(float x) { return 1.f / (1.f + expf(-x)); }
// torch's softplus (beta 1, threshold 20: linear above it).
DEVI float softplus_f(float x) { return x > 20.f ? x : log1pf(expf(x)); }
