//! The codec entry points: dequantize / quantize whole buffers, matrices and rows.

use crate::error::{QuantError, Result};
use crate::format::{QuantFormat, ScaleLayout};

/// A row-major matrix `[rows, cols]` of quantized weights, borrowed (zero-copy, e.g. from a
/// memmap), with companion scale tensors for formats that keep scales apart.
#[derive(Debug, Clone, Copy)]
pub struct QuantMatrix<'a> {
    /// The weight format.
    pub format: QuantFormat,
    /// Output features (rows).
    pub rows: usize,
    /// Input features (columns, the reduced dimension).
    pub cols: usize,
    /// The quantized data, `rows * format.row_bytes(cols)` bytes.
    pub data: &'a [u8],
    /// Companion scales (see [`QuantFormat::scale_layout`]); `None` for inline formats.
    pub scales: Option<&'a [u8]>,
    /// A scale multiplying every value (FP8 per-tensor scale, NVFP4 `weight_scale_2`), if any.
    pub tensor_scale: Option<f32>,
}

/// An owned quantized matrix, as produced by [`quantize_matrix`].
#[derive(Debug, Clone, PartialEq)]
pub struct QuantizedMatrix {
    /// The weight format.
    pub format: QuantFormat,
    /// Rows.
    pub rows: usize,
    /// Columns.
    pub cols: usize,
    /// Quantized data.
    pub data: Vec<u8>,
    /// Companion scales (empty for inline formats).
    pub scales: Vec<u8>,
    /// Tensor scale, if the format has one.
    pub tensor_scale: Option<f32>,
}

impl QuantizedMatrix {
    /// A borrowed view for [`crate::matmul`] and the dequantizers.
    pub fn view(&self) -> QuantMatrix<'_> {
        QuantMatrix {
            format: self.format,
            rows: self.rows,
            cols: self.cols,
            data: &self.data,
            scales: if self.scales.is_empty() {
                None
            } else {
                Some(&self.scales)
            },
            tensor_scale: self.tensor_scale,
        }
    }
}

fn check_blocks(format: QuantFormat, data_len: usize, out_len: usize) -> Result<()> {
    let s = format.spec();
    if !data_len.is_multiple_of(s.block_bytes) {
        return Err(QuantError::PartialBlock {
            format: s.name.to_string(),
            len: data_len,
            block_bytes: s.block_bytes,
        });
    }
    let n = data_len / s.block_bytes * s.block_size;
    if out_len != n {
        return Err(QuantError::LengthMismatch {
            what: "output",
            expected: n,
            got: out_len,
        });
    }
    Ok(())
}

/// Dequantizes a buffer of whole blocks of a self-contained format into `out` (one f32 per
/// element). Formats with companion scales need [`dequantize_matrix`].
pub fn dequantize(format: QuantFormat, data: &[u8], out: &mut [f32]) -> Result<()> {
    let s = format.spec();
    if s.scales != ScaleLayout::Inline {
        return Err(QuantError::MissingScales(s.name.to_string()));
    }
    let dq = s
        .dequant
        .ok_or_else(|| QuantError::Unsupported(s.name.to_string()))?;
    check_blocks(format, data.len(), out.len())?;
    dq(data, &[], out);
    Ok(())
}

/// Quantizes `src` (a whole number of blocks) to a self-contained format's bytes.
pub fn quantize(format: QuantFormat, src: &[f32]) -> Result<Vec<u8>> {
    let s = format.spec();
    if s.scales != ScaleLayout::Inline {
        return Err(QuantError::MissingScales(s.name.to_string()));
    }
    let q = s
        .quant
        .ok_or_else(|| QuantError::NoQuantizer(s.name.to_string()))?;
    if !src.len().is_multiple_of(s.block_size) {
        return Err(QuantError::NotBlockMultiple {
            format: s.name.to_string(),
            elements: src.len(),
            block_size: s.block_size,
        });
    }
    let mut out = vec![0u8; src.len() / s.block_size * s.block_bytes];
    q(src, &mut out);
    Ok(out)
}

