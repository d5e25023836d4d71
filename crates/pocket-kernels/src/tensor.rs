//! Device tensors: a dtype, a row-major shape and storage on one device.

use half::{bf16, f16};

/// Element type of an activation, cache or index tensor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DType {
    /// 32-bit float (activations, norms, logits).
    F32,
    /// IEEE half (KV cache option).
    F16,
    /// bfloat16 (KV cache option).
    BF16,
    /// Unsigned 32-bit integer (token ids, positions, block tables).
    U32,
}

impl DType {
    /// The type's name as the command lines take it (`f32`, `f16`, `bf16`, `u32`).
    pub fn name(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::F16 => "f16",
            DType::BF16 => "bf16",
            DType::U32 => "u32",
        }
    }

    /// Size of one element in bytes.
    pub fn size(self) -> usize {
        match self {
            DType::F32 | DType::U32 => 4,
            DType::F16 | DType::BF16 => 2,
        }
    }
}

/// Where a tensor's elements live.
pub enum Storage {
    /// Host memory, typed.
    Host(HostData),
    /// CUDA device memory (raw bytes; the tensor's dtype says how to read them).
    #[cfg(feature = "cuda")]
    Cuda(crate::cuda::CudaStorage),
}

/// Typed host storage.
#[derive(Debug, Clone)]
pub enum HostData {
    /// f32 elements.
    F32(Vec<f32>),
    /// f16 elements.
    F16(Vec<f16>),
    /// bf16 elements.
    BF16(Vec<bf16>),
    /// u32 elements.
    U32(Vec<u32>),
}

/// A dense row-major tensor on one device.
///
/// The storage may hold more elements than the shape names: workspaces are allocated once for the
/// largest batch and [`Tensor::set_leading`] views a prefix of them, so steps allocate nothing.
pub struct Tensor {
    /// Element type.
    pub dtype: DType,
    /// Row-major shape, outermost first (batch-first for activations).
    pub shape: Vec<usize>,
    /// The elements.
    pub storage: Storage,
}

impl Tensor {
    /// Number of elements.
    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }

    /// Size of the last dimension (the row length).
    pub fn row_len(&self) -> usize {
        self.shape.last().copied().unwrap_or(1)
    }

    /// Number of rows: all dimensions but the last, multiplied.
    pub fn rows(&self) -> usize {
        self.numel() / self.row_len().max(1)
    }

    /// A host f32 tensor from data (panics only if `data.len()` disagrees with `shape`, a caller bug).
    pub fn host_f32(data: Vec<f32>, shape: &[usize]) -> Tensor {
        assert_eq!(
            data.len(),
            shape.iter().product::<usize>(),
            "data/shape mismatch"
        );
        Tensor {
            dtype: DType::F32,
            shape: shape.to_vec(),
            storage: Storage::Host(HostData::F32(data)),
        }
    }

    /// A host u32 tensor from data.
    pub fn host_u32(data: Vec<u32>, shape: &[usize]) -> Tensor {
        assert_eq!(
            data.len(),
            shape.iter().product::<usize>(),
            "data/shape mismatch"
        );
        Tensor {
            dtype: DType::U32,
            shape: shape.to_vec(),
            storage: Storage::Host(HostData::U32(data)),
        }
    }

    /// Elements the storage can hold (at least `numel()`).
    pub fn capacity(&self) -> usize {
        match &self.storage {
            Storage::Host(HostData::F32(v)) => v.len(),
            Storage::Host(HostData::F16(v)) => v.len(),
            Storage::Host(HostData::BF16(v)) => v.len(),
            Storage::Host(HostData::U32(v)) => v.len(),
            #[cfg(feature = "cuda")]
            Storage::Cuda(c) => c.len_bytes() / self.dtype.size(),
        }
    }

    /// The host f32 elements named by the shape, if this is a host f32 tensor.
    pub fn as_host_f32(&self) -> Option<&[f32]> {
        let n = self.numel();
        match &self.storage {
            Storage::Host(HostData::F32(v)) => Some(&v[..n]),
            _ => None,
        }
    }

    /// The mutable host f32 elements named by the shape, if this is a host f32 tensor.
    pub fn as_host_f32_mut(&mut self) -> Option<&mut [f32]> {
        let n = self.numel();
        match &mut self.storage {
            Storage::Host(HostData::F32(v)) => Some(&mut v[..n]),
            _ => None,
        }
    }

    /// The host u32 elements named by the shape, if this is a host u32 tensor.
    pub fn as_host_u32(&self) -> Option<&[u32]> {
        let n = self.numel();
        match &self.storage {
            Storage::Host(HostData::U32(v)) => Some(&v[..n]),
            _ => None,
        }
    }

    /// Changes the shape without moving data; the new shape must fit the storage's capacity.
    pub fn reshape(&mut self, shape: &[usize]) -> crate::Result<()> {
        if shape.iter().product::<usize>() > self.capacity() {
            return Err(crate::error::shape_err(
                "reshape",
                format!(
                    "cannot view {:?} (capacity {}) as {:?}",
                    self.shape,
                    self.capacity(),
                    shape
                ),
            ));
        }
        self.shape = shape.to_vec();
        Ok(())
    }

    /// Sets the leading (batch or token) dimension, keeping the others; must fit the capacity.
    pub fn set_leading(&mut self, n: usize) -> crate::Result<()> {
        let mut shape = self.shape.clone();
        if shape.is_empty() {
            return Err(crate::error::shape_err("set_leading", "scalar tensor"));
        }
        shape[0] = n;
        self.reshape(&shape)
    }

    /// A short description of where the tensor lives, for error messages.
    pub fn location(&self) -> String {
        match &self.storage {
            Storage::Host(_) => "cpu".to_string(),
            #[cfg(feature = "cuda")]
            Storage::Cuda(c) => format!("cuda:{}", c.ordinal()),
        }
    }
}
