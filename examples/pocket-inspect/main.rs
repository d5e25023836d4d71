//! pocket-inspect: inspect and validate GGUF and safetensors checkpoints.
//!
//! `cargo run --release --example pocket-inspect -- [--json] <info|tensors|check|dump|tokenize> ...`
//! Exit status: 0 success, 1 a failed `check`, 2 any error (one line on stderr).

mod args;
mod check;
mod dump;
mod info;
mod tensors;
mod tokenize;

#[cfg(test)]
mod tests;

use std::process::ExitCode;

use args::{Cli, Command};
use pocket_formats::TensorStore;

fn open(path: &std::path::Path) -> Result<TensorStore, String> {
    TensorStore::open(path).map_err(|e| e.to_string())
}

/// Writes to stdout, ignoring a closed pipe (`| head`).
fn emit(text: &str) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(text.as_bytes());
    let _ = out.flush();
}

/// Runs a parsed command; `Ok(false)` means a failed audit.
fn run(cli: &Cli) -> Result<bool, String> {
    match &cli.command {
        Command::Help => emit(&format!("{}\n", args::USAGE)),
        Command::Info { path } => {
            let r = info::report(&open(path)?);
            if cli.json {
                emit(&format!("{}\n", info::to_json(&r)));
            } else {
                emit(&info::render_human(&r));
            }
        }
        Command::Tensors { path, filter } => {
            let rows = tensors::rows(&open(path)?, filter.as_deref())?;
            if cli.json {
                emit(&format!("{}\n", serde_json::Value::Array(rows)));
            } else {
                emit(&tensors::render_human(&rows));
            }
        }
        Command::Check { path } => {
            let a = check::audit(&open(path)?)?;
            if cli.json {
                emit(&format!("{}\n", a.to_json()));
            } else {
                emit(&a.render_human());
            }
            return Ok(a.ok());
        }
        Command::Dump { path, tensor, out } => {
            let store = open(path)?;
            let view = store.tensor(tensor).map_err(|e| e.to_string())?;
            let n = dump::dump(&view, out)?;
            if cli.json {
                emit(&format!(
                    "{}\n",
                    serde_json::json!({"tensor": view.name, "shape": view.shape, "values": n, "out": out})
                ));
            } else {
                emit(&format!(
                    "wrote {n} f32 values of {} {:?} to {}\n",
                    view.name,
                    view.shape,
                    out.display()
                ));
            }
        }
        Command::Tokenize(t) => tokenize::run(t).map_err(|e| e.to_string())?,
    }
    Ok(true)
}

fn main() -> ExitCode {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let cli = match args::parse(&argv) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("pocket-inspect: {e}\n{}", args::USAGE);
            return ExitCode::from(2);
        }
    };
    match run(&cli) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("pocket-inspect: error: {}", e.replace('\n', " "));
            ExitCode::from(2)
        }
    }
}
