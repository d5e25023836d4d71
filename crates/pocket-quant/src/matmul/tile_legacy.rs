//! The 32-element block formats as the AVX2 tile kernels (`tile.rs`) read them: one block's
//! codes as 32 bytes, its scale and the coefficient of the activation block sum.

use crate::formats::iq4::KVALUES_IQ4NL;
use crate::simd::avx2::{bits_to_bytes, f16_at, nibbles};
use std::arch::x86_64::*;

/// One weight block decoded: its 32 codes as bytes (unsigned unless the format is signed), the
/// scale `d` and the coefficient `c` of the activation block sum (`dot = d*dy*(q.y) + c*sy`).
pub(super) trait Legacy {
    /// Bytes per block.
    const BB: usize;
    /// Whether the codes are signed (Q8_0, IQ4_NL) rather than unsigned with an offset.
    const SIGNED: bool;
    /// The block's 32 codes at `p`.
    unsafe fn codes(p: *const u8) -> __m256i;
    /// Decodes the block at `p`: its codes, `d` (the f16 at `D_AT`) and `c` (from `C_AT` or
    /// `C_D`; 0 for the signed formats).
    #[inline(always)]
    unsafe fn unpack(p: *const u8) -> (__m256i, f32, f32) {
        let d = f16_at(p.add(Self::D_AT));
        let c = match Self::C_AT {
            Some(at) => f16_at(p.add(at)),
            None if Self::C_D == 0.0 => 0.0,
            None => Self::C_D * d,
        };
        (Self::codes(p), d, c)
    }
    /// Whether the codes are unsigned and below 32, so a `vpmaddubsw` lane (two products, each
    /// at most 31 * 127) summed with its neighbour still fits an i16 (4 * 31 * 127 < 2^15).
    const SMALL: bool = false;
    /// Offset of the f16 scale `d`.
    const D_AT: usize = 0;
    /// How `c` derives from the block: `c = C_D * d`, or the f16 at `C_AT` when `C_AT` is set.
    const C_D: f32 = 0.0;
    /// Offset of an f16 `c` field (formats with a minimum).
    const C_AT: Option<usize> = None;
}

pub(super) struct Q4_0;
impl Legacy for Q4_0 {
    const SMALL: bool = true;
    const BB: usize = 18;
    const SIGNED: bool = false;
    const C_D: f32 = -8.0;
    #[inline(always)]
    unsafe fn codes(p: *const u8) -> __m256i {
        nibbles(p.add(2))
    }
}

pub(super) struct Q4_1;
impl Legacy for Q4_1 {
    const SMALL: bool = true;
    const BB: usize = 20;
    const SIGNED: bool = false;
    const C_AT: Option<usize> = Some(2);
    #[inline(always)]
    unsafe fn codes(p: *const u8) -> __m256i {
        nibbles(p.add(4))
    }
}

pub(super) struct Q5_0;
impl Legacy for Q5_0 {
    const SMALL: bool = true;
    const BB: usize = 22;
    const SIGNED: bool = false;
    const C_D: f32 = -16.0;
    #[inline(always)]
    unsafe fn codes(p: *const u8) -> __m256i {
        let qh = std::ptr::read_unaligned(p.add(2) as *const u32);
        let hi = _mm256_and_si256(bits_to_bytes(qh), _mm256_set1_epi8(0x10));
        _mm256_or_si256(nibbles(p.add(6)), hi)
    }
}

pub(super) struct Q5_1;
impl Legacy for Q5_1 {
    const SMALL: bool = true;
    const BB: usize = 24;
    const SIGNED: bool = false;
    const C_AT: Option<usize> = Some(2);
    #[inline(always)]
    unsafe fn codes(p: *const u8) -> __m256i {
        let qh = std::ptr::read_unaligned(p.add(4) as *const u32);
        let hi = _mm256_and_si256(bits_to_bytes(qh), _mm256_set1_epi8(0x10));
        _mm256_or_si256(nibbles(p.add(8)), hi)
    }
}

pub(super) struct Q8_0;
impl Legacy for Q8_0 {
    const BB: usize = 34;
    const SIGNED: bool = true;
    #[inline(always)]
    unsafe fn codes(p: *const u8) -> __m256i {
        _mm256_loadu_si256(p.add(2) as *const __m256i)
    }
}

pub(super) struct Iq4Nl;
impl Legacy for Iq4Nl {
    const BB: usize = 18;
    const SIGNED: bool = true;
    #[inline(always)]
    unsafe fn codes(p: *const u8) -> __m256i {
        let table =
            _mm256_broadcastsi128_si256(_mm_loadu_si128(KVALUES_IQ4NL.as_ptr() as *const __m128i));
        _mm256_shuffle_epi8(table, nibbles(p.add(2)))
    }
}
