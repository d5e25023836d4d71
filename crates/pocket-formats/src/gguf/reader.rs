//! Parsing of a GGUF v2/v3 header, metadata and tensor infos from bytes, with every count, length
//! and tensor extent checked against the input before use.

use super::cursor::Cursor;
use super::metadata::GgufMetadata;
use super::value::{GgufArray, GgufValue, GgufValueType};
use crate::error::{FormatError, Result};
use crate::ggml_type::GgmlType;

/// The GGUF magic, `GGUF` read as bytes.
pub const GGUF_MAGIC: [u8; 4] = *b"GGUF";
/// Alignment of tensor data when `general.alignment` is absent.
pub const DEFAULT_ALIGNMENT: u64 = 32;
/// Most dimensions a ggml tensor can have (`GGML_MAX_DIMS`).
pub const MAX_DIMS: usize = 4;
/// Deepest array nesting the reader accepts.
pub const MAX_ARRAY_DEPTH: usize = 8;

/// One tensor's entry in the GGUF tensor-info table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GgufTensorInfo {
    /// Tensor name.
    pub name: String,
    /// Dimensions as stored in the file: innermost first (`dims[0]` is the row length, ggml `ne`).
    pub dims: Vec<u64>,
    /// Element type.
    pub ggml_type: GgmlType,
    /// Offset of the first byte relative to the start of the data region.
    pub offset: u64,
    /// Size in bytes (elements x type geometry).
    pub size: u64,
}

impl GgufTensorInfo {
    /// Row-major shape, outermost first (the reverse of [`Self::dims`]; PyTorch/numpy order).
    pub fn shape(&self) -> Vec<usize> {
        self.dims.iter().rev().map(|&d| d as usize).collect()
    }

    /// Number of elements.
    pub fn n_elements(&self) -> u64 {
        self.dims.iter().product()
    }
}

/// Everything in a GGUF file except the tensor bytes.
#[derive(Debug, Clone, PartialEq)]
pub struct GgufLayout {
    /// Format version (2 or 3).
    pub version: u32,
    /// Key-value metadata.
    pub metadata: GgufMetadata,
    /// Tensor infos in file order.
    pub tensors: Vec<GgufTensorInfo>,
    /// Alignment of tensor data (`general.alignment`, default 32).
    pub alignment: u64,
    /// Absolute offset of the data region.
    pub data_offset: u64,
}

/// Parses and validates the header, metadata and tensor infos of a GGUF file held in `bytes`.
///
/// Every tensor is checked: known type, at most four dimensions, row length a whole number of
/// blocks, offset aligned, bytes inside the file, no overlap with another tensor.
pub fn parse_layout(bytes: &[u8]) -> Result<GgufLayout> {
    let mut c = Cursor::new(bytes);
    let magic = c.take(4, &|| "magic".to_string())?;
    if magic != GGUF_MAGIC {
        let mut found = [0u8; 4];
        found.copy_from_slice(magic);
        return Err(FormatError::BadMagic { found });
    }
    let version = c.u32(&|| "version".to_string())?;
    match version {
        2 | 3 => {}
        v if matches!(v.swap_bytes(), 2 | 3) => return Err(FormatError::BigEndian(v.swap_bytes())),
        v => return Err(FormatError::UnsupportedVersion(v)),
    }
    // Smallest tensor info: name length (8), n_dims (4), type (4), offset (8).
    let tensor_count = c.u64(&|| "tensor count".to_string())?;
    let kv_count = c.count(8 + 4 + 1, &|| "metadata key count".to_string())?;
    let mut metadata = GgufMetadata::new();
    for i in 0..kv_count {
        let key = c.string(&|| format!("metadata key #{i}"))?;
        let type_offset = c.pos();
        let type_id = c.u32(&|| format!("value type of `{key}`"))?;
        let value = read_value(&mut c, &key, type_id, type_offset, 0)?;
        metadata.insert(key, value)?;
    }
    let max_tensors = c.remaining() / 24;
    if tensor_count > max_tensors {
        return Err(FormatError::AbsurdCount {
            what: "tensor count".to_string(),
            count: tensor_count,
            offset: 8,
            max: max_tensors,
        });
    }
    let mut tensors = Vec::with_capacity(tensor_count as usize);
    for i in 0..tensor_count {
        tensors.push(read_tensor_info(&mut c, i)?);
    }
    let alignment = match metadata.get("general.alignment") {
        None => DEFAULT_ALIGNMENT,
        Some(_) => metadata.get_u64("general.alignment")?,
    };
    if alignment == 0 || !alignment.is_power_of_two() || alignment > 1 << 30 {
        return Err(FormatError::BadAlignment(alignment));
    }
    let data_offset = c.pos().div_ceil(alignment) * alignment;
    if !tensors.is_empty() && data_offset > bytes.len() as u64 {
        // Even zero-byte tensors start at the data region, which must lie inside the file.
        return Err(FormatError::Truncated {
            what: "padding before the tensor data region".to_string(),
            offset: c.pos(),
            need: data_offset - c.pos(),
            have: c.remaining(),
        });
    }
    let data_len = (bytes.len() as u64).saturating_sub(data_offset);
    check_extents(&tensors, alignment, data_len)?;
    Ok(GgufLayout {
        version,
        metadata,
        tensors,
        alignment,
        data_offset,
    })
}

