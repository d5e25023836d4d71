//! Run-time selected SIMD kernels.

use crate::dot::Kernel;
use crate::format::QuantFormat;

#[cfg(target_arch = "x86_64")]
pub(crate) mod avx2;

/// Whether the AVX2 path can run here (AVX2, FMA and F16C).
#[cfg(target_arch = "x86_64")]
pub(crate) fn avx2_available() -> bool {
    is_x86_feature_detected!("avx2")
        && is_x86_feature_detected!("fma")
        && is_x86_feature_detected!("f16c")
}

/// The AVX2 kernel for a format, if there is one and the CPU has AVX2.
pub(crate) fn avx2_kernel(f: QuantFormat) -> Option<Kernel> {
    #[cfg(target_arch = "x86_64")]
    {
        if avx2_available() {
            return avx2::kernel(f);
        }
    }
    let _ = f;
    None
}
