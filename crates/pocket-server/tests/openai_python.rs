//! Runs tests/openai_client (the official `openai` Python package) against an in-process server.
//!
//! Needs `POCKET_PYTHON` (set by scripts/test) pointing at a Python with `openai` installed.
//! Without it the test is skipped locally, and fails under CI (`CI=true`).

mod common;

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use common::start;
use pocket_server::fake::FakeConfig;
use pocket_server::ServerConfig;

fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true" || v == "1")
}

/// Returns the Python to use, or None (skip) outside CI.
fn python() -> Option<String> {
    let py = match std::env::var("POCKET_PYTHON") {
        Ok(p) if !p.is_empty() => p,
        _ => {
            assert!(
                !in_ci(),
                "POCKET_PYTHON is not set under CI: run through scripts/test"
            );
            eprintln!("skipping: POCKET_PYTHON not set (run through scripts/test)");
            return None;
        }
    };
    let ok = std::process::Command::new(&py)
        .args(["-c", "import openai"])
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        assert!(!in_ci(), "{py} cannot import openai under CI");
        eprintln!("skipping: {py} cannot import openai");
        return None;
    }
    Some(py)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn official_openai_client_suite() {
    let Some(py) = python() else { return };
    let fake = FakeConfig {
        context_length: 512,
        ..FakeConfig::default()
    };
    let cfg = ServerConfig {
        api_key: Some("suite-key".into()),
        ..ServerConfig::default()
    };
    let s = start(fake, cfg).await;
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/openai_client");
    let child = tokio::process::Command::new(&py)
        .args(["-m", "unittest", "discover", "-v", "-s"])
        .arg(&dir)
        .env("POCKET_BASE_URL", format!("http://{}/v1", s.handle.addr))
        .env("POCKET_API_KEY", "suite-key")
        .env("POCKET_MODEL", "fake-model")
        .env("NO_PROXY", "*")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn python");
    let out = tokio::time::timeout(Duration::from_secs(300), child.wait_with_output())
        .await
        .expect("python suite timed out")
        .expect("python suite");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!("{text}");
    assert!(out.status.success(), "openai client suite failed:\n{text}");
    assert!(
        !text.contains("skipped"),
        "no test may skip against the fake backend:\n{text}"
    );
    let st = s.backend_stats();
    assert_eq!((st.running, st.queued, st.cache_blocks_used), (0, 0, 0));
}
