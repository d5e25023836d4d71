//! `cargo xtask bench`: criterion microbenchmarks and end-to-end runs through the release
//! `pocket-bench` binary.
//!
//! - `cargo xtask bench` or `cargo xtask bench micro [ARGS]`: `cargo bench [ARGS]` (criterion).
//! - `cargo xtask bench run|set|synth|report|presets|bandwidth ARGS`: builds `pocket-bench` in
//!   release and runs that subcommand with ARGS (see `pocket-bench --help`).

use std::process::Command;

use crate::workspace_root;

/// Runs the task.
pub fn run(args: &[String]) -> Result<(), String> {
    let root = workspace_root();
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let sub = args.first().map(String::as_str).unwrap_or("micro");
    let status = match sub {
        "micro" => Command::new(&cargo)
            .current_dir(&root)
            .arg("bench")
            .args(args.iter().skip(1))
            .status(),
        "run" | "set" | "synth" | "report" | "presets" | "bandwidth" => {
            let built = Command::new(&cargo)
                .current_dir(&root)
                .args([
                    "build",
                    "--release",
                    "-p",
                    "pocket-bench",
                    "--bin",
                    "pocket-bench",
                ])
                .status()
                .map_err(|e| e.to_string())?;
            if !built.success() {
                return Err("building pocket-bench failed".into());
            }
            let target = std::env::var("CARGO_TARGET_DIR")
                .map(std::path::PathBuf::from)
                .unwrap_or_else(|_| root.join("target"));
            Command::new(target.join("release/pocket-bench"))
                .current_dir(&root)
                .args(args)
                .status()
        }
        other => {
            return Err(format!(
                "unknown bench task `{other}` (micro, run, set, synth, report, presets, bandwidth)"
            ))
        }
    };
    let status = status.map_err(|e| e.to_string())?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("exited with {status}"))
    }
}
