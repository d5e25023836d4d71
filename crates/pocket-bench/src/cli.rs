//! A small command-line parser: positional words, `--key value` / `--key=value` options and
//! bare `--flags`.

use std::collections::{HashMap, HashSet};
use std::str::FromStr;

use crate::error::{BenchError, Result};

/// Parsed arguments.
#[derive(Debug, Default)]
pub struct Args {
    /// Positional words in order.
    pub positional: Vec<String>,
    opts: HashMap<String, String>,
    flags: HashSet<String>,
}

impl Args {
    /// Parses `argv` (without the program and subcommand); `flag_names` take no value.
    pub fn parse(argv: &[String], flag_names: &[&str]) -> Result<Args> {
        let mut a = Args::default();
        let mut it = argv.iter();
        while let Some(w) = it.next() {
            let Some(key) = w.strip_prefix("--") else {
                a.positional.push(w.clone());
                continue;
            };
            if let Some((k, v)) = key.split_once('=') {
                a.opts.insert(k.to_string(), v.to_string());
            } else if flag_names.contains(&key) {
                a.flags.insert(key.to_string());
            } else {
                let v = it
                    .next()
                    .ok_or_else(|| BenchError::Usage(format!("--{key} needs a value")))?;
                a.opts.insert(key.to_string(), v.clone());
            }
        }
        Ok(a)
    }

    /// The string value of `--key`.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.opts.get(key).map(String::as_str)
    }

    /// The parsed value of `--key`, or `default` when absent.
    pub fn num<T: FromStr>(&self, key: &str, default: T) -> Result<T> {
        match self.get(key) {
            None => Ok(default),
            Some(v) => v
                .parse()
                .map_err(|_| BenchError::Usage(format!("--{key} {v}: not a valid number"))),
        }
    }

    /// The parsed value of `--key`, if present.
    pub fn num_opt<T: FromStr>(&self, key: &str) -> Result<Option<T>> {
        self.get(key)
            .map(|v| {
                v.parse()
                    .map_err(|_| BenchError::Usage(format!("--{key} {v}: not a valid number")))
            })
            .transpose()
    }

    /// Whether `--flag` was given.
    pub fn flag(&self, name: &str) -> bool {
        self.flags.contains(name)
    }

    /// Fails on options outside `known`.
    pub fn only(&self, known: &[&str]) -> Result<()> {
        for k in self.opts.keys().chain(self.flags.iter()) {
            if !known.contains(&k.as_str()) {
                return Err(BenchError::Usage(format!("unknown option --{k}")));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses() {
        let v: Vec<String> = ["a", "--x", "3", "--y=4", "--f", "b"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let a = Args::parse(&v, &["f"]).unwrap();
        assert_eq!(a.positional, vec!["a", "b"]);
        assert_eq!(a.num::<usize>("x", 0).unwrap(), 3);
        assert_eq!(a.num::<usize>("y", 0).unwrap(), 4);
        assert!(a.flag("f"));
        assert!(a.num::<usize>("x2", 7).unwrap() == 7);
        assert!(a.only(&["x", "y"]).is_err());
        assert!(Args::parse(&["--x".to_string()], &[]).is_err());
    }
}
