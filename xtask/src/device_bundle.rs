//! `cargo xtask device-bundle [-p PKG]... [--no-examples]`: builds the test binaries (release) of
//! pocket-kernels and any extra packages, and the root package's examples, strips them, and gathers
//! them with `scripts/device/run.sh` into `bundle/` (gitignored), which the device tool carries to
//! the GPU machine. There, `bash bundle/run.sh` runs every check and benchmark and prints a summary
//! table last.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::workspace_root;

/// CPU-only test binaries that read `../shared/data` (tokenizer vectors, chat-template fixtures),
/// which does not travel to the GPU machine: they run in CI, not in the bundle (on the device
/// they could only fail for the missing files).
const HOST_DATA_TESTS: &[(&str, &str)] = &[
    ("pocket-models", "chat_template_fixtures"),
    ("pocket-models", "sampling_stop"),
    ("pocket-models", "tokenizer_behaviour"),
    ("pocket-models", "tokenizer_models"),
    ("pocket-models", "tokenizer_vectors"),
];

/// Runs the task.
pub fn run(args: &[String]) -> Result<(), String> {
    let root = workspace_root();
    let mut packages = vec!["pocket-kernels".to_string()];
    let mut examples = true;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "-p" | "--package" => packages.push(it.next().ok_or("-p needs a package")?.clone()),
            "--no-examples" => examples = false,
            other => return Err(format!("unknown argument `{other}`")),
        }
    }
    let bundle = root.join("bundle");
    let bin = bundle.join("bin");
    if bundle.exists() {
        std::fs::remove_dir_all(&bundle).map_err(|e| e.to_string())?;
    }
    std::fs::create_dir_all(&bin).map_err(|e| e.to_string())?;

    let mut built = Vec::new();
    for p in &packages {
        let exes = cargo_json(&root, &["test", "--release", "--no-run", "-p", p])?;
        for (name, exe) in exes {
            if HOST_DATA_TESTS.contains(&(p.as_str(), name.as_str())) {
                continue;
            }
            built.push((format!("test-{}-{}", p.replace('-', "_"), name), exe));
        }
    }
    if examples {
        match cargo_json(&root, &["build", "--release", "--examples"]) {
            Ok(exes) => built.extend(exes.into_iter().map(|(n, e)| (format!("example-{n}"), e))),
            Err(e) => eprintln!("warning: examples not bundled: {e}"),
        }
    }
    // The end-to-end tools: pocket-bench generates synthetic models on the GPU machine (nothing
    // large can travel there) and runs parity and benchmarks; it needs llama.cpp vocabularies.
    let bench = cargo_json(
        &root,
        &["build", "--release", "-p", "pocket-bench", "--bins"],
    )?;
    built.extend(
        bench
            .into_iter()
            .filter(|(n, _)| n == "pocket_bench")
            .map(|(_, e)| ("pocket-bench".to_string(), e)),
    );
    let vocab = bundle.join("vocab");
    std::fs::create_dir_all(&vocab).map_err(|e| e.to_string())?;
    let shared = root.join("../shared/data/tokenizer-vectors");
    for f in [
        "ggml-vocab-gpt-2.gguf",
        "ggml-vocab-llama-bpe.gguf",
        "ggml-vocab-qwen2.gguf",
    ] {
        std::fs::copy(shared.join(f), vocab.join(f)).map_err(|e| format!("{f}: {e}"))?;
    }
    for (name, exe) in &built {
        let dst = bin.join(name);
        std::fs::copy(exe, &dst).map_err(|e| format!("{}: {e}", exe.display()))?;
        let _ = Command::new("strip").arg(&dst).status();
    }
    for script in [
        "run.sh",
        "ab.sh",
        "e2e.sh",
        "session.sh",
        "profile.sh",
        "profile_summary.py",
        "ncu_sass.sh",
        "trace.sh",
        "trace_layers.py",
    ] {
        std::fs::copy(
            root.join("scripts/device").join(script),
            bundle.join(script),
        )
        .map_err(|e| format!("{script}: {e}"))?;
    }
    let mut listing = String::new();
    for (name, _) in &built {
        listing += name;
        listing.push('\n');
    }
    std::fs::write(bundle.join("MANIFEST"), listing).map_err(|e| e.to_string())?;
    let size: u64 = built
        .iter()
        .filter_map(|(n, _)| std::fs::metadata(bin.join(n)).ok())
        .map(|m| m.len())
        .sum();
    eprintln!(
        "bundle/: {} binaries, {:.1} MiB",
        built.len(),
        size as f64 / (1 << 20) as f64
    );
    // At most 64 MiB travels to the GPU machine per call. Every binary embeds the same PTX and
    // cubins, so the archive is one xz stream (-T1) with a dictionary wider than one binary:
    // each copy after the first compresses to references (about 40x in all; a multi-threaded
    // xz splits the stream into blocks and loses that).
    let packed = root.join(".cache/device");
    std::fs::create_dir_all(&packed).map_err(|e| e.to_string())?;
    let status = Command::new("tar")
        .current_dir(&root)
        .env("XZ_OPT", "-T1 --lzma2=preset=6,dict=96MiB")
        .args(["-cJf", ".cache/device/bundle.tar.xz", "bundle"])
        .status()
        .map_err(|e| format!("tar: {e}"))?;
    if !status.success() {
        return Err("tar of bundle/ failed".into());
    }
    eprintln!("packed .cache/device/bundle.tar.xz: carry `.cache/device`, then `tar -xJf .cache/device/bundle.tar.xz`");
    Ok(())
}

/// Runs cargo with JSON messages and returns (target name, executable) of every binary built.
fn cargo_json(root: &Path, args: &[&str]) -> Result<Vec<(String, PathBuf)>, String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .current_dir(root)
        .args(args)
        .arg("--message-format=json-render-diagnostics")
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| e.to_string())?;
    if !out.status.success() {
        return Err(format!("cargo {} failed", args.join(" ")));
    }
    let mut exes = Vec::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        if v["reason"] != "compiler-artifact" {
            continue;
        }
        if let Some(exe) = v["executable"].as_str() {
            let name = v["target"]["name"]
                .as_str()
                .unwrap_or("bin")
                .replace('-', "_");
            exes.push((name, PathBuf::from(exe)));
        }
    }
    Ok(exes)
}
