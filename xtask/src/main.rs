//! Project tasks: `cargo xtask <task>`.

mod bench;
mod build_ptx;
mod device_bundle;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let task = args.first().map(String::as_str).unwrap_or_default();
    let result = match task {
        "build-ptx" => build_ptx::run(&args[1..]),
        "device-bundle" => device_bundle::run(&args[1..]),
        "bench" => bench::run(&args[1..]),
        _ => {
            eprintln!("usage: cargo xtask <build-ptx|device-bundle|bench>");
            std::process::exit(2);
        }
    };
    if let Err(e) = result {
        eprintln!("xtask {task}: {e}");
        std::process::exit(1);
    }
}

/// The workspace root (the parent of this crate's directory).
pub fn workspace_root() -> std::path::PathBuf {
    let here = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    here.parent()
        .expect("xtask lives one level below the root")
        .to_path_buf()
}

/// Lower-case hex of a byte slice.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