fn read_tensor_info(c: &mut Cursor<'_>, i: u64) -> Result<GgufTensorInfo> {
    let name = c.string(&|| format!("name of tensor #{i}"))?;
    let n_dims = c.u32(&|| format!("n_dims of tensor `{name}`"))?;
    if n_dims as usize > MAX_DIMS {
        return Err(FormatError::BadShape {
            tensor: name,
            reason: format!("{n_dims} dimensions (ggml allows at most {MAX_DIMS})"),
        });
    }
    let mut dims = Vec::with_capacity(n_dims as usize);
    for d in 0..n_dims {
        dims.push(c.u64(&|| format!("dimension {d} of tensor `{name}`"))?);
    }
    let type_id = c.u32(&|| format!("type of tensor `{name}`"))?;
    let offset = c.u64(&|| format!("offset of tensor `{name}`"))?;
    let Some(ggml_type) = GgmlType::from_id(type_id) else {
        return Err(FormatError::UnknownTensorType {
            tensor: name,
            id: type_id,
        });
    };
    let size = tensor_size(&name, &dims, ggml_type)?;
    Ok(GgufTensorInfo {
        name,
        dims,
        ggml_type,
        offset,
        size,
    })
}

/// Bytes a tensor of `dims` (innermost first) and `ty` occupies, checking that the row length is a
/// whole number of blocks and that nothing overflows.
pub fn tensor_size(name: &str, dims: &[u64], ty: GgmlType) -> Result<u64> {
    let bad = |reason: String| FormatError::BadShape {
        tensor: name.to_string(),
        reason,
    };
    if dims.iter().any(|&d| d > i64::MAX as u64) {
        return Err(bad(format!("dimension out of range in {dims:?}")));
    }
    let n = dims
        .iter()
        .try_fold(1u64, |acc, &d| acc.checked_mul(d))
        .ok_or_else(|| bad(format!("element count of {dims:?} overflows")))?;
    let row = dims.first().copied().unwrap_or(1);
    if row % ty.block_size() as u64 != 0 {
        return Err(bad(format!(
            "row length {row} is not a multiple of the {} block size {}",
            ty.name(),
            ty.block_size()
        )));
    }
    ty.bytes_for(n)
        .ok_or_else(|| bad(format!("byte size of {dims:?} {} overflows", ty.name())))
}

fn check_extents(tensors: &[GgufTensorInfo], alignment: u64, data_len: u64) -> Result<()> {
    let mut seen = std::collections::HashSet::with_capacity(tensors.len());
    for t in tensors {
        if !seen.insert(t.name.as_str()) {
            return Err(FormatError::DuplicateTensor(t.name.clone()));
        }
        if t.offset % alignment != 0 {
            return Err(FormatError::TensorMisaligned {
                tensor: t.name.clone(),
                offset: t.offset,
                alignment,
            });
        }
        let end = t.offset.checked_add(t.size);
        if end.is_none_or(|e| e > data_len) {
            return Err(FormatError::TensorOutOfBounds {
                tensor: t.name.clone(),
                start: t.offset,
                end: end.unwrap_or(u64::MAX),
                limit: data_len,
            });
        }
    }
    let mut order: Vec<&GgufTensorInfo> = tensors.iter().filter(|t| t.size > 0).collect();
    order.sort_by_key(|t| t.offset);
    for w in order.windows(2) {
        if w[0].offset + w[0].size > w[1].offset {
            return Err(FormatError::TensorOverlap {
                first: w[0].name.clone(),
                second: w[1].name.clone(),
            });
        }
    }
    Ok(())
}

