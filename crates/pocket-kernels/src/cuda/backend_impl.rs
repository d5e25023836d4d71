//! The [`Backend`] implementation for [`CudaBackend`]: memory ops, weight upload, and delegation of
//! each op to the kernel module that launches it.

use cudarc::driver::result as dr;
use pocket_quant::QuantFormat;

use super::memory::cuda_err;
use super::transfer::as_bytes;
use super::{
    attn, matmul, matmul_fp8, ops, recurrent, sample, split, CudaBackend, CudaWeight, DevFormat,
    WeightLayout,
};
use crate::error::shape_err;
use crate::rope::DeviceRope;
use crate::tensor::Storage;
use crate::{
    AttentionMeta, AttentionParams, Backend, DType, HostBytes, KernelError, Result, Tensor, Weight,
    WeightStorage,
};

impl Backend for CudaBackend {
    fn name(&self) -> String {
        self.name.clone()
    }

    fn memory_info(&self) -> Option<crate::backend::MemoryInfo> {
        // cuMemGetInfo reports on the context current to this thread.
        self.ctx.bind_to_thread().ok()?;
        let (free, total) = dr::mem_get_info().ok()?;
        Some(crate::backend::MemoryInfo {
            used_bytes: total.saturating_sub(free) as u64,
            total_bytes: total as u64,
            process_bytes: Some(self.pool.held_bytes() as u64),
            process_peak_bytes: Some(self.pool.peak_held_bytes() as u64),
        })
    }

    fn alloc(&self, dtype: DType, shape: &[usize]) -> Result<Tensor> {
        self.invalidate_q8();
        let n = shape
            .iter()
            .try_fold(1usize, |a, &d| a.checked_mul(d))
            .and_then(|n| n.checked_mul(dtype.size()))
            .ok_or_else(|| shape_err("alloc", format!("shape {shape:?} overflows")))?;
        Ok(Tensor {
            dtype,
            shape: shape.to_vec(),
            storage: Storage::Cuda(self.pool.alloc(n)?),
        })
    }

    fn upload_f32(&self, data: &[f32], shape: &[usize]) -> Result<Tensor> {
        self.invalidate_q8();
        if data.len() != shape.iter().product::<usize>() {
            return Err(shape_err(
                "upload_f32",
                format!("{} values for {shape:?}", data.len()),
            ));
        }
        Ok(Tensor {
            dtype: DType::F32,
            shape: shape.to_vec(),
            storage: Storage::Cuda(self.upload_bytes("upload_f32", as_bytes(data))?),
        })
    }

    fn upload_u32(&self, data: &[u32], shape: &[usize]) -> Result<Tensor> {
        self.invalidate_q8();
        if data.len() != shape.iter().product::<usize>() {
            return Err(shape_err(
                "upload_u32",
                format!("{} values for {shape:?}", data.len()),
            ));
        }
        let mut s = self.upload_bytes("upload_u32", as_bytes(data))?;
        s.shadow = Some(data.to_vec());
        Ok(Tensor {
            dtype: DType::U32,
            shape: shape.to_vec(),
            storage: Storage::Cuda(s),
        })
    }

    fn write_u32(&self, dst: &mut Tensor, data: &[u32], shape: &[usize]) -> Result<()> {
        self.invalidate_q8();
        self.write_host("write_u32", dst, as_bytes(data), DType::U32, shape)?;
        if let Storage::Cuda(c) = &mut dst.storage {
            c.shadow = Some(data.to_vec());
        }
        Ok(())
    }

    fn write_f32(&self, dst: &mut Tensor, data: &[f32], shape: &[usize]) -> Result<()> {
        self.invalidate_q8();
        self.write_host("write_f32", dst, as_bytes(data), DType::F32, shape)
    }

    fn read_f32(&self, src: &Tensor) -> Result<Vec<f32>> {
        const OP: &str = "read_f32";
        let ptr = self.ptr(OP, "src", src)?;
        let n = src.numel();
        let b = self.read_bytes(OP, ptr, n * src.dtype.size())?;
        Ok(match src.dtype {
            DType::F32 => b
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect(),
            DType::F16 => b
                .chunks_exact(2)
                .map(|c| half::f16::from_le_bytes([c[0], c[1]]).to_f32())
                .collect(),
            DType::BF16 => b
                .chunks_exact(2)
                .map(|c| half::bf16::from_le_bytes([c[0], c[1]]).to_f32())
                .collect(),
            DType::U32 => return Err(shape_err(OP, "tensor is u32")),
        })
    }

