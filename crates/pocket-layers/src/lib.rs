//! Building blocks shared by architectures: Linear, attention, MLP, norms, KV cache.
