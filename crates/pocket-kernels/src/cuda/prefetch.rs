//! L2 prefetch of the next decode GEMV's weight on a side stream (an experiment for issues #7
//! and #9, off unless `POCKET_L2_PREFETCH=1` or [`CudaBackend::set_l2_prefetch`]).
//!
//! Batch-1 decode reads each weight once, and between two GEMVs the small kernels (norms, RoPE
//! and the KV write, attention, SwiGLU) leave HBM idle for ~25 us per layer. The backend learns
//! which weight follows which in the one-row GEMV sequence of a step (a successor table keyed by
//! the weight's device address, filled as GEMVs launch; the sequence is cyclic, so the last GEMV
//! of a step learns the first of the next). After each GEMV it forks the side stream: an event
//! recorded on the main stream, the side stream waiting on it (so the prefetch starts only once
//! that GEMV has finished and does not compete with it), then `prefetch_l2` over the first
//! `POCKET_L2_PREFETCH_MB` MiB of the next weight on a few blocks. The side stream is joined back
//! into the main stream before a capture ends (a capture must rejoin every stream it forked) and
//! before `synchronize`. Capture keeps the fork: the side stream's first op waits on an event
//! recorded on the capturing stream, which pulls it into the capture, and event records add no
//! node, so the programmatic edges between main-stream kernels stay.
//!
//! The prefetch only touches caches: results cannot change. A learned successor whose weight was
//! freed is only prefetched while the pool still holds its block (the pool caches freed blocks);
//! [`CudaBackend::set_l2_prefetch`] forgets the table.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex};

use cudarc::driver::{result as dr, CudaEvent, CudaStream};

use super::kernels::Kernel;
use super::matmul::GEMV_MAX_ROWS;
use super::memory::cuda_err;
use super::switch::{EnvNumber, EnvSwitch};
use super::CudaBackend;
use crate::{KernelError, Result, Weight, WeightStorage};

/// The switch (`POCKET_L2_PREFETCH=1` turns it on).
static ON: EnvSwitch = EnvSwitch::off_unless_one("POCKET_L2_PREFETCH");
/// MiB of the next weight prefetched after each GEMV (its first bytes; L2 is 50 MB).
static MIB: EnvNumber = EnvNumber::new("POCKET_L2_PREFETCH_MB", 16);
/// Blocks of the prefetch kernel (few, to leave the SMs to the small kernels).
static BLOCKS: EnvNumber = EnvNumber::new("POCKET_L2_PREFETCH_BLOCKS", 4);
/// KiB per bulk prefetch instruction (sm_90) or per thread's run of 128-byte line prefetches.
static CHUNK_KIB: EnvNumber = EnvNumber::new("POCKET_L2_PREFETCH_CHUNK_KB", 32);

/// Threads per prefetch block.
const THREADS: u32 = 128;

/// The prefetcher's settings and learned GEMV order (one per backend).
pub(crate) struct L2Prefetch {
    on: AtomicBool,
    /// Bytes of the next weight to prefetch (its first ones).
    budget: AtomicUsize,
    /// Most blocks one prefetch launch uses.
    blocks: AtomicU32,
    /// Bytes per prefetch piece (a multiple of 16).
    chunk: AtomicU32,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    side: Option<Side>,
    /// Weight address -> (address, bytes) of the weight whose GEMV came next.
    next: HashMap<u64, (u64, usize)>,
    /// The weight of the last GEMV seen.
    prev: Option<u64>,
    /// The side stream has work the main stream has not joined.
    pending: bool,
}

impl State {
    /// Records that a GEMV over the weight at `ptr` (`len` bytes) follows the previous one and
    /// returns the weight learned to follow it, if any; `None` also for a repeat of the previous
    /// weight (handled already).
    fn learn(&mut self, ptr: u64, len: usize) -> Option<(u64, usize)> {
        match self.prev {
            Some(p) if p == ptr => return None,
            Some(p) => {
                self.next.insert(p, (ptr, len));
            }
            None => {}
        }
        self.prev = Some(ptr);
        self.next.get(&ptr).copied()
    }
}

