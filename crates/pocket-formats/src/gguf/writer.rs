//! A streaming GGUF writer: declare metadata and tensors, write the header, then stream each
//! tensor's bytes in order (from a slice or a callback), so files larger than memory can be made.

use std::io::Write;
use std::path::Path;

use super::metadata::GgufMetadata;
use super::reader::{tensor_size, GgufTensorInfo, DEFAULT_ALIGNMENT, GGUF_MAGIC, MAX_DIMS};
use super::value::{GgufArray, GgufValue};
use crate::error::{FormatError, Result};
use crate::ggml_type::GgmlType;

/// Collects metadata and tensor declarations; [`GgufWriter::begin`] writes the header.
#[derive(Debug, Clone)]
pub struct GgufWriter {
    version: u32,
    alignment: u64,
    metadata: GgufMetadata,
    tensors: Vec<GgufTensorInfo>,
    next_offset: u64,
}

impl Default for GgufWriter {
    fn default() -> Self {
        Self::new()
    }
}

impl GgufWriter {
    /// A version-3 writer with the default alignment (32).
    pub fn new() -> Self {
        GgufWriter {
            version: 3,
            alignment: DEFAULT_ALIGNMENT,
            metadata: GgufMetadata::new(),
            tensors: Vec::new(),
            next_offset: 0,
        }
    }

    /// Chooses the format version (2 or 3; they differ only in the version field here).
    pub fn set_version(&mut self, version: u32) -> Result<&mut Self> {
        if !matches!(version, 2 | 3) {
            return Err(FormatError::UnsupportedVersion(version));
        }
        self.version = version;
        Ok(self)
    }

    /// Sets the data alignment and records it as `general.alignment` (u32); call before adding tensors.
    pub fn set_alignment(&mut self, alignment: u64) -> Result<&mut Self> {
        if alignment == 0 || !alignment.is_power_of_two() || alignment > 1 << 30 {
            return Err(FormatError::BadAlignment(alignment));
        }
        if !self.tensors.is_empty() {
            return Err(FormatError::Writer(
                "set the alignment before adding tensors".into(),
            ));
        }
        self.alignment = alignment;
        self.metadata.set("general.alignment", alignment as u32);
        Ok(self)
    }

    /// Sets a metadata key (replacing an earlier value of the same key).
    pub fn add(&mut self, key: impl Into<String>, value: impl Into<GgufValue>) -> &mut Self {
        self.metadata.set(key, value);
        self
    }

    /// The metadata collected so far.
    pub fn metadata(&self) -> &GgufMetadata {
        &self.metadata
    }

    /// Declares a tensor with dimensions in file order (innermost first, ggml `ne`).
    pub fn add_tensor_dims(&mut self, name: &str, ty: GgmlType, dims: &[u64]) -> Result<&mut Self> {
        if dims.len() > MAX_DIMS {
            return Err(FormatError::BadShape {
                tensor: name.to_string(),
                reason: format!("{} dimensions (ggml allows at most {MAX_DIMS})", dims.len()),
            });
        }
        if self.tensors.iter().any(|t| t.name == name) {
            return Err(FormatError::DuplicateTensor(name.to_string()));
        }
        let size = tensor_size(name, dims, ty)?;
        let offset = self.next_offset;
        self.next_offset = (offset + size).div_ceil(self.alignment) * self.alignment;
        self.tensors.push(GgufTensorInfo {
            name: name.to_string(),
            dims: dims.to_vec(),
            ggml_type: ty,
            offset,
            size,
        });
        Ok(self)
    }

    /// Declares a tensor with a row-major shape (outermost first, as numpy/PyTorch write it).
    pub fn add_tensor(&mut self, name: &str, ty: GgmlType, shape: &[usize]) -> Result<&mut Self> {
        let dims: Vec<u64> = shape.iter().rev().map(|&d| d as u64).collect();
        self.add_tensor_dims(name, ty, &dims)
    }

    /// The tensors declared so far, with the offsets they will get.
    pub fn tensor_infos(&self) -> &[GgufTensorInfo] {
        &self.tensors
    }

