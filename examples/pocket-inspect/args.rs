//! Command-line parsing for pocket-inspect (hand-rolled: five commands, a few flags).

use std::path::PathBuf;

/// Usage text printed by `--help` and on usage errors.
pub const USAGE: &str = "usage: pocket-inspect [--json] <command> ...
  info PATH                          architecture, sizes and formats of a GGUF / safetensors file or folder
  tensors PATH [--filter REGEX]      name, format, shape, bytes, offset of each tensor
  check PATH                         audit the tensors a known architecture needs (exit 1 on failure)
  dump PATH TENSOR --out FILE.npy    a tensor's values as f32 in a .npy file
  tokenize PATH --text TEXT [--add-special] [--parse-special]
                                     token ids from the file's own vocabulary";

/// A parsed command line.
#[derive(Debug, Clone, PartialEq)]
pub struct Cli {
    /// Machine-readable JSON output.
    pub json: bool,
    /// The command.
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Clone, PartialEq)]
pub enum Command {
    /// `info PATH`.
    Info { path: PathBuf },
    /// `tensors PATH [--filter REGEX]`.
    Tensors {
        path: PathBuf,
        filter: Option<String>,
    },
    /// `check PATH`.
    Check { path: PathBuf },
    /// `dump PATH TENSOR --out FILE`.
    Dump {
        path: PathBuf,
        tensor: String,
        out: PathBuf,
    },
    /// `tokenize PATH --text TEXT`.
    Tokenize(crate::tokenize::TokenizeArgs),
    /// `--help`.
    Help,
}

/// Parses the arguments after the program name.
pub fn parse(args: &[String]) -> Result<Cli, String> {
    let mut json = false;
    let mut flags: Vec<(String, Option<String>)> = Vec::new();
    let mut positional: Vec<String> = Vec::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--json" => json = true,
            "-h" | "--help" => {
                return Ok(Cli {
                    json,
                    command: Command::Help,
                });
            }
            "--add-special" | "--parse-special" => flags.push((a.clone(), None)),
            "--filter" | "--out" | "--text" => {
                let v = it.next().ok_or_else(|| format!("{a} needs a value"))?;
                flags.push((a.clone(), Some(v.clone())));
            }
            s if s.starts_with("--") => return Err(format!("unknown option {s}")),
            _ => positional.push(a.clone()),
        }
    }
    let flag = |name: &str| flags.iter().find(|f| f.0 == name).and_then(|f| f.1.clone());
    let has = |name: &str| flags.iter().any(|f| f.0 == name);
    let allow = |ok: &[&str]| -> Result<(), String> {
        match flags.iter().find(|f| !ok.contains(&f.0.as_str())) {
            Some(f) => Err(format!("option {} does not apply to this command", f.0)),
            None => Ok(()),
        }
    };
    let (cmd, rest) = positional.split_first().ok_or("no command given")?;
    let want = |n: usize| -> Result<(), String> {
        if rest.len() == n {
            Ok(())
        } else {
            Err(format!("`{cmd}` takes {n} argument(s), got {}", rest.len()))
        }
    };
    let command = match cmd.as_str() {
        "info" => {
            want(1)?;
            allow(&[])?;
            Command::Info {
                path: rest[0].clone().into(),
            }
        }
        "tensors" => {
            want(1)?;
            allow(&["--filter"])?;
            Command::Tensors {
                path: rest[0].clone().into(),
                filter: flag("--filter"),
            }
        }
        "check" => {
            want(1)?;
            allow(&[])?;
            Command::Check {
                path: rest[0].clone().into(),
            }
        }
        "dump" => {
            want(2)?;
            allow(&["--out"])?;
            let out = flag("--out").ok_or("dump needs --out FILE.npy")?;
            Command::Dump {
                path: rest[0].clone().into(),
                tensor: rest[1].clone(),
                out: out.into(),
            }
        }
        "tokenize" => {
            want(1)?;
            allow(&["--text", "--add-special", "--parse-special"])?;
            Command::Tokenize(crate::tokenize::TokenizeArgs {
                path: rest[0].clone().into(),
                text: flag("--text").ok_or("tokenize needs --text TEXT")?,
                add_special: has("--add-special"),
                parse_special: has("--parse-special"),
                json,
            })
        }
        other => return Err(format!("unknown command `{other}`")),
    };
    Ok(Cli { json, command })
}
