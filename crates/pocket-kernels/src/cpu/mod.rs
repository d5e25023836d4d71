//! The CPU backend: ops over host tensors, matmul through pocket-quant, parallel over rayon.

/// The CPU backend.
pub struct CpuBackend {}

impl CpuBackend {
    /// A CPU backend over the global rayon pool.
    pub fn new() -> Self {
        CpuBackend {}
    }
}

impl Default for CpuBackend {
    fn default() -> Self {
        Self::new()
    }
}
