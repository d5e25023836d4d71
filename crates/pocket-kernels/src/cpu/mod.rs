//! The CPU backend: ops over host tensors, matmul through pocket-quant, parallel over rayon.

mod attention;
mod delta_rule;
mod deltanet;
mod elementwise;
mod host;
mod matmul;
mod qkv_rope;
mod split;

use pocket_quant::QuantFormat;

use crate::error::shape_err;
use crate::recurrent::{DeltaRuleParams, RecurrentMeta};
use crate::rope::DeviceRope;
use crate::tensor::{HostData, Storage};
use crate::{
    AttentionMeta, AttentionParams, Backend, DType, HostBytes, Result, Tensor, Weight,
    WeightStorage,
};

/// The CPU backend.
pub struct CpuBackend {
    /// f32 activations in every matmul ([`Backend::set_exact_arithmetic`]); off by default.
    exact: std::sync::atomic::AtomicBool,
}

impl CpuBackend {
    /// A CPU backend over the global rayon pool.
    pub fn new() -> Self {
        CpuBackend {
            exact: std::sync::atomic::AtomicBool::new(false),
        }
    }
}

impl Default for CpuBackend {
    fn default() -> Self {
        Self::new()
    }
}

/// Checks that `data` fits a tensor's capacity and returns the element count of `shape`.
fn fits(op: &'static str, dst: &Tensor, len: usize, shape: &[usize]) -> Result<()> {
    let n: usize = shape.iter().product();
    if n != len {
        return Err(shape_err(op, format!("{len} values for shape {shape:?}")));
    }
    if n > dst.capacity() {
        return Err(shape_err(
            op,
            format!(
                "shape {shape:?} exceeds the tensor's capacity {}",
                dst.capacity()
            ),
        ));
    }
    Ok(())
}

/// Reads `key:  N kB` lines of a `/proc` file as bytes.
fn proc_kib(path: &str, key: &str) -> Option<u64> {
    let text = std::fs::read_to_string(path).ok()?;
    let line = text.lines().find(|l| l.starts_with(key))?;
    let kib: u64 = line[key.len()..]
        .trim_start_matches(':')
        .split_whitespace()
        .next()?
        .parse()
        .ok()?;
    Some(kib * 1024)
}

/// Host memory from `/proc` (Linux): total, available, and this process's resident set and its
/// high-water mark.
fn host_memory() -> Option<crate::backend::MemoryInfo> {
    let total = proc_kib("/proc/meminfo", "MemTotal")?;
    let available = proc_kib("/proc/meminfo", "MemAvailable")?;
    Some(crate::backend::MemoryInfo {
        used_bytes: total.saturating_sub(available),
        total_bytes: total,
        process_bytes: proc_kib("/proc/self/status", "VmRSS"),
        process_peak_bytes: proc_kib("/proc/self/status", "VmHWM"),
    })
}

impl Backend for CpuBackend {
    fn name(&self) -> String {
        "cpu".into()
    }

    fn set_exact_arithmetic(&self, exact: bool) {
        self.exact
            .store(exact, std::sync::atomic::Ordering::Relaxed);
    }

    fn exact_arithmetic(&self) -> bool {
        self.exact.load(std::sync::atomic::Ordering::Relaxed)
    }

    fn memory_info(&self) -> Option<crate::backend::MemoryInfo> {
        host_memory()
    }

    fn alloc(&self, dtype: DType, shape: &[usize]) -> Result<Tensor> {
        let n = shape
            .iter()
            .try_fold(1usize, |a, &d| a.checked_mul(d))
            .ok_or_else(|| shape_err("alloc", format!("shape {shape:?} overflows")))?;
        Ok(Tensor {
            dtype,
            shape: shape.to_vec(),
            storage: Storage::Host(host::zeros(dtype, n)),
        })
    }

    fn upload_f32(&self, data: &[f32], shape: &[usize]) -> Result<Tensor> {
        if data.len() != shape.iter().product::<usize>() {
            return Err(shape_err(
                "upload_f32",
                format!("{} values for {shape:?}", data.len()),
            ));
        }
        Ok(Tensor::host_f32(data.to_vec(), shape))
    }

