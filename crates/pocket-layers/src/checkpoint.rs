//! Tensors of a checkpoint onto a device, shared by every architecture's loader: the format
//! routing (GGUF blocks, safetensors dtypes, FP8 with block scales) and zero-copy borrowing live
//! here once; a model crate only adds its naming scheme on top.

use std::sync::Arc;

use pocket_formats::{CompanionRole, TensorFormat, TensorStore, TensorView};
use pocket_kernels::{Device, HostBytes, Tensor, Weight};
use pocket_quant::QuantFormat;

use crate::{LayerError, Result};

/// One file of a store, as the owner of the bytes that host weights borrow (keeps the mapping
/// alive for as long as any weight points into it).
struct FileBytes {
    store: Arc<TensorStore>,
    file: usize,
}

impl AsRef<[u8]> for FileBytes {
    fn as_ref(&self) -> &[u8] {
        if let Some(g) = self.store.gguf() {
            return g.bytes();
        }
        match self.store.safetensors() {
            Some(c) => c.files().get(self.file).map_or(&[], |f| f.bytes()),
            None => &[],
        }
    }
}

/// Reads named tensors of one store onto one device, whatever the file format.
pub struct TensorSource {
    store: Arc<TensorStore>,
    dev: Device,
}

impl TensorSource {
    /// A source reading `store` onto `dev`.
    pub fn new(store: Arc<TensorStore>, dev: Device) -> TensorSource {
        TensorSource { store, dev }
    }

    /// The store.
    pub fn store(&self) -> &Arc<TensorStore> {
        &self.store
    }

    /// The device weights are placed on.
    pub fn device(&self) -> &Device {
        &self.dev
    }

    /// Whether the store holds `name`.
    pub fn contains(&self, name: &str) -> bool {
        self.store.contains(name)
    }

    /// The shape of a stored tensor.
    pub fn shape(&self, name: &str) -> Result<Vec<usize>> {
        Ok(self.view(name)?.shape.to_vec())
    }

    /// Number of stored tensors whose names start with `prefix` (companions included).
    pub fn count_prefix(&self, prefix: &str) -> usize {
        self.store.names().filter(|n| n.starts_with(prefix)).count()
    }

