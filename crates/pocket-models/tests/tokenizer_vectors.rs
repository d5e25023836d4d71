//! llama.cpp's tokenizer vectors (`../shared/data/tokenizer-vectors`): every `.inp` text must
//! tokenize to the ids of its `.out` line (no BOS, no special-token parsing), as llama.cpp's
//! test-tokenizer-0 checks. Missing data is a failure, not a skip.

use std::path::PathBuf;

use pocket_models::tokenizer::Tokenizer;

fn vectors_dir() -> PathBuf {
    let dir = match std::env::var_os("POCKET_SHARED_DIR") {
        Some(d) => PathBuf::from(d),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared"),
    };
    dir.join("data/tokenizer-vectors")
}

/// Reads `name.inp` / `name.out` into (text, expected ids) pairs.
fn load(name: &str) -> Vec<(String, Vec<u32>)> {
    let dir = vectors_dir();
    let inp = std::fs::read_to_string(dir.join(format!("{name}.inp")))
        .unwrap_or_else(|e| panic!("tokenizer vectors missing in {}: {e}", dir.display()));
    let out = std::fs::read_to_string(dir.join(format!("{name}.out"))).expect("missing .out file");
    let sep = "\n__ggml_vocab_test__\n";
    let mut texts: Vec<String> = inp.split(sep).map(str::to_string).collect();
    // the file ends with a separator, leaving one empty remainder
    assert_eq!(
        texts.pop().as_deref(),
        Some(""),
        "{name}.inp must end with the separator"
    );
    let ids: Vec<Vec<u32>> = out
        .lines()
        .map(|l| {
            l.split_whitespace()
                .map(|t| t.parse().expect("bad id in .out"))
                .collect()
        })
        .collect();
    assert_eq!(
        texts.len(),
        ids.len(),
        "{name}: .inp and .out disagree in count"
    );
    assert!(texts.len() > 10, "{name}: too few vectors");
    texts.into_iter().zip(ids).collect()
}

fn check(name: &str) {
    let path = vectors_dir().join(name);
    let tok = Tokenizer::from_gguf_path(&path).unwrap_or_else(|e| panic!("{name}: {e}"));
    let mut failures = Vec::new();
    let cases = load(name);
    for (text, want) in &cases {
        let got = tok.encode(text, false, false).unwrap();
        if &got != want {
            failures.push(format!("{text:?}\n   want {want:?}\n    got {got:?}"));
        }
        // decoding gives back the text (these vocabularies are lossless on it)
        let back = tok.decode(&got, false).unwrap();
        let expect_back = if tok.adds_bos() {
            text.strip_prefix(' ').unwrap_or(text).to_string()
        } else {
            text.clone()
        };
        if back != *text && back != expect_back {
            failures.push(format!("decode {text:?} -> {back:?}"));
        }
    }
    assert!(
        failures.is_empty(),
        "{name}: {} of {} failed:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}

#[test]
fn llama_spm() {
    check("ggml-vocab-llama-spm.gguf");
}

#[test]
fn llama_bpe() {
    check("ggml-vocab-llama-bpe.gguf");
}

#[test]
fn qwen2() {
    check("ggml-vocab-qwen2.gguf");
}

#[test]
fn gpt2() {
    check("ggml-vocab-gpt-2.gguf");
}

#[test]
fn deepseek_llm() {
    check("ggml-vocab-deepseek-llm.gguf");
}

#[test]
fn every_vector_file_is_covered() {
    let mut names: Vec<String> = std::fs::read_dir(vectors_dir())
        .expect("tokenizer vectors folder missing")
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.ends_with(".gguf"))
        .collect();
    names.sort();
    let covered = [
        "ggml-vocab-deepseek-llm.gguf",
        "ggml-vocab-gpt-2.gguf",
        "ggml-vocab-llama-bpe.gguf",
        "ggml-vocab-llama-spm.gguf",
        "ggml-vocab-qwen2.gguf",
    ];
    for n in &names {
        assert!(covered.contains(&n.as_str()), "vector file {n} has no test");
    }
}
