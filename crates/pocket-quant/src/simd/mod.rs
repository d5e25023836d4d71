//! Run-time selected SIMD kernels.

use crate::dot::Kernel;
use crate::format::QuantFormat;

/// A safe `fn` over an `unsafe` `#[target_feature]` kernel, for the AVX2 modules.
#[cfg(target_arch = "x86_64")]
macro_rules! safe_wrapper {
    ($name:ident, $inner:ident, $w:ty) => {
        fn $name(w: &[u8], s: &[u8], x: &[$w]) -> f32 {
            // SAFETY: only reachable through `kernel`, handed out after the CPU feature check.
            unsafe { $inner(w, s, x) }
        }
    };
}

#[cfg(target_arch = "x86_64")]
pub(crate) mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx2_fp;
#[cfg(target_arch = "x86_64")]
mod avx2_iq;
#[cfg(target_arch = "x86_64")]
pub(crate) mod avx2_k;

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
            return avx2::kernel(f)
                .or_else(|| avx2_k::kernel(f))
                .or_else(|| avx2_iq::kernel(f))
                .or_else(|| avx2_fp::kernel(f));
        }
    }
    let _ = f;
    None
}