    fn upload_u32(&self, data: &[u32], shape: &[usize]) -> Result<Tensor> {
        if data.len() != shape.iter().product::<usize>() {
            return Err(shape_err(
                "upload_u32",
                format!("{} values for {shape:?}", data.len()),
            ));
        }
        Ok(Tensor::host_u32(data.to_vec(), shape))
    }

    fn write_u32(&self, dst: &mut Tensor, data: &[u32], shape: &[usize]) -> Result<()> {
        const OP: &str = "write_u32";
        fits(OP, dst, data.len(), shape)?;
        match &mut dst.storage {
            Storage::Host(HostData::U32(v)) => v[..data.len()].copy_from_slice(data),
            #[allow(unreachable_patterns)]
            _ => return Err(shape_err(OP, "destination must be a host u32 tensor")),
        }
        dst.shape = shape.to_vec();
        Ok(())
    }

    fn write_f32(&self, dst: &mut Tensor, data: &[f32], shape: &[usize]) -> Result<()> {
        const OP: &str = "write_f32";
        fits(OP, dst, data.len(), shape)?;
        match &mut dst.storage {
            Storage::Host(HostData::F32(v)) => v[..data.len()].copy_from_slice(data),
            #[allow(unreachable_patterns)]
            _ => return Err(shape_err(OP, "destination must be a host f32 tensor")),
        }
        dst.shape = shape.to_vec();
        Ok(())
    }

    fn read_f32(&self, src: &Tensor) -> Result<Vec<f32>> {
        const OP: &str = "read_f32";
        host::check_host(OP, "src", src)?;
        let n = src.numel();
        if n > src.capacity() {
            return Err(shape_err(OP, "shape exceeds storage"));
        }
        Ok(match &src.storage {
            Storage::Host(HostData::F32(v)) => v[..n].to_vec(),
            Storage::Host(HostData::F16(v)) => v[..n].iter().map(|x| x.to_f32()).collect(),
            Storage::Host(HostData::BF16(v)) => v[..n].iter().map(|x| x.to_f32()).collect(),
            Storage::Host(HostData::U32(_)) => return Err(shape_err(OP, "tensor is u32")),
            #[allow(unreachable_patterns)]
            _ => return Err(shape_err(OP, "not a host tensor")),
        })
    }

    fn read_u32(&self, src: &Tensor) -> Result<Vec<u32>> {
        Ok(host::u32s("read_u32", "src", src)?.to_vec())
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
        const OP: &str = "upload_weight";
        let row_bytes = format.row_bytes(cols)?;
        let want = row_bytes
            .checked_mul(rows)
            .ok_or_else(|| shape_err(OP, format!("[{rows}, {cols}] overflows")))?;
        if data.as_slice().len() != want {
            return Err(shape_err(
                OP,
                format!(
                    "{format} [{rows}, {cols}] needs {want} bytes, got {}",
                    data.as_slice().len()
                ),
            ));
        }
        let want_scales = format.scale_bytes(rows, cols);
        let got_scales = scales.as_ref().map_or(0, |s| s.as_slice().len());
        if got_scales != want_scales {
            return Err(shape_err(
                OP,
                format!(
                    "{format} [{rows}, {cols}] needs {want_scales} scale bytes, got {got_scales}"
                ),
            ));
        }
        Ok(Weight {
            format,
            rows,
            cols,
            tensor_scale,
            storage: WeightStorage::Host { data, scales },
        })
    }

    fn synchronize(&self) -> Result<()> {
        Ok(())
    }

    fn embedding(&self, table: &Weight, ids: &Tensor, out: &mut Tensor) -> Result<()> {
        matmul::embedding(table, ids, out)
    }

    fn matmul(&self, x: &Tensor, w: &Weight, out: &mut Tensor) -> Result<()> {
        matmul::matmul(x, w, out, self.exact_arithmetic())
    }

    fn add_bias(&self, x: &mut Tensor, bias: &Tensor) -> Result<()> {
        elementwise::add_bias(x, bias)
    }

    fn rms_norm(&self, x: &Tensor, weight: &Tensor, eps: f32, out: &mut Tensor) -> Result<()> {
        elementwise::rms_norm(x, weight, eps, out)
    }

