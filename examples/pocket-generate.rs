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
use pocket_models::{Engine, FinishReason, GenerateParams};

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
    ignore_eos: bool,
}

const USAGE: &str = "usage: pocket-generate --model ALIAS|PATH --prompt TEXT [--max-tokens N] \
[--temperature T] [--seed S] [--raw] [--device cpu|cuda] [--json] [--stats] [--ignore-eos]";

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
        ignore_eos: false,
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
            "--ignore-eos" => a.ignore_eos = true,
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
        ignore_eos: a.ignore_eos,
        ..GenerateParams::default()
    };
    let ids = engine.encode_prompt(&a.prompt, a.raw)?;
    let id = engine.add_sequence(ids.clone(), params)?;
    let mut out = std::io::stdout();
    let (mut gen_ids, mut text) = (Vec::new(), String::new());
    let t1 = Instant::now();
    let mut prefill = None;
    'run: loop {
        for (sid, ev) in engine.step()? {
            if sid != id {
                continue;
            }
            prefill.get_or_insert_with(|| t1.elapsed());
            if let Some(t) = ev.token {
                if ev.finish != Some(FinishReason::Stop) {
                    gen_ids.push(t);
                }
            }
            if !a.json && !ev.text.is_empty() {
                out.write_all(ev.text.as_bytes())?;
                out.flush()?;
            }
            text.push_str(&ev.text);
            match ev.finish {
                Some(FinishReason::Error(e)) => return Err(e.into()),
                Some(_) => break 'run,
                None => {}
            }
        }
    }
    let total = t1.elapsed();
    if a.json {
        println!("{}", serde_json::json!({ "ids": gen_ids, "text": text }));
    } else {
        println!();
    }
    if a.stats {
        let prefill = prefill.unwrap_or_default();
        let decode = total - prefill;
        let decoded = gen_ids.len().saturating_sub(1);
        eprintln!("prompt ids: {ids:?}");
        eprintln!(
            "load {:.2}s; prefill {} tokens in {:.3}s ({:.1} tok/s); decode {} tokens in {:.3}s ({:.1} tok/s)",
            load.as_secs_f64(),
            ids.len(),
            prefill.as_secs_f64(),
            ids.len() as f64 / prefill.as_secs_f64(),
            decoded,
            decode.as_secs_f64(),
            decoded as f64 / decode.as_secs_f64().max(1e-9)
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
