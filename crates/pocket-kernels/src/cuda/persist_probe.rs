//! Measurement probe for docs/architecture/persistent-decode.md (plan step 1; no model uses it):
//! the cost of a grid-wide barrier, and chained one-row FP8 GEMVs in one persistent launch
//! against the same GEMVs as separate launches (kernels/persist_probe.cu;
//! tests/cuda_bench_persist.rs times both), and the byte stream such a kernel would read
//! through a shared-memory ring with grid barriers between its phases (session 19).

use pocket_quant::QuantFormat;

use super::kernels::Kernel;
use super::matmul_fp8::{weight_ptrs, Fp8Kind};
use super::CudaBackend;
use crate::error::shape_err;
use crate::{DType, Result, Tensor, Weight};

/// Blocks per SM the persistent kernels are launched with (`PERSIST_MINB` in persist_probe.cu:
/// their registers guarantee that many fit, so every block is resident and the barrier cannot
/// deadlock).
const BLOCKS_PER_SM: usize = 3;
/// Weight rows per block of `persist_fp8_chain` (4 warps x 4 rows).
const ROWS_PER_BLOCK: usize = 16;

impl CudaBackend {
    /// Runs `rounds` grid-wide barriers in one launch of `blocks` 128-thread blocks (at most 3
    /// per SM, so all are resident). `bar`: [`Self::probe_barrier_words`], allocated once.
    pub fn probe_grid_barriers(&self, blocks: usize, rounds: usize, bar: &Tensor) -> Result<()> {
        const OP: &str = "probe_grid_barriers";
        let max = BLOCKS_PER_SM * self.sm_count() as usize;
        if blocks == 0 || blocks > max {
            return Err(shape_err(
                OP,
                format!("{blocks} blocks (1..={max} fit at once)"),
            ));
        }
        let bar = self.ptr_of(OP, "barrier", bar, DType::U32)?;
        self.launch(
            OP,
            Kernel::PersistBarriers,
            (blocks as u32, 1, 1),
            128,
            args![bar, rounds as i32],
        )
    }

    /// For each layer l, `xb = W1_l xa` then `xa = W2_l xb`, all in one persistent launch:
    /// `w1` [layers * r, c] and `w2` [layers * c, r] stack the layers' weights (FP8 E4M3 with
    /// 128x128 tile scales; r and c multiples of 128), `xa` [1, c] and `xb` [1, r] f32.
    /// `preload`: each phase loads its first weights before the barrier that publishes its
    /// input (else after it). The results equal the same chain of one-row GEMVs up to f32
    /// summation order. `bar`: [`Self::probe_barrier_words`], allocated once.
    #[allow(clippy::too_many_arguments)]
    pub fn probe_fp8_chain(
        &self,
        w1: &Weight,
        w2: &Weight,
        xa: &mut Tensor,
        xb: &mut Tensor,
        layers: usize,
        preload: bool,
        bar: &Tensor,
    ) -> Result<()> {
        const OP: &str = "probe_fp8_chain";
        let (p1, s1) = self.probe_weight(OP, w1)?;
        let (p2, s2) = self.probe_weight(OP, w2)?;
        let (r, c) = (w1.rows / layers.max(1), w1.cols);
        let fits = layers > 0
            && w1.rows == layers * r
            && (w2.rows, w2.cols) == (layers * c, r)
            && r.is_multiple_of(128)
            && c.is_multiple_of(128)
            && xa.shape == [1, c]
            && xb.shape == [1, r];
        if !fits {
            return Err(shape_err(
                OP,
                format!(
                    "{layers} layers: W1 [{}, {}], W2 [{}, {}], xa {:?}, xb {:?}: need W1 \
                     [layers * r, c], W2 [layers * c, r], xa [1, c], xb [1, r], r and c \
                     multiples of 128",
                    w1.rows, w1.cols, w2.rows, w2.cols, xa.shape, xb.shape
                ),
            ));
        }
        let blocks = BLOCKS_PER_SM * self.sm_count() as usize;
        if r.max(c) > blocks * ROWS_PER_BLOCK {
            return Err(shape_err(
                OP,
                format!(
                    "{} rows exceed one row group per warp ({blocks} blocks)",
                    r.max(c)
                ),
            ));
        }
        let pa = self.ptr_of(OP, "xa", xa, DType::F32)?;
        let pb = self.ptr_of(OP, "xb", xb, DType::F32)?;
        let bar = self.ptr_of(OP, "barrier", bar, DType::U32)?;
        self.launch(
            OP,
            Kernel::PersistFp8Chain(preload),
            (blocks as u32, 1, 1),
            128,
            args![
                p1,
                s1,
                p2,
                s2,
                pa,
                pb,
                r as i32,
                c as i32,
                layers as i32,
                bar
            ],
        )
    }

    /// Reads the FP8 codes of `w` (FP8 E4M3 128x128) once and does no arithmetic with them:
    /// `stream` false the one-row GEMV's pattern (`warp4d6`'s grid, a warp per 4 rows, 6 steps
    /// of loads in flight), true grid-stride over all the codes (`blocks` of 256 threads). The
    /// time is the memory system's for that read (kernels/persist_probe.cu, session 12). `sink`
    /// (any f32 tensor, allocated once by the caller so no upload sits in a timed loop) is
    /// written only if the words' xor hits a value random data does not give.
    pub fn probe_read(
        &self,
        w: &Weight,
        stream: bool,
        blocks: usize,
        sink: &mut Tensor,
    ) -> Result<()> {
        const OP: &str = "probe_read";
        let (p, _) = self.probe_weight(OP, w)?;
        let sink = self.ptr_of(OP, "sink", sink, DType::F32)?;
        if stream {
            let n16 = (w.rows * w.cols / 16) as i64;
            self.launch(
                OP,
                Kernel::ProbeRead(true),
                (blocks.max(1) as u32, 1, 1),
                256,
                args![p, n16, sink],
            )
        } else {
            let grid = w.rows.div_ceil(ROWS_PER_BLOCK) as u32;
            self.launch(
                OP,
                Kernel::ProbeRead(false),
                (grid, 1, 1),
                128,
                args![p, w.rows as i32, w.cols as i32, sink],
            )
        }
    }

