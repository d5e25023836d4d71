//! L2 prefetch of the next op's weight from a latency-bound kernel (kernels/common.cuh
//! `l2_prefetch_share`). The DeltaNet decode step and the decode attention move a few MB while
//! HBM could move tens: their blocks start bringing the weight of the GEMV that follows them (the
//! out / output projection) into L2, so that GEMV's first loads hit L2. A prefetch reads nothing
//! into registers and writes nothing, so results never depend on it.

use super::CudaBackend;
use crate::{Weight, WeightStorage};

/// The span of `next` a kernel brings into L2 (device address, bytes): the weight's first
/// bytes up to 3/4 of the L2, so that the prefetch does not evict its own first bytes, in whole
/// 16-byte units. (0, 0), nothing, when `on` is false, without a next weight, or for a weight
/// on the host or another device.
pub(crate) fn l2_span(be: &CudaBackend, next: Option<&Weight>, on: bool) -> (u64, u64) {
    let Some(WeightStorage::Cuda(c)) = next.map(|w| &w.storage) else {
        return (0, 0);
    };
    let ptr = c.storage.ptr();
    if !on || c.ordinal() != be.ctx.ordinal() || ptr % 16 != 0 {
        return (0, 0);
    }
    match (c.len_bytes() as u64).min(be.l2_bytes() / 4 * 3) & !15 {
        0 => (0, 0),
        bytes => (ptr, bytes),
    }
}