    fn read_u32(&self, src: &Tensor) -> Result<Vec<u32>> {
        const OP: &str = "read_u32";
        let ptr = self.ptr_of(OP, "src", src, DType::U32)?;
        let b = self.read_bytes(OP, ptr, src.numel() * 4)?;
        Ok(b.chunks_exact(4)
            .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect())
    }

    fn upload_weight(
        &self,
        format: QuantFormat,
        rows: usize,
        cols: usize,
        data: HostBytes,
        scales: Option<HostBytes>,
        tensor_scale: Option<f32>,
    ) -> Result<Weight> {
        self.invalidate_q8();
        const OP: &str = "upload_weight";
        let row_bytes = format.row_bytes(cols)?;
        let want = row_bytes
            .checked_mul(rows)
            .ok_or_else(|| shape_err(OP, format!("[{rows}, {cols}] overflows")))?;
        let bytes = data.as_slice();
        if bytes.len() != want {
            return Err(shape_err(
                OP,
                format!(
                    "{format} [{rows}, {cols}] needs {want} bytes, got {}",
                    bytes.len()
                ),
            ));
        }
        if let Some(kind) = matmul_fp8::Fp8Kind::of(format) {
            let s = scales.as_ref().map(|s| s.as_slice());
            return matmul_fp8::upload(self, format, kind, rows, cols, bytes, s, tensor_scale);
        }
        if scales.is_some() || format.scale_bytes(rows, cols) != 0 {
            return Err(KernelError::Unsupported {
                op: OP,
                device: self.name.clone(),
                what: format!("{format} (companion scales)"),
            });
        }
        let dev = DevFormat::of(format).ok_or_else(|| KernelError::Unsupported {
            op: OP,
            device: self.name.clone(),
            what: format.to_string(),
        })?;
        if !cols.is_multiple_of(dev.block_elems()) {
            return Err(KernelError::Unsupported {
                op: OP,
                device: self.name.clone(),
                what: format!(
                    "{format} rows of {cols} (the GPU reads rows in chunks of {})",
                    dev.block_elems()
                ),
            });
        }
        let (storage, layout) = if let Some((packed, layout)) =
            super::repack::repack(dev, format.block_bytes(), bytes)
        {
            (self.upload_bytes(OP, &packed)?, layout)
        } else {
            (self.upload_bytes(OP, bytes)?, WeightLayout::Ggml)
        };
        // The host bytes may be a temporary: finish the copy before returning.
        self.stream.synchronize().map_err(|e| cuda_err(OP, e))?;
        Ok(Weight {
            format,
            rows,
            cols,
            tensor_scale,
            storage: WeightStorage::Cuda(CudaWeight { storage, layout }),
        })
    }

    fn synchronize(&self) -> Result<()> {
        self.ctx
            .bind_to_thread()
            .map_err(|e| cuda_err("synchronize", e))?;
        // A pending folded norm (cuda/rms_fold.rs) runs first, so everything queued is done.
        super::rms_fold::flush(self)?;
        self.stream
            .synchronize()
            .map_err(|e| cuda_err("synchronize", e))
    }

    fn embedding(&self, table: &Weight, ids: &Tensor, out: &mut Tensor) -> Result<()> {
        self.invalidate_q8();
        matmul::embedding(self, table, ids, out)
    }

    fn matmul(&self, x: &Tensor, w: &Weight, out: &mut Tensor) -> Result<()> {
        matmul::matmul(self, x, w, out)
    }

    fn add_bias(&self, x: &mut Tensor, bias: &Tensor) -> Result<()> {
        self.invalidate_q8();
        ops::add_bias(self, x, bias)
    }

    fn rms_norm(&self, x: &Tensor, weight: &Tensor, eps: f32, out: &mut Tensor) -> Result<()> {
        self.invalidate_q8();
        ops::rms_norm(self, x, weight, eps, out)
    }

    fn add_rms_norm(
        &self,
        residual: &mut Tensor,
        delta: &Tensor,
        weight: &Tensor,
        eps: f32,
        out: &mut Tensor,
    ) -> Result<()> {
        self.invalidate_q8();
        ops::add_rms_norm(self, residual, delta, weight, eps, out)
    }

