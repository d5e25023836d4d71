//! Launchers of the device sampler (kernels/sample.cu): greedy with log-probabilities and
//! temperature / top-k / top-p / min-p draws (one block per row; greedy rows several, see
//! kernels/greedy.cuh).

use super::kernels::Kernel;
use super::ops::greedy_launches;
use super::CudaBackend;
use crate::error::shape_err;
use crate::tensor::Storage;
use crate::{DType, Result, Tensor};

/// Threads per row of the sampling kernel (`SAMPLE_THREADS` in kernels/sample.cu).
const THREADS: u32 = 1024;

/// Checks shapes and launches `sample_rows`; `params`/`seeds` `None` means greedy rows.
pub(crate) fn sample_rows(
    be: &CudaBackend,
    logits: &Tensor,
    params: Option<(&Tensor, &Tensor)>,
    ids: &mut Tensor,
    logprobs: &mut Tensor,
) -> Result<()> {
    const OP: &str = "sample_rows";
    let (n, vocab) = (logits.rows(), logits.row_len());
    if vocab == 0 || vocab > (1 << 24) {
        return Err(shape_err(OP, format!("rows of {vocab} logits")));
    }
    if ids.numel() != n || logprobs.numel() != n {
        return Err(shape_err(
            OP,
            format!(
                "{n} rows but ids hold {} and logprobs {}",
                ids.numel(),
                logprobs.numel()
            ),
        ));
    }
    let lp = be.ptr_of(OP, "logits", logits, DType::F32)?;
    let ip = be.ptr_of(OP, "ids", ids, DType::U32)?;
    let op = be.ptr_of(OP, "logprobs", logprobs, DType::F32)?;
    let (pp, sp) = match params {
        Some((p, s)) => {
            if p.numel() != 4 * n || s.numel() != 4 * n {
                return Err(shape_err(
                    OP,
                    format!(
                        "params/seeds must be [{n}, 4], hold {}/{}",
                        p.numel(),
                        s.numel()
                    ),
                ));
            }
            (
                be.ptr_of(OP, "params", p, DType::F32)?,
                be.ptr_of(OP, "seeds", s, DType::U32)?,
            )
        }
        None => (0u64, 0u64),
    };
    let v4 = (vocab * 4) as u64;
    if params.is_none() {
        // Greedy rows: the multi-block pick (kernels/greedy.cuh).
        for (r0, rows, g) in greedy_launches(n, vocab) {
            let r0 = r0 as u64;
            be.launch(
                OP,
                Kernel::SampleRows,
                g.grid(rows),
                g.threads,
                args![
                    lp + r0 * v4,
                    0u64,
                    0u64,
                    ip + 4 * r0,
                    op + 4 * r0,
                    vocab as i32,
                    g.multi
                ],
            )?;
        }
    } else {
        // One block per row, rows on the grid's y (at most 65535 per launch).
        for r0 in (0..n).step_by(65535) {
            let rows = 65535.min(n - r0) as u32;
            let r0 = r0 as u64;
            be.launch(
                OP,
                Kernel::SampleRows,
                (1, rows, 1),
                THREADS,
                args![
                    lp + r0 * v4,
                    pp + 16 * r0,
                    sp + 16 * r0,
                    ip + 4 * r0,
                    op + 4 * r0,
                    vocab as i32,
                    0i32
                ],
            )?;
        }
    }
    if let Storage::Cuda(c) = &mut ids.storage {
        c.shadow = None; // written by the device now
    }
    Ok(())
}
