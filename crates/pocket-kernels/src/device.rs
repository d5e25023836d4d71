//! The device handle models hold: a shared backend chosen at run time.

use std::sync::Arc;

use crate::rope::{DeviceRope, RopeTable};
use crate::{Backend, KernelError, Result};

/// A backend's captured sequence of ops (see [`Device::capture`]).
pub trait GraphExec: Send {
    /// Launches the captured ops once, asynchronously, on the device's stream.
    fn replay(&self) -> Result<()>;
}

/// A captured, replayable sequence of device ops. Replays read and write the same device buffers
/// the capture used, so per-step inputs must be written into those buffers (`write_u32`) first.
pub struct Graph(Box<dyn GraphExec>);

impl Graph {
    /// Wraps a backend's captured graph.
    pub fn new(exec: Box<dyn GraphExec>) -> Graph {
        Graph(exec)
    }

    /// Runs the captured ops again (asynchronously, ordered after earlier work).
    pub fn replay(&self) -> Result<()> {
        self.0.replay()
    }
}

impl std::fmt::Debug for Graph {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Graph")
    }
}

/// Which kind of device to open.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeviceKind {
    /// The host CPU (rayon over all cores).
    Cpu,
    /// A CUDA GPU by ordinal.
    Cuda(usize),
}

impl std::str::FromStr for DeviceKind {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "cpu" => Ok(DeviceKind::Cpu),
            "cuda" | "gpu" => Ok(DeviceKind::Cuda(0)),
            _ => match s.strip_prefix("cuda:") {
                Some(n) => n
                    .parse()
                    .map(DeviceKind::Cuda)
                    .map_err(|_| format!("bad CUDA ordinal in `{s}`")),
                None => Err(format!(
                    "unknown device `{s}` (expected cpu, cuda or cuda:N)"
                )),
            },
        }
    }
}

/// A device: a cheap, cloneable handle to one backend. Ops are called through `Deref`.
#[derive(Clone)]
pub struct Device {
    kind: DeviceKind,
    backend: Arc<dyn Backend>,
}

impl Device {
    /// The CPU device.
    pub fn cpu() -> Device {
        Device {
            kind: DeviceKind::Cpu,
            backend: Arc::new(crate::cpu::CpuBackend::new()),
        }
    }

    /// Opens a device; CUDA fails cleanly (an error, not a crash) where no driver or GPU exists.
    pub fn open(kind: DeviceKind) -> Result<Device> {
        match kind {
            DeviceKind::Cpu => Ok(Device::cpu()),
            #[cfg(feature = "cuda")]
            DeviceKind::Cuda(ordinal) => Ok(Device {
                kind,
                backend: Arc::new(crate::cuda::CudaBackend::new(ordinal)?),
            }),
            #[cfg(not(feature = "cuda"))]
            DeviceKind::Cuda(_) => Err(crate::KernelError::Unavailable(
                "this build has no CUDA support (feature `cuda` is off)".into(),
            )),
        }
    }

    /// Every device a test should run on: the CPU, plus CUDA:0 when one can be opened.
    pub fn all_for_tests() -> Vec<Device> {
        let mut out = vec![Device::cpu()];
        if let Ok(d) = Device::open(DeviceKind::Cuda(0)) {
            out.push(d);
        }
        out
    }

    /// Which device this is.
    pub fn kind(&self) -> DeviceKind {
        self.kind
    }

    /// The device's memory now and this process's peak on it, where the backend reports them.
    pub fn memory_info(&self) -> Option<crate::backend::MemoryInfo> {
        self.backend.memory_info()
    }

    /// Whether [`Device::capture`] records graphs here (CUDA) or only runs eagerly (CPU).
    pub fn supports_graphs(&self) -> bool {
        self.backend.supports_graphs()
    }

    /// Runs `f` and, where the backend supports it, records its ops as a [`Graph`].
    ///
    /// Either way `f`'s work has been done when this returns: a captured graph is replayed once
    /// right after capture. `f` must only launch ops on buffers that outlive the graph and must
    /// not allocate or read device data back (the CUDA backend refuses both while capturing).
    /// On the CPU `f` simply runs and the graph is `None`. If `f` fails, the capture is
    /// abandoned and its error returned.
    pub fn capture<T, E: From<KernelError>>(
        &self,
        f: impl FnOnce() -> std::result::Result<T, E>,
    ) -> std::result::Result<(T, Option<Graph>), E> {
        if !self.supports_graphs() {
            return f().map(|t| (t, None));
        }
        self.backend.begin_graph_capture()?;
        let out = f();
        let graph = self.backend.end_graph_capture();
        let t = out?;
        let g = Graph::new(graph?);
        g.replay()?;
        Ok((t, Some(g)))
    }

    /// Uploads a RoPE table for [`Backend::rope`].
    pub fn upload_rope(&self, table: &RopeTable) -> Result<DeviceRope> {
        let half = table.config.rot_dim / 2;
        Ok(DeviceRope {
            config: table.config,
            cos: self.upload_f32(&table.cos, &[table.max_pos, half])?,
            sin: self.upload_f32(&table.sin, &[table.max_pos, half])?,
        })
    }
}

impl std::ops::Deref for Device {
    type Target = dyn Backend;
    fn deref(&self) -> &Self::Target {
        &*self.backend
    }
}

impl std::fmt::Debug for Device {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Device({})", self.backend.name())
    }
}
