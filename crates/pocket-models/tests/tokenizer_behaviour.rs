//! Tokenizer behaviour beyond the vectors: special tokens, BOS/EOS policy, streaming decode, and
//! the tokenizer.json backend checked against the GGUF one on the same vocabulary.

use std::path::PathBuf;

use pocket_models::tokenizer::{GgufVocab, Tokenizer};

fn vectors_dir() -> PathBuf {
    let dir = match std::env::var_os("POCKET_SHARED_DIR") {
        Some(d) => PathBuf::from(d),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared"),
    };
    dir.join("data/tokenizer-vectors")
}

fn vocab(name: &str) -> GgufVocab {
    let f = pocket_formats::GgufFile::open(vectors_dir().join(name)).expect("vector gguf missing");
    GgufVocab::from_metadata(f.metadata()).unwrap()
}

fn texts() -> Vec<String> {
    let inp = std::fs::read_to_string(vectors_dir().join("ggml-vocab-qwen2.gguf.inp"))
        .expect("vectors missing");
    let mut t: Vec<String> = inp
        .split("\n__ggml_vocab_test__\n")
        .map(str::to_string)
        .collect();
    t.pop();
    t
}

#[test]
fn special_tokens_parse_only_when_asked() {
    let tok = Tokenizer::from_gguf_vocab(&vocab("ggml-vocab-qwen2.gguf")).unwrap();
    let im_start = tok
        .token_id("<|im_start|>")
        .expect("qwen2 has <|im_start|>");
    let with = tok.encode("<|im_start|>user\nhi", false, true).unwrap();
    assert_eq!(with[0], im_start);
    let without = tok.encode("<|im_start|>user\nhi", false, false).unwrap();
    assert!(!without.contains(&im_start));
    assert!(without.len() > with.len());
    assert!(tok.is_special(im_start));
    // decode: control tokens shown unless skipped
    assert_eq!(tok.decode(&with, false).unwrap(), "<|im_start|>user\nhi");
    assert_eq!(tok.decode(&with, true).unwrap(), "user\nhi");
    // end-of-generation ids include <|im_end|> and <|endoftext|>
    for t in ["<|im_end|>", "<|endoftext|>"] {
        assert!(
            tok.stop_token_ids().contains(&tok.token_id(t).unwrap()),
            "{t}"
        );
    }
}

#[test]
fn spm_adds_bos_as_metadata_says_and_strips_dummy_space() {
    let v = vocab("ggml-vocab-llama-spm.gguf");
    let tok = Tokenizer::from_gguf_vocab(&v).unwrap();
    let bos = tok.bos_token_id().unwrap();
    let ids = tok.encode("Hello world", true, false).unwrap();
    assert_eq!(ids[0], bos);
    assert_eq!(
        &ids[1..],
        &tok.encode("Hello world", false, false).unwrap()[..]
    );
    assert_eq!(tok.decode(&ids, true).unwrap(), "Hello world");
    assert_eq!(tok.bos_token(), Some("<s>"));
    // turning add_bos off in the metadata is honoured
    let tok2 = Tokenizer::from_gguf_vocab(&GgufVocab {
        add_bos_token: Some(false),
        ..v
    })
    .unwrap();
    assert_ne!(tok2.encode("Hello", true, false).unwrap()[0], bos);
    // byte fallback: a character outside the vocabulary becomes <0xNN> tokens and decodes back
    let ids = tok.encode("\u{10FFFD}", false, false).unwrap();
    assert_eq!(tok.decode(&ids, false).unwrap(), "\u{10FFFD}");
}

/// Streams every vector text token by token: no U+FFFD ever, and the pieces add up to decode().
fn stream_roundtrip(tok: &Tokenizer) {
    for text in texts() {
        let ids = tok.encode(&text, false, false).unwrap();
        let mut dec = tok.stream_decoder(false);
        let mut streamed = String::new();
        for &id in &ids {
            let piece = dec.push(tok, id).unwrap();
            assert!(
                !piece.contains('\u{FFFD}'),
                "broken UTF-8 streamed for {text:?}"
            );
            streamed.push_str(&piece);
        }
        streamed.push_str(&dec.finish(tok).unwrap());
        assert_eq!(
            streamed,
            tok.decode(&ids, false).unwrap(),
            "stream != decode for {text:?}"
        );
    }
}

#[test]
fn streaming_never_breaks_utf8() {
    for name in [
        "ggml-vocab-qwen2.gguf",
        "ggml-vocab-llama-spm.gguf",
        "ggml-vocab-gpt-2.gguf",
    ] {
        stream_roundtrip(&Tokenizer::from_gguf_vocab(&vocab(name)).unwrap());
    }
}

