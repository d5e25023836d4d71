//! `pocket-bench`: synthetic models, end-to-end runs, reports. Runs without cargo (the GPU
//! machine gets it in the device bundle).

use std::path::PathBuf;
use std::process::ExitCode;

use pocket_bench::cli::Args;
use pocket_bench::e2e::{run_e2e, summary, RunRequest};
use pocket_bench::error::{BenchError, Result};
use pocket_bench::preset::presets;
use pocket_bench::report::render_dir;
use pocket_bench::roofline::host_copy_bandwidth;
use pocket_bench::runner::RunSettings;
use pocket_bench::synth::{synthesize, SynthOptions};

const USAGE: &str = "usage:
  pocket-bench synth PRESET FORMAT --out PATH [--vocab-dir DIR] [--seed N] [--threads T]
  pocket-bench run --model PATH|synthetic:PRESET:FORMAT [--device cpu|cuda] [--engine pocket|standin]
                   [--prompt-tokens N] [--gen-tokens M] [--reps R] [--warmup W] [--batch B] [--depth D]
                   [--threads T] [--compare-llama-bench PATH] [--record-dir DIR] [--synth-dir DIR]
                   [--vocab-dir DIR] [--kv-cache f32|f16|bf16] [--json]
  pocket-bench set cuda|hybrid|moe|cpu [run options except --model] [--delete-after]
  pocket-bench parity --model PATH|synthetic:PRESET:FORMAT [--device cuda] [--steps 64]
                   [--prompt-lengths 7,33,130] [--rel-tol 0.002] [--noise-factor 2] [--margin 0.05]
                   [--synth-dir DIR] [--json] [--ops: per-weight matmul] [--self: device noise floor]
  pocket-bench report DIR
  pocket-bench presets
  pocket-bench bandwidth [--mib N] [--threads T]
formats: q4_0 q4_1 q5_0 q5_1 q8_0 q2_k q3_k q4_k_m q4_k_s q5_k_m q6_k iq4_nl iq4_xs f16 bf16 f32
         (GGUF, llama.cpp mixes; add -pure for one type everywhere), st-bf16 st-f16 fp8 nvfp4 (safetensors)";

fn threads(a: &Args) -> Result<Option<usize>> {
    let t: Option<usize> = a.num_opt("threads")?;
    if let Some(n) = t {
        rayon::ThreadPoolBuilder::new()
            .num_threads(n)
            .build_global()
            .map_err(|e| BenchError::Usage(format!("--threads {n}: {e}")))?;
    }
    Ok(t)
}

fn synth_opts(a: &Args) -> Result<SynthOptions> {
    Ok(SynthOptions {
        vocab_dir: a.get("vocab-dir").map(PathBuf::from),
        seed: a.num("seed", 0u64)?,
    })
}

fn cmd_synth(argv: &[String]) -> Result<()> {
    let a = Args::parse(argv, &[])?;
    a.only(&["out", "vocab-dir", "seed", "threads"])?;
    let [preset, format] = a.positional.as_slice() else {
        return Err(BenchError::Usage(USAGE.into()));
    };
    let out = a
        .get("out")
        .map(PathBuf::from)
        .ok_or_else(|| BenchError::Usage("synth needs --out PATH".into()))?;
    threads(&a)?;
    let r = synthesize(preset, format, &out, &synth_opts(&a)?)?;
    println!("{}", serde_json::to_string_pretty(&r)?);
    eprintln!(
        "wrote {} ({:.2} GB) in {:.1} s ({:.2} GB/s)",
        r.path.display(),
        r.file_bytes as f64 / 1e9,
        r.seconds,
        r.file_bytes as f64 / 1e9 / r.seconds.max(1e-9)
    );
    Ok(())
}

const RUN_OPTS: &[&str] = &[
    "model",
    "kv-cache",
    "llama-model",
    "device",
    "engine",
    "prompt-tokens",
    "gen-tokens",
    "reps",
    "warmup",
    "batch",
    "depth",
    "threads",
    "compare-llama-bench",
    "record-dir",
    "synth-dir",
    "vocab-dir",
    "seed",
    "json",
    "delete-after",
];

fn request(a: &Args, model: String, threads: Option<usize>) -> Result<RunRequest> {
    Ok(RunRequest {
        llama_model: a.get("llama-model").map(str::to_string),
        model,
        device: a.get("device").unwrap_or("cpu").to_string(),
        engine: a.get("engine").unwrap_or("pocket").to_string(),
        settings: RunSettings {
            prompt_tokens: a.num("prompt-tokens", 512)?,
            gen_tokens: a.num("gen-tokens", 128)?,
            reps: a.num("reps", 5)?,
            batch: a.num("batch", 1)?,
            depth: a.num("depth", 0)?,
            warmup: a.num("warmup", 1)?,
            threads,
            vocab: 0,
        },
        compare_llama_bench: a.get("compare-llama-bench").map(PathBuf::from),
        record_dir: a.get("record-dir").map(PathBuf::from),
        synth: synth_opts(a)?,
        synth_dir: a.get("synth-dir").map(PathBuf::from),
        kv_cache: a.get("kv-cache").map(str::to_string),
    })
}