    fn view(&self, name: &str) -> Result<TensorView<'_>> {
        Ok(self.store.tensor(name)?)
    }

    /// A `[rows, cols]` matrix in its own block format, borrowed from the mapped file on the CPU.
    /// FP8 E4M3 weights need their `weight_scale_inv` companion: f32 (or bf16, widened) scales of
    /// 128x128 tiles, `[ceil(rows/128), ceil(cols/128)]`.
    pub fn weight(&self, name: &str, rows: usize, cols: usize) -> Result<Weight> {
        let v = self.view(name)?;
        if v.shape != [rows, cols] {
            return Err(LayerError::Checkpoint(format!(
                "`{name}` has shape {:?}, expected [{rows}, {cols}]",
                v.shape
            )));
        }
        let (format, scales) = match v.format {
            TensorFormat::Ggml(t) => (QuantFormat::Ggml(t), None),
            TensorFormat::F8E4M3 => {
                let scales = fp8_tile_scales(name, &v, rows, cols)?;
                (QuantFormat::Fp8E4M3Block128, Some(scales))
            }
            other => {
                return Err(LayerError::Checkpoint(format!(
                    "`{name}`: format {other:?} is not supported"
                )))
            }
        };
        let owner: Arc<dyn AsRef<[u8]> + Send + Sync> = Arc::new(FileBytes {
            store: self.store.clone(),
            file: v.file_index,
        });
        // The view's bytes must be exactly the window of the file we borrow, or the weight
        // would read something else once the view is gone.
        let bytes = HostBytes::new(owner, v.file_offset as usize, v.data.len())
            .filter(|b| b.as_slice().as_ptr() == v.data.as_ptr())
            .ok_or_else(|| LayerError::Checkpoint(format!("`{name}` lies outside its file")))?;
        Ok(self
            .dev
            .upload_weight(format, rows, cols, bytes, scales, None)?)
    }

    /// Several `[rows_i, cols]` matrices stacked row-wise into one `[sum rows_i, cols]` weight
    /// (a model's Q, K and V, or gate and up, which read one input: one GEMV instead of several),
    /// or `None` where they cannot be stacked byte-wise: differing formats, or FP8 128x128 tiles
    /// whose row counts (all but the last) are not multiples of 128. Every GGML format stores rows
    /// independently, so the stack is the parts' bytes one after another. The stacked bytes are
    /// a host copy that lives only until the upload returns on a device that copies (CUDA); on
    /// the CPU the weight would keep that copy instead of borrowing the mapped file, so callers
    /// stack only where it pays (see [`crate::linear::stack_projections`]).
    pub fn stacked_weight(&self, parts: &[(&str, usize)], cols: usize) -> Result<Option<Weight>> {
        let mut views = Vec::with_capacity(parts.len());
        for &(name, rows) in parts {
            let v = self.view(name)?;
            if v.shape != [rows, cols] {
                return Err(LayerError::Checkpoint(format!(
                    "`{name}` has shape {:?}, expected [{rows}, {cols}]",
                    v.shape
                )));
            }
            views.push(v);
        }
        let Some(first) = views.first() else {
            return Ok(None);
        };
        if views.iter().any(|v| v.format != first.format) {
            return Ok(None);
        }
        let rows: usize = parts.iter().map(|p| p.1).sum();
        let data: Vec<u8> = views.iter().map(|v| v.data).collect::<Vec<_>>().concat();
        let (format, scales) = match first.format {
            TensorFormat::Ggml(t) => (QuantFormat::Ggml(t), None),
            TensorFormat::F8E4M3 => {
                // Tile rows stack only if no tile straddles two parts.
                let last = parts.len() - 1;
                if parts[..last].iter().any(|p| !p.1.is_multiple_of(128)) {
                    return Ok(None);
                }
                let mut s = Vec::new();
                for (v, &(name, r)) in views.iter().zip(parts) {
                    s.extend_from_slice(fp8_tile_scales(name, v, r, cols)?.as_slice());
                }
                (QuantFormat::Fp8E4M3Block128, Some(HostBytes::from_vec(s)))
            }
            other => {
                return Err(LayerError::Checkpoint(format!(
                    "`{}`: format {other:?} is not supported",
                    parts[0].0
                )))
            }
        };
        let bytes = HostBytes::from_vec(data);
        Ok(Some(
            self.dev
                .upload_weight(format, rows, cols, bytes, scales, None)?,
        ))
    }

    /// Several vectors (biases of stacked projections) concatenated and uploaded as one f32
    /// vector.
    pub fn stacked_vector(&self, parts: &[(&str, usize)]) -> Result<Tensor> {
        let mut v = Vec::new();
        for &(name, len) in parts {
            v.extend(self.values(name, len)?);
        }
        let len = v.len();
        Ok(self.dev.upload_f32(&v, &[len])?)
    }

    /// A small tensor (norm scale, bias, conv taps, per-head vector) of `len` elements as host
    /// f32, whatever float or block format it is stored in.
    pub fn values(&self, name: &str, len: usize) -> Result<Vec<f32>> {
        let v = self.view(name)?;
        if v.shape.iter().product::<usize>() != len {
            return Err(LayerError::Checkpoint(format!(
                "`{name}` has shape {:?}, expected {len} elements",
                v.shape
            )));
        }
        let TensorFormat::Ggml(t) = v.format else {
            return Err(LayerError::Checkpoint(format!(
                "`{name}`: format {:?} is not supported for a vector",
                v.format
            )));
        };
        let mut out = vec![0f32; len];
        pocket_quant::dequantize(QuantFormat::Ggml(t), v.data, &mut out)?;
        Ok(out)
    }

    /// A vector of `len` elements ([`TensorSource::values`]) uploaded to the device as f32.
    pub fn vector(&self, name: &str, len: usize) -> Result<Tensor> {
        let v = self.values(name, len)?;
        Ok(self.dev.upload_f32(&v, &[len])?)
    }
}

/// The f32 scales of an FP8 E4M3 weight's 128x128 tiles, from its `weight_scale_inv` companion,
/// as little-endian bytes for [`Device::upload_weight`].
fn fp8_tile_scales(name: &str, v: &TensorView<'_>, rows: usize, cols: usize) -> Result<HostBytes> {
    let c = v.companion(CompanionRole::ScaleInv).ok_or_else(|| {
        LayerError::Checkpoint(format!(
            "`{name}` is FP8 E4M3 without a `weight_scale_inv` (only 128x128 block-scaled FP8 is supported)"
        ))
    })?;
    let want = [rows.div_ceil(128), cols.div_ceil(128)];
    if c.shape != want {
        return Err(LayerError::Checkpoint(format!(
            "`{}` has shape {:?}, 128x128 tiles of [{rows}, {cols}] need {want:?}",
            c.name, c.shape
        )));
    }
    let TensorFormat::Ggml(t) = c.format else {
        return Err(LayerError::Checkpoint(format!(
            "`{}`: scale format {:?} is not a float",
            c.name, c.format
        )));
    };
    let mut f = vec![0f32; want[0] * want[1]];
    pocket_quant::dequantize(QuantFormat::Ggml(t), c.data, &mut f)?;
    let bytes: Vec<u8> = f.iter().flat_map(|x| x.to_le_bytes()).collect();
    Ok(HostBytes::from_vec(bytes))
}