    /// The header, metadata, tensor infos and padding up to the data region.
    pub fn header_bytes(&self) -> Vec<u8> {
        let mut b = Vec::new();
        b.extend_from_slice(&GGUF_MAGIC);
        b.extend_from_slice(&self.version.to_le_bytes());
        b.extend_from_slice(&(self.tensors.len() as u64).to_le_bytes());
        b.extend_from_slice(&(self.metadata.len() as u64).to_le_bytes());
        for (key, value) in self.metadata.iter() {
            put_str(&mut b, key);
            b.extend_from_slice(&value.value_type().id().to_le_bytes());
            put_value(&mut b, value);
        }
        for t in &self.tensors {
            put_str(&mut b, &t.name);
            b.extend_from_slice(&(t.dims.len() as u32).to_le_bytes());
            for d in &t.dims {
                b.extend_from_slice(&d.to_le_bytes());
            }
            b.extend_from_slice(&t.ggml_type.id().to_le_bytes());
            b.extend_from_slice(&t.offset.to_le_bytes());
        }
        let padded = (b.len() as u64).div_ceil(self.alignment) * self.alignment;
        b.resize(padded as usize, 0);
        b
    }

    /// Writes the header to `out` and returns the writer that takes the tensor bytes.
    pub fn begin<W: Write>(self, mut out: W) -> Result<GgufStreamWriter<W>> {
        out.write_all(&self.header_bytes())?;
        Ok(GgufStreamWriter {
            out,
            tensors: self.tensors,
            alignment: self.alignment,
            next: 0,
        })
    }

    /// Writes the whole file to `path`, taking the tensors' bytes in declaration order.
    pub fn write_file(self, path: impl AsRef<Path>, data: &[&[u8]]) -> Result<()> {
        let path = path.as_ref();
        let file = std::fs::File::create(path).map_err(|e| FormatError::io(path, e))?;
        let mut w = self.begin(std::io::BufWriter::new(file))?;
        for d in data {
            w.write_next(d)?;
        }
        let mut buf = w.finish()?;
        buf.flush().map_err(|e| FormatError::io(path, e))
    }

    /// The whole file in memory, taking the tensors' bytes in declaration order.
    pub fn to_vec(self, data: &[&[u8]]) -> Result<Vec<u8>> {
        let mut w = self.begin(Vec::new())?;
        for d in data {
            w.write_next(d)?;
        }
        w.finish()
    }
}

/// Takes tensor bytes, in declaration order, after the header has been written.
#[derive(Debug)]
pub struct GgufStreamWriter<W: Write> {
    out: W,
    tensors: Vec<GgufTensorInfo>,
    alignment: u64,
    next: usize,
}

/// Counts bytes passed through to the inner writer.
struct Counting<'a, W: Write> {
    inner: &'a mut W,
    written: u64,
}

impl<W: Write> Write for Counting<'_, W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.written += n as u64;
        Ok(n)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

impl<W: Write> GgufStreamWriter<W> {
    /// The tensor whose bytes are expected next, if any remain.
    pub fn next_tensor(&self) -> Option<&GgufTensorInfo> {
        self.tensors.get(self.next)
    }

    /// Writes the bytes of the next declared tensor, which must be `name`.
    pub fn write_tensor(&mut self, name: &str, data: &[u8]) -> Result<()> {
        self.write_tensor_with(name, |w| w.write_all(data))
    }

    /// Writes the bytes of the next declared tensor, whatever its name.
    pub fn write_next(&mut self, data: &[u8]) -> Result<()> {
        let name = match self.next_tensor() {
            Some(t) => t.name.clone(),
            None => {
                return Err(FormatError::Writer(
                    "more data than declared tensors".into(),
                ))
            }
        };
        self.write_tensor(&name, data)
    }