impl QuantMatrix<'_> {
    /// Checks the buffers against the shape; returns the bytes per row.
    pub fn validate(&self) -> Result<usize> {
        if self.rows == 0 || self.cols == 0 {
            return Err(QuantError::BadShape(format!("{}x{}", self.rows, self.cols)));
        }
        let rb = self.format.row_bytes(self.cols)?;
        let need = rb.checked_mul(self.rows).ok_or_else(|| {
            QuantError::BadShape(format!("{}x{} overflows", self.rows, self.cols))
        })?;
        if self.data.len() != need {
            return Err(QuantError::LengthMismatch {
                what: "weight data",
                expected: need,
                got: self.data.len(),
            });
        }
        if self.format.scale_layout() != ScaleLayout::Inline {
            let sc = self
                .scales
                .ok_or_else(|| QuantError::MissingScales(self.format.name().to_string()))?;
            let need = self.format.scale_bytes(self.rows, self.cols);
            if sc.len() != need {
                return Err(QuantError::LengthMismatch {
                    what: "companion scales",
                    expected: need,
                    got: sc.len(),
                });
            }
        }
        if !self.format.has_dequantizer() {
            return Err(QuantError::Unsupported(self.format.name().to_string()));
        }
        Ok(rb)
    }

    /// The data and companion-scale slices of row `r` (unchecked shape: call `validate` first).
    pub(crate) fn row_parts(&self, r: usize, rb: usize) -> (&[u8], &[u8]) {
        let data = &self.data[r * rb..(r + 1) * rb];
        let sc: &[u8] = match (self.format.scale_layout(), self.scales) {
            (ScaleLayout::PerGroup { group, bytes }, Some(s)) => {
                let n = self.cols / group * bytes;
                &s[r * n..(r + 1) * n]
            }
            (ScaleLayout::Tile128, Some(s)) => {
                let n = self.cols.div_ceil(128) * 4;
                &s[(r / 128) * n..(r / 128 + 1) * n]
            }
            _ => &[],
        };
        (data, sc)
    }
}

/// Dequantizes one row (embedding lookup) into `out` (`cols` long), tensor scale applied.
pub fn dequantize_row(m: &QuantMatrix, row: usize, out: &mut [f32]) -> Result<()> {
    let rb = m.validate()?;
    if row >= m.rows {
        return Err(QuantError::BadShape(format!("row {row} of {}", m.rows)));
    }
    if out.len() != m.cols {
        return Err(QuantError::LengthMismatch {
            what: "output row",
            expected: m.cols,
            got: out.len(),
        });
    }
    let dq = m
        .format
        .spec()
        .dequant
        .ok_or_else(|| QuantError::Unsupported(m.format.name().into()))?;
    let (d, s) = m.row_parts(row, rb);
    dq(d, s, out);
    if let Some(ts) = m.tensor_scale {
        out.iter_mut().for_each(|v| *v *= ts);
    }
    Ok(())
}

/// Dequantizes a whole matrix (any format, companion scales included) into `out` (`rows * cols`).
pub fn dequantize_matrix(m: &QuantMatrix, out: &mut [f32]) -> Result<()> {
    let rb = m.validate()?;
    let n = m.rows * m.cols;
    if out.len() != n {
        return Err(QuantError::LengthMismatch {
            what: "output",
            expected: n,
            got: out.len(),
        });
    }
    let dq = m
        .format
        .spec()
        .dequant
        .ok_or_else(|| QuantError::Unsupported(m.format.name().into()))?;
    for (r, o) in out.chunks_exact_mut(m.cols).enumerate() {
        let (d, s) = m.row_parts(r, rb);
        dq(d, s, o);
    }
    if let Some(ts) = m.tensor_scale {
        out.iter_mut().for_each(|v| *v *= ts);
    }
    Ok(())
}

