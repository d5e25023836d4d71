//! The bytes behind a parsed file: a read-only memory map or an owned buffer.

use std::path::Path;

use crate::error::{FormatError, Result};

/// Read-only bytes of a whole file, mapped or owned; tensors are slices into it.
#[derive(Debug)]
pub enum Backing {
    /// A read-only memory map of a file.
    Mmap(memmap2::Mmap),
    /// An owned in-memory buffer (tests, fuzzing, generated files).
    Owned(Vec<u8>),
}

impl Backing {
    /// Maps `path` read-only.
    pub fn map(path: &Path) -> Result<Self> {
        let file = std::fs::File::open(path).map_err(|e| FormatError::io(path, e))?;
        let len = file.metadata().map_err(|e| FormatError::io(path, e))?.len();
        if len == 0 {
            return Ok(Backing::Owned(Vec::new()));
        }
        // SAFETY: the map is read-only; like every mmap-based reader we rely on the file not being
        // truncated or rewritten by another process while it is mapped.
        let map = unsafe { memmap2::Mmap::map(&file) }.map_err(|e| FormatError::io(path, e))?;
        Ok(Backing::Mmap(map))
    }

    /// The bytes.
    pub fn bytes(&self) -> &[u8] {
        match self {
            Backing::Mmap(m) => m,
            Backing::Owned(v) => v,
        }
    }
}

impl std::ops::Deref for Backing {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.bytes()
    }
}