fn cmd_run(argv: &[String]) -> Result<()> {
    let a = Args::parse(argv, &["json"])?;
    a.only(RUN_OPTS)?;
    let model = a
        .get("model")
        .ok_or_else(|| BenchError::Usage("run needs --model".into()))?
        .to_string();
    let threads = threads(&a)?;
    let req = request(&a, model, threads)?;
    let rec = run_e2e(&req)?;
    if a.flag("json") {
        println!("{}", serde_json::to_string_pretty(&rec)?);
    } else {
        print!("{}", summary(&rec));
    }
    Ok(())
}

fn cmd_set(argv: &[String]) -> Result<()> {
    let a = Args::parse(argv, &["json", "delete-after"])?;
    a.only(RUN_OPTS)?;
    let [name] = a.positional.as_slice() else {
        return Err(BenchError::Usage("set NAME".into()));
    };
    let threads = threads(&a)?;
    let mut failed = 0;
    let mut rows = Vec::new();
    for e in pocket_bench::sets::set(name)? {
        let mut req = request(&a, e.model.to_string(), threads)?;
        if a.get("llama-model").is_none() {
            req.llama_model = e.llama_model.map(str::to_string);
        }
        if a.get("prompt-tokens").is_none() {
            req.settings.prompt_tokens = e.prompt;
        }
        if a.get("gen-tokens").is_none() {
            req.settings.gen_tokens = e.gen;
        }
        eprintln!("== {}", e.model);
        match run_e2e(&req) {
            Ok(rec) => {
                print!("{}", summary(&rec));
                rows.push(pocket_bench::report::row(&rec));
            }
            Err(err) => {
                failed += 1;
                eprintln!("{}: {err}", e.model);
            }
        }
        if a.flag("delete-after") {
            for spec in std::iter::once(e.model).chain(e.llama_model) {
                if let Some(Ok(s)) = pocket_bench::synth::SyntheticSpec::parse(spec) {
                    let dir = req
                        .synth_dir
                        .clone()
                        .unwrap_or_else(pocket_bench::synth::cache_dir);
                    if let Ok(f) = s.file_name() {
                        let p = dir.join(f);
                        let _ = std::fs::remove_file(&p).or_else(|_| std::fs::remove_dir_all(&p));
                    }
                }
            }
        }
    }
    println!("\n{}{}", pocket_bench::report::header(), rows.concat());
    if failed > 0 {
        return Err(BenchError::Model(format!(
            "{failed} run(s) of set {name} failed"
        )));
    }
    Ok(())
}

