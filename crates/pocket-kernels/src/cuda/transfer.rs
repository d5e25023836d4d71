//! Host<->device copies for [`CudaBackend`]: uploads, read-backs and writes into existing tensors.

use cudarc::driver::result as dr;

use super::memory::cuda_err;
use super::{CudaBackend, CudaStorage};
use crate::error::shape_err;
use crate::{DType, Result, Tensor};

impl CudaBackend {
    pub(super) fn upload_bytes(&self, op: &'static str, bytes: &[u8]) -> Result<CudaStorage> {
        let s = self.pool.alloc(bytes.len())?;
        if !bytes.is_empty() {
            self.ctx.bind_to_thread().map_err(|e| cuda_err(op, e))?;
            unsafe { dr::memcpy_htod_async(s.ptr(), bytes, self.stream.cu_stream()) }
                .map_err(|e| cuda_err(op, e))?;
        }
        Ok(s)
    }

    pub(super) fn read_bytes(&self, op: &'static str, ptr: u64, len: usize) -> Result<Vec<u8>> {
        // A pending folded norm may be what is read.
        super::rms_fold::flush(self)?;
        let mut out = vec![0u8; len];
        if len > 0 {
            self.ctx.bind_to_thread().map_err(|e| cuda_err(op, e))?;
            unsafe { dr::memcpy_dtoh_async(&mut out[..], ptr, self.stream.cu_stream()) }
                .map_err(|e| cuda_err(op, e))?;
            self.stream.synchronize().map_err(|e| cuda_err(op, e))?;
        }
        Ok(out)
    }

    pub(super) fn write_host(
        &self,
        op: &'static str,
        dst: &mut Tensor,
        bytes: &[u8],
        dtype: DType,
        shape: &[usize],
    ) -> Result<()> {
        let n: usize = shape.iter().product();
        if n * dtype.size() != bytes.len() {
            return Err(shape_err(
                op,
                format!("{} values for shape {shape:?}", bytes.len() / dtype.size()),
            ));
        }
        if dst.dtype != dtype {
            return Err(shape_err(op, format!("destination is {:?}", dst.dtype)));
        }
        let ptr = self.ptr(op, "dst", dst)?;
        // A pending folded norm's write must not land after (over) this one.
        super::rms_fold::flush(self)?;
        if n > dst.capacity() {
            return Err(shape_err(
                op,
                format!(
                    "shape {shape:?} exceeds the tensor's capacity {}",
                    dst.capacity()
                ),
            ));
        }
        if !bytes.is_empty() {
            self.ctx.bind_to_thread().map_err(|e| cuda_err(op, e))?;
            unsafe { dr::memcpy_htod_async(ptr, bytes, self.stream.cu_stream()) }
                .map_err(|e| cuda_err(op, e))?;
        }
        dst.shape = shape.to_vec();
        Ok(())
    }
}

pub(super) fn as_bytes<T: Copy>(v: &[T]) -> &[u8] {
    // SAFETY: f32 and u32 have no padding and any byte pattern is a valid u8.
    unsafe { std::slice::from_raw_parts(v.as_ptr() as *const u8, std::mem::size_of_val(v)) }
}
