//! Weights: quantized matrices held on a device in their own block format.

use std::sync::Arc;

use pocket_quant::QuantFormat;

/// Bytes owned elsewhere (a memory map, a file buffer) that a weight borrows without copying.
#[derive(Clone)]
pub struct HostBytes {
    owner: Arc<dyn AsRef<[u8]> + Send + Sync>,
    start: usize,
    len: usize,
}

impl HostBytes {
    /// A window `[start, start + len)` into `owner`; `None` if it falls outside.
    pub fn new(
        owner: Arc<dyn AsRef<[u8]> + Send + Sync>,
        start: usize,
        len: usize,
    ) -> Option<Self> {
        let end = start.checked_add(len)?;
        if end > (*owner).as_ref().len() {
            return None;
        }
        Some(HostBytes { owner, start, len })
    }

    /// Owned bytes (tests, synthetic weights).
    pub fn from_vec(bytes: Vec<u8>) -> Self {
        let len = bytes.len();
        HostBytes {
            owner: Arc::new(bytes),
            start: 0,
            len,
        }
    }

    /// The bytes.
    pub fn as_slice(&self) -> &[u8] {
        &(*self.owner).as_ref()[self.start..self.start + self.len]
    }
}

impl std::fmt::Debug for HostBytes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "HostBytes({} bytes)", self.len)
    }
}

/// Where a weight's blocks live.
pub enum WeightStorage {
    /// Host bytes, usually a window of a memory-mapped checkpoint.
    Host {
        /// The blocks.
        data: HostBytes,
        /// Companion scales for formats that keep them apart (FP8 block scales, NVFP4).
        scales: Option<HostBytes>,
    },
    /// Blocks copied to (and possibly repacked on) a CUDA device.
    #[cfg(feature = "cuda")]
    Cuda(crate::cuda::CudaWeight),
}

/// A row-major matrix `[rows, cols]` in a block format, on one device.
///
/// `y = x · Wᵀ` is the contract of [`crate::Backend::matmul`]; an embedding table is a weight
/// whose rows are looked up.
pub struct Weight {
    /// The block format of `data`.
    pub format: QuantFormat,
    /// Output features (rows).
    pub rows: usize,
    /// Input features (columns; the row length).
    pub cols: usize,
    /// A per-tensor scale for formats that carry one (FP8 per-tensor, NVFP4's second scale).
    pub tensor_scale: Option<f32>,
    /// The blocks.
    pub storage: WeightStorage,
}

impl Weight {
    /// A host weight over borrowed bytes (zero-copy).
    pub fn host(format: QuantFormat, rows: usize, cols: usize, data: HostBytes) -> Weight {
        Weight {
            format,
            rows,
            cols,
            tensor_scale: None,
            storage: WeightStorage::Host { data, scales: None },
        }
    }

    /// The borrowed quantized view of a host weight, as pocket-quant consumes it.
    pub fn host_matrix(&self) -> Option<pocket_quant::QuantMatrix<'_>> {
        match &self.storage {
            WeightStorage::Host { data, scales } => Some(pocket_quant::QuantMatrix {
                format: self.format,
                rows: self.rows,
                cols: self.cols,
                data: data.as_slice(),
                scales: scales.as_ref().map(|s| s.as_slice()),
                tensor_scale: self.tensor_scale,
            }),
            #[cfg(feature = "cuda")]
            WeightStorage::Cuda(_) => None,
        }
    }
}
