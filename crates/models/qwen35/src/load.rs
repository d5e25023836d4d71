//! Weights from a [`TensorStore`] onto a device under either naming scheme: Hugging Face
//! (`model.layers.N...`, or `model.language_model.layers.N...` in checkpoints with a vision
//! tower) or llama.cpp's `qwen35` GGUF names. Matrices stay in their block format (BF16, FP8 E4M3
//! with 128x128 block scales, any GGUF type) and are borrowed from the mapped file on the CPU.

use std::sync::Arc;

use pocket_formats::{CompanionRole, StoreKind, TensorFormat, TensorStore, TensorView};
use pocket_kernels::{Device, HostBytes, Weight};
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

/// Which naming scheme (and value conventions) the store uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Naming {
    /// llama.cpp's converter: RMSNorm scales stored as `1 + w`, `ssm_a = -exp(A_log)`, value
    /// heads re-tiled.
    Gguf,
    /// Hugging Face: zero-centred RMSNorm scales, `A_log`, grouped value heads; text tensors
    /// under `prefix` (`model.` or `model.language_model.`).
    Hf {
        /// Prefix of the text model's tensors.
        prefix: String,
    },
}

/// Per-layer parts, named independently of the scheme.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    /// Pre-mixer norm.
    AttnNorm,
    /// Pre-MLP norm.
    FfnNorm,
    /// Attention `[query | gate]` projection.
    Q,
    /// Attention K projection.
    K,
    /// Attention V projection.
    V,
    /// Attention output projection.
    O,
    /// Per-head query norm.
    QNorm,
    /// Per-head key norm.
    KNorm,
    /// DeltaNet `[q | k | v]` projection.
    InQkv,
    /// DeltaNet output gate projection.
    InZ,
    /// DeltaNet beta projection.
    InB,
    /// DeltaNet decay projection.
    InA,
    /// DeltaNet output projection.
    Out,
    /// DeltaNet conv taps.
    Conv,
    /// DeltaNet `A_log` (HF) or `ssm_a` (GGUF).
    A,
    /// DeltaNet decay bias.
    DtBias,
    /// DeltaNet gated-norm scale.
    GatedNorm,
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
    /// A loader for `store` onto `dev`; for safetensors, finds the text model's prefix.
    pub fn new(store: Arc<TensorStore>, dev: Device) -> Result<Loader> {
        let naming = match store.kind() {
            StoreKind::Gguf => Naming::Gguf,
            StoreKind::Safetensors => {
                let prefix = ["model.language_model.", "model."]
                    .into_iter()
                    .find(|p| store.contains(&format!("{p}embed_tokens.weight")))
                    .ok_or_else(|| {
                        LayerError::Checkpoint(
                            "no `model.embed_tokens.weight` or `model.language_model.embed_tokens.weight`"
                                .into(),
                        )
                    })?;
                Naming::Hf {
                    prefix: prefix.to_string(),
                }
            }
        };
        Ok(Loader { store, dev, naming })
    }

    /// The naming scheme.
    pub fn naming(&self) -> &Naming {
        &self.naming
    }

    /// The name of a layer part.
    pub fn layer_name(&self, layer: usize, part: Part) -> String {
        match &self.naming {
            Naming::Gguf => {
                let p = match part {
                    Part::AttnNorm => "attn_norm.weight",
                    Part::FfnNorm => "post_attention_norm.weight",
                    Part::Q => "attn_q.weight",
                    Part::K => "attn_k.weight",
                    Part::V => "attn_v.weight",
                    Part::O => "attn_output.weight",
                    Part::QNorm => "attn_q_norm.weight",
                    Part::KNorm => "attn_k_norm.weight",
                    Part::InQkv => "attn_qkv.weight",
                    Part::InZ => "attn_gate.weight",
                    Part::InB => "ssm_beta.weight",
                    Part::InA => "ssm_alpha.weight",
                    Part::Out => "ssm_out.weight",
                    Part::Conv => "ssm_conv1d.weight",
                    Part::A => "ssm_a",
                    Part::DtBias => "ssm_dt.bias",
                    Part::GatedNorm => "ssm_norm.weight",
                    Part::Gate => "ffn_gate.weight",
                    Part::Up => "ffn_up.weight",
                    Part::Down => "ffn_down.weight",
                };
                format!("blk.{layer}.{p}")
            }
            Naming::Hf { prefix } => {
                let p = match part {
                    Part::AttnNorm => "input_layernorm.weight",
                    Part::FfnNorm => "post_attention_layernorm.weight",
                    Part::Q => "self_attn.q_proj.weight",
                    Part::K => "self_attn.k_proj.weight",
                    Part::V => "self_attn.v_proj.weight",
                    Part::O => "self_attn.o_proj.weight",
                    Part::QNorm => "self_attn.q_norm.weight",
                    Part::KNorm => "self_attn.k_norm.weight",
                    Part::InQkv => "linear_attn.in_proj_qkv.weight",
                    Part::InZ => "linear_attn.in_proj_z.weight",
                    Part::InB => "linear_attn.in_proj_b.weight",
                    Part::InA => "linear_attn.in_proj_a.weight",
                    Part::Out => "linear_attn.out_proj.weight",
                    Part::Conv => "linear_attn.conv1d.weight",
                    Part::A => "linear_attn.A_log",
                    Part::DtBias => "linear_attn.dt_bias",
                    Part::GatedNorm => "linear_attn.norm.weight",
                    Part::Gate => "mlp.gate_proj.weight",
                    Part::Up => "mlp.up_proj.weight",
                    Part::Down => "mlp.down_proj.weight",
                };
                format!("{prefix}layers.{layer}.{p}")
            }
        }
    }

    /// Names of the embedding table, final norm and output projection.
    pub fn global_names(&self) -> (String, String, String) {
        match &self.naming {
            Naming::Gguf => (
                "token_embd.weight".into(),
                "output_norm.weight".into(),
                "output.weight".into(),
            ),
            Naming::Hf { prefix } => (
                format!("{prefix}embed_tokens.weight"),
                format!("{prefix}norm.weight"),
                "lm_head.weight".into(),
            ),
        }
    }

    /// Whether the store holds `name`.
    pub fn contains(&self, name: &str) -> bool {
        self.store.contains(name)
    }

    /// The shape of a stored tensor.
    pub fn shape(&self, name: &str) -> Result<Vec<usize>> {
        Ok(self.store.tensor(name)?.shape.to_vec())
    }

    /// Number of stored tensors whose names start with `prefix` (companions included).
    pub fn count_prefix(&self, prefix: &str) -> usize {
        self.store.names().filter(|n| n.starts_with(prefix)).count()
    }

    fn view(&self, name: &str) -> Result<TensorView<'_>> {
        Ok(self.store.tensor(name)?)
    }

    /// A `[rows, cols]` matrix in its own block format, borrowed from the file on the CPU. FP8
    /// E4M3 weights need their `weight_scale_inv` companion: f32 (or bf16, widened) scales of
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
                let n = want[0] * want[1];
                let mut f = vec![0f32; n];
                let TensorFormat::Ggml(t) = c.format else {
                    return Err(LayerError::Checkpoint(format!(
                        "`{}`: scale format {:?} is not a float",
                        c.name, c.format
                    )));
                };
                pocket_quant::dequantize(QuantFormat::Ggml(t), c.data, &mut f)?;
                let bytes: Vec<u8> = f.iter().flat_map(|x| x.to_le_bytes()).collect();
                (
                    QuantFormat::Fp8E4M3Block128,
                    Some(HostBytes::from_vec(bytes)),
                )
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
        let bytes = HostBytes::new(owner, v.file_offset as usize, v.data.len())
            .filter(|b| b.as_slice().as_ptr() == v.data.as_ptr())
            .ok_or_else(|| LayerError::Checkpoint(format!("`{name}` lies outside its file")))?;
        Ok(self
            .dev
            .upload_weight(format, rows, cols, bytes, scales, None)?)
    }

    /// A small tensor (norm scale, conv taps, per-head vector) of `len` elements as host f32.
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

    /// The device.
    pub fn device(&self) -> &Device {
        &self.dev
    }
}