/// Builds a tokenizer.json (BPE, Qwen2's split regex, byte-level) from the GGUF vocabulary.
fn qwen2_tokenizer_json(v: &GgufVocab) -> Vec<u8> {
    let mut vocab = serde_json::Map::new();
    let mut added = Vec::new();
    for (i, t) in v.tokens.iter().enumerate() {
        // control (3) and user-defined (4) tokens are added tokens; they follow the model vocabulary
        let ty = v.token_types.get(i).copied().unwrap_or(1);
        if ty == 3 || ty == 4 {
            added.push(
                serde_json::json!({"id": i, "content": t, "single_word": false, "lstrip": false,
                "rstrip": false, "normalized": false, "special": ty == 3}),
            );
        } else {
            vocab.insert(t.clone(), serde_json::json!(i));
        }
    }
    let merges: Vec<serde_json::Value> = v.merges.iter().map(|m| serde_json::json!(m)).collect();
    let regex = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
    let j = serde_json::json!({
        "version": "1.0",
        "truncation": null,
        "padding": null,
        "added_tokens": added,
        "normalizer": null,
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": regex}, "behavior": "Isolated", "invert": false},
            {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false}
        ]},
        "post_processor": null,
        "decoder": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false},
        "model": {"type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": null,
            "end_of_word_suffix": null, "fuse_unk": false, "byte_fallback": false, "ignore_merges": false,
            "vocab": vocab, "merges": merges}
    });
    serde_json::to_vec(&j).unwrap()
}

#[test]
fn tokenizer_json_backend_matches_gguf_backend() {
    let v = vocab("ggml-vocab-qwen2.gguf");
    let gguf = Tokenizer::from_gguf_vocab(&v).unwrap();
    let cfg = br#"{"eos_token": "<|im_end|>", "add_bos_token": false, "chat_template": "{{ messages }}"}"#;
    let hf = Tokenizer::from_tokenizer_json_bytes(&qwen2_tokenizer_json(&v), Some(cfg)).unwrap();
    assert_eq!(hf.eos_token_id(), gguf.token_id("<|im_end|>"));
    assert_eq!(hf.chat_template(), Some("{{ messages }}"));
    for text in texts() {
        let a = gguf.encode(&text, false, false).unwrap();
        let b = hf.encode(&text, false, false).unwrap();
        assert_eq!(a, b, "{text:?}");
        assert_eq!(hf.decode(&b, false).unwrap(), text);
    }
    let im_start = gguf.token_id("<|im_start|>").unwrap();
    assert_eq!(
        hf.encode("<|im_start|>x", false, true).unwrap()[0],
        im_start
    );
    assert_ne!(
        hf.encode("<|im_start|>x", false, false).unwrap()[0],
        im_start
    );
    stream_roundtrip(&hf);
}

#[test]
fn bad_vocabularies_are_errors() {
    let base = GgufVocab {
        model: "gpt2".into(),
        tokens: vec!["a".into()],
        ..Default::default()
    };
    assert!(Tokenizer::from_gguf_vocab(&GgufVocab {
        model: "rwkv".into(),
        ..base.clone()
    })
    .is_err());
    assert!(Tokenizer::from_gguf_vocab(&GgufVocab {
        pre: Some("nope".into()),
        ..base.clone()
    })
    .is_err());
    assert!(Tokenizer::from_gguf_vocab(&GgufVocab {
        tokens: vec![],
        ..base.clone()
    })
    .is_err());
    assert!(Tokenizer::from_gguf_vocab(&GgufVocab {
        token_types: vec![1, 1],
        ..base.clone()
    })
    .is_err());
    let tok = Tokenizer::from_gguf_vocab(&base).unwrap();
    assert!(tok.decode(&[5], false).is_err());
    assert!(Tokenizer::from_tokenizer_json_bytes(b"not json", None).is_err());
}

#[test]
fn random_text_roundtrips_through_every_vocabulary() {
    use rand_chacha::rand_core::{RngCore, SeedableRng};
    let alphabet = [
        " ",
        "  ",
        "\n",
        "\t",
        "a",
        "Hello",
        "ß",
        "é",
        "e\u{301}",
        "中文",
        "🦙",
        "👩‍👩‍👧",
        "\u{0}",
        "\u{7f}",
        "1",
        "234",
        "'s",
        "<s>",
        "<|im_start|>",
        "\u{FFFD}",
        "\u{10FFFF}",
        "ქ",
        "ا",
        "-",
        ".",
    ];
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(5);
    for name in [
        "ggml-vocab-qwen2.gguf",
        "ggml-vocab-llama-spm.gguf",
        "ggml-vocab-gpt-2.gguf",
        "ggml-vocab-llama-bpe.gguf",
        "ggml-vocab-deepseek-llm.gguf",
    ] {
        let tok = Tokenizer::from_gguf_vocab(&vocab(name)).unwrap();
        for _ in 0..300 {
            let len = (rng.next_u32() % 12) as usize;
            let text: String = (0..len)
                .map(|_| alphabet[rng.next_u32() as usize % alphabet.len()])
                .collect();
            let ids = tok.encode(&text, false, false).unwrap();
            assert_eq!(
                tok.decode(&ids, false).unwrap(),
                text,
                "{name}: {text:?} -> {ids:?}"
            );
        }
    }
}

#[test]
fn tokenizer_is_shareable_and_loads_from_paths() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Tokenizer>();
    assert_send_sync::<pocket_models::chat_template::ChatTemplate>();
    let tok = Tokenizer::from_path(&vectors_dir().join("ggml-vocab-gpt-2.gguf")).unwrap();
    assert_eq!(
        tok.decode(&tok.encode("Hello", false, false).unwrap(), false)
            .unwrap(),
        "Hello"
    );
    // a folder without tokenizer.json is a typed error, not a panic
    assert!(Tokenizer::from_path(&vectors_dir()).is_err());
    assert!(Tokenizer::from_path(&vectors_dir().join("no-such.gguf")).is_err());
}
