//! Command-line front end used by `examples/pocket-server.rs`.

use std::net::{IpAddr, SocketAddr};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use pocket_kernels::DType;

use crate::backend::InferenceBackend;
use crate::fake::{FakeBackend, FakeConfig};
use crate::server::{Server, ServerConfig};

/// The model served when no `--model` is given.
pub const DEFAULT_MODEL: &str = "smollm2-135m-instruct";

/// Parsed command-line options.
#[derive(Debug, Clone, PartialEq)]
pub struct CliArgs {
    /// Models as given: `ALIAS|PATH` or `NAME=ALIAS|PATH` (at least one after defaults apply).
    pub models: Vec<String>,
    /// Address to bind.
    pub host: IpAddr,
    /// Port to bind.
    pub port: u16,
    /// Bearer key required on `/v1/*`.
    pub api_key: Option<String>,
    /// Sequences in the running batch at most.
    pub max_sequences: usize,
    /// Context length per sequence (tokens); `None` = the model's.
    pub ctx_size: Option<usize>,
    /// Device name (`cpu`, `cuda`, `cuda:1`).
    pub device: String,
    /// KV cache element type; `None` = the engine's default for the device (f16 on a GPU, f32 on
    /// the CPU).
    pub kv_cache: Option<DType>,
    /// Waiting requests allowed beyond the running batch (429 above).
    pub max_queue: usize,
    /// Per-request time limit.
    pub timeout: Duration,
    /// Request body limit in bytes.
    pub max_body_bytes: usize,
    /// Serve the deterministic fake backend instead of a model (for trying the API).
    pub fake: bool,
    /// Memory the models may take together (weights plus KV caches); `None` = what the device
    /// reports free.
    pub memory_budget: Option<u64>,
}

impl Default for CliArgs {
    fn default() -> Self {
        Self {
            models: Vec::new(),
            host: IpAddr::from([127, 0, 0, 1]),
            port: 8080,
            api_key: None,
            max_sequences: 8,
            ctx_size: None,
            device: "cpu".into(),
            kv_cache: None,
            max_queue: 64,
            timeout: Duration::from_secs(600),
            max_body_bytes: 4 << 20,
            fake: false,
            memory_budget: None,
        }
    }
}

