//! The cuBLAS GEMM shared by the prefill paths (GGML-format and FP8 weights): the lazily created
//! handle and one row chunk of `out = alpha · W · Xᵀ`.

use std::sync::MutexGuard;

use cudarc::cublas::{result as blas, sys as bsys, CudaBlas};

use super::CudaBackend;
use crate::error::shape_err;
use crate::{KernelError, Result};

/// Locks the backend's cuBLAS handle, creating it on first use. The guard must be held while the
/// handle is in use, since cuBLAS handles are not safe to share between threads.
pub(crate) fn lock_handle<'a>(
    be: &'a CudaBackend,
    op: &'static str,
) -> Result<(MutexGuard<'a, Option<CudaBlas>>, bsys::cublasHandle_t)> {
    let mut blas_guard = be
        .blas
        .lock()
        .map_err(|_| shape_err(op, "cuBLAS lock poisoned"))?;
    if blas_guard.is_none() {
        let h = CudaBlas::new(be.stream.clone()).map_err(|e| KernelError::Cuda {
            op,
            msg: format!("cuBLAS init: {e}"),
        })?;
        *blas_guard = Some(h);
    }
    let handle = *blas_guard
        .as_ref()
        .map(|b| b.handle())
        .ok_or_else(|| shape_err(op, "no cuBLAS handle"))?;
    Ok((blas_guard, handle))
}

/// A prefill GEMM of `rows` weight rows by `cols` against `n` activation rows, run one chunk of
/// weight rows at a time: each chunk's weights are first expanded to `ty` into a scratch buffer.
pub(crate) struct ChunkedGemm {
    /// Handle from [`lock_handle`], whose guard the caller holds.
    pub handle: bsys::cublasHandle_t,
    /// Op name for errors.
    pub op: &'static str,
    /// Element type of the expanded weights and of the activations at `x`.
    pub ty: bsys::cudaDataType,
    /// cuBLAS compute type.
    pub compute: bsys::cublasComputeType_t,
    /// Scale applied to the product (the output is overwritten: beta is 0).
    pub alpha: f32,
    /// Weight rows in total (the output's row stride).
    pub rows: usize,
    /// Weight columns (the shared inner dimension).
    pub cols: usize,
    /// Activation rows.
    pub n: usize,
    /// Device pointer to the activations `[n, cols]` of type `ty`.
    pub x: u64,
    /// Device pointer to the f32 output `[n, rows]`.
    pub out: u64,
}

impl ChunkedGemm {
    /// Runs the whole GEMM in chunks of `chunk_rows` weight rows: `expand(r0, nr)` writes weight
    /// rows `r0..r0 + nr` into `wc` as `[nr, cols]` of type `ty`, then cuBLAS multiplies them.
    ///
    /// # Safety
    /// As for [`ChunkedGemm::chunk`], with `wc` large enough for `chunk_rows` rows.
    pub(crate) unsafe fn run(
        &self,
        chunk_rows: usize,
        wc: u64,
        mut expand: impl FnMut(usize, usize) -> Result<()>,
    ) -> Result<()> {
        for r0 in (0..self.rows).step_by(chunk_rows) {
            let nr = chunk_rows.min(self.rows - r0);
            expand(r0, nr)?;
            // SAFETY: `expand` just filled `wc` with this chunk's `nr` rows.
            unsafe { self.chunk(wc, r0, nr) }?;
        }
        Ok(())
    }

    /// Writes output columns `r0..r0 + nr` from the expanded weight rows `wc` (`[nr, cols]`).
    ///
    /// # Safety
    /// `wc`, `x` and `out` must be live device buffers of the sizes above, on the handle's stream.
    unsafe fn chunk(&self, wc: u64, r0: usize, nr: usize) -> Result<()> {
        let (n, cols) = (self.n, self.cols);
        let (alpha, beta) = (self.alpha, 0.0f32);
        // Column-major view: C[nr, n] (ld rows) = Wc[cols, nr]ᵀ · X[cols, n].
        unsafe {
            blas::gemm_ex(
                self.handle,
                bsys::cublasOperation_t::CUBLAS_OP_T,
                bsys::cublasOperation_t::CUBLAS_OP_N,
                nr as i32,
                n as i32,
                cols as i32,
                &alpha as *const f32 as *const _,
                wc as *const _,
                self.ty,
                cols as i32,
                self.x as *const _,
                self.ty,
                cols as i32,
                &beta as *const f32 as *const _,
                (self.out + (r0 * 4) as u64) as *mut _,
                bsys::cudaDataType::CUDA_R_32F,
                self.rows as i32,
                self.compute,
                bsys::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
            )
        }
        .map_err(|e| KernelError::Cuda {
            op: self.op,
            msg: format!("cublasGemmEx [{nr}x{n}x{cols}]: {e}"),
        })
    }
}