#[cfg(feature = "engine")]
fn cmd_parity(argv: &[String]) -> Result<()> {
    let a = Args::parse(argv, &["json", "ops", "self"])?;
    a.only(&[
        "ops",
        "self",
        "model",
        "device",
        "steps",
        "prompt-lengths",
        "rel-tol",
        "noise-factor",
        "margin",
        "synth-dir",
        "vocab-dir",
        "seed",
        "json",
    ])?;
    let spec = a
        .get("model")
        .ok_or_else(|| BenchError::Usage("parity needs --model".into()))?;
    let (path, _) = pocket_bench::e2e::resolve_model(
        spec,
        a.get("synth-dir").map(std::path::Path::new),
        &synth_opts(&a)?,
    )?;
    let device: pocket_kernels::DeviceKind = a
        .get("device")
        .unwrap_or("cuda")
        .parse()
        .map_err(BenchError::Usage)?;
    let lengths: Vec<usize> = a
        .get("prompt-lengths")
        .unwrap_or("7,33,130")
        .split(',')
        .map(|s| s.trim().parse())
        .collect::<std::result::Result<_, _>>()
        .map_err(|e| BenchError::Usage(format!("--prompt-lengths: {e}")))?;
    if a.flag("ops") {
        // Op-level bisect: each distinct weight's matmul (n = 1, 7, 33) and the embedding.
        for o in pocket_bench::parity::check_ops(&path, device, &[1, 7, 33])? {
            println!(
                "ops {} {} [{}x{}] n={}: max|d| {:.3e} (rel {:.2e}; vs exact: cpu {:.2e}, device {:.2e})",
                o.name,
                o.format,
                o.rows,
                o.cols,
                o.n,
                o.max_abs_diff,
                o.rel_diff,
                o.rel_err_cpu_dev.0,
                o.rel_err_cpu_dev.1
            );
        }
        return Ok(());
    }
    let prompts = pocket_bench::parity::prompts(&lengths, 32_000);
    if a.flag("self") {
        // The device's own noise floor: a prompt as one batch vs token by token.
        let steps = a.num("steps", 64usize)?;
        for (n, d, rel, eq) in pocket_bench::parity::check_self(&path, device, &prompts, steps)? {
            println!(
                "self {spec} on {device:?} prompt {n} tok: batch vs stepwise max|d| {d:.3e} \
                 (rel {rel:.2e}), greedy {eq}/{steps} equal"
            );
        }
        return Ok(());
    }
    let r = pocket_bench::parity::check(
        &path,
        device,
        &prompts,
        a.num("steps", 64usize)?,
        a.num("rel-tol", 0.002f32)?,
        a.num("noise-factor", 2.0f32)?,
        a.num("margin", 0.05f32)?,
    )?;
    if a.flag("json") {
        println!("{}", serde_json::to_string_pretty(&r)?);
    }
    for p in &r.prompts {
        println!(
            "parity {spec} prompt {} tok: logits max|d| {:.3e} (rel {:.2e}), greedy {}/{} equal, \
             forced max|d| {:.3e}, forced top-1 mismatches above margin {}: {}; reference noise \
             (cpu batch vs token by token) rel {:.2e}, greedy {}/{} equal; cpu vs exact \
             arithmetic rel {:.2e}",
            p.prompt_tokens,
            p.max_abs_diff,
            p.rel_diff,
            p.greedy_equal,
            p.greedy_len,
            p.forced_max_abs_diff,
            r.margin,
            p.forced_mismatches,
            p.reference_noise_rel,
            p.reference_greedy_equal,
            p.greedy_len,
            p.reference_exact_rel
        );
        if let Some(sp) = &p.split {
            println!(
                "parity {spec} prompt {} tok: greedy split at token {}: cpu {} vs device {}; \
                 cpu prefers its token by {:.3e}, device its own by {:.3e}, exact arithmetic \
                 the cpu's by {:.3e} (negative: the device's); step max|d| {:.3e}",
                p.prompt_tokens,
                sp.step,
                sp.tokens.0,
                sp.tokens.1,
                sp.reference_margin,
                sp.device_margin,
                sp.exact_margin,
                sp.max_abs_diff
            );
        }
    }
    println!(
        "parity {spec}: {} ({} vs {})",
        if r.pass { "PASS" } else { "FAIL" },
        r.device,
        r.reference
    );
    if r.pass {
        Ok(())
    } else {
        Err(BenchError::Model(format!("parity failed for {spec}")))
    }
}

fn cmd_report(argv: &[String]) -> Result<()> {
    let a = Args::parse(argv, &[])?;
    let [dir] = a.positional.as_slice() else {
        return Err(BenchError::Usage("report DIR".into()));
    };
    print!("{}", render_dir(&PathBuf::from(dir))?);
    Ok(())
}

fn cmd_presets() {
    println!("| preset | imitates | arch | hidden | layers | heads/kv | head dim | ffn | experts | vocab | vocab file |");
    println!("|---|---|---|---:|---:|---:|---:|---:|---|---:|---|");
    for p in presets() {
        let moe = p.moe.map_or("-".into(), |m| {
            format!("{} (top {}, ffn {})", m.experts, m.used, m.ffn)
        });
        println!(
            "| {} | {} | {} | {} | {} | {}/{} | {} | {} | {} | {} | {} |",
            p.name,
            p.about,
            p.arch.gguf_name(),
            p.hidden,
            p.layers,
            p.heads,
            p.kv_heads,
            p.head_dim,
            p.ffn,
            moe,
            p.vocab,
            p.vocab_file
        );
    }
}

fn cmd_bandwidth(argv: &[String]) -> Result<()> {
    let a = Args::parse(argv, &[])?;
    threads(&a)?;
    let b = host_copy_bandwidth(a.num("mib", 512usize)?);
    println!("{:.1} GB/s ({})", b.copy_bytes_per_s / 1e9, b.source);
    Ok(())
}

fn main() -> ExitCode {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let Some(cmd) = argv.first() else {
        eprintln!("{USAGE}");
        return ExitCode::from(2);
    };
    let rest = &argv[1..];
    let r = match cmd.as_str() {
        "synth" => cmd_synth(rest),
        "run" => cmd_run(rest),
        "set" => cmd_set(rest),
        "report" => cmd_report(rest),
        #[cfg(feature = "engine")]
        "parity" => cmd_parity(rest),
        "presets" => {
            cmd_presets();
            Ok(())
        }
        "bandwidth" => cmd_bandwidth(rest),
        "-h" | "--help" | "help" => {
            println!("{USAGE}");
            Ok(())
        }
        other => Err(BenchError::Usage(format!(
            "unknown command `{other}`\n{USAGE}"
        ))),
    };
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("pocket-bench: {e}");
            ExitCode::FAILURE
        }
    }
}