    /// Streams the next tensor (`name`) through `fill`, which may write in any number of chunks;
    /// the total must equal the declared size.
    pub fn write_tensor_with<F>(&mut self, name: &str, fill: F) -> Result<()>
    where
        F: FnOnce(&mut dyn Write) -> std::io::Result<()>,
    {
        let Some(t) = self.tensors.get(self.next) else {
            return Err(FormatError::Writer(format!(
                "tensor `{name}` written but all declared tensors are done"
            )));
        };
        if t.name != name {
            return Err(FormatError::Writer(format!(
                "expected data for tensor `{}`, got `{name}`",
                t.name
            )));
        }
        let size = t.size;
        let mut counting = Counting {
            inner: &mut self.out,
            written: 0,
        };
        fill(&mut counting)?;
        if counting.written != size {
            return Err(FormatError::Writer(format!(
                "tensor `{name}` declared {size} bytes, {} written",
                counting.written
            )));
        }
        let pad = size.div_ceil(self.alignment) * self.alignment - size;
        self.out.write_all(&vec![0u8; pad as usize])?;
        self.next += 1;
        Ok(())
    }

    /// Checks every declared tensor was written and returns the output.
    pub fn finish(mut self) -> Result<W> {
        if let Some(t) = self.tensors.get(self.next) {
            return Err(FormatError::Writer(format!(
                "tensor `{}` was declared but not written",
                t.name
            )));
        }
        self.out.flush()?;
        Ok(self.out)
    }
}

fn put_str(b: &mut Vec<u8>, s: &str) {
    b.extend_from_slice(&(s.len() as u64).to_le_bytes());
    b.extend_from_slice(s.as_bytes());
}

fn put_value(b: &mut Vec<u8>, v: &GgufValue) {
    match v {
        GgufValue::U8(x) => b.push(*x),
        GgufValue::I8(x) => b.push(*x as u8),
        GgufValue::U16(x) => b.extend_from_slice(&x.to_le_bytes()),
        GgufValue::I16(x) => b.extend_from_slice(&x.to_le_bytes()),
        GgufValue::U32(x) => b.extend_from_slice(&x.to_le_bytes()),
        GgufValue::I32(x) => b.extend_from_slice(&x.to_le_bytes()),
        GgufValue::F32(x) => b.extend_from_slice(&x.to_le_bytes()),
        GgufValue::Bool(x) => b.push(*x as u8),
        GgufValue::String(s) => put_str(b, s),
        GgufValue::U64(x) => b.extend_from_slice(&x.to_le_bytes()),
        GgufValue::I64(x) => b.extend_from_slice(&x.to_le_bytes()),
        GgufValue::F64(x) => b.extend_from_slice(&x.to_le_bytes()),
        GgufValue::Array(a) => put_array(b, a),
    }
}

fn put_array(b: &mut Vec<u8>, a: &GgufArray) {
    b.extend_from_slice(&a.elem_type().id().to_le_bytes());
    b.extend_from_slice(&(a.len() as u64).to_le_bytes());
    macro_rules! each {
        ($v:expr, $x:ident => $e:expr) => {
            for $x in $v {
                $e
            }
        };
    }
    match a {
        GgufArray::U8(v) => b.extend_from_slice(v),
        GgufArray::I8(v) => each!(v, x => b.push(*x as u8)),
        GgufArray::U16(v) => each!(v, x => b.extend_from_slice(&x.to_le_bytes())),
        GgufArray::I16(v) => each!(v, x => b.extend_from_slice(&x.to_le_bytes())),
        GgufArray::U32(v) => each!(v, x => b.extend_from_slice(&x.to_le_bytes())),
        GgufArray::I32(v) => each!(v, x => b.extend_from_slice(&x.to_le_bytes())),
        GgufArray::F32(v) => each!(v, x => b.extend_from_slice(&x.to_le_bytes())),
        GgufArray::Bool(v) => each!(v, x => b.push(*x as u8)),
        GgufArray::String(v) => each!(v, x => put_str(b, x)),
        GgufArray::U64(v) => each!(v, x => b.extend_from_slice(&x.to_le_bytes())),
        GgufArray::I64(v) => each!(v, x => b.extend_from_slice(&x.to_le_bytes())),
        GgufArray::F64(v) => each!(v, x => b.extend_from_slice(&x.to_le_bytes())),
        GgufArray::Array(v) => each!(v, x => put_array(b, x)),
    }
}