fn read_value(
    c: &mut Cursor<'_>,
    key: &str,
    type_id: u32,
    type_offset: u64,
    depth: usize,
) -> Result<GgufValue> {
    let ty = GgufValueType::from_id(type_id).ok_or_else(|| FormatError::UnknownValueType {
        key: key.to_string(),
        id: type_id,
        offset: type_offset,
    })?;
    let what = || format!("value of `{key}`");
    Ok(match ty {
        GgufValueType::U8 => GgufValue::U8(c.u8(&what)?),
        GgufValueType::I8 => GgufValue::I8(c.u8(&what)? as i8),
        GgufValueType::U16 => GgufValue::U16(c.u16(&what)?),
        GgufValueType::I16 => GgufValue::I16(c.u16(&what)? as i16),
        GgufValueType::U32 => GgufValue::U32(c.u32(&what)?),
        GgufValueType::I32 => GgufValue::I32(c.u32(&what)? as i32),
        GgufValueType::F32 => GgufValue::F32(f32::from_bits(c.u32(&what)?)),
        GgufValueType::U64 => GgufValue::U64(c.u64(&what)?),
        GgufValueType::I64 => GgufValue::I64(c.u64(&what)? as i64),
        GgufValueType::F64 => GgufValue::F64(f64::from_bits(c.u64(&what)?)),
        GgufValueType::Bool => GgufValue::Bool(read_bool(c, key)?),
        GgufValueType::String => GgufValue::String(c.string(&what)?),
        GgufValueType::Array => GgufValue::Array(read_array(c, key, depth)?),
    })
}

fn read_bool(c: &mut Cursor<'_>, key: &str) -> Result<bool> {
    let offset = c.pos();
    match c.u8(&|| format!("bool in `{key}`"))? {
        0 => Ok(false),
        1 => Ok(true),
        b => Err(FormatError::WrongType {
            key: key.to_string(),
            expected: "bool (0 or 1)",
            found: format!("byte {b} at offset {offset}"),
        }),
    }
}

fn read_array(c: &mut Cursor<'_>, key: &str, depth: usize) -> Result<GgufArray> {
    if depth >= MAX_ARRAY_DEPTH {
        return Err(FormatError::NestingTooDeep {
            key: key.to_string(),
            max: MAX_ARRAY_DEPTH,
        });
    }
    let type_offset = c.pos();
    let elem_id = c.u32(&|| format!("array element type of `{key}`"))?;
    let elem = GgufValueType::from_id(elem_id).ok_or_else(|| FormatError::UnknownValueType {
        key: key.to_string(),
        id: elem_id,
        offset: type_offset,
    })?;
    let n = c.count(elem.min_size() as u64, &|| {
        format!("array length of `{key}`")
    })? as usize;
    let what = || format!("array element of `{key}`");
    macro_rules! fixed {
        ($variant:ident, $read:expr) => {{
            let mut v = Vec::with_capacity(n);
            for _ in 0..n {
                v.push($read);
            }
            GgufArray::$variant(v)
        }};
    }
    Ok(match elem {
        GgufValueType::U8 => GgufArray::U8(c.take(n as u64, &what)?.to_vec()),
        GgufValueType::I8 => fixed!(I8, c.u8(&what)? as i8),
        GgufValueType::U16 => fixed!(U16, c.u16(&what)?),
        GgufValueType::I16 => fixed!(I16, c.u16(&what)? as i16),
        GgufValueType::U32 => fixed!(U32, c.u32(&what)?),
        GgufValueType::I32 => fixed!(I32, c.u32(&what)? as i32),
        GgufValueType::F32 => fixed!(F32, f32::from_bits(c.u32(&what)?)),
        GgufValueType::U64 => fixed!(U64, c.u64(&what)?),
        GgufValueType::I64 => fixed!(I64, c.u64(&what)? as i64),
        GgufValueType::F64 => fixed!(F64, f64::from_bits(c.u64(&what)?)),
        GgufValueType::Bool => fixed!(Bool, read_bool(c, key)?),
        GgufValueType::String => fixed!(String, c.string(&what)?),
        GgufValueType::Array => fixed!(Array, read_array(c, key, depth + 1)?),
    })
}
