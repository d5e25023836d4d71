//! The real checkpoints' own vocabularies against llama.cpp: the vector texts tokenized by the
//! fetched model must give the ids llama.cpp gives. SmolLM2's expected ids
//! (tests/data/tokenizer/smollm2-135m-instruct.out) were written by scripts/tokenizer_vectors.py
//! with llama-cpp-python 0.3.36, which reproduces the shared qwen2 and llama-spm vector files
//! byte for byte.

use std::path::PathBuf;

use pocket_models::store::ModelStore;
use pocket_models::tokenizer::Tokenizer;

fn shared_dir() -> PathBuf {
    match std::env::var_os("POCKET_SHARED_DIR") {
        Some(d) => PathBuf::from(d),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared"),
    }
}

fn check(alias: &str, expected: PathBuf) {
    let inp = std::fs::read_to_string(
        shared_dir().join("data/tokenizer-vectors/ggml-vocab-qwen2.gguf.inp"),
    )
    .expect("tokenizer vectors missing");
    let mut texts: Vec<&str> = inp.split("\n__ggml_vocab_test__\n").collect();
    assert_eq!(texts.pop(), Some(""));
    let out_path = expected;
    let out = std::fs::read_to_string(&out_path)
        .unwrap_or_else(|e| panic!("{}: {e}", out_path.display()));
    let want: Vec<Vec<u32>> = out
        .lines()
        .map(|l| l.split_whitespace().map(|t| t.parse().unwrap()).collect())
        .collect();
    assert_eq!(texts.len(), want.len());
    let model = ModelStore::new().resolve(alias).expect("fetch failed");
    let tok = Tokenizer::from_path(&model.path).unwrap();
    let mut failures = Vec::new();
    for (text, want) in texts.iter().zip(&want) {
        let got = tok.encode(text, false, false).unwrap();
        if &got != want {
            failures.push(format!("{text:?}\n   want {want:?}\n    got {got:?}"));
        }
    }
    assert!(
        failures.is_empty(),
        "{alias}: {} differ:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn smollm2_matches_llama_cpp() {
    if std::env::var("POCKET_TEST_REAL_FETCH").as_deref() != Ok("1") {
        eprintln!("skipped: set POCKET_TEST_REAL_FETCH=1 to fetch SmolLM2 for real");
        return;
    }
    let out = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/tokenizer/smollm2-135m-instruct.out");
    check("smollm2-135m-instruct", out);
}

#[test]
fn qwen25_coder_matches_llama_cpp() {
    // 491 MB: only when asked for explicitly
    if std::env::var("POCKET_TEST_FETCH_QWEN").as_deref() != Ok("1") {
        eprintln!("skipped: set POCKET_TEST_FETCH_QWEN=1 to fetch Qwen2.5-Coder-0.5B for real");
        return;
    }
    // Its vocabulary is ggml-vocab-qwen2's (same merges, same pre-tokenizer `qwen2`, same ordinary
    // tokens; only added tokens past id 151645 differ, and the texts contain none of them), and
    // llama.cpp gives exactly that file's ids for it (checked with scripts/tokenizer_vectors.py).
    let out = shared_dir().join("data/tokenizer-vectors/ggml-vocab-qwen2.gguf.out");
    check("qwen2.5-coder-0.5b-instruct", out);
}
