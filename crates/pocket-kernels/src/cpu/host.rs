//! Typed access to host tensors, with the device and dtype checks every CPU op needs.

use crate::error::shape_err;
use crate::tensor::{HostData, Storage};
use crate::{DType, KernelError, Result, Tensor};

/// A `WrongDevice` error for a tensor that is not in host memory.
fn not_host(op: &'static str, name: &'static str, t: &Tensor) -> KernelError {
    KernelError::WrongDevice {
        op,
        tensor: name,
        found: t.location(),
        expected: "cpu".into(),
    }
}

/// The f32 elements of a host tensor (as shaped).
pub(crate) fn f32s<'a>(op: &'static str, name: &'static str, t: &'a Tensor) -> Result<&'a [f32]> {
    let n = t.numel();
    match &t.storage {
        Storage::Host(HostData::F32(v)) => v
            .get(..n)
            .ok_or_else(|| shape_err(op, format!("`{name}` shape exceeds its storage"))),
        Storage::Host(_) => Err(shape_err(
            op,
            format!("`{name}` must be f32, is {:?}", t.dtype),
        )),
        #[allow(unreachable_patterns)]
        _ => Err(not_host(op, name, t)),
    }
}

/// The mutable f32 elements of a host tensor (as shaped).
pub(crate) fn f32s_mut<'a>(
    op: &'static str,
    name: &'static str,
    t: &'a mut Tensor,
) -> Result<&'a mut [f32]> {
    let n = t.numel();
    let dtype = t.dtype;
    let loc = t.location();
    match &mut t.storage {
        Storage::Host(HostData::F32(v)) => {
            let len = v.len();
            v.get_mut(..n).ok_or_else(|| {
                shape_err(
                    op,
                    format!("`{name}` shape ({n}) exceeds its storage ({len})"),
                )
            })
        }
        Storage::Host(_) => Err(shape_err(op, format!("`{name}` must be f32, is {dtype:?}"))),
        #[allow(unreachable_patterns)]
        _ => Err(KernelError::WrongDevice {
            op,
            tensor: name,
            found: loc,
            expected: "cpu".into(),
        }),
    }
}

/// The u32 elements of a host tensor (as shaped).
pub(crate) fn u32s<'a>(op: &'static str, name: &'static str, t: &'a Tensor) -> Result<&'a [u32]> {
    let n = t.numel();
    match &t.storage {
        Storage::Host(HostData::U32(v)) => v
            .get(..n)
            .ok_or_else(|| shape_err(op, format!("`{name}` shape exceeds its storage"))),
        Storage::Host(_) => Err(shape_err(
            op,
            format!("`{name}` must be u32, is {:?}", t.dtype),
        )),
        #[allow(unreachable_patterns)]
        _ => Err(not_host(op, name, t)),
    }
}

/// Checks that a tensor lives in host memory.
pub(crate) fn check_host(op: &'static str, name: &'static str, t: &Tensor) -> Result<()> {
    match &t.storage {
        Storage::Host(_) => Ok(()),
        #[allow(unreachable_patterns)]
        _ => Err(not_host(op, name, t)),
    }
}

/// Checks that two element counts agree.
pub(crate) fn same_len(op: &'static str, what: &str, a: usize, b: usize) -> Result<()> {
    if a != b {
        return Err(shape_err(op, format!("{what}: {a} != {b}")));
    }
    Ok(())
}

/// A zeroed host storage of `len` elements of `dtype`.
pub(crate) fn zeros(dtype: DType, len: usize) -> HostData {
    match dtype {
        DType::F32 => HostData::F32(vec![0.0; len]),
        DType::F16 => HostData::F16(vec![half::f16::ZERO; len]),
        DType::BF16 => HostData::BF16(vec![half::bf16::ZERO; len]),
        DType::U32 => HostData::U32(vec![0; len]),
    }
}
