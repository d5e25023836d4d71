//! Launchers of the device sampler (kernels/sample.cu): greedy with log-probabilities and
//! temperature / top-k / top-p / min-p draws (one block per row; greedy rows several, see
//! kernels/greedy.cuh, whether or not the call carries per-row parameters).

use super::kernels::Kernel;
use super::ops::sample_launches;
use super::CudaBackend;
use crate::error::shape_err;
use crate::tensor::Storage;
use crate::{DType, Result, Tensor};

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
    let params = match params {
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
            Some((
                be.ptr_of(OP, "params", p, DType::F32)?,
                be.ptr_of(OP, "seeds", s, DType::U32)?,
            ))
        }
        None => None,
    };
    let v4 = (vocab * 4) as u64;
    // Greedy rows take the multi-block pick (kernels/greedy.cuh) with or without per-row
    // parameters; sampled rows are drawn by one block each.
    for (r0, rows, g) in sample_launches(n, vocab, params.is_some()) {
        let r0 = r0 as u64;
        let (pr, sr) = params.map_or((0, 0), |(p, s)| (p + 16 * r0, s + 16 * r0));
        be.launch(
            OP,
            Kernel::SampleRows,
            g.grid(rows),
            g.threads,
            args![
                lp + r0 * v4,
                pr,
                sr,
                ip + 4 * r0,
                op + 4 * r0,
                vocab as i32,
                g.multi
            ],
        )?;
    }
    if let Storage::Cuda(c) = &mut ids.storage {
        c.shadow = None; // written by the device now
    }
    Ok(())
}
