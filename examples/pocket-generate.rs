//! Generate text from a model on the command line.
//!
//! ```sh
//! cargo run --release --example pocket-generate -- --model smollm2-135m-instruct \
//!     --prompt "The capital of France is" --max-tokens 16 --raw --temperature 0
//! ```
//!
//! `--raw` feeds the prompt without the chat template; `--json` prints
//! `{"ids": [generated ids], "text": "..."}` instead of streaming the text.

use std::io::Write;
use std::process::ExitCode;
use std::time::Instant;

use pocket_kernels::DeviceKind;
use pocket_models::sampling::SamplingParams;
use pocket_models::{Engine, GenerateParams};

/// Parsed command-line options.
struct Args {
    model: String,
    prompt: String,
    max_tokens: usize,
    temperature: f32,
    seed: Option<u64>,
    raw: bool,
    device: DeviceKind,
    json: bool,
    stats: bool,
}

const USAGE: &str = "usage: pocket-generate --model ALIAS|PATH --prompt TEXT [--max-tokens N] \
[--temperature T] [--seed S] [--raw] [--device cpu|cuda] [--json] [--stats]";

fn parse() -> Result<Args, String> {
    let mut a = Args {
        model: String::new(),
        prompt: String::new(),
        max_tokens: 128,
        temperature: 0.8,
        seed: None,
        raw: false,
        device: DeviceKind::Cpu,
        json: false,
        stats: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut val = |name: &str| it.next().ok_or_else(|| format!("{name} needs a value"));
        match flag.as_str() {
            "--model" => a.model = val("--model")?,
            "--prompt" => a.prompt = val("--prompt")?,
            "--max-tokens" => {
                a.max_tokens = val("--max-tokens")?
                    .parse()
                    .map_err(|e| format!("--max-tokens: {e}"))?
            }
            "--temperature" => {
                a.temperature = val("--temperature")?
                    .parse()
                    .map_err(|e| format!("--temperature: {e}"))?
            }
            "--seed" => a.seed = Some(val("--seed")?.parse().map_err(|e| format!("--seed: {e}"))?),
            "--device" => a.device = val("--device")?.parse()?,
            "--raw" => a.raw = true,
            "--json" => a.json = true,
            "--stats" => a.stats = true,
            "-h" | "--help" => return Err(USAGE.to_string()),
            other => return Err(format!("unknown argument `{other}`\n{USAGE}")),
        }
    }
    if a.model.is_empty() {
        return Err(format!("--model is required\n{USAGE}"));
    }
    Ok(a)
}

fn run(a: Args) -> Result<(), Box<dyn std::error::Error>> {
    let t0 = Instant::now();
    let mut engine = Engine::builder().model(&a.model).device(a.device).build()?;
    let load = t0.elapsed();
    let params = GenerateParams {
        max_tokens: a.max_tokens,
        sampling: SamplingParams {
            temperature: a.temperature,
            seed: a.seed,
            ..SamplingParams::default()
        },
        ..GenerateParams::default()
    };
    let ids = engine.encode_prompt(&a.prompt, a.raw)?;
    let t1 = Instant::now();
    let json = a.json;
    let mut out = std::io::stdout();
    let g = engine.generate_with(ids.clone(), params, |text| {
        if !json {
            let _ = out.write_all(text.as_bytes());
            let _ = out.flush();
        }
    })?;
    let gen = t1.elapsed();
    if json {
        println!("{}", serde_json::json!({ "ids": g.ids, "text": g.text }));
    } else {
        println!();
    }
    if a.stats {
        eprintln!("prompt ids: {ids:?}");
        eprintln!(
            "load {:.2}s, prompt {} tokens, generated {} tokens in {:.2}s ({:.1} tok/s incl. prefill)",
            load.as_secs_f64(),
            ids.len(),
            g.ids.len(),
            gen.as_secs_f64(),
            g.ids.len() as f64 / gen.as_secs_f64()
        );
    }
    Ok(())
}

fn main() -> ExitCode {
    let args = match parse() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    match run(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