/// The usage text.
pub const USAGE: &str = "\
usage: pocket-server [options]
  --model [NAME=]ALIAS|PATH
                       model to serve (repeatable: one engine per model, requests routed by
                       their `model` field, which is NAME or else ALIAS|PATH;
                       default smollm2-135m-instruct)
  --host ADDR          address to bind (default 127.0.0.1)
  --port PORT          port to bind (default 8080)
  --api-key KEY        require 'Authorization: Bearer KEY' on /v1/* (or env POCKET_API_KEY)
  --max-sequences N    sequences generated together (default 8)
  --ctx-size N         context length per sequence in tokens (default: the model's)
  --device DEV         cpu, cuda or cuda:N (default cpu)
  --kv-cache TYPE      KV cache element type: f32, f16 or bf16 (default f16 on cuda, f32 on cpu)
  --max-queue N        requests allowed to wait for a slot; more get 429 (default 64)
  --timeout SECS       per-request time limit (default 600)
  --max-body BYTES     request body limit (default 4194304)
  --memory-budget SIZE memory all models may take together, weights plus KV caches (bytes, or
                       with a K/M/G suffix; default: what the device reports free); startup
                       is refused above it
  --fake               serve the deterministic test backend instead of a model
  -h, --help           this text";

/// A bad command line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CliError {
    /// `--help` was given.
    #[error("{USAGE}")]
    Help,
    /// An option needs a value that is missing.
    #[error("{0} needs a value\n{USAGE}")]
    MissingValue(String),
    /// A value did not parse.
    #[error("invalid value {value:?} for {flag}: {why}")]
    BadValue {
        /// The option.
        flag: String,
        /// The value given.
        value: String,
        /// Why it is wrong.
        why: String,
    },
    /// An unknown option.
    #[error("unknown option {0}\n{USAGE}")]
    Unknown(String),
}

fn num<T>(flag: &str, v: &str, min: T) -> Result<T, CliError>
where
    T: std::str::FromStr + PartialOrd + std::fmt::Display,
    T::Err: std::fmt::Display,
{
    let x: T = v.parse().map_err(|e: T::Err| CliError::BadValue {
        flag: flag.into(),
        value: v.into(),
        why: e.to_string(),
    })?;
    if x < min {
        return Err(CliError::BadValue {
            flag: flag.into(),
            value: v.into(),
            why: format!("must be at least {min}"),
        });
    }
    Ok(x)
}

/// A KV cache element type by name.
fn cache_type(flag: &str, v: &str) -> Result<DType, CliError> {
    pocket_models::cache_dtype_by_name(v).ok_or_else(|| CliError::BadValue {
        flag: flag.into(),
        value: v.into(),
        why: "f32, f16 or bf16".into(),
    })
}

/// Parses a byte count with an optional binary K/M/G/T suffix (`512M`, `8G`).
fn size(flag: &str, v: &str) -> Result<u64, CliError> {
    let t = v.trim();
    let (digits, shift) = match t.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => {
            let shift = match c.to_ascii_uppercase() {
                'K' => 10,
                'M' => 20,
                'G' => 30,
                'T' => 40,
                _ => {
                    return Err(CliError::BadValue {
                        flag: flag.into(),
                        value: v.into(),
                        why: "the suffix must be K, M, G or T".into(),
                    })
                }
            };
            (&t[..i], shift)
        }
        _ => (t, 0),
    };
    let n: f64 = num(flag, digits, 0.0f64)?;
    let bytes = n * (1u64 << shift) as f64;
    if !bytes.is_finite() || bytes < 1.0 || bytes > u64::MAX as f64 {
        return Err(CliError::BadValue {
            flag: flag.into(),
            value: v.into(),
            why: "must be a positive size".into(),
        });
    }
    Ok(bytes as u64)
}

/// Splits a `--model` value into the served name (if given) and the alias or path.
/// `NAME=SPEC` names it; a value whose part before `=` contains a path separator is a path.
pub fn split_model_spec(spec: &str) -> (Option<&str>, &str) {
    match spec.split_once('=') {
        Some((name, rest)) if !name.is_empty() && !name.contains('/') && !rest.is_empty() => {
            (Some(name), rest)
        }
        _ => (None, spec),
    }
}

/// Parses arguments (without the program name); `env_key` is `POCKET_API_KEY` if set.
pub fn parse_args<I: IntoIterator<Item = String>>(
    args: I,
    env_key: Option<String>,
) -> Result<CliArgs, CliError> {
    let mut a = CliArgs {
        api_key: env_key.filter(|k| !k.is_empty()),
        ..CliArgs::default()
    };
    let mut it = args.into_iter();
    while let Some(flag) = it.next() {
        let (flag, inline) = match flag.split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f.to_string(), Some(v.to_string())),
            _ => (flag, None),
        };
        if matches!(flag.as_str(), "-h" | "--help") {
            return Err(CliError::Help);
        }
        if flag == "--fake" {
            a.fake = true;
            continue;
        }
        let known = [
            "--model",
            "--host",
            "--port",
            "--api-key",
            "--max-sequences",
            "--ctx-size",
            "--device",
            "--kv-cache",
            "--max-queue",
            "--timeout",
            "--max-body",
            "--memory-budget",
        ];
        if !known.contains(&flag.as_str()) {
            return Err(CliError::Unknown(flag));
        }
        let v = inline
            .or_else(|| it.next())
            .ok_or_else(|| CliError::MissingValue(flag.clone()))?;
        match flag.as_str() {
            "--model" => a.models.push(v),
            "--host" => {
                a.host = v
                    .parse()
                    .map_err(|e: std::net::AddrParseError| CliError::BadValue {
                        flag: flag.clone(),
                        value: v.clone(),
                        why: e.to_string(),
                    })?
            }
            "--port" => a.port = num(&flag, &v, 0u16)?,
            "--api-key" => a.api_key = Some(v),
            "--max-sequences" => a.max_sequences = num(&flag, &v, 1usize)?,
            "--ctx-size" => a.ctx_size = Some(num(&flag, &v, 16usize)?),
            "--device" => a.device = v,
            "--kv-cache" => a.kv_cache = Some(cache_type(&flag, &v)?),
            "--max-queue" => a.max_queue = num(&flag, &v, 0usize)?,
            "--timeout" => a.timeout = Duration::from_secs_f64(num(&flag, &v, 0.001f64)?),
            "--max-body" => a.max_body_bytes = num(&flag, &v, 1024usize)?,
            "--memory-budget" => a.memory_budget = Some(size(&flag, &v)?),
            _ => return Err(CliError::Unknown(flag)),
        }
    }
    if a.models.is_empty() {
        a.models.push(DEFAULT_MODEL.to_string());
    }
    Ok(a)
}

/// Builds the backend the arguments ask for: one engine per `--model`, all on `--device`.
pub fn build_backend(args: &CliArgs) -> Result<Arc<dyn InferenceBackend>, String> {
    if args.fake {
        let ids = args
            .models
            .iter()
            .map(|m| split_model_spec(m).0.unwrap_or(m).to_string())
            .collect();
        return Ok(Arc::new(FakeBackend::new(FakeConfig {
            models: ids,
            context_length: args.ctx_size.unwrap_or(2048),
            max_running: args.max_sequences,
            max_queue: args.max_queue,
            token_delay: Duration::from_millis(5),
            ..FakeConfig::default()
        })));
    }
    let device = crate::engine_backend::parse_device(&args.device)?;
    let opts: Vec<crate::engine_backend::EngineOptions> = args
        .models
        .iter()
        .map(|m| {
            let (id, model) = split_model_spec(m);
            crate::engine_backend::EngineOptions {
                id: id.map(str::to_string),
                model: model.to_string(),
                device,
                kv_cache: args.kv_cache,
                ctx_size: args.ctx_size,
                max_sequences: args.max_sequences,
                max_queue: args.max_queue,
            }
        })
        .collect();
    Ok(Arc::new(crate::engine_backend::start_all(
        &opts,
        args.memory_budget,
    )?))
}

/// Runs the server from the process's arguments; returns the exit code.
pub fn main_from_env() -> ExitCode {
    let args = match parse_args(
        std::env::args().skip(1),
        std::env::var("POCKET_API_KEY").ok(),
    ) {
        Ok(a) => a,
        Err(CliError::Help) => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("pocket-server: {e}");
            return ExitCode::from(2);
        }
    };
    let backend = match build_backend(&args) {
        Ok(b) => b,
        Err(e) => {
            eprintln!("pocket-server: {e}");
            return ExitCode::FAILURE;
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("pocket-server: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(async move {
        let config = ServerConfig {
            api_key: args.api_key.clone(),
            max_body_bytes: args.max_body_bytes,
            request_timeout: args.timeout,
        };
        let models: Vec<String> = backend.models().into_iter().map(|m| m.id).collect();
        let server =
            match Server::bind(SocketAddr::new(args.host, args.port), backend, config).await {
                Ok(s) => s,
                Err(e) => {
                    eprintln!(
                        "pocket-server: cannot listen on {}:{}: {e}",
                        args.host, args.port
                    );
                    return ExitCode::FAILURE;
                }
            };
        let addr = server
            .local_addr()
            .unwrap_or(SocketAddr::new(args.host, args.port));
        eprintln!(
            "pocket-server: listening on http://{addr}/v1 (models: {}{})",
            models.join(", "),
            if args.api_key.is_some() {
                "; API key required"
            } else {
                ""
            }
        );
        let handle = match server.spawn() {
            Ok(h) => h,
            Err(e) => {
                eprintln!("pocket-server: {e}");
                return ExitCode::FAILURE;
            }
        };
        let _ = tokio::signal::ctrl_c().await;
        eprintln!("pocket-server: shutting down");
        handle.shutdown();
        ExitCode::SUCCESS
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(args: &[&str]) -> Result<CliArgs, CliError> {
        parse_args(args.iter().map(|s| s.to_string()), None)
    }

    #[test]
    fn defaults() {
        let a = p(&[]).unwrap();
        assert_eq!(a.models, vec![DEFAULT_MODEL.to_string()]);
        assert_eq!((a.host.to_string(), a.port), ("127.0.0.1".into(), 8080));
    }

    #[test]
    fn flags() {
        let a = p(&[
            "--model",
            "a",
            "--model=b",
            "--port",
            "0",
            "--host",
            "::1",
            "--api-key",
            "k",
            "--max-sequences",
            "4",
            "--ctx-size",
            "512",
            "--device",
            "cuda:1",
            "--max-queue",
            "3",
        ])
        .unwrap();
        assert_eq!(a.models, vec!["a".to_string(), "b".to_string()]);
        assert_eq!(a.port, 0);
        assert_eq!(a.api_key.as_deref(), Some("k"));
        assert_eq!(
            (a.max_sequences, a.ctx_size, a.max_queue),
            (4, Some(512), 3)
        );
        assert_eq!(a.device, "cuda:1");
        let env = parse_args(Vec::new(), Some("e".into())).unwrap();
        assert_eq!(env.api_key.as_deref(), Some("e"));
    }

    #[test]
    fn model_names_and_memory_budget() {
        assert_eq!(split_model_spec("a=smollm2"), (Some("a"), "smollm2"));
        assert_eq!(split_model_spec("smollm2"), (None, "smollm2"));
        assert_eq!(split_model_spec("./m=x.gguf"), (None, "./m=x.gguf"));
        assert_eq!(split_model_spec("=x"), (None, "=x"));
        let a = p(&[
            "--model",
            "small=m1",
            "--model",
            "m2",
            "--memory-budget",
            "1.5G",
        ])
        .unwrap();
        assert_eq!(a.models, ["small=m1", "m2"]);
        assert_eq!(a.memory_budget, Some(3 << 29));
        assert_eq!(
            p(&["--memory-budget=4096"]).unwrap().memory_budget,
            Some(4096)
        );
        assert_eq!(
            p(&["--memory-budget", "2k"]).unwrap().memory_budget,
            Some(2048)
        );
        for bad in ["0", "-1G", "3X", "G"] {
            assert!(
                matches!(p(&["--memory-budget", bad]), Err(CliError::BadValue { .. })),
                "{bad}"
            );
        }
    }

    /// Two names for the fake backend: both listed, routed, and an unknown name is refused.
    #[test]
    fn fake_backend_serves_every_named_model() {
        let a = p(&["--fake", "--model", "one=x", "--model", "two"]).unwrap();
        let b = build_backend(&a).unwrap();
        let ids: Vec<String> = b.models().into_iter().map(|m| m.id).collect();
        assert_eq!(ids, ["one", "two"]);
    }

    #[test]
    fn kv_cache_types() {
        assert_eq!(p(&[]).unwrap().kv_cache, None);
        assert_eq!(
            p(&["--kv-cache", "f16"]).unwrap().kv_cache,
            Some(DType::F16)
        );
        assert_eq!(p(&["--kv-cache=bf16"]).unwrap().kv_cache, Some(DType::BF16));
        assert_eq!(
            p(&["--kv-cache", "f32"]).unwrap().kv_cache,
            Some(DType::F32)
        );
        let e = p(&["--kv-cache", "q8_0"]).unwrap_err();
        assert!(e.to_string().contains("f32, f16 or bf16"), "{e}");
    }

    #[test]
    fn errors() {
        assert!(matches!(p(&["--port"]), Err(CliError::MissingValue(_))));
        assert!(matches!(
            p(&["--port", "x"]),
            Err(CliError::BadValue { .. })
        ));
        assert!(matches!(
            p(&["--max-sequences", "0"]),
            Err(CliError::BadValue { .. })
        ));
        assert!(matches!(p(&["--bogus"]), Err(CliError::Unknown(_))));
        assert!(matches!(p(&["-h"]), Err(CliError::Help)));
    }
}
