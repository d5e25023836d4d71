//! Parsing and validation of a safetensors header: the u64 length, the JSON table, and every
//! tensor's dtype, shape and byte range checked against the data that follows.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::error::{FormatError, Result};
use crate::format::TensorFormat;

/// Largest header accepted (the limit the reference `safetensors` implementation uses).
pub const MAX_HEADER_BYTES: u64 = 100_000_000;

/// One tensor entry of a safetensors header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SafetensorsTensorInfo {
    /// Tensor name.
    pub name: String,
    /// Element format (from the dtype string).
    pub format: TensorFormat,
    /// Row-major shape, outermost first.
    pub shape: Vec<usize>,
    /// First byte, relative to the data region.
    pub start: u64,
    /// One past the last byte, relative to the data region.
    pub end: u64,
}

impl SafetensorsTensorInfo {
    /// Size in bytes.
    pub fn size(&self) -> u64 {
        self.end - self.start
    }

    /// Number of elements.
    pub fn n_elements(&self) -> u64 {
        self.shape.iter().map(|&d| d as u64).product()
    }
}

/// Everything in a safetensors file except the tensor bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SafetensorsLayout {
    /// Tensor entries sorted by offset (file order).
    pub tensors: Vec<SafetensorsTensorInfo>,
    /// The `__metadata__` string map (empty when absent).
    pub metadata: BTreeMap<String, String>,
    /// Absolute offset of the data region (8 + header length).
    pub data_offset: u64,
}

fn bad(msg: impl Into<String>) -> FormatError {
    FormatError::SafetensorsHeader(msg.into())
}

/// Parses and validates the header of a safetensors file held in `bytes`.
pub fn parse_layout(bytes: &[u8]) -> Result<SafetensorsLayout> {
    let total = bytes.len() as u64;
    if total < 8 {
        return Err(FormatError::Truncated {
            what: "safetensors header length".into(),
            offset: 0,
            need: 8,
            have: total,
        });
    }
    let mut len_bytes = [0u8; 8];
    len_bytes.copy_from_slice(&bytes[..8]);
    let n = u64::from_le_bytes(len_bytes);
    if n > MAX_HEADER_BYTES {
        return Err(bad(format!(
            "header length {n} exceeds the {MAX_HEADER_BYTES}-byte limit"
        )));
    }
    if n > total - 8 {
        return Err(FormatError::Truncated {
            what: "safetensors JSON header".into(),
            offset: 8,
            need: n,
            have: total - 8,
        });
    }
    let raw = &bytes[8..8 + n as usize];
    let text = std::str::from_utf8(raw).map_err(|e| {
        bad(format!(
            "JSON header is not valid UTF-8 (byte {})",
            e.valid_up_to() + 8
        ))
    })?;
    if !text.starts_with('{') {
        return Err(bad("JSON header does not start with '{'"));
    }
    let json: Value =
        serde_json::from_str(text).map_err(|e| bad(format!("invalid JSON header: {e}")))?;
    let Value::Object(map) = json else {
        return Err(bad("JSON header is not an object"));
    };
    let data_offset = 8 + n;
    let data_len = total - data_offset;
    let mut metadata = BTreeMap::new();
    let mut tensors = Vec::with_capacity(map.len());
    for (name, entry) in map {
        if name == "__metadata__" {
            metadata = parse_metadata(&entry)?;
            continue;
        }
        tensors.push(parse_entry(name, &entry, data_len)?);
    }
    tensors.sort_by_key(|a| (a.start, a.end));
    for w in tensors.windows(2) {
        if w[0].end > w[1].start {
            return Err(FormatError::TensorOverlap {
                first: w[0].name.clone(),
                second: w[1].name.clone(),
            });
        }
    }
    Ok(SafetensorsLayout {
        tensors,
        metadata,
        data_offset,
    })
}

fn parse_metadata(v: &Value) -> Result<BTreeMap<String, String>> {
    let Value::Object(m) = v else {
        return Err(bad("`__metadata__` is not an object"));
    };
    m.iter()
        .map(|(k, v)| match v {
            Value::String(s) => Ok((k.clone(), s.clone())),
            _ => Err(bad(format!("`__metadata__.{k}` is not a string"))),
        })
        .collect()
}

fn parse_entry(name: String, entry: &Value, data_len: u64) -> Result<SafetensorsTensorInfo> {
    let Value::Object(e) = entry else {
        return Err(bad(format!("entry `{name}` is not an object")));
    };
    let dtype = e
        .get("dtype")
        .and_then(Value::as_str)
        .ok_or_else(|| bad(format!("tensor `{name}` has no string `dtype`")))?;
    let format =
        TensorFormat::from_safetensors(dtype).ok_or_else(|| FormatError::UnknownDtype {
            tensor: name.clone(),
            dtype: dtype.to_string(),
        })?;
    let shape_json = e
        .get("shape")
        .and_then(Value::as_array)
        .ok_or_else(|| bad(format!("tensor `{name}` has no array `shape`")))?;
    let mut shape = Vec::with_capacity(shape_json.len());
    for d in shape_json {
        let d = d
            .as_u64()
            .and_then(|d| usize::try_from(d).ok())
            .ok_or_else(|| bad(format!("tensor `{name}`: shape entry {d} is not a size")))?;
        shape.push(d);
    }
    let offsets = e
        .get("data_offsets")
        .and_then(Value::as_array)
        .filter(|a| a.len() == 2)
        .ok_or_else(|| bad(format!("tensor `{name}` needs `data_offsets` [begin, end]")))?;
    let (Some(start), Some(end)) = (offsets[0].as_u64(), offsets[1].as_u64()) else {
        return Err(bad(format!(
            "tensor `{name}`: data_offsets are not unsigned integers"
        )));
    };
    if start > end {
        return Err(bad(format!(
            "tensor `{name}`: data_offsets [{start}, {end}] run backwards"
        )));
    }
    if end > data_len {
        return Err(FormatError::TensorOutOfBounds {
            tensor: name,
            start,
            end,
            limit: data_len,
        });
    }
    let elements = shape
        .iter()
        .try_fold(1u64, |acc, &d| acc.checked_mul(d as u64))
        .ok_or_else(|| {
            bad(format!(
                "tensor `{name}`: element count of {shape:?} overflows"
            ))
        })?;
    let expect = format
        .bytes_for(elements)
        .ok_or_else(|| FormatError::BadShape {
            tensor: name.clone(),
            reason: format!("{elements} {format} elements are not a whole number of bytes"),
        })?;
    if expect != end - start {
        return Err(FormatError::BadShape {
            tensor: name,
            reason: format!(
                "shape {shape:?} of {format} needs {expect} bytes but data_offsets span {}",
                end - start
            ),
        });
    }
    Ok(SafetensorsTensorInfo {
        name,
        format,
        shape,
        start,
        end,
    })
}
