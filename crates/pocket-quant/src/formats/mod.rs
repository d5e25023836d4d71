//! Per-family codecs. Each function works on whole blocks; lengths are checked by the callers.

pub(crate) mod float;
pub(crate) mod fp4;
pub(crate) mod fp8;
pub(crate) mod iq4;
pub(crate) mod iquants;
pub(crate) mod kquants;
pub(crate) mod kquants_quant;
pub(crate) mod legacy;
pub(crate) mod ternary;