/// The side stream and its fork and join events (reused: a wait takes the event's state when
/// it is enqueued).
struct Side {
    stream: Arc<CudaStream>,
    fork: CudaEvent,
    join: CudaEvent,
}

impl L2Prefetch {
    /// Settings from the environment (`POCKET_L2_PREFETCH`, `_MB`, `_BLOCKS`, `_CHUNK_KB`).
    pub(crate) fn from_env() -> L2Prefetch {
        L2Prefetch {
            on: AtomicBool::new(ON.on()),
            budget: AtomicUsize::new(MIB.get() << 20),
            blocks: AtomicU32::new(BLOCKS.get().clamp(1, 1024) as u32),
            chunk: AtomicU32::new(chunk_bytes(CHUNK_KIB.get() << 10)),
            state: Mutex::new(State::default()),
        }
    }

    fn lock(&self) -> Result<std::sync::MutexGuard<'_, State>> {
        self.state
            .lock()
            .map_err(|_| cuda_err("l2_prefetch", "state lock poisoned"))
    }
}

/// A piece size the kernel accepts: a multiple of 16 bytes, at least 128 (one line), below 4 GiB.
fn chunk_bytes(b: usize) -> u32 {
    (b.clamp(128, 1 << 30) & !15) as u32
}

/// Blocks for a prefetch of `bytes` in pieces of `chunk`: enough for one piece per thread, at most
/// `max`.
fn grid_blocks(bytes: usize, chunk: u32, max: u32) -> u32 {
    let per_block = chunk as usize * THREADS as usize;
    bytes.div_ceil(per_block).clamp(1, max.max(1) as usize) as u32
}

/// The device address and byte size of a weight on `be`.
fn weight_range(be: &CudaBackend, op: &'static str, w: &Weight) -> Result<(u64, usize)> {
    match &w.storage {
        WeightStorage::Cuda(c) if c.ordinal() == be.ctx.ordinal() => {
            Ok((c.storage.ptr(), c.len_bytes()))
        }
        other => Err(KernelError::WrongDevice {
            op,
            tensor: "weight",
            found: match other {
                WeightStorage::Host { .. } => "cpu".into(),
                WeightStorage::Cuda(c) => format!("cuda:{}", c.ordinal()),
            },
            expected: format!("cuda:{}", be.ctx.ordinal()),
        }),
    }
}

impl CudaBackend {
    /// Turns the L2 prefetch of the next decode GEMV's weight on or off for later launches
    /// (`POCKET_L2_PREFETCH=1` at open) and forgets the learned GEMV order. A graph keeps the
    /// prefetches it captured. Results do not change either way: the prefetch only fills L2.
    pub fn set_l2_prefetch(&self, on: bool) {
        self.l2.on.store(on, Relaxed);
        if let Ok(mut s) = self.l2.lock() {
            s.next.clear();
            s.prev = None;
        }
    }

    /// Whether the L2 prefetch of the next decode GEMV's weight is on.
    pub fn l2_prefetch(&self) -> bool {
        self.l2.on.load(Relaxed)
    }

    /// Sets how many bytes of the next weight each prefetch brings in (its first ones;
    /// `POCKET_L2_PREFETCH_MB` at open, default 16 MiB).
    pub fn set_l2_prefetch_budget(&self, bytes: usize) {
        self.l2.budget.store(bytes, Relaxed);
    }

    /// The prefetch budget in bytes.
    pub fn l2_prefetch_budget(&self) -> usize {
        self.l2.budget.load(Relaxed)
    }

