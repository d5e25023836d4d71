//! The SwiGLU of a one-row dp4a MLP moved into its down projection (kernels/gemv.cu
//! `gemv_q8r_swiglu_*`, kernels/swiglu_cluster.cuh): no `silu_mul_halves_q8` launch between the
//! gate|up and the down GEMV.
//!
//! [`crate::Backend::matmul_silu_halves`] launches the gate|up GEMV and leaves the SwiGLU
//! *pending*: its output `act` is not written yet. The next op decides:
//!  * the one-row dp4a GEMV (`matmul`) whose input is `act` and whose kernel would be
//!    `gemv_q8r_*` of a format with a fused form takes it ([`take_for_down`]): its blocks compute
//!    and quantize silu(g) * u in clusters (each cluster into its own region of a scratch), and
//!    the first cluster writes `act`;
//!  * another one-row GEMV over `act` runs it first as the unfused path does
//!    ([`flush_quantized`]: `silu_mul_halves_q8`, whose int8 row that GEMV then reuses);
//!  * any other launch, read-back, host write or graph boundary first runs it as
//!    `silu_mul_halves` ([`flush`]: the float row only, which takes no scratch lock, as a
//!    launching op may hold it), so no reader ever sees `act` stale.
//!
//! At most one op is pending on a backend, this or a folded norm (rms_fold.rs): each is set
//! right after a launch, which ran the other first, so the two share the pool's one watched
//! address (freeing `act` cancels the pending SwiGLU). `POCKET_SWIGLU_DOWN=0` turns it off.

use std::sync::atomic::{AtomicU64, Ordering};

use super::kernels::{Artifact, Kernel, Q8Gemv};
use super::matmul::GEMVR_ROWS;
use super::switch::EnvChoice;
use super::{CudaBackend, Scratch};
use crate::error::shape_err;
use crate::{DType, Result, Tensor};

/// Fused down projections launched in this process (for tests that check the path ran).
static LAUNCHES: AtomicU64 = AtomicU64::new(0);

/// Blocks per cluster of the fused kernel: `POCKET_SWIGLU_DOWN` = 8 (the default) or 4 (the two
/// cluster sizes built), 0 turns the fusion off; [`CudaBackend::set_swiglu_down`] overrides it.
static CLUSTER: EnvChoice<u8> = EnvChoice::new("POCKET_SWIGLU_DOWN", &[0, 4, 8], |v| match v {
    Some("0") => 0,
    Some("4") => 4,
    _ => 8,
});
/// Threads per block of `gemv_q8r_*` (GEMVR_THREADS in kernels/gemv.cu).
const THREADS: usize = 128;
/// Smallest fused-activation scratch (bytes): the 8B shape's 128 cluster regions fit, so the
/// buffer is allocated once, before any graph capture, for the usual shapes.
const MIN_SCRATCH: usize = 4 << 20;

/// A SwiGLU whose output `act` (`d` floats) is still to be computed from `gate_up` (`2d`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct PendingSwiglu {
    gate_up: u64,
    act: u64,
    d: usize,
}

/// Whether a one-row `matmul_silu_halves` may leave its SwiGLU pending: the switch is on, the
/// sm_90 cubin (the only one with the cluster kernels) is loaded, and the row is one the fused
/// kernel can quantize (whole 256-element chunks).
fn may_defer(be: &CudaBackend, gate_up: &Tensor, act: &Tensor) -> bool {
    let d = act.row_len();
    CLUSTER.get() > 0
        && be.artifact() == Artifact::Sm90Cubin
        && act.rows() == 1
        && gate_up.rows() == 1
        && gate_up.row_len() == 2 * d
        && d > 0
        && d.is_multiple_of(256)
        && gate_up.dtype == DType::F32
        && act.dtype == DType::F32
}

/// Leaves `act = silu_mul_halves(gate_up)` pending (`Ok(true)`) where [`may_defer`] allows;
/// `Ok(false)`: nothing done, the caller runs the SwiGLU.
pub(crate) fn defer(be: &CudaBackend, gate_up: &Tensor, act: &mut Tensor) -> Result<bool> {
    const OP: &str = "silu_mul_halves";
    if !may_defer(be, gate_up, act) {
        return Ok(false);
    }
    let gp = be.ptr_of(OP, "x", gate_up, DType::F32)?;
    let ap = be.ptr_of(OP, "out", act, DType::F32)?;
    // Nothing else pending (see the module note), and no stale quantization of `act` cached.
    be.flush_pending()?;
    be.invalidate_q8();
    let mut slot = be
        .swiglu
        .lock()
        .map_err(|_| shape_err(OP, "swiglu lock poisoned"))?;
    be.pool.watch_free(ap);
    *slot = Some(PendingSwiglu {
        gate_up: gp,
        act: ap,
        d: act.row_len(),
    });
    Ok(true)
}

