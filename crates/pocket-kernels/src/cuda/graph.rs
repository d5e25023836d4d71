//! CUDA graphs: capture a sequence of ops once and replay it with one launch.
//!
//! Ops write into preallocated tensors and never allocate (after their first eager run has grown
//! the backend's scratch), so a decode step can be captured as is: run the step once eagerly,
//! then [`CudaBackend::begin_capture`], run it again, [`CudaBackend::end_capture`], and
//! [`StepGraph::replay`] it every later step after writing the new inputs with `write_u32` /
//! `write_f32` (copies outside the graph into the same buffers).
//!
//! The backend's scratch workspaces (activation quantization, attention partials) that the
//! captured ops address are moved into the graph at `end_capture`, so a later eager op that grows
//! the scratch allocates a new one instead of freeing memory the graph still writes. Tensors the
//! caller passes (workspaces, batch metadata, KV cache) must outlive the graph: that is the
//! caller's contract.
//!
//! A capture may also start with no scratch (right after another capture took it) or grow one
//! mid-step: the pool then allocates inside the capture, and every block freed while capturing
//! (a scratch slot replaced by a larger one, an op's temporary) is owned by the graph rather than
//! cached for reuse, since the graph may address it (see the module doc of `memory`).
//!
//! Host-side validation that needs device data (u32 tensors the device wrote, such as argmax
//! output fed back as ids) reads it back, which is not allowed while capturing: feed such tensors
//! through `write_u32` so their host shadow is known.
//!
//! Kernels launched with programmatic dependent launch (see the module doc of `cuda`) are
//! captured with programmatic edges (CUDA 12.3+ drivers), so a replay overlaps each kernel's
//! launch with its predecessor's tail as eager launches do; [`StepGraph::edge_counts`] tells.

use cudarc::driver::{sys, CudaGraph};

use super::memory::{cuda_err, CudaStorage};
use super::step_trace::GraphTrace;
use super::{CudaBackend, Scratch};
use crate::device::GraphExec;
use crate::Result;

/// A captured, instantiated sequence of ops.
pub struct StepGraph {
    graph: CudaGraph,
    /// The scratch buffers the captured ops address, owned by the graph from now on.
    _scratch: Scratch,
    /// Blocks freed while capturing, which captured ops may address.
    _freed: Vec<CudaStorage>,
    /// The step trace of this graph's replays (`POCKET_STEP_TRACE=1`).
    trace: Option<GraphTrace>,
}

// SAFETY: the graph is only launched on the backend's one stream; cudarc's CudaGraph holds raw
// driver handles that the driver allows to be used from any thread.
unsafe impl Send for StepGraph {}

impl CudaBackend {
    /// Starts recording every op launched on this device instead of running it.
    pub fn begin_capture(&self) -> Result<()> {
        self.invalidate_q8();
        // An eager op's pending folded norm runs now, not inside the graph.
        super::rms_fold::flush(self)?;
        self.stream
            .begin_capture(sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
            .map_err(|e| cuda_err("begin_capture", e))?;
        self.pool.begin_capture();
        if let Some(t) = &self.trace {
            t.begin_capture();
        }
        Ok(())
    }

    /// Stops recording and instantiates the graph.
    pub fn end_capture(&self) -> Result<StepGraph> {
        self.invalidate_q8();
        // A folded norm still pending is part of the captured step (a failure here still ends
        // the capture below).
        let flushed = super::rms_fold::flush(self);
        let ended = self.stream.end_capture(sys::CUgraphInstantiate_flags(0));
        // Closed whatever the outcome; without a graph nothing captured will run, so the blocks
        // freed meanwhile go straight back to the cache when `freed` drops.
        let freed = self.pool.end_capture();
        flushed?;
        let g = ended
            .map_err(|e| cuda_err("end_capture", e))?
            .ok_or_else(|| cuda_err("end_capture", "nothing was captured"))?;
        let scratch = std::mem::take(
            &mut *self
                .scratch
                .lock()
                .map_err(|_| cuda_err("end_capture", "scratch lock poisoned"))?,
        );
        Ok(StepGraph {
            graph: g,
            _scratch: scratch,
            _freed: freed,
            trace: self.trace.as_ref().map(|t| t.end_capture()),
        })
    }
}

impl StepGraph {
    /// Launches the captured ops once (asynchronously, on the device's stream; traced replays
    /// wait for it, see `step_trace`).
    pub fn replay(&self) -> Result<()> {
        let launch = || self.graph.launch().map_err(|e| cuda_err("graph replay", e));
        match &self.trace {
            Some(t) => t.traced(launch),
            None => launch(),
        }
    }

    /// (programmatic, all) dependency edges of the captured graph: the programmatic ones are
    /// the PDL launches that capture kept.
    pub fn edge_counts(&self) -> Result<(usize, usize)> {
        let g = self.graph.cu_graph();
        // cudarc panics on a symbol the driver lacks (cuGraphGetEdges_v2 is CUDA 12.3+).
        let edges = std::panic::catch_unwind(|| -> Result<Vec<sys::CUgraphEdgeData>> {
            let mut n = 0usize;
            // SAFETY: null arrays ask for the count only; then three arrays of `n` entries.
            unsafe {
                sys::cuGraphGetEdges_v2(
                    g,
                    std::ptr::null_mut(),
                    std::ptr::null_mut(),
                    std::ptr::null_mut(),
                    &mut n,
                )
            }
            .result()
            .map_err(|e| cuda_err("graph edges", e))?;
            let mut from = vec![std::ptr::null_mut(); n];
            let mut to = vec![std::ptr::null_mut(); n];
            // SAFETY: CUgraphEdgeData is plain bytes.
            let mut data = vec![unsafe { std::mem::zeroed::<sys::CUgraphEdgeData>() }; n];
            unsafe {
                sys::cuGraphGetEdges_v2(
                    g,
                    from.as_mut_ptr(),
                    to.as_mut_ptr(),
                    data.as_mut_ptr(),
                    &mut n,
                )
            }
            .result()
            .map_err(|e| cuda_err("graph edges", e))?;
            data.truncate(n);
            Ok(data)
        })
        .map_err(|_| cuda_err("graph edges", "the driver lacks cuGraphGetEdges_v2"))??;
        let programmatic = edges
            .iter()
            .filter(|e| {
                e.type_ == sys::CUgraphDependencyType::CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC as u8
            })
            .count();
        Ok((programmatic, edges.len()))
    }
}

impl GraphExec for StepGraph {
    fn replay(&self) -> Result<()> {
        StepGraph::replay(self)
    }
}