    /// Sets the prefetch kernel's grid: at most `blocks` blocks of 128 threads, `chunk_bytes` per
    /// piece (rounded down to a multiple of 16, at least 128; `POCKET_L2_PREFETCH_BLOCKS`,
    /// default 4, and `POCKET_L2_PREFETCH_CHUNK_KB`, default 32, at open).
    pub fn set_l2_prefetch_grid(&self, blocks: u32, chunk_bytes: usize) {
        self.l2.blocks.store(blocks.clamp(1, 1024), Relaxed);
        self.l2.chunk.store(self::chunk_bytes(chunk_bytes), Relaxed);
    }

    /// The prefetch kernel's (most blocks, bytes per piece).
    pub fn l2_prefetch_grid(&self) -> (u32, u32) {
        (self.l2.blocks.load(Relaxed), self.l2.chunk.load(Relaxed))
    }

    /// Prefetches the first `bytes` (at most the whole) of weight `w` into L2: `forked`, on the
    /// side stream after the work launched so far on the main stream (joined back at
    /// `end_capture` and `synchronize`, as the decode prefetch); else on the main stream. For
    /// benchmarks; works whether or not the decode prefetch is on.
    pub fn prefetch_weight_l2(&self, w: &Weight, bytes: usize, forked: bool) -> Result<()> {
        let (ptr, len) = weight_range(self, "prefetch_weight_l2", w)?;
        let n = bytes.min(len);
        if forked {
            let mut s = self.l2.lock()?;
            self.fork_prefetch(&mut s, ptr, n)
        } else {
            self.launch_prefetch(self.stream.as_ref(), ptr, n)
        }
    }

    /// Busy-waits one device thread on the main stream for `ns` nanoseconds: the benchmarks'
    /// stand-in for the small kernels between two GEMVs (HBM idle, the SMs almost free).
    pub fn spin_ns(&self, ns: u64) -> Result<()> {
        self.launch("spin_ns", Kernel::SpinNs, (1, 1, 1), 32, args![ns])
    }

    /// Called after an op launched a GEMV over weight `w` for `n` activation rows (`matmul`, and
    /// every fused op that launches its own GEMV must call it too, or the learned order skips
    /// that weight): learns the GEMV order and, where the successor of `w` is known, forks its
    /// prefetch. Does nothing while the prefetch is off or for prefill-sized batches. A second
    /// call for the same weight in a row (a fused op that fell back to `matmul`) does nothing.
    pub(crate) fn after_decode_gemv(&self, w: &Weight, n: usize) -> Result<()> {
        if !self.l2_prefetch() || n == 0 || n > GEMV_MAX_ROWS {
            return Ok(());
        }
        let (ptr, len) = weight_range(self, "matmul", w)?;
        let mut s = self.l2.lock()?;
        let Some((next, next_len)) = s.learn(ptr, len) else {
            return Ok(());
        };
        let n = next_len.min(self.l2_prefetch_budget());
        self.fork_prefetch(&mut s, next, n)
    }

    /// Makes the main stream wait for everything launched on the side stream (nothing to do
    /// when nothing is pending). Before ending a capture and before synchronizing.
    pub(crate) fn l2_prefetch_join(&self) -> Result<()> {
        let mut s = self.l2.lock()?;
        if !s.pending {
            return Ok(());
        }
        let Some(side) = s.side.as_ref() else {
            return Err(cuda_err(
                "l2_prefetch join",
                "pending work without a side stream",
            ));
        };
        side.join
            .record(&side.stream)
            .map_err(|e| cuda_err("l2_prefetch join", e))?;
        self.stream
            .wait(&side.join)
            .map_err(|e| cuda_err("l2_prefetch join", e))?;
        s.pending = false;
        Ok(())
    }

