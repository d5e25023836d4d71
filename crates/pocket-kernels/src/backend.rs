//! The op contract every backend implements.
//!
//! Ops write into caller-provided outputs and never allocate, so a decode step can be captured
//! as a CUDA graph. Activations are batch-first: `[tokens, features]`. Each op validates shapes
//! and devices and returns [`crate::KernelError`] on a mismatch; none panics.

use crate::rope::DeviceRope;
use crate::{AttentionMeta, AttentionParams, DType, HostBytes, Result, Tensor, Weight};
use pocket_quant::QuantFormat;

/// A compute backend (CPU, CUDA). Model code reaches it through [`crate::Device`].
pub trait Backend: Send + Sync {
    /// Human-readable name ("cpu", "cuda:0 NVIDIA H200").
    fn name(&self) -> String;

    // ---- memory -------------------------------------------------------------------------

    /// Allocates an uninitialized-or-zeroed tensor of `shape` (contents unspecified).
    fn alloc(&self, dtype: DType, shape: &[usize]) -> Result<Tensor>;
    /// Copies host f32 data into a new tensor on this device.
    fn upload_f32(&self, data: &[f32], shape: &[usize]) -> Result<Tensor>;
    /// Copies host u32 data into a new tensor on this device.
    fn upload_u32(&self, data: &[u32], shape: &[usize]) -> Result<Tensor>;
    /// Overwrites an existing tensor with host u32 data (sets its shape to `shape`).
    fn write_u32(&self, dst: &mut Tensor, data: &[u32], shape: &[usize]) -> Result<()>;
    /// Overwrites an existing tensor with host f32 data (sets its shape to `shape`).
    fn write_f32(&self, dst: &mut Tensor, data: &[f32], shape: &[usize]) -> Result<()>;
    /// Reads a tensor's elements (as shaped) back to the host as f32.
    fn read_f32(&self, src: &Tensor) -> Result<Vec<f32>>;
    /// Reads a u32 tensor back to the host.
    fn read_u32(&self, src: &Tensor) -> Result<Vec<u32>>;
    /// Places a quantized `[rows, cols]` matrix on this device (zero-copy on the CPU).
    fn upload_weight(
        &self,
        format: QuantFormat,
        rows: usize,
        cols: usize,
        data: HostBytes,
        scales: Option<HostBytes>,
        tensor_scale: Option<f32>,
    ) -> Result<Weight>;
    /// Waits for all queued work on this device.
    fn synchronize(&self) -> Result<()>;

    // ---- ops ----------------------------------------------------------------------------

    /// `out[i, :] = table[ids[i], :]`, dequantized. `ids` u32 `[n]`, `out` f32 `[n, cols]`.
    fn embedding(&self, table: &Weight, ids: &Tensor, out: &mut Tensor) -> Result<()>;

    /// `out = x · Wᵀ` for `x` f32 `[n, cols]`, `out` f32 `[n, rows]`, reading W's blocks directly.
    fn matmul(&self, x: &Tensor, w: &Weight, out: &mut Tensor) -> Result<()>;

    /// `x[i, :] += bias` for `x` f32 `[n, m]`, `bias` f32 `[m]`.
    fn add_bias(&self, x: &mut Tensor, bias: &Tensor) -> Result<()>;

    /// `out = x / rms(x) * weight` over rows of length `weight.len()`; `x` may hold several rows
    /// per token (per-head QK-norm uses `[n * heads, head_dim]`). `x` and `out` have one shape.
    fn rms_norm(&self, x: &Tensor, weight: &Tensor, eps: f32, out: &mut Tensor) -> Result<()>;

    /// `residual += delta; out = rms_norm(residual) * weight`, fused.
    fn add_rms_norm(
        &self,
        residual: &mut Tensor,
        delta: &Tensor,
        weight: &Tensor,
        eps: f32,
        out: &mut Tensor,
    ) -> Result<()>;

    /// `x += y` elementwise (same shape).
    fn add_assign(&self, x: &mut Tensor, y: &Tensor) -> Result<()>;

    /// Rotates the leading `rot_dim` dimensions of each head of `x` (`[n, heads, head_dim]`) by
    /// the angle of `positions[i]` (u32 `[n]`), in place.
    fn rope(&self, x: &mut Tensor, positions: &Tensor, rope: &DeviceRope) -> Result<()>;

    /// `out = silu(gate) * up`, elementwise, all `[n, ff]`.
    fn silu_mul(&self, gate: &Tensor, up: &Tensor, out: &mut Tensor) -> Result<()>;

    /// Writes each new token's `k`, `v` (`[n, kv_heads, head_dim]`) into the paged caches
    /// (`[num_blocks, block_size, kv_heads, head_dim]`, f32/f16/bf16) at `meta.slot_mapping`.
    fn kv_write(
        &self,
        k: &Tensor,
        v: &Tensor,
        k_cache: &mut Tensor,
        v_cache: &mut Tensor,
        meta: &AttentionMeta,
    ) -> Result<()>;

    /// Causal (optionally windowed) GQA attention of `q` (`[n, heads, head_dim]`) over the paged
    /// caches, described by `meta` (see [`crate::attention`]); writes `out` `[n, heads, head_dim]`.
    fn attention(
        &self,
        q: &Tensor,
        k_cache: &Tensor,
        v_cache: &Tensor,
        meta: &AttentionMeta,
        params: &AttentionParams,
        out: &mut Tensor,
    ) -> Result<()>;

    /// Index of the largest value of each row of `logits` (`[n, vocab]`) into `out` u32 `[n]`.
    fn argmax(&self, logits: &Tensor, out: &mut Tensor) -> Result<()>;

    /// Copies rows `src_rows[i]` of `src` (`[m, d]`) to row `i` of `out` (`[n, d]`); used to keep
    /// only the last token of each sequence before the output projection.
    fn gather_rows(&self, src: &Tensor, src_rows: &Tensor, out: &mut Tensor) -> Result<()>;
}