/// Quantizes a row-major `[rows, cols]` f32 matrix to any quantizable format, producing companion
/// scales where the format keeps them apart (per-tensor FP8 and NVFP4 get a tensor scale from the
/// largest magnitude; other formats get none).
pub fn quantize_matrix(
    format: QuantFormat,
    rows: usize,
    cols: usize,
    src: &[f32],
) -> Result<QuantizedMatrix> {
    use crate::formats::{fp4, fp8};
    if rows == 0 || cols == 0 || rows.checked_mul(cols) != Some(src.len()) {
        return Err(QuantError::BadShape(format!(
            "{rows}x{cols} for {} values",
            src.len()
        )));
    }
    let rb = format.row_bytes(cols)?;
    let amax = src.iter().fold(0.0f32, |m, v| m.max(v.abs()));
    let mut out = QuantizedMatrix {
        format,
        rows,
        cols,
        data: vec![0u8; rb * rows],
        scales: vec![0u8; format.scale_bytes(rows, cols)],
        tensor_scale: None,
    };
    match format {
        QuantFormat::Fp8E4M3 | QuantFormat::Fp8E5M2 => {
            let max = if format == QuantFormat::Fp8E4M3 {
                448.0
            } else {
                57344.0
            };
            let ts = if amax > 0.0 { amax / max } else { 1.0 };
            let scaled: Vec<f32> = src.iter().map(|v| v / ts).collect();
            out.data = quantize(format, &scaled)?;
            out.tensor_scale = Some(ts);
        }
        QuantFormat::Fp8E4M3Block128 | QuantFormat::Fp8E5M2Block128 => {
            let (max, enc): (f32, fn(f32) -> u8) = if format == QuantFormat::Fp8E4M3Block128 {
                (448.0, fp8::f32_to_e4m3)
            } else {
                (57344.0, fp8::f32_to_e5m2)
            };
            let nc = cols.div_ceil(128);
            for tr in 0..rows.div_ceil(128) {
                for tc in 0..nc {
                    let (r0, r1) = (tr * 128, (tr * 128 + 128).min(rows));
                    let (c0, c1) = (tc * 128, (tc * 128 + 128).min(cols));
                    let mut a = 0.0f32;
                    for r in r0..r1 {
                        a = src[r * cols + c0..r * cols + c1]
                            .iter()
                            .fold(a, |m, v| m.max(v.abs()));
                    }
                    let s = if a > 0.0 { a / max } else { 1.0 };
                    out.scales[(tr * nc + tc) * 4..(tr * nc + tc) * 4 + 4]
                        .copy_from_slice(&s.to_le_bytes());
                    for r in r0..r1 {
                        for c in c0..c1 {
                            out.data[r * cols + c] = enc(src[r * cols + c] / s);
                        }
                    }
                }
            }
        }
        QuantFormat::NvFp4 => {
            // tensor scale so that the largest block scale (amax / 6) lands on E4M3's maximum
            let ts = if amax > 0.0 {
                amax / (6.0 * 448.0)
            } else {
                1.0
            };
            let sg = cols / 16;
            for r in 0..rows {
                fp4::quant_nvfp4_st(
                    &src[r * cols..(r + 1) * cols],
                    ts,
                    &mut out.data[r * rb..(r + 1) * rb],
                    &mut out.scales[r * sg..(r + 1) * sg],
                );
            }
            out.tensor_scale = Some(ts);
        }
        QuantFormat::MxFp4Blocks => {
            let sg = cols / 32;
            for r in 0..rows {
                fp4::quant_mxfp4_st(
                    &src[r * cols..(r + 1) * cols],
                    &mut out.data[r * rb..(r + 1) * rb],
                    &mut out.scales[r * sg..(r + 1) * sg],
                );
            }
        }
        QuantFormat::Ggml(_) => out.data = quantize(format, src)?,
    }
    Ok(out)
}
