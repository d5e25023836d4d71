//! Tokenizer metadata copied from llama.cpp's vocab-only GGUF files, fitted to a preset's
//! vocabulary size (padded with `[PADn]` tokens, or cut with the merges that no longer apply).

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use pocket_formats::{GgufArray, GgufFile, GgufValue};

use crate::error::{BenchError, Result};

/// llama.cpp token types.
const TOKEN_CONTROL: i32 = 3;
const TOKEN_UNUSED: i32 = 5;

/// Directories searched for vocab files, in order: `explicit`, `$POCKET_VOCAB_DIR`, `vocab/`
/// beside the executable and one level up, `./vocab`, and the shared data folder of this checkout.
pub fn search_dirs(explicit: Option<&Path>) -> Vec<PathBuf> {
    let mut v = Vec::new();
    if let Some(d) = explicit {
        v.push(d.to_path_buf());
    }
    if let Some(d) = std::env::var_os("POCKET_VOCAB_DIR") {
        v.push(PathBuf::from(d));
    }
    if let Ok(exe) = std::env::current_exe() {
        if let Some(dir) = exe.parent() {
            v.push(dir.join("vocab"));
            v.push(dir.join("../vocab"));
        }
    }
    v.push(PathBuf::from("vocab"));
    v.push(
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/data/tokenizer-vectors"),
    );
    v.push(PathBuf::from("/work/shared/data/tokenizer-vectors"));
    v
}

/// Finds `name` in the search directories.
pub fn find_vocab(name: &str, explicit: Option<&Path>) -> Result<PathBuf> {
    let dirs = search_dirs(explicit);
    dirs.iter()
        .map(|d| d.join(name))
        .find(|p| p.is_file())
        .ok_or_else(|| BenchError::VocabNotFound {
            name: name.to_string(),
            searched: dirs
                .iter()
                .map(|d| d.display().to_string())
                .collect::<Vec<_>>()
                .join(", "),
        })
}

/// The `tokenizer.*` metadata of `file`, fitted to exactly `n` tokens.
pub fn load_fitted(file: &Path, n: usize) -> Result<Vec<(String, GgufValue)>> {
    let g = GgufFile::open(file)?;
    let mut kv: Vec<(String, GgufValue)> = g
        .metadata()
        .iter()
        .filter(|(k, _)| k.starts_with("tokenizer."))
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect();
    fit(&mut kv, n)?;
    Ok(kv)
}

fn take<'a>(kv: &'a mut [(String, GgufValue)], key: &str) -> Option<&'a mut GgufValue> {
    kv.iter_mut().find(|(k, _)| k == key).map(|(_, v)| v)
}

/// Pads or cuts the token list (and its parallel arrays, merges and special ids) to `n`.
pub fn fit(kv: &mut [(String, GgufValue)], n: usize) -> Result<()> {
    let bad = |m: &str| BenchError::Usage(format!("vocab file: {m}"));
    let Some(GgufValue::Array(GgufArray::String(tokens))) = take(kv, "tokenizer.ggml.tokens")
    else {
        return Err(bad("no tokenizer.ggml.tokens string array"));
    };
    let len = tokens.len();
    if n == 0 {
        return Err(bad("vocabulary size 0"));
    }
    if n > len {
        tokens.extend((len..n).map(|i| format!("[PAD{i}]")));
    } else {
        tokens.truncate(n);
    }
    let tokens = tokens.clone();
    if let Some(GgufValue::Array(GgufArray::I32(tt))) = take(kv, "tokenizer.ggml.token_type") {
        tt.resize(n, TOKEN_UNUSED);
    }
    if let Some(GgufValue::Array(GgufArray::F32(sc))) = take(kv, "tokenizer.ggml.scores") {
        sc.resize(n, 0.0);
    }
    if n >= len {
        return Ok(());
    }
    // cut: special ids beyond the end move to a control token at n - 1
    let mut moved = false;
    for key in [
        "tokenizer.ggml.bos_token_id",
        "tokenizer.ggml.eos_token_id",
        "tokenizer.ggml.padding_token_id",
        "tokenizer.ggml.unknown_token_id",
    ] {
        if let Some(v) = take(kv, key) {
            if v.as_int().is_some_and(|id| id >= n as i128) {
                *v = GgufValue::U32((n - 1) as u32);
                moved = true;
            }
        }
    }
    let mut tokens = tokens;
    if moved {
        tokens[n - 1] = "<|endoftext|>".to_string();
        if let Some(GgufValue::Array(GgufArray::String(t))) = take(kv, "tokenizer.ggml.tokens") {
            t[n - 1] = tokens[n - 1].clone();
        }
        if let Some(GgufValue::Array(GgufArray::I32(tt))) = take(kv, "tokenizer.ggml.token_type") {
            tt[n - 1] = TOKEN_CONTROL;
        }
    }
    let set: HashSet<&str> = tokens.iter().map(String::as_str).collect();
    if let Some(GgufValue::Array(GgufArray::String(merges))) = take(kv, "tokenizer.ggml.merges") {
        merges.retain(|m| match m.split_once(' ') {
            Some((a, b)) => {
                set.contains(a) && set.contains(b) && set.contains(format!("{a}{b}").as_str())
            }
            None => false,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kv(tokens: &[&str], merges: &[&str], eos: u32) -> Vec<(String, GgufValue)> {
        vec![
            ("tokenizer.ggml.tokens".into(), tokens.to_vec().into()),
            (
                "tokenizer.ggml.token_type".into(),
                vec![1i32; tokens.len()].into(),
            ),
            ("tokenizer.ggml.merges".into(), merges.to_vec().into()),
            ("tokenizer.ggml.eos_token_id".into(), GgufValue::U32(eos)),
        ]
    }

    #[test]
    fn pads_and_cuts() {
        let mut v = kv(&["a", "b", "ab", "abb", "eos"], &["a b", "ab b"], 4);
        fit(&mut v, 7).unwrap();
        assert_eq!(v[0].1.as_array().unwrap().len(), 7);
        let mut v = kv(&["a", "b", "ab", "abb", "eos"], &["a b", "ab b"], 4);
        fit(&mut v, 4).unwrap();
        let GgufValue::Array(GgufArray::String(m)) = &v[2].1 else {
            panic!()
        };
        assert_eq!(m, &vec!["a b".to_string()]);
        assert_eq!(v[3].1.as_int(), Some(3));
        let GgufValue::Array(GgufArray::String(t)) = &v[0].1 else {
            panic!()
        };
        assert_eq!(t[3], "<|endoftext|>");
    }

    #[test]
    fn shared_vocab_files_fit() {
        let Ok(p) = find_vocab("ggml-vocab-gpt-2.gguf", None) else {
            return;
        };
        let kv = load_fitted(&p, 49152).unwrap();
        let t = kv
            .iter()
            .find(|(k, _)| k == "tokenizer.ggml.tokens")
            .unwrap();
        assert_eq!(t.1.as_array().unwrap().len(), 49152);
    }
}
