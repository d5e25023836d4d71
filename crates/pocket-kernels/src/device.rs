//! The device handle models hold: a shared backend chosen at run time.

use std::sync::Arc;

use crate::rope::{DeviceRope, RopeTable};
use crate::{Backend, Result};

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
