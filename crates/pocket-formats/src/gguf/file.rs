//! A parsed GGUF file whose tensors are zero-copy slices of its mapping.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use super::metadata::GgufMetadata;
use super::reader::{parse_layout, GgufLayout, GgufTensorInfo};
use crate::backing::Backing;
use crate::error::{FormatError, Result};

/// A GGUF file (v2 or v3), validated at open, memory-mapped or held in memory.
#[derive(Debug)]
pub struct GgufFile {
    backing: Backing,
    layout: GgufLayout,
    index: HashMap<String, usize>,
    path: Option<PathBuf>,
}

/// A tensor's info and its bytes.
#[derive(Debug, Clone, Copy)]
pub struct GgufTensor<'a> {
    /// The tensor-info entry.
    pub info: &'a GgufTensorInfo,
    /// Its bytes, borrowed from the mapping.
    pub data: &'a [u8],
}

impl GgufFile {
    /// Maps and validates the GGUF file at `path`; errors carry the path.
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        let backing = Backing::map(path)?;
        let mut file = Self::from_backing(backing).map_err(|e| with_path(path, e))?;
        file.path = Some(path.to_path_buf());
        Ok(file)
    }

    /// Validates a GGUF file held in memory (tests, fuzzing, generated files).
    pub fn from_bytes(bytes: Vec<u8>) -> Result<Self> {
        Self::from_backing(Backing::Owned(bytes))
    }

    fn from_backing(backing: Backing) -> Result<Self> {
        let layout = parse_layout(&backing)?;
        let index = layout
            .tensors
            .iter()
            .enumerate()
            .map(|(i, t)| (t.name.clone(), i))
            .collect();
        Ok(GgufFile {
            backing,
            layout,
            index,
            path: None,
        })
    }

    /// The path it was opened from, if any.
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// Format version (2 or 3).
    pub fn version(&self) -> u32 {
        self.layout.version
    }

    /// Key-value metadata.
    pub fn metadata(&self) -> &GgufMetadata {
        &self.layout.metadata
    }

    /// Tensor infos in file order.
    pub fn tensor_infos(&self) -> &[GgufTensorInfo] {
        &self.layout.tensors
    }

    /// Data alignment in bytes.
    pub fn alignment(&self) -> u64 {
        self.layout.alignment
    }

    /// Absolute file offset of the data region.
    pub fn data_offset(&self) -> u64 {
        self.layout.data_offset
    }

    /// The whole parsed layout.
    pub fn layout(&self) -> &GgufLayout {
        &self.layout
    }

    /// The whole file's bytes.
    pub fn bytes(&self) -> &[u8] {
        &self.backing
    }

    /// The info of tensor `name`, if present.
    pub fn tensor_info(&self, name: &str) -> Option<&GgufTensorInfo> {
        self.index.get(name).map(|&i| &self.layout.tensors[i])
    }

    /// Tensor `name` with its bytes, or [`FormatError::TensorNotFound`].
    pub fn tensor(&self, name: &str) -> Result<GgufTensor<'_>> {
        let info = self
            .tensor_info(name)
            .ok_or_else(|| FormatError::TensorNotFound(name.to_string()))?;
        Ok(GgufTensor {
            info,
            data: self.data_of(info),
        })
    }

    /// Every tensor with its bytes, in file order.
    pub fn tensors(&self) -> impl Iterator<Item = GgufTensor<'_>> {
        self.layout.tensors.iter().map(|info| GgufTensor {
            info,
            data: self.data_of(info),
        })
    }

    /// The bytes of a tensor info of this file (bounds were checked at open); an info from another
    /// file that does not fit gives an empty slice rather than a panic.
    pub fn data_of(&self, info: &GgufTensorInfo) -> &[u8] {
        let start = self.layout.data_offset.saturating_add(info.offset);
        let end = start.saturating_add(info.size);
        self.backing
            .get(start as usize..end as usize)
            .unwrap_or_default()
    }
}

fn with_path(path: &Path, e: FormatError) -> FormatError {
    e.in_file(path)
}