    fn add_assign(&self, x: &mut Tensor, y: &Tensor) -> Result<()> {
        self.invalidate_q8();
        ops::add_assign(self, x, y)
    }

    fn rope(&self, x: &mut Tensor, positions: &Tensor, rope: &DeviceRope) -> Result<()> {
        self.invalidate_q8();
        ops::rope(self, x, positions, rope)
    }

    fn silu_mul(&self, gate: &Tensor, up: &Tensor, out: &mut Tensor) -> Result<()> {
        self.invalidate_q8();
        ops::silu_mul(self, gate, up, out)
    }

    fn kv_write(
        &self,
        k: &Tensor,
        v: &Tensor,
        k_cache: &mut Tensor,
        v_cache: &mut Tensor,
        meta: &AttentionMeta,
    ) -> Result<()> {
        self.invalidate_q8();
        attn::kv_write(self, k, v, k_cache, v_cache, meta)
    }

    fn attention(
        &self,
        q: &Tensor,
        k_cache: &Tensor,
        v_cache: &Tensor,
        meta: &AttentionMeta,
        params: &AttentionParams,
        out: &mut Tensor,
    ) -> Result<()> {
        self.invalidate_q8();
        attn::attention(self, q, k_cache, v_cache, meta, params, out)
    }

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
        self.invalidate_q8();
        attn::attention_gated(self, q, gate, k_cache, v_cache, meta, params, out)
    }

    fn argmax(&self, logits: &Tensor, out: &mut Tensor) -> Result<()> {
        self.invalidate_q8();
        ops::argmax(self, logits, out)
    }

    fn gather_rows(&self, src: &Tensor, src_rows: &Tensor, out: &mut Tensor) -> Result<()> {
        self.invalidate_q8();
        ops::gather_rows(self, src, src_rows, out)
    }

    fn supports_graphs(&self) -> bool {
        true
    }

    fn set_exact_prefill(&self, exact: bool) {
        self.exact_prefill
            .store(exact, std::sync::atomic::Ordering::Relaxed);
    }

    fn exact_prefill(&self) -> bool {
        self.exact_prefill
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    fn begin_graph_capture(&self) -> Result<()> {
        CudaBackend::begin_capture(self)
    }

    fn end_graph_capture(&self) -> Result<Box<dyn crate::device::GraphExec>> {
        Ok(Box::new(CudaBackend::end_capture(self)?))
    }

    fn argmax_logprob(
        &self,
        logits: &Tensor,
        ids: &mut Tensor,
        logprobs: &mut Tensor,
    ) -> Result<()> {
        self.invalidate_q8();
        sample::sample_rows(self, logits, None, ids, logprobs)
    }

    fn sample_rows(
        &self,
        logits: &Tensor,
        params: &Tensor,
        seeds: &Tensor,
        ids: &mut Tensor,
        logprobs: &mut Tensor,
    ) -> Result<()> {
        self.invalidate_q8();
        sample::sample_rows(self, logits, Some((params, seeds)), ids, logprobs)
    }

    fn causal_conv1d_silu(
        &self,
        x: &Tensor,
        weight: &Tensor,
        conv_state: &mut Tensor,
        meta: &crate::RecurrentMeta,
        out: &mut Tensor,
    ) -> Result<()> {
        self.invalidate_q8();
        recurrent::causal_conv1d_silu(self, x, weight, conv_state, meta, out)
    }

    fn delta_gates(
        &self,
        alpha: &Tensor,
        b: &Tensor,
        a_neg: &Tensor,
        dt_bias: &Tensor,
        g: &mut Tensor,
        beta: &mut Tensor,
    ) -> Result<()> {
        self.invalidate_q8();
        recurrent::delta_gates(self, alpha, b, a_neg, dt_bias, g, beta)
    }

    fn gated_delta_rule_chunked(
        &self,
        qkv: &Tensor,
        g: &Tensor,
        beta: &Tensor,
        state: &mut Tensor,
        meta: &crate::RecurrentMeta,
        params: &crate::DeltaRuleParams,
        out: &mut Tensor,
    ) -> Result<()> {
        self.invalidate_q8();
        let op = "gated_delta_rule_chunked";
        recurrent::gated_delta_rule(self, op, qkv, g, beta, state, meta, params, out)
    }

    fn gated_delta_rule_recurrent(
        &self,
        qkv: &Tensor,
        g: &Tensor,
        beta: &Tensor,
        state: &mut Tensor,
        meta: &crate::RecurrentMeta,
        params: &crate::DeltaRuleParams,
        out: &mut Tensor,
    ) -> Result<()> {
        self.invalidate_q8();
        let op = "gated_delta_rule_recurrent";
        recurrent::gated_delta_rule(self, op, qkv, g, beta, state, meta, params, out)
    }

    fn gated_rms_norm(
        &self,
        x: &Tensor,
        gate: &Tensor,
        weight: &Tensor,
        eps: f32,
        out: &mut Tensor,
    ) -> Result<()> {
        self.invalidate_q8();
        recurrent::gated_rms_norm(self, x, gate, weight, eps, out)
    }

    fn split_halves(&self, x: &Tensor, first: &mut Tensor, second: &mut Tensor) -> Result<()> {
        self.invalidate_q8();
        recurrent::split_halves(self, x, first, second)
    }

    fn sigmoid_mul(&self, x: &mut Tensor, gate: &Tensor) -> Result<()> {
        self.invalidate_q8();
        recurrent::sigmoid_mul(self, x, gate)
    }

    fn gated_deltanet_decode(
        &self,
        inputs: &crate::recurrent::DeltaNetDecodeInputs<'_>,
        conv_state: &mut Tensor,
        state: &mut Tensor,
        meta: &crate::RecurrentMeta,
        out: &mut Tensor,
    ) -> Result<()> {
        self.invalidate_q8();
        recurrent::gated_deltanet_decode(self, inputs, conv_state, state, meta, out)
    }

    fn fused_deltanet_decode(&self, params: &crate::DeltaRuleParams, kernel: usize) -> bool {
        recurrent::fused_supported(params, kernel)
    }

    fn fused_deltanet_decode_ba(
        &self,
        params: &crate::DeltaRuleParams,
        kernel: usize,
        b: &crate::Weight,
        a: &crate::Weight,
    ) -> bool {
        recurrent::fused_ba_supported(self, params, kernel, b, a)
    }

    fn split_columns(&self, x: &Tensor, outs: &mut [&mut Tensor]) -> Result<()> {
        self.invalidate_q8();
        split::split_columns(self, x, outs)
    }

    fn silu_mul_halves(&self, x: &Tensor, out: &mut Tensor) -> Result<()> {
        self.invalidate_q8();
        split::silu_mul_halves(self, x, out)
    }

    fn matmul_silu_halves(
        &self,
        x: &Tensor,
        w: &Weight,
        gate_up: &mut Tensor,
        out: &mut Tensor,
    ) -> Result<()> {
        // One row of FP8 weights: gemv_fp8_silu, one launch (`POCKET_GATE_UP_FUSED=0`: off).
        if super::gate_up_fp8::gate_up_fused_applies(x, w) {
            super::gate_up_fp8::gate_up_silu(self, x, w, out, None)?;
        } else {
            self.matmul(x, w, gate_up)?;
            self.silu_mul_halves(gate_up, out)?;
        }
        Ok(())
    }

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
        // One row of FP8 weights: the norm folded into this GEMV and the next (cuda/rms_fold.rs).
        if !super::rms_fold::produce(self, x, w, delta, residual, norm_w, eps, normed)? {
            self.matmul(x, w, delta)?;
            self.add_rms_norm(residual, delta, norm_w, eps, normed)?;
        }
        Ok(())
    }

    fn qkv_norm_rope_kv_write(
        &self,
        src: crate::QkvSource<'_>,
        bias: crate::QkvBias<'_>,
        params: &crate::QkvRopeParams,
        norm: crate::qkv_rope::QkNorm<'_>,
        positions: &Tensor,
        rope: &DeviceRope,
        q_out: &mut Tensor,
        gate_out: Option<&mut Tensor>,
        k_cache: &mut Tensor,
        v_cache: &mut Tensor,
        meta: &AttentionMeta,
    ) -> Result<()> {
        self.invalidate_q8();
        super::qkv_rope::qkv_norm_rope_kv_write(
            self, src, bias, params, norm, positions, rope, q_out, gate_out, k_cache, v_cache, meta,
        )
    }

    fn fused_qkv_norm(&self) -> bool {
        static ON: super::switch::EnvSwitch =
            super::switch::EnvSwitch::on_unless_zero("POCKET_QKV_NORM_FUSED");
        ON.on()
    }
}
