//! The loaded kernel modules of one device and the functions resolved from them.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use cudarc::driver::{CudaContext, CudaFunction, CudaModule};
use cudarc::nvrtc::Ptx;

use super::super::artifacts::ModuleId;
use super::super::memory::cuda_err;
use super::{Artifact, Kernel};
use crate::{KernelError, Result};

/// Loaded modules and a cache of resolved functions.
pub(crate) struct KernelTable {
    modules: HashMap<ModuleId, Arc<CudaModule>>,
    /// Resolved functions and whether each is PDL-aware.
    functions: Mutex<HashMap<Kernel, (CudaFunction, bool)>>,
    /// The artifact the modules were loaded from.
    pub(crate) artifact: Artifact,
}

impl KernelTable {
    /// Loads every module for a device of compute capability `cc`.
    pub(crate) fn load(ctx: &Arc<CudaContext>, cc: (i32, i32)) -> Result<KernelTable> {
        if cc.0 < 7 || (cc.0 == 7 && cc.1 < 5) {
            return Err(KernelError::Unavailable(format!(
                "compute capability {}.{} is older than the 7.5 (Turing) our PTX targets",
                cc.0, cc.1
            )));
        }
        let artifact = if cc == (9, 0) {
            Artifact::Sm90Cubin
        } else {
            Artifact::Ptx75
        };
        let mut modules = HashMap::new();
        for &m in ModuleId::ALL {
            let image = match artifact {
                Artifact::Sm90Cubin => Ptx::from_binary(m.sm90_cubin().to_vec()),
                Artifact::Ptx75 => Ptx::from_src(m.ptx()),
            };
            let module = ctx.load_module(image).map_err(|e| KernelError::Cuda {
                op: "load_module",
                msg: format!("kernels/{}.cu ({artifact:?}): {e}", m.name()),
            })?;
            modules.insert(m, module);
        }
        Ok(KernelTable {
            modules,
            functions: Mutex::new(HashMap::new()),
            artifact,
        })
    }

    /// Writes `value(module)` to the `__constant__` `name` of every module that has one (in stream
    /// order on `stream`, so launches queued after it see the new value): `int` as `i32`,
    /// `unsigned long long` as `u64`.
    pub(crate) fn set_constant<T: cudarc::driver::DeviceRepr + Copy>(
        &self,
        stream: &Arc<cudarc::driver::CudaStream>,
        name: &str,
        value: impl Fn(ModuleId) -> T,
    ) -> Result<()> {
        for (&m, module) in &self.modules {
            let value = value(m);
            // A module that never reads the constant may not have kept it.
            let Ok(mut global) = module.get_global(name, stream) else {
                continue;
            };
            let fail = |e: cudarc::driver::DriverError| KernelError::Cuda {
                op: "set_constant",
                msg: format!("kernels/{}.cu `{name}`: {e}", m.name()),
            };
            // SAFETY: the symbol is a `T` (its size checked by the view's length).
            let mut view = unsafe { global.transmute_mut::<T>(1) }.ok_or_else(|| {
                fail(cudarc::driver::DriverError(
                    cudarc::driver::sys::CUresult::CUDA_ERROR_INVALID_VALUE,
                ))
            })?;
            stream.memcpy_htod(&[value], &mut view).map_err(fail)?;
        }
        Ok(())
    }

    /// The function handle of `k` (resolved once, then cached).
    pub(crate) fn get(&self, k: Kernel) -> Result<CudaFunction> {
        Ok(self.get_launch(k)?.0)
    }

    /// The function handle of `k` and whether it is PDL-aware (both resolved once, then cached).
    pub(crate) fn get_launch(&self, k: Kernel) -> Result<(CudaFunction, bool)> {
        let mut f = self.functions.lock().map_err(|_| KernelError::Cuda {
            op: "kernel_table",
            msg: "lock poisoned".into(),
        })?;
        if let Some(entry) = f.get(&k) {
            return Ok(entry.clone());
        }
        let (m, sym) = k.symbol();
        let module = self.modules.get(&m).ok_or_else(|| KernelError::Cuda {
            op: "kernel_table",
            msg: format!("module {} not loaded", m.name()),
        })?;
        let func = module
            .load_function(sym)
            .map_err(|e| cuda_err("load_function", format!("{sym}: {e}")))?;
        let entry = (func, k.pdl_aware());
        f.insert(k, entry.clone());
        Ok(entry)
    }
}