    fn add_rms_norm(
        &self,
        residual: &mut Tensor,
        delta: &Tensor,
        weight: &Tensor,
        eps: f32,
        out: &mut Tensor,
    ) -> Result<()> {
        elementwise::add_rms_norm(residual, delta, weight, eps, out)
    }

    fn add_assign(&self, x: &mut Tensor, y: &Tensor) -> Result<()> {
        elementwise::add_assign(x, y)
    }

    fn rope(&self, x: &mut Tensor, positions: &Tensor, rope: &DeviceRope) -> Result<()> {
        elementwise::rope(x, positions, rope)
    }

    fn silu_mul(&self, gate: &Tensor, up: &Tensor, out: &mut Tensor) -> Result<()> {
        elementwise::silu_mul(gate, up, out)
    }

    fn kv_write(
        &self,
        k: &Tensor,
        v: &Tensor,
        k_cache: &mut Tensor,
        v_cache: &mut Tensor,
        meta: &AttentionMeta,
    ) -> Result<()> {
        attention::kv_write(k, v, k_cache, v_cache, meta)
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
        attention::attention(q, k_cache, v_cache, meta, params, out)
    }

    fn argmax(&self, logits: &Tensor, out: &mut Tensor) -> Result<()> {
        elementwise::argmax(logits, out)
    }

    fn gather_rows(&self, src: &Tensor, src_rows: &Tensor, out: &mut Tensor) -> Result<()> {
        elementwise::gather_rows(src, src_rows, out)
    }

    fn causal_conv1d_silu(
        &self,
        x: &Tensor,
        weight: &Tensor,
        conv_state: &mut Tensor,
        meta: &RecurrentMeta,
        out: &mut Tensor,
    ) -> Result<()> {
        deltanet::causal_conv1d_silu(x, weight, conv_state, meta, out)
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
        deltanet::delta_gates(alpha, b, a_neg, dt_bias, g, beta)
    }

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
        delta_rule::gated_delta_rule_chunked(qkv, g, beta, state, meta, params, out)
    }

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
        delta_rule::gated_delta_rule_recurrent(qkv, g, beta, state, meta, params, out)
    }

    fn gated_rms_norm(
        &self,
        x: &Tensor,
        gate: &Tensor,
        weight: &Tensor,
        eps: f32,
        out: &mut Tensor,
    ) -> Result<()> {
        deltanet::gated_rms_norm(x, gate, weight, eps, out)
    }

    fn split_halves(&self, x: &Tensor, first: &mut Tensor, second: &mut Tensor) -> Result<()> {
        deltanet::split_halves(x, first, second)
    }

    fn sigmoid_mul(&self, x: &mut Tensor, gate: &Tensor) -> Result<()> {
        deltanet::sigmoid_mul(x, gate)
    }

    fn split_columns(&self, x: &Tensor, outs: &mut [&mut Tensor]) -> Result<()> {
        split::split_columns(x, outs)
    }

    fn silu_mul_halves(&self, x: &Tensor, out: &mut Tensor) -> Result<()> {
        split::silu_mul_halves(x, out)
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
        qkv_rope::qkv_norm_rope_kv_write(
            src, bias, params, norm, positions, rope, q_out, gate_out, k_cache, v_cache, meta,
        )
    }
}

#[cfg(test)]
mod memory_tests {
    use crate::Backend;

    /// Host memory is reported on Linux, and a touched 64 MiB buffer is resident. (Other test
    /// threads allocate and free meanwhile, so only lower bounds are checked.)
    #[test]
    #[cfg(target_os = "linux")]
    fn host_memory_info_sees_a_64_mib_allocation() {
        let b = super::CpuBackend::new();
        let before = b.memory_info().expect("/proc/meminfo");
        assert!(before.total_bytes > 0 && before.used_bytes <= before.total_bytes);
        let rss0 = before.process_bytes.expect("VmRSS");
        assert!(before.process_peak_bytes.expect("VmHWM") >= rss0);
        let n = 64usize << 20;
        let v = vec![1u8; n];
        std::hint::black_box(&v);
        let after = b.memory_info().unwrap();
        let rss = after.process_bytes.unwrap();
        assert!(
            rss >= n as u64,
            "rss {rss0} -> {rss} with {n} bytes touched"
        );
        assert!(after.process_peak_bytes.unwrap() >= rss);
        drop(v);
    }
}