/// The fused down projection's launch where the one-row GEMV of `q` (`rows x cols`, kernel
/// `chosen`) reads the pending SwiGLU's output at `x`. `None` leaves the SwiGLU pending. Called
/// with no scratch lock held (it takes it).
pub(crate) fn take_for_down(
    be: &CudaBackend,
    x: u64,
    q: Q8Gemv,
    chosen: Kernel,
    (rows, cols): (usize, usize),
) -> Result<Option<FusedDown>> {
    const OP: &str = "matmul";
    let mut slot = be
        .swiglu
        .lock()
        .map_err(|_| shape_err(OP, "swiglu lock poisoned"))?;
    let Some(p) = *slot else {
        return Ok(None);
    };
    let cluster = usize::from(CLUSTER.get());
    let groups = rows.div_ceil(GEMVR_ROWS);
    let fits = cluster > 0
        && p.act == x
        && p.d == cols
        && q.has_fused()
        && chosen == Kernel::GemvQ8Rows(q)
        && groups.is_multiple_of(cluster)
        // Every thread takes the first loop pass, where the cluster barrier is (kernels/gemv.cu).
        && q.items_per_row(cols) >= THREADS;
    if !fits {
        return Ok(None);
    }
    *slot = None;
    drop(slot);
    if !be.pool.unwatch(p.act) {
        return Ok(None); // `act` was freed: x is not it any more
    }
    // One region per cluster: the int8 row, then its scales and scaled sums (quantize_q8's).
    let region = (cols + 8 * (cols / 32)).next_multiple_of(256);
    let bytes = region * (groups / cluster);
    let scratch = {
        let mut s = be
            .scratch
            .lock()
            .map_err(|_| shape_err(OP, "scratch lock poisoned"))?;
        Scratch::get(&mut s.swiglu, &be.pool, bytes.max(MIN_SCRATCH))?
    };
    LAUNCHES.fetch_add(1, Ordering::Relaxed);
    Ok(Some(FusedDown {
        kernel: Kernel::GemvQ8Swiglu(q, cluster == 8),
        blocks: groups as u32,
        threads: THREADS as u32,
        gate_up: p.gate_up,
        act: p.act,
        scratch,
        region: region as i32,
    }))
}

/// A fused down projection's launch: `args![w, gate_up, act, scratch, region, out, rows, cols]`.
pub(crate) struct FusedDown {
    pub kernel: Kernel,
    pub blocks: u32,
    pub threads: u32,
    pub gate_up: u64,
    pub act: u64,
    pub scratch: u64,
    pub region: i32,
}

/// Runs the pending SwiGLU with its int8 quantization (`silu_mul_halves_q8`, the unfused path),
/// for a one-row GEMV that reads it but cannot take the fusion. Called with no scratch lock held.
pub(crate) fn flush_quantized(be: &CudaBackend) -> Result<()> {
    run_pending(be, true)
}

/// Runs the pending SwiGLU, if any, as `silu_mul_halves` (the float row, no scratch lock):
/// before any op that is not a GEMV reading it, a read-back, a host write, or a graph boundary.
pub(crate) fn flush(be: &CudaBackend) -> Result<()> {
    run_pending(be, false)
}

fn run_pending(be: &CudaBackend, quantized: bool) -> Result<()> {
    const OP: &str = "silu_mul_halves";
    let pending = be
        .swiglu
        .lock()
        .map_err(|_| shape_err(OP, "swiglu lock poisoned"))?
        .take();
    let Some(p) = pending else {
        return Ok(());
    };
    if !be.pool.unwatch(p.act) {
        return Ok(()); // freed before anyone read it
    }
    super::split::silu_mul_halves_at(be, p.gate_up, p.act, 1, p.d, quantized)
}

impl CudaBackend {
    /// Overrides `POCKET_SWIGLU_DOWN` for the `matmul_silu_halves` calls that follow, in the
    /// whole process: `Some(0)` off, `Some(4)` / `Some(8)` blocks per cluster, `None` the
    /// environment. Tests and benches compare them in one process.
    pub fn set_swiglu_down(&self, cluster: Option<u8>) {
        CLUSTER.set(cluster);
    }

    /// Fused down projections (`gemv_q8r_swiglu_*`) launched so far in this process.
    pub fn swiglu_down_launches(&self) -> u64 {
        LAUNCHES.load(Ordering::Relaxed)
    }
}
