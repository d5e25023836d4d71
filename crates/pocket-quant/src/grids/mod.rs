//! IQ codebooks (format data reproduced from gguf-py 0.19.0, see each file's header).

mod iq1s;
mod iq2s;
mod iq2xs;
mod iq2xxs;
mod iq3s;
mod iq3xxs;

pub(crate) use iq1s::IQ1S_GRID;
pub(crate) use iq2s::IQ2S_GRID;
pub(crate) use iq2xs::IQ2XS_GRID;
pub(crate) use iq2xxs::IQ2XXS_GRID;
pub(crate) use iq3s::IQ3S_GRID;
pub(crate) use iq3xxs::IQ3XXS_GRID;

/// `ksigns_iq2xs` (gguf-py 0.19.0 `IQ2_XXS.ksigns`): a 7-bit sign index with its parity as bit 7.
pub(crate) static KSIGNS: [u8; 128] = {
    let mut t = [0u8; 128];
    let mut i = 0;
    while i < 128 {
        t[i] = i as u8
            | if (i as u32).count_ones() % 2 == 1 {
                0x80
            } else {
                0
            };
        i += 1;
    }
    t
};