    /// Launches the prefetch of `bytes` at `ptr` on the side stream, after the main stream's
    /// work so far.
    fn fork_prefetch(&self, s: &mut State, ptr: u64, bytes: usize) -> Result<()> {
        if bytes < 16 {
            return Ok(());
        }
        if s.side.is_none() {
            let err = |e| cuda_err("l2_prefetch side stream", e);
            s.side = Some(Side {
                stream: self.ctx.new_stream().map_err(err)?,
                fork: self.ctx.new_event(None).map_err(err)?,
                join: self.ctx.new_event(None).map_err(err)?,
            });
        }
        let Some(side) = s.side.as_ref() else {
            return Err(cuda_err("l2_prefetch fork", "no side stream"));
        };
        let err = |e| cuda_err("l2_prefetch fork", e);
        side.fork.record(&self.stream).map_err(err)?;
        side.stream.wait(&side.fork).map_err(err)?;
        // From here the side stream may hold work the main stream must rejoin (in a capture the
        // wait above already pulled it in), even if the launch below fails.
        s.pending = true;
        self.launch_prefetch(&side.stream, ptr, bytes)
    }

    /// Launches `prefetch_l2` over `bytes` (rounded down to 16) at `ptr` on `stream`.
    fn launch_prefetch(&self, stream: &CudaStream, ptr: u64, bytes: usize) -> Result<()> {
        let bytes = bytes & !15;
        if bytes == 0 {
            return Ok(());
        }
        let chunk = self.l2.chunk.load(Relaxed);
        let blocks = grid_blocks(bytes, chunk, self.l2.blocks.load(Relaxed));
        let func = self.kernels.get(Kernel::PrefetchL2)?;
        self.ctx
            .bind_to_thread()
            .map_err(|e| cuda_err("l2_prefetch", e))?;
        // SAFETY: prefetch_l2(const uint8_t*, unsigned long long, unsigned int); the range lies in
        // one live device allocation (a weight's block) and the kernel only reads it into L2.
        unsafe {
            dr::launch_kernel(
                func.cu_function(),
                (blocks, 1, 1),
                (THREADS, 1, 1),
                0,
                stream.cu_stream(),
                args![ptr, bytes as u64, chunk],
            )
        }
        .map_err(|e| KernelError::Cuda {
            op: "l2_prefetch",
            msg: format!("launch of prefetch_l2 grid {blocks} over {bytes} bytes: {e}"),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::{chunk_bytes, grid_blocks, State};

    #[test]
    fn the_gemv_order_is_learned_cyclically_and_repeats_are_ignored() {
        let mut s = State::default();
        // Step 1 (eager): nothing is known yet.
        for w in [10, 20, 30] {
            assert_eq!(s.learn(w, w as usize), None);
        }
        // Step 2: the first GEMV learns it follows the last of step 1 (the cycle); the others
        // know their successors from step 1, the last one the first (learned just now).
        assert_eq!(s.learn(10, 10), Some((20, 20)));
        assert_eq!(s.learn(10, 10), None, "a repeat of the previous weight");
        assert_eq!(s.learn(20, 20), Some((30, 30)));
        assert_eq!(s.learn(30, 30), Some((10, 10)));
        // A changed order overwrites: 20 is now followed by 40.
        assert_eq!(s.learn(20, 20), Some((30, 30)));
        assert_eq!(s.learn(40, 40), None);
        assert_eq!(s.learn(20, 20), Some((40, 40)));
    }

    #[test]
    fn pieces_are_whole_16_byte_units_of_at_least_a_line() {
        assert_eq!(chunk_bytes(32 << 10), 32 << 10);
        assert_eq!(chunk_bytes(1000), 992);
        assert_eq!(chunk_bytes(0), 128);
    }

    #[test]
    fn the_grid_is_one_piece_per_thread_up_to_the_cap() {
        // 16 MiB in 32 KiB pieces: 512 pieces, 4 blocks of 128 threads.
        assert_eq!(grid_blocks(16 << 20, 32 << 10, 8), 4);
        assert_eq!(grid_blocks(16 << 20, 32 << 10, 2), 2);
        assert_eq!(grid_blocks(16, 32 << 10, 4), 1);
    }
}
