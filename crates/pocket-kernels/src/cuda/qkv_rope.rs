//! Launcher of `kernels/qkv_rope.cu`: the attention-input op ([`crate::qkv_rope`]) in one
//! kernel (with QK-norm or a gate output, the block-per-head variant). Positions and slots are
//! validated from the host shadows, as `rope` and `kv_write` do (no device round trip, so a
//! decode step stays graph-capturable).

use super::kernels::{CacheType, Kernel};
use super::switch::EnvSwitch;
use super::CudaBackend;
use crate::error::shape_err;
use crate::qkv_rope::{check_extras, plan, QkNorm, QkvBias, QkvRopeParams, QkvSource, OP};
use crate::rope::{DeviceRope, RopeLayout};
use crate::{AttentionMeta, DType, Result, Tensor};

/// Kernel argument block (mirrors `QkvRopeArgs` in kernels/qkv_rope.cu).
#[repr(C)]
#[derive(Clone, Copy)]
struct QkvRopeArgs {
    q: u64,
    k: u64,
    v: u64,
    q_bias: u64,
    k_bias: u64,
    v_bias: u64,
    pos: u64,
    cos: u64,
    sin: u64,
    slots: u64,
    q_out: u64,
    k_cache: u64,
    v_cache: u64,
    n: i32,
    heads: i32,
    kv_heads: i32,
    head_dim: i32,
    rot_dim: i32,
    neox: i32,
    max_pos: i32,
    q_stride: i32,
    k_stride: i32,
    v_stride: i32,
    q_head_stride: i32,
    q_norm: u64,
    k_norm: u64,
    gate_out: u64,
    q_eps: f32,
    k_eps: f32,
    trigger_first: i32,
}

/// Whether the RoPE/cache-write kernel lets the attention launch before it waits for the
/// projection (`POCKET_ROPE_EARLY=0` turns it off: the attention launches after that wait).
fn trigger_first() -> bool {
    static ON: EnvSwitch = EnvSwitch::on_unless_zero("POCKET_ROPE_EARLY");
    ON.on()
}

/// Threads per block.
const TPB: usize = 256;

fn int(v: usize) -> Result<i32> {
    i32::try_from(v).map_err(|_| shape_err(OP, format!("{v} exceeds i32")))
}

/// Threads per block of the QK-norm kernel: one per element pair of a head, rounded up to a warp.
fn norm_block(head_dim: usize) -> Result<u32> {
    let t = (head_dim / 2).next_multiple_of(32);
    if t > 1024 {
        return Err(shape_err(
            OP,
            format!("head_dim {head_dim} exceeds one block"),
        ));
    }
    Ok(t as u32)
}

/// Both ops: without norms or a gate output the flat kernel (`qkv_rope_kv_write_*`), otherwise
/// the block-per-head one (`qkv_rope_kv_write_norm_*`), which reduces each head's squares.
#[allow(clippy::too_many_arguments)]
pub(crate) fn qkv_norm_rope_kv_write(
    be: &CudaBackend,
    src: QkvSource<'_>,
    bias: QkvBias<'_>,
    p: &QkvRopeParams,
    norm: QkNorm<'_>,
    positions: &Tensor,
    rope: &DeviceRope,
    q_out: &mut Tensor,
    gate_out: Option<&mut Tensor>,
    k_cache: &mut Tensor,
    v_cache: &mut Tensor,
    meta: &AttentionMeta,
) -> Result<()> {
    let pos = be.host_u32(OP, "positions", positions)?;
    let slots = be.host_u32(OP, "slot_mapping", &meta.slot_mapping)?;
    let plan = plan(src, bias, p, &pos, rope, q_out, k_cache, v_cache, &slots)?;
    check_extras(p, plan.n, &norm, gate_out.as_deref())?;
    let ct = CacheType::of(k_cache.dtype)
        .ok_or_else(|| shape_err(OP, "cache must be f32, f16 or bf16"))?;
    let mut part = [0u64; 3];
    for (o, pt) in part.iter_mut().zip(&plan.parts) {
        *o = be.ptr_of(OP, "qkv", pt.tensor, DType::F32)? + 4 * pt.col as u64;
    }
    let mut bp = [0u64; 3];
    for (o, b) in bp.iter_mut().zip(&plan.bias) {
        if let Some((t, col)) = b {
            *o = be.ptr_of(OP, "bias", t, DType::F32)? + 4 * *col as u64;
        }
    }
    let mut np = [(0u64, 0f32); 2];
    for (o, w) in np.iter_mut().zip([norm.q, norm.k]) {
        if let Some((t, eps)) = w {
            *o = (be.ptr_of(OP, "norm weight", t, DType::F32)?, eps);
        }
    }
    let gate = match &gate_out {
        Some(g) => be.ptr_of(OP, "gate_out", g, DType::F32)?,
        None => 0,
    };
    let args = QkvRopeArgs {
        q: part[0],
        k: part[1],
        v: part[2],
        q_bias: bp[0],
        k_bias: bp[1],
        v_bias: bp[2],
        pos: be.ptr_of(OP, "positions", positions, DType::U32)?,
        cos: be.ptr_of(OP, "cos", &rope.cos, DType::F32)?,
        sin: be.ptr_of(OP, "sin", &rope.sin, DType::F32)?,
        slots: be.ptr_of(OP, "slot_mapping", &meta.slot_mapping, DType::U32)?,
        q_out: be.ptr_of(OP, "q_out", q_out, DType::F32)?,
        k_cache: be.ptr(OP, "k_cache", k_cache)?,
        v_cache: be.ptr(OP, "v_cache", v_cache)?,
        n: int(plan.n)?,
        heads: int(p.heads)?,
        kv_heads: int(p.kv_heads)?,
        head_dim: int(p.head_dim)?,
        rot_dim: int(2 * plan.half)?,
        neox: matches!(rope.config.layout, RopeLayout::NeoX) as i32,
        max_pos: int(plan.max_pos)?,
        q_stride: int(plan.parts[0].stride)?,
        k_stride: int(plan.parts[1].stride)?,
        v_stride: int(plan.parts[2].stride)?,
        q_head_stride: int(p.q_head_stride)?,
        q_norm: np[0].0,
        k_norm: np[1].0,
        gate_out: gate,
        q_eps: np[0].1,
        k_eps: np[1].1,
        trigger_first: trigger_first() as i32,
    };
    if plan.n == 0 {
        return Ok(());
    }
    if norm.is_none() && gate_out.is_none() {
        let total = plan.n * (p.heads + 2 * p.kv_heads) * (p.head_dim / 2);
        let grid = u32::try_from(total.div_ceil(TPB))
            .map_err(|_| shape_err(OP, format!("{total} threads exceed one grid")))?;
        return be.launch(
            OP,
            Kernel::QkvRopeKvWrite(ct),
            (grid, 1, 1),
            TPB as u32,
            args![args],
        );
    }
    // Tokens on x (up to 2^31 - 1), head units on y (up to 65535).
    let units = u32::try_from(p.heads + 2 * p.kv_heads)
        .ok()
        .filter(|&u| u <= 65_535)
        .ok_or_else(|| shape_err(OP, "too many heads for one grid"))?;
    let rows = u32::try_from(plan.n)
        .map_err(|_| shape_err(OP, format!("{} tokens exceed one grid", plan.n)))?;
    be.launch(
        OP,
        Kernel::QkvRopeKvWriteNorm(ct),
        (rows, units, 1),
        norm_block(p.head_dim)?,
        args![args],
    )
}
