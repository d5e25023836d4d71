//! The op contract every backend implements.
//!
//! Ops write into caller-provided outputs and never allocate, so a decode step can be captured
//! as a CUDA graph. Activations are batch-first: `[tokens, features]`. Each op validates shapes
//! and devices and returns [`crate::KernelError`] on a mismatch; none panics.

use crate::device::GraphExec;
use crate::qkv_rope::{QkNorm, QkvBias, QkvRopeParams, QkvSource};
use crate::recurrent::{DeltaRuleParams, RecurrentMeta};
use crate::rope::DeviceRope;
use crate::{
    AttentionMeta, AttentionParams, DType, HostBytes, KernelError, Result, Tensor, Weight,
};
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

    /// Memory of this device now, with this process's high-water mark where the backend tracks
    /// one; `None` where the backend cannot tell.
    fn memory_info(&self) -> Option<MemoryInfo> {
        None
    }

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

    // ---- graphs and device sampling (defaults: unsupported, so other backends compile) ------

    /// Whether this backend can record graphs ([`crate::Device::capture`]).
    fn supports_graphs(&self) -> bool {
        false
    }

    /// Starts recording this thread's ops on the device instead of running them.
    fn begin_graph_capture(&self) -> Result<()> {
        Err(unsupported(self, "begin_graph_capture"))
    }

    /// Stops recording and returns the instantiated graph (also ends a capture whose ops failed).
    fn end_graph_capture(&self) -> Result<Box<dyn GraphExec>> {
        Err(unsupported(self, "end_graph_capture"))
    }

    /// Greedy pick with its log-probability: for each row of `logits` (`[n, vocab]`) the index of
    /// the largest value (first on ties; NaN never wins) into `ids` u32 `[n]` and
    /// `logits[id] - logsumexp(row)` into `logprobs` f32 `[n]`.
    fn argmax_logprob(
        &self,
        logits: &Tensor,
        ids: &mut Tensor,
        logprobs: &mut Tensor,
    ) -> Result<()> {
        let _ = (logits, ids, logprobs);
        Err(unsupported(self, "argmax_logprob"))
    }

    /// Draws one token per row of `logits` (`[n, vocab]`) on the device: `params` f32 `[n, 4]`
    /// holds each row's temperature, top-k (as a float, 0 = off), top-p and min-p; `seeds` u32
    /// `[n, 4]` each row's counter-based RNG key (seed low, seed high) and counter (low, high).
    /// Writes the id into `ids` u32 `[n]` and its log-probability under the unmodified logits
    /// into `logprobs` f32 `[n]`. A row with temperature 0 is greedy.
    fn sample_rows(
        &self,
        logits: &Tensor,
        params: &Tensor,
        seeds: &Tensor,
        ids: &mut Tensor,
        logprobs: &mut Tensor,
    ) -> Result<()> {
        let _ = (logits, params, seeds, ids, logprobs);
        Err(unsupported(self, "sample_rows"))
    }

    // ---- recurrent (Gated DeltaNet) ops --------------------------------------------------
    // Default bodies report `Unsupported`, so a backend compiles before it implements them.
    // Shapes and the varlen/state-slot convention are described in [`crate::recurrent`].

    /// Depthwise causal conv1d of each sequence's rows of `x` (`[n, C]`) with `weight`
    /// (`[C, K]` f32), continuing from the sequence's window in `conv_state`
    /// (`[slots, K - 1, C]`), followed by SiLU; writes `out` (`[n, C]`) and the new window.
    fn causal_conv1d_silu(
        &self,
        x: &Tensor,
        weight: &Tensor,
        conv_state: &mut Tensor,
        meta: &RecurrentMeta,
        out: &mut Tensor,
    ) -> Result<()> {
        let _ = (x, weight, conv_state, meta, out);
        Err(unsupported(self, "causal_conv1d_silu"))
    }

    /// Delta-rule gates: `g = a_neg[h] * softplus(alpha + dt_bias[h])` (log-space decay) and
    /// `beta = sigmoid(b)`, for `alpha`, `b`, `g`, `beta` `[n, H]` and `a_neg`, `dt_bias` `[H]`.
    fn delta_gates(
        &self,
        alpha: &Tensor,
        b: &Tensor,
        a_neg: &Tensor,
        dt_bias: &Tensor,
        g: &mut Tensor,
        beta: &mut Tensor,
    ) -> Result<()> {
        let _ = (alpha, b, a_neg, dt_bias, g, beta);
        Err(unsupported(self, "delta_gates"))
    }

    /// The gated delta rule over whole sequences in chunks (prefill): `qkv` `[n, qkv_width]`
    /// (`[q | k | v]`, q and k L2-normalised inside), `g`, `beta` `[n, v_heads]`, `state`
    /// `[slots, v_heads, k_dim, v_dim]` read and written per sequence; writes `out`
    /// `[n, v_heads * v_dim]`.
    #[allow(clippy::too_many_arguments)]
    fn gated_delta_rule_chunked(
        &self,
        qkv: &Tensor,
        g: &Tensor,
        beta: &Tensor,
        state: &mut Tensor,
        meta: &RecurrentMeta,
        params: &DeltaRuleParams,
        out: &mut Tensor,
    ) -> Result<()> {
        let _ = (qkv, g, beta, state, meta, params, out);
        Err(unsupported(self, "gated_delta_rule_chunked"))
    }

    /// The same contract as [`Backend::gated_delta_rule_chunked`], token by token (decode).
    #[allow(clippy::too_many_arguments)]
    fn gated_delta_rule_recurrent(
        &self,
        qkv: &Tensor,
        g: &Tensor,
        beta: &Tensor,
        state: &mut Tensor,
        meta: &RecurrentMeta,
        params: &DeltaRuleParams,
        out: &mut Tensor,
    ) -> Result<()> {
        let _ = (qkv, g, beta, state, meta, params, out);
        Err(unsupported(self, "gated_delta_rule_recurrent"))
    }

    /// `out = x / rms(x) * weight * silu(gate)` over rows of `weight.len()`; `x`, `gate` and
    /// `out` have one element count.
    fn gated_rms_norm(
        &self,
        x: &Tensor,
        gate: &Tensor,
        weight: &Tensor,
        eps: f32,
        out: &mut Tensor,
    ) -> Result<()> {
        let _ = (x, gate, weight, eps, out);
        Err(unsupported(self, "gated_rms_norm"))
    }

    /// Splits each row of `x` (`[rows, 2d]`) into its halves: `first`, `second` `[rows, d]`
    /// (Qwen3.5's per-head `[query | gate]` projection rows).
    fn split_halves(&self, x: &Tensor, first: &mut Tensor, second: &mut Tensor) -> Result<()> {
        let _ = (x, first, second);
        Err(unsupported(self, "split_halves"))
    }

    /// `x *= sigmoid(gate)`, elementwise (same element count).
    fn sigmoid_mul(&self, x: &mut Tensor, gate: &Tensor) -> Result<()> {
        let _ = (x, gate);
        Err(unsupported(self, "sigmoid_mul"))
    }

    /// The decode step of a Gated DeltaNet layer between its in- and out-projections (every
    /// sequence has at most one row): conv + SiLU with the window update, gates, the recurrent
    /// delta rule and the gated RMSNorm, reading the projections' outputs in place; writes `out`
    /// (`[n, v_heads * v_dim]`, the out projection's input). The default is the composition of
    /// the ops above ([`crate::recurrent::deltanet_decode_composed`], which allocates); CUDA runs
    /// one fused kernel.
    fn gated_deltanet_decode(
        &self,
        inputs: &crate::recurrent::DeltaNetDecodeInputs<'_>,
        conv_state: &mut Tensor,
        state: &mut Tensor,
        meta: &RecurrentMeta,
        out: &mut Tensor,
    ) -> Result<()> {
        crate::recurrent::deltanet_decode_composed(self, inputs, conv_state, state, meta, out)
    }

    /// Whether [`Backend::gated_deltanet_decode`] is a fused op for these params and conv taps
    /// (a layer then takes it for decode batches; default false: keep the unfused ops).
    fn fused_deltanet_decode(&self, params: &DeltaRuleParams, kernel: usize) -> bool {
        let _ = (params, kernel);
        false
    }

    /// Whether [`Backend::gated_deltanet_decode`] computes the in_ba projection itself for
    /// these (bias-free) `b` and `a` weights ([`crate::recurrent::BaInputs::Weights`]; a layer
    /// then skips that GEMV). Default false: the layer projects and passes the columns.
    fn fused_deltanet_decode_ba(
        &self,
        params: &DeltaRuleParams,
        kernel: usize,
        b: &Weight,
        a: &Weight,
    ) -> bool {
        let _ = (params, kernel, b, a);
        false
    }

    // ---- fused projections ----------------------------------------------------------------

    /// Splits each row of `x` (`[n, w_0 + w_1 + ...]`) into consecutive column ranges, one per
    /// output (`outs[i]` `[n, w_i]`): the `[q | k | v]` output of a stacked QKV weight. The CUDA
    /// backend takes at most 3 outputs.
    fn split_columns(&self, x: &Tensor, outs: &mut [&mut Tensor]) -> Result<()> {
        let _ = (x, outs);
        Err(unsupported(self, "split_columns"))
    }

    /// SwiGLU over the halves of each row: `out[r, :] = silu(x[r, :d]) * x[r, d..]` for `x`
    /// `[n, 2d]` (the `[gate | up]` output of a stacked weight), `out` `[n, d]`.
    fn silu_mul_halves(&self, x: &Tensor, out: &mut Tensor) -> Result<()> {
        let _ = (x, out);
        Err(unsupported(self, "silu_mul_halves"))
    }

    /// The stacked gate|up projection and SwiGLU: `gate_up = x · Wᵀ` (`[n, 2d]`, a workspace
    /// the op may leave holding the projection) then `out = silu_mul_halves(gate_up)`
    /// (`[n, d]`). The default is that composition; CUDA folds the SwiGLU for one row of FP8
    /// weights into `gemv_fp8_silu_*` (`POCKET_GATE_UP_FUSED=0`: the composition).
    fn matmul_silu_halves(
        &self,
        x: &Tensor,
        w: &Weight,
        gate_up: &mut Tensor,
        out: &mut Tensor,
    ) -> Result<()> {
        self.matmul(x, w, gate_up)?;
        self.silu_mul_halves(gate_up, out)
    }

    /// A projection followed by the residual add and RMSNorm: `delta = x · Wᵀ` (a workspace
    /// `[n, rows]`), then [`Backend::add_rms_norm`]`(residual, delta, norm_w, eps, normed)`.
    /// The default is that composition; CUDA folds the norm into one-row FP8 decode GEMVs
    /// (cuda/rms_fold.rs, `POCKET_RMS_FOLD=0`: the composition).
    #[allow(clippy::too_many_arguments)]
    fn matmul_add_rms_norm(
        &self,
        x: &Tensor,
        w: &Weight,
        delta: &mut Tensor,
        residual: &mut Tensor,
        norm_w: &Tensor,
        eps: f32,
        normed: &mut Tensor,
    ) -> Result<()> {
        self.matmul(x, w, delta)?;
        self.add_rms_norm(residual, delta, norm_w, eps, normed)
    }

    /// The attention inputs in one pass: reads each token's Q, K and V from `src` (a stacked
    /// `[q | k | v]` projection row or three tensors), adds `bias`, rotates Q and K by
    /// `positions` (u32 `[n]`) with `rope` as [`Backend::rope`] does, writes the rotated queries
    /// to `q_out` (`[n, heads, head_dim]`, the attention input) and K and V at
    /// `meta.slot_mapping` into the paged caches as [`Backend::kv_write`] does. Equals
    /// `split_columns` + `add_bias` + `rope` x2 + `kv_write`, element for element (CUDA: one
    /// launch, bit for bit the unfused kernels).
    #[allow(clippy::too_many_arguments)]
    fn qkv_rope_kv_write(
        &self,
        src: QkvSource<'_>,
        bias: QkvBias<'_>,
        params: &QkvRopeParams,
        positions: &Tensor,
        rope: &DeviceRope,
        q_out: &mut Tensor,
        k_cache: &mut Tensor,
        v_cache: &mut Tensor,
        meta: &AttentionMeta,
    ) -> Result<()> {
        // The norm op without norms or a gate output is this op (backends implement that one).
        self.qkv_norm_rope_kv_write(
            src,
            bias,
            params,
            QkNorm::default(),
            positions,
            rope,
            q_out,
            None,
            k_cache,
            v_cache,
            meta,
        )
    }

    /// [`Backend::qkv_rope_kv_write`] for Qwen3 / Qwen3.5 attention: after the bias, each head of
    /// q and k is RMS-normed by `norm` (as [`Backend::rms_norm`] over `[n * heads, head_dim]`),
    /// then rotated; with `gate_out` (`[n, heads * head_dim]`, needs `q_head_stride == 2 *
    /// head_dim`) the gate half of each `[query | gate]` head (+ its bias) is copied there, for
    /// [`Backend::attention_gated`]. Equals split + bias + `split_halves` + `rms_norm` x2 + `rope`
    /// x2 + `kv_write` (CUDA: one launch). Backends that have the one-pass input implement this
    /// op (the plain [`Backend::qkv_rope_kv_write`] forwards here); the default is unsupported.
    #[allow(clippy::too_many_arguments)]
    fn qkv_norm_rope_kv_write(
        &self,
        src: QkvSource<'_>,
        bias: QkvBias<'_>,
        params: &QkvRopeParams,
        norm: QkNorm<'_>,
        positions: &Tensor,
        rope: &DeviceRope,
        q_out: &mut Tensor,
        gate_out: Option<&mut Tensor>,
        k_cache: &mut Tensor,
        v_cache: &mut Tensor,
        meta: &AttentionMeta,
    ) -> Result<()> {
        let _ = (
            src, bias, params, norm, positions, rope, q_out, gate_out, k_cache, v_cache, meta,
        );
        Err(unsupported(self, "qkv_norm_rope_kv_write"))
    }

    /// Gated attention output (Qwen3.5): `out = attention(q) * sigmoid(gate)`, `gate` as many
    /// elements as `out`. The default runs [`Backend::attention`] then [`Backend::sigmoid_mul`];
    /// CUDA applies the gate in the decode kernels' epilogue.
    #[allow(clippy::too_many_arguments)]
    fn attention_gated(
        &self,
        q: &Tensor,
        gate: &Tensor,
        k_cache: &Tensor,
        v_cache: &Tensor,
        meta: &AttentionMeta,
        params: &AttentionParams,
        out: &mut Tensor,
    ) -> Result<()> {
        self.attention(q, k_cache, v_cache, meta, params, out)?;
        self.sigmoid_mul(out, gate)
    }

    /// Whether attention layers with QK-norm or an output gate should take
    /// [`Backend::qkv_norm_rope_kv_write`] and [`Backend::attention_gated`] (where they take the
    /// one-pass attention input at all); CUDA: `POCKET_QKV_NORM_FUSED=0` says no, for A/B runs.
    fn fused_qkv_norm(&self) -> bool {
        true
    }

    // ---- prefill arithmetic mode ------------------------------------------------------------

    /// Selects f32 arithmetic for the prefill GEMM (`true`: same rounding class as the CPU and
    /// transformers in f32) or the backend's fast default (`false`; CUDA: f16 operands on the
    /// tensor cores). Reference-parity tests turn it on; on CUDA `POCKET_PREFILL=exact` sets it
    /// when the backend opens. The CPU ignores it: its prefill rounds activations exactly as its
    /// decode does (int8, like llama.cpp), which is what CUDA's GGML paths are compared against;
    /// for f32 activations on the CPU see [`Backend::set_exact_arithmetic`].
    /// On CUDA it changes FP8 weights' prefill; float weights (F32/F16/BF16) always take the f32
    /// GEMV, and the GGML formats' prefill already rounds activations as the CPU's int8 dot does.
    fn set_exact_prefill(&self, exact: bool) {
        let _ = exact;
    }

    /// Whether the prefill GEMM runs in f32 (see [`Backend::set_exact_prefill`]); default true,
    /// for backends with no faster mode.
    fn exact_prefill(&self) -> bool {
        true
    }

    /// Selects the backend's most exact arithmetic in every matmul, prefill and decode alike
    /// (`false`: the fast default). Per backend: the CPU multiplies f32 activations by weights
    /// dequantized row by row (no int8 activation quantization; the arithmetic of the f32 numpy
    /// reference), several times slower than its int8 dot; CUDA (the default here) means
    /// [`Backend::set_exact_prefill`]: no f16/FP8 prefill shortcuts, GGML formats keep their int8
    /// activations. The real-checkpoint tests use it to hold the engine to f32 references.
    fn set_exact_arithmetic(&self, exact: bool) {
        self.set_exact_prefill(exact);
    }

    /// Whether [`Backend::set_exact_arithmetic`] is on (default: [`Backend::exact_prefill`]).
    fn exact_arithmetic(&self) -> bool {
        self.exact_prefill()
    }
}

/// A device's memory as its backend reports it (bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MemoryInfo {
    /// In use by every process on the device (total minus free; on the CPU: minus available).
    pub used_bytes: u64,
    /// The device's capacity.
    pub total_bytes: u64,
    /// Held by this process now (CUDA: the allocator's live and cached blocks; CPU: resident set),
    /// when known.
    pub process_bytes: Option<u64>,
    /// The highest `process_bytes` since the device was opened (CPU: since the process started),
    /// when known.
    pub process_peak_bytes: Option<u64>,
}

impl MemoryInfo {
    /// Bytes still free on the device.
    pub fn free_bytes(&self) -> u64 {
        self.total_bytes.saturating_sub(self.used_bytes)
    }
}

/// The error a backend returns for a recurrent op it does not implement yet.
fn unsupported<B: Backend + ?Sized>(b: &B, op: &'static str) -> KernelError {
    KernelError::Unsupported {
        op,
        device: b.name(),
        what: "this op".into(),
    }
}
