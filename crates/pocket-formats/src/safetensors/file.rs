//! A single safetensors file whose tensors are zero-copy slices of its mapping.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use super::header::{parse_layout, SafetensorsLayout, SafetensorsTensorInfo};
use crate::backing::Backing;
use crate::error::{FormatError, Result};

/// A validated safetensors file, memory-mapped or held in memory.
#[derive(Debug)]
pub struct SafetensorsFile {
    backing: Backing,
    layout: SafetensorsLayout,
    index: HashMap<String, usize>,
    path: Option<PathBuf>,
}

impl SafetensorsFile {
    /// Maps and validates the safetensors file at `path`; errors carry the path.
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        let backing = Backing::map(path)?;
        let mut f = Self::from_backing(backing).map_err(|e| e.in_file(path))?;
        f.path = Some(path.to_path_buf());
        Ok(f)
    }

    /// Validates a safetensors file held in memory.
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
        Ok(SafetensorsFile {
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

    /// The whole file's bytes.
    pub fn bytes(&self) -> &[u8] {
        &self.backing
    }

    /// Tensor entries in file order.
    pub fn tensor_infos(&self) -> &[SafetensorsTensorInfo] {
        &self.layout.tensors
    }

    /// The `__metadata__` map.
    pub fn metadata(&self) -> &BTreeMap<String, String> {
        &self.layout.metadata
    }

    /// Absolute offset of the data region.
    pub fn data_offset(&self) -> u64 {
        self.layout.data_offset
    }

    /// The entry for `name`, if present.
    pub fn tensor_info(&self, name: &str) -> Option<&SafetensorsTensorInfo> {
        self.index.get(name).map(|&i| &self.layout.tensors[i])
    }

    /// The bytes of tensor `name`, or [`FormatError::TensorNotFound`].
    pub fn tensor_data(&self, name: &str) -> Result<&[u8]> {
        let info = self
            .tensor_info(name)
            .ok_or_else(|| FormatError::TensorNotFound(name.to_string()))?;
        Ok(self.data_of(info))
    }

    /// The bytes of an entry of this file (bounds were checked at open); an entry from another
    /// file that does not fit gives an empty slice rather than a panic.
    pub fn data_of(&self, info: &SafetensorsTensorInfo) -> &[u8] {
        let base = self.layout.data_offset;
        let (start, end) = (
            base.saturating_add(info.start),
            base.saturating_add(info.end),
        );
        self.backing
            .get(start as usize..end as usize)
            .unwrap_or_default()
    }
}
