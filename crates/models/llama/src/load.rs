//! Weights from a [`TensorStore`] onto a device, zero-copy on the CPU: each weight borrows its
//! window of the memory-mapped file.

use std::sync::Arc;

use pocket_formats::{StoreKind, TensorFormat, TensorStore, TensorView};
use pocket_kernels::{Device, HostBytes, Tensor, Weight};
use pocket_layers::{LayerError, Result};
use pocket_quant::QuantFormat;

/// One file of a store, as the owner of the bytes that host weights borrow.
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

/// Which naming scheme the store uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Naming {
    /// llama.cpp GGUF names (`blk.0.attn_q.weight`).
    Gguf,
    /// Hugging Face names (`model.layers.0.self_attn.q_proj.weight`).
    Hf,
}

/// Per-layer parts of the family, named independently of the file's scheme.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    /// Pre-attention norm.
    AttnNorm,
    /// Q projection.
    Q,
    /// K projection.
    K,
    /// V projection.
    V,
    /// Output projection.
    O,
    /// Per-head Q norm.
    QNorm,
    /// Per-head K norm.
    KNorm,
    /// Pre-MLP norm.
    FfnNorm,
    /// MLP gate.
    Gate,
    /// MLP up.
    Up,
    /// MLP down.
    Down,
}

/// Reads named tensors of one store onto one device.
pub struct Loader {
    store: Arc<TensorStore>,
    dev: Device,
    naming: Naming,
}

impl Loader {
    /// A loader for `store` onto `dev`.
    pub fn new(store: Arc<TensorStore>, dev: Device) -> Loader {
        let naming = match store.kind() {
            StoreKind::Gguf => Naming::Gguf,
            StoreKind::Safetensors => Naming::Hf,
        };
        Loader { store, dev, naming }
    }

    /// The naming scheme.
    pub fn naming(&self) -> Naming {
        self.naming
    }

    /// The store.
    pub fn store(&self) -> &Arc<TensorStore> {
        &self.store
    }

    /// The file name of a layer part's weight (or bias).
    pub fn layer_name(&self, layer: usize, part: Part, bias: bool) -> String {
        let suffix = if bias { "bias" } else { "weight" };
        match self.naming {
            Naming::Gguf => {
                let p = match part {
                    Part::AttnNorm => "attn_norm",
                    Part::Q => "attn_q",
                    Part::K => "attn_k",
                    Part::V => "attn_v",
                    Part::O => "attn_output",
                    Part::QNorm => "attn_q_norm",
                    Part::KNorm => "attn_k_norm",
                    Part::FfnNorm => "ffn_norm",
                    Part::Gate => "ffn_gate",
                    Part::Up => "ffn_up",
                    Part::Down => "ffn_down",
                };
                format!("blk.{layer}.{p}.{suffix}")
            }
            Naming::Hf => {
                let p = match part {
                    Part::AttnNorm => "input_layernorm",
                    Part::Q => "self_attn.q_proj",
                    Part::K => "self_attn.k_proj",
                    Part::V => "self_attn.v_proj",
                    Part::O => "self_attn.o_proj",
                    Part::QNorm => "self_attn.q_norm",
                    Part::KNorm => "self_attn.k_norm",
                    Part::FfnNorm => "post_attention_layernorm",
                    Part::Gate => "mlp.gate_proj",
                    Part::Up => "mlp.up_proj",
                    Part::Down => "mlp.down_proj",
                };
                format!("model.layers.{layer}.{p}.{suffix}")
            }
        }
    }

    /// Names of the embedding table, final norm and output projection.
    pub fn global_names(&self) -> (&'static str, &'static str, &'static str) {
        match self.naming {
            Naming::Gguf => ("token_embd.weight", "output_norm.weight", "output.weight"),
            Naming::Hf => (
                "model.embed_tokens.weight",
                "model.norm.weight",
                "lm_head.weight",
            ),
        }
    }

    /// Whether the store holds `name`.
    pub fn contains(&self, name: &str) -> bool {
        self.store.contains(name)
    }

    fn view(&self, name: &str) -> Result<TensorView<'_>> {
        Ok(self.store.tensor(name)?)
    }

    /// The block format of a stored tensor, if the engine can use it.
    fn quant_format(name: &str, f: TensorFormat) -> Result<QuantFormat> {
        match f {
            TensorFormat::Ggml(t) => Ok(QuantFormat::Ggml(t)),
            other => Err(LayerError::Checkpoint(format!(
                "`{name}`: format {other:?} is not supported"
            ))),
        }
    }

    /// The shape of a stored tensor.
    pub fn shape(&self, name: &str) -> Result<Vec<usize>> {
        Ok(self.view(name)?.shape.to_vec())
    }

    /// A `[rows, cols]` matrix in its own block format, borrowed from the file on the CPU.
    pub fn weight(&self, name: &str, rows: usize, cols: usize) -> Result<Weight> {
        let v = self.view(name)?;
        if v.shape != [rows, cols] {
            return Err(LayerError::Checkpoint(format!(
                "`{name}` has shape {:?}, expected [{rows}, {cols}]",
                v.shape
            )));
        }
        let format = Self::quant_format(name, v.format)?;
        let owner: Arc<dyn AsRef<[u8]> + Send + Sync> = Arc::new(FileBytes {
            store: self.store.clone(),
            file: v.file_index,
        });
        let bytes = HostBytes::new(owner, v.file_offset as usize, v.data.len())
            .filter(|b| b.as_slice().as_ptr() == v.data.as_ptr())
            .ok_or_else(|| LayerError::Checkpoint(format!("`{name}` lies outside its file")))?;
        Ok(self
            .dev
            .upload_weight(format, rows, cols, bytes, None, None)?)
    }

    /// A vector (norm scale, bias) of `len` elements, dequantized to f32 on the device.
    pub fn vector(&self, name: &str, len: usize) -> Result<Tensor> {
        let v = self.view(name)?;
        if v.shape.iter().product::<usize>() != len {
            return Err(LayerError::Checkpoint(format!(
                "`{name}` has shape {:?}, expected {len} elements",
                v.shape
            )));
        }
        let format = Self::quant_format(name, v.format)?;
        let mut out = vec![0f32; len];
        pocket_quant::dequantize(format, v.data, &mut out)?;
        Ok(self.dev.upload_f32(&out, &[len])?)
    }

    /// The device.
    pub fn device(&self) -> &Device {
        &self.dev
    }
}
