//! A bounds-checked little-endian reader over a byte slice; every read that would pass the end
//! becomes [`FormatError::Truncated`].

use crate::error::{FormatError, Result};

/// Position-tracking reader over a byte slice.
pub(crate) struct Cursor<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    pub(crate) fn new(bytes: &'a [u8]) -> Self {
        Cursor { bytes, pos: 0 }
    }

    pub(crate) fn pos(&self) -> u64 {
        self.pos as u64
    }

    pub(crate) fn remaining(&self) -> u64 {
        (self.bytes.len() - self.pos) as u64
    }

    pub(crate) fn take(&mut self, n: u64, what: &dyn Fn() -> String) -> Result<&'a [u8]> {
        if n > self.remaining() {
            return Err(FormatError::Truncated {
                what: what(),
                offset: self.pos(),
                need: n,
                have: self.remaining(),
            });
        }
        let start = self.pos;
        self.pos += n as usize;
        Ok(&self.bytes[start..self.pos])
    }

    fn array<const N: usize>(&mut self, what: &dyn Fn() -> String) -> Result<[u8; N]> {
        let s = self.take(N as u64, what)?;
        let mut out = [0u8; N];
        out.copy_from_slice(s);
        Ok(out)
    }

    pub(crate) fn u8(&mut self, what: &dyn Fn() -> String) -> Result<u8> {
        Ok(self.array::<1>(what)?[0])
    }

    pub(crate) fn u16(&mut self, what: &dyn Fn() -> String) -> Result<u16> {
        Ok(u16::from_le_bytes(self.array(what)?))
    }

    pub(crate) fn u32(&mut self, what: &dyn Fn() -> String) -> Result<u32> {
        Ok(u32::from_le_bytes(self.array(what)?))
    }

    pub(crate) fn u64(&mut self, what: &dyn Fn() -> String) -> Result<u64> {
        Ok(u64::from_le_bytes(self.array(what)?))
    }

    /// A count that is checked against the remaining bytes: each counted item needs at least
    /// `min_item_bytes`, so a count that cannot fit is rejected before anything is allocated.
    pub(crate) fn count(&mut self, min_item_bytes: u64, what: &dyn Fn() -> String) -> Result<u64> {
        let offset = self.pos();
        let count = self.u64(what)?;
        let max = self.remaining() / min_item_bytes.max(1);
        if count > max {
            return Err(FormatError::AbsurdCount {
                what: what(),
                count,
                offset,
                max,
            });
        }
        Ok(count)
    }

    /// A u64-length-prefixed UTF-8 string.
    pub(crate) fn string(&mut self, what: &dyn Fn() -> String) -> Result<String> {
        let len_what = || format!("length of {}", what());
        let len = self.u64(&len_what)?;
        let offset = self.pos();
        let raw = self.take(len, what)?;
        match std::str::from_utf8(raw) {
            Ok(s) => Ok(s.to_string()),
            Err(_) => Err(FormatError::InvalidUtf8 {
                what: what(),
                offset,
            }),
        }
    }
}