    /// The codes and tile scales of `w`: the probes take FP8 E4M3 with 128x128 tile scales only.
    fn probe_weight(&self, op: &'static str, w: &Weight) -> Result<(u64, u64)> {
        match Fp8Kind::of(w.format) {
            Some(k) if w.format == QuantFormat::Fp8E4M3Block128 => weight_ptrs(self, op, k, w),
            _ => Err(shape_err(
                op,
                format!("{} weight (FP8 E4M3 128x128 only)", w.format),
            )),
        }
    }

    /// Streams the u32 words of `w` unit by unit in one persistent launch of one 256-thread
    /// block per SM, each block reading its share of every unit through a ring of shared-memory
    /// stages filled by bulk copies (kernels/persist_probe.cu `probe_ring_stream`, which says
    /// what the modes model); `bounds` (u32) holds the units' limits in 16-byte words, ascending
    /// from 0, `ring.waves` consecutive units making one phase. Each block writes the wrapping
    /// sum of the words it read to `sums[block]` (`sums`: u32, at least one per SM). sm_90 only.
    /// `bar`: [`Self::probe_barrier_words`]; `ready`: one u32 per unit, zeroed once, read with
    /// `ring.dataflow_epoch` (the dataflow mode; every launch over it must have the same units).
    pub fn probe_ring_stream(
        &self,
        w: &Tensor,
        bounds: &Tensor,
        ring: &RingProbe,
        bar: &Tensor,
        ready: &Tensor,
        sums: &mut Tensor,
    ) -> Result<()> {
        const OP: &str = "probe_ring_stream";
        let blocks = self.sm_count() as usize;
        let smem = ring.stage_bytes * ring.stages;
        let units = bounds.numel().saturating_sub(1);
        if self.kernels.artifact != super::kernels::Artifact::Sm90Cubin {
            return Err(shape_err(OP, "needs the sm_90 cubin (bulk copies)"));
        }
        let fits = ring.stage_bytes > 0
            && ring.stage_bytes.is_multiple_of(16)
            && (1..=16).contains(&ring.stages)
            && smem <= 227 * 1024
            && ring.waves > 0
            && units > 0
            && units.is_multiple_of(ring.waves)
            && sums.numel() >= blocks
            && ready.numel() >= units;
        if !fits {
            return Err(shape_err(
                OP,
                format!(
                    "{ring:?} over {units} units, {} sums, {} ready words: need 1..=16 stages \
                     of a multiple of 16 bytes, at most 227 KiB in all, whole phases of \
                     `waves` units, one sum per SM ({blocks}) and one ready word per unit",
                    sums.numel(),
                    ready.numel()
                ),
            ));
        }
        if !self.allow_dynamic_smem(Kernel::ProbeRingStream, smem)? {
            return Err(shape_err(
                OP,
                format!("this GPU refuses {smem} bytes of shared memory"),
            ));
        }
        let pw = self.ptr_of(OP, "w", w, DType::U32)?;
        let pbounds = self.ptr_of(OP, "bounds", bounds, DType::U32)?;
        let bar = self.ptr_of(OP, "barrier", bar, DType::U32)?;
        let pready = self.ptr_of(OP, "ready", ready, DType::U32)?;
        let psums = self.ptr_of(OP, "sums", sums, DType::U32)?;
        let mode = ring.barriers as i32
            | (ring.ahead as i32) << 1
            | (ring.dataflow_epoch.is_some() as i32) << 2;
        self.launch_smem(
            OP,
            Kernel::ProbeRingStream,
            (blocks as u32, 1, 1),
            256,
            smem as u32,
            args![
                pw,
                pbounds,
                units as i32,
                ring.waves as i32,
                ring.stage_bytes as i32,
                ring.stages as i32,
                mode,
                bar,
                pready,
                ring.dataflow_epoch.unwrap_or(0),
                psums
            ],
        )
    }

    /// The two u32 words of the persistent probes' grid barrier (count, generation), zeroed:
    /// allocate them once, since every launch leaves the count at zero and the barrier only
    /// compares the generation with the value it read (no upload inside a timed loop).
    pub fn probe_barrier_words(&self) -> Result<Tensor> {
        crate::Backend::upload_u32(self, &[0, 0], &[2])
    }
}

/// How [`CudaBackend::probe_ring_stream`] reads: the ring and what separates the phases.
#[derive(Clone, Copy, Debug)]
pub struct RingProbe {
    /// Bytes of one ring stage (one bulk copy), a multiple of 16.
    pub stage_bytes: usize,
    /// Stages in the ring, 1..=16.
    pub stages: usize,
    /// Units per phase (the waves of output rows of one weight).
    pub waves: usize,
    /// A grid barrier between phases.
    pub barriers: bool,
    /// The ring's loads run on into later phases.
    pub ahead: bool,
    /// Dataflow waits on the previous phase's waves instead of barriers: the launch's epoch
    /// (1 for the first launch over zeroed ready words, then 2, 3, ...).
    pub dataflow_epoch: Option<u32>,
}
