//! Growable workspaces: a tensor allocated once and re-viewed for every batch up to its capacity.

use pocket_kernels::{DType, Device, Tensor};

use crate::Result;

/// Views `t` as `[n, rest...]`, reallocating it (once, with headroom) if `n` rows exceed its
/// capacity; steps that fit allocate nothing.
pub fn fit(dev: &Device, t: &mut Tensor, n: usize) -> Result<()> {
    let row: usize = t.shape.iter().skip(1).product();
    if n * row > t.capacity() {
        let mut shape = t.shape.clone();
        shape[0] = n.max(1).next_power_of_two();
        *t = dev.alloc(t.dtype, &shape)?;
    }
    t.set_leading(n)?;
    Ok(())
}

/// A new f32 workspace of `[rows, cols]` (rows may be grown later with [`fit`]).
pub fn workspace(dev: &Device, rows: usize, cols: usize) -> Result<Tensor> {
    Ok(dev.alloc(DType::F32, &[rows.max(1), cols])?)
}

/// Reinterprets `t` (whatever its shape) as `shape`; the element count must not change.
pub fn view(t: &mut Tensor, shape: &[usize]) -> Result<()> {
    t.reshape(shape)?;
    Ok(())
}
