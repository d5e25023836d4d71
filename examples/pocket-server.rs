//! OpenAI-compatible server: `cargo run --release --example pocket-server -- --help`.

fn main() -> std::process::ExitCode {
    pocket_server::cli::main_from_env()
}
