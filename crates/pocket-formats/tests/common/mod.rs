//! Helpers shared by the integration tests: temp paths and the Python reference interpreter.
#![allow(dead_code)]

use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};

static COUNTER: AtomicUsize = AtomicUsize::new(0);

/// A fresh, empty temporary directory unique to this process and call.
pub fn temp_dir(tag: &str) -> PathBuf {
    let n = COUNTER.fetch_add(1, Ordering::SeqCst);
    let dir = std::env::temp_dir().join(format!("pocket-formats-{tag}-{}-{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The workspace root.
pub fn workspace() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The Python with gguf-py 0.19.0: `$POCKET_PYTHON` (set by scripts/test), else the venv that
/// scripts/python-env.sh makes. Panics with instructions when neither exists: these tests must not
/// silently skip.
pub fn python() -> PathBuf {
    if let Some(p) = std::env::var_os("POCKET_PYTHON") {
        return PathBuf::from(p);
    }
    let venv = workspace().join(".cache/pyenv/bin/python");
    if venv.exists() {
        return venv;
    }
    panic!(
        "POCKET_PYTHON is not set and {} does not exist: run ./scripts/test (or \
         `source scripts/python-env.sh`) so gguf-py 0.19.0 is installed",
        venv.display()
    );
}

/// Runs `scripts/<script> args...` with the reference Python and returns stdout; panics with
/// stderr on failure.
pub fn run_py(script: &str, args: &[&str]) -> String {
    let out = Command::new(python())
        .arg(workspace().join("scripts").join(script))
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", python().display()));
    assert!(
        out.status.success(),
        "{script} {args:?} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Deterministic pseudo-random bytes.
pub fn bytes(n: usize, seed: u64) -> Vec<u8> {
    let mut x = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

/// Lower-case hex of `b`.
pub fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}
