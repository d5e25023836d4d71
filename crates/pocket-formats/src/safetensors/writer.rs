//! A small safetensors writer for tests, tools and synthetic checkpoints.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;

use serde_json::{json, Map, Value};

use crate::error::{FormatError, Result};
use crate::format::TensorFormat;

/// Collects borrowed tensors and writes them as one safetensors file, in the order added.
#[derive(Debug, Default)]
pub struct SafetensorsWriter<'a> {
    tensors: Vec<(String, TensorFormat, Vec<usize>, &'a [u8])>,
    metadata: BTreeMap<String, String>,
}

impl<'a> SafetensorsWriter<'a> {
    /// An empty writer.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a `__metadata__` entry.
    pub fn metadata(&mut self, key: impl Into<String>, value: impl Into<String>) -> &mut Self {
        self.metadata.insert(key.into(), value.into());
        self
    }

    /// Adds a tensor; its size must match the row-major `shape` and `format`.
    pub fn add(
        &mut self,
        name: &str,
        format: TensorFormat,
        shape: &[usize],
        data: &'a [u8],
    ) -> Result<&mut Self> {
        if format.safetensors_name().is_none() {
            return Err(FormatError::Writer(format!(
                "{format} has no safetensors dtype"
            )));
        }
        if name == "__metadata__" || self.tensors.iter().any(|t| t.0 == name) {
            return Err(FormatError::DuplicateTensor(name.to_string()));
        }
        let n: u64 = shape.iter().map(|&d| d as u64).product();
        if format.bytes_for(n) != Some(data.len() as u64) {
            return Err(FormatError::Writer(format!(
                "tensor `{name}`: {} bytes given for shape {shape:?} of {format}",
                data.len()
            )));
        }
        self.tensors
            .push((name.to_string(), format, shape.to_vec(), data));
        Ok(self)
    }

    /// The length prefix and JSON header, padded with spaces to a multiple of 8 bytes.
    pub fn header_bytes(&self) -> Vec<u8> {
        let mut map = Map::new();
        if !self.metadata.is_empty() {
            map.insert("__metadata__".into(), json!(self.metadata));
        }
        let mut offset = 0u64;
        for (name, format, shape, data) in &self.tensors {
            let end = offset + data.len() as u64;
            map.insert(
                name.clone(),
                json!({"dtype": format.safetensors_name(), "shape": shape, "data_offsets": [offset, end]}),
            );
            offset = end;
        }
        let mut text = Value::Object(map).to_string().into_bytes();
        while !text.len().is_multiple_of(8) {
            text.push(b' ');
        }
        let mut out = (text.len() as u64).to_le_bytes().to_vec();
        out.extend_from_slice(&text);
        out
    }

    /// Writes the file to `out`.
    pub fn write_to<W: Write>(&self, mut out: W) -> Result<W> {
        out.write_all(&self.header_bytes())?;
        for t in &self.tensors {
            out.write_all(t.3)?;
        }
        out.flush()?;
        Ok(out)
    }

    /// The file in memory.
    pub fn to_vec(&self) -> Result<Vec<u8>> {
        self.write_to(Vec::new())
    }

    /// Writes the file to `path`.
    pub fn write_file(&self, path: impl AsRef<Path>) -> Result<()> {
        let path = path.as_ref();
        let f = std::fs::File::create(path).map_err(|e| FormatError::io(path, e))?;
        self.write_to(std::io::BufWriter::new(f))
            .map(drop)
            .map_err(|e| e.in_file(path))
    }
}
