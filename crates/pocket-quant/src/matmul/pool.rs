//! A tiny spin-then-park helper pool for decode GEMVs.
//!
//! Why not rayon here: a decode step runs a few hundred small GEMVs (tens of microseconds each)
//! separated by microseconds of serial work. Rayon's idle workers go to sleep between them and
//! each fork pays a futex wake and a context switch; measured on the 2-core box, 2-thread decode
//! was slower than 1-thread. These helpers spin on a generation counter for a while after each
//! job (like ggml's thread pool) and park only when no job has come for ~a millisecond.
//!
//! Protocol: the caller publishes the job (closure pointer, chunk count), then bumps `gen`.
//! Chunks are claimed with a compare-exchange on `claim`, which holds `(generation << 32) |
//! next_chunk`; a claim only succeeds for the current generation while chunks remain, and the
//! caller returns only after `done` reaches the chunk count, so a claimed chunk's closure is
//! always alive and a stale helper never calls it.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::SeqCst};
use std::sync::{Mutex, OnceLock};
use std::thread::Thread;
use std::time::{Duration, Instant};

/// A type-erased `&(dyn Fn(usize) + Sync)`, valid for the generation it was published with.
type JobRef = *const (dyn Fn(usize) + Sync);

struct Pool {
    gen: AtomicU64,
    claim: AtomicU64,
    done: AtomicUsize,
    parts: AtomicUsize,
    helpers_wanted: AtomicUsize,
    job: Mutex<Option<SendJob>>,
    /// Helper threads (for unparking); fixed after start.
    threads: Vec<Thread>,
    /// One caller at a time (GEMVs from several threads at once fall back to serial).
    busy: Mutex<()>,
}

#[derive(Clone, Copy)]
struct SendJob(JobRef);
// SAFETY: the pointee is `Sync` and outlives every use (see the module protocol).
unsafe impl Send for SendJob {}

/// How long an idle helper spins before parking.
const SPIN: Duration = Duration::from_micros(1000);

fn pool() -> &'static Pool {
    static POOL: OnceLock<&'static Pool> = OnceLock::new();
    POOL.get_or_init(|| {
        let n = std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1)
            .saturating_sub(1);
        // The helpers need the pool's address, the pool needs their handles: start them parked
        // on a barrier-free handshake through a leaked box.
        let pool: &'static mut Pool = Box::leak(Box::new(Pool {
            gen: AtomicU64::new(0),
            claim: AtomicU64::new(0),
            done: AtomicUsize::new(0),
            parts: AtomicUsize::new(0),
            helpers_wanted: AtomicUsize::new(0),
            job: Mutex::new(None),
            threads: Vec::new(),
            busy: Mutex::new(()),
        }));
        let addr = pool as *const Pool as usize;
        for i in 0..n {
            let h = std::thread::Builder::new()
                .name(format!("pocket-gemv-{i}"))
                .spawn(move || {
                    // SAFETY: the pool is leaked ('static) and fully built before any job is
                    // published (helpers only read it after `gen` changes).
                    helper(unsafe { &*(addr as *const Pool) }, i)
                })
                .expect("spawn a GEMV helper thread");
            pool.threads.push(h.thread().clone());
        }
        pool
    })
}

/// Claims and runs chunks of generation `g` until none are left.
fn work(p: &Pool, g: u64, f: JobRef) {
    let parts = p.parts.load(SeqCst) as u64;
    loop {
        let v = p.claim.load(SeqCst);
        if v >> 32 != g & 0xffff_ffff || (v & 0xffff_ffff) >= parts {
            return;
        }
        if p.claim.compare_exchange(v, v + 1, SeqCst, SeqCst).is_ok() {
            // SAFETY: a successful claim of generation `g` means `g` is not finished, so the
            // caller is still waiting and `f` is alive.
            unsafe { (*f)((v & 0xffff_ffff) as usize) };
            p.done.fetch_add(1, SeqCst);
        }
    }
}

fn helper(p: &'static Pool, index: usize) {
    let mut seen = 0u64;
    let mut idle_since = Instant::now();
    loop {
        let g = p.gen.load(SeqCst);
        if g != seen {
            seen = g;
            if index < p.helpers_wanted.load(SeqCst) {
                let job = *p.job.lock().unwrap_or_else(|e| e.into_inner());
                if let Some(SendJob(f)) = job {
                    work(p, g, f);
                }
            }
            idle_since = Instant::now();
            continue;
        }
        if idle_since.elapsed() < SPIN {
            std::hint::spin_loop();
        } else {
            std::thread::park_timeout(Duration::from_millis(5));
        }
    }
}

/// Runs `f(0..parts)` on the calling thread and up to `threads - 1` helpers; returns `false`
/// (without running anything) when the pool is busy with another caller or has no helpers.
pub(super) fn run(parts: usize, threads: usize, f: &(dyn Fn(usize) + Sync)) -> bool {
    let p = pool();
    if p.threads.is_empty() || threads < 2 {
        return false;
    }
    let Ok(_guard) = p.busy.try_lock() else {
        return false;
    };
    // SAFETY (lifetime erasure): helpers call `f` only for claims of this generation, and we
    // return only after every claimed chunk is done.
    let job: JobRef = unsafe { std::mem::transmute::<&(dyn Fn(usize) + Sync), JobRef>(f) };
    *p.job.lock().unwrap_or_else(|e| e.into_inner()) = Some(SendJob(job));
    p.parts.store(parts, SeqCst);
    p.done.store(0, SeqCst);
    p.helpers_wanted.store(threads - 1, SeqCst);
    let g = p.gen.load(SeqCst) + 1;
    p.claim.store((g & 0xffff_ffff) << 32, SeqCst);
    p.gen.store(g, SeqCst);
    for t in p.threads.iter().take(threads - 1) {
        t.unpark();
    }
    work(p, g, job);
    while p.done.load(SeqCst) < parts {
        std::hint::spin_loop();
    }
    // Close the generation before anything of the next one is written: a helper that still
    // holds generation `g` can no longer claim (it would read the next job's `parts`).
    p.claim
        .store(((g & 0xffff_ffff) << 32) | 0xffff_ffff, SeqCst);
    *p.job.lock().unwrap_or_else(|e| e.into_inner()) = None;
    true
}

#[cfg(test)]
mod tests {
    use super::run;
    use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};

    /// Every chunk runs exactly once per call, over many back-to-back calls from several
    /// threads at once (callers that find the pool busy run their chunks themselves).
    #[test]
    fn each_chunk_once_under_contention() {
        std::thread::scope(|s| {
            for t in 0..3 {
                s.spawn(move || {
                    for i in 0..3000 {
                        let parts = 1 + (i * 7 + t) % 13;
                        let hits: Vec<AtomicUsize> =
                            (0..parts).map(|_| AtomicUsize::new(0)).collect();
                        let f = |c: usize| {
                            hits[c].fetch_add(1, SeqCst);
                        };
                        if !run(parts, 2, &f) {
                            (0..parts).for_each(f);
                        }
                        assert!(hits.iter().all(|h| h.load(SeqCst) == 1), "call {i}");
                    }
                });
            }
        });
    }
}
