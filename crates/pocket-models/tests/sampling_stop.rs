//! Stop conditions: ids, stop strings split across tokens, held-back text.

use pocket_models::sampling::{StopChecker, StopReason};

/// Feeds (id, text) pairs; returns the emitted text and the stop reason.
fn run(stop: &mut StopChecker, toks: &[(u32, &str)]) -> (String, Option<StopReason>) {
    let mut out = String::new();
    for &(id, t) in toks {
        let step = stop.push(id, t);
        out.push_str(&step.text);
        if step.stop.is_some() {
            return (out, step.stop);
        }
    }
    out.push_str(&stop.finish());
    (out, None)
}

#[test]
fn eos_stops_and_flushes_held_text() {
    let mut s = StopChecker::new([2, 7], vec!["</end>".into()]);
    let (out, why) = run(&mut s, &[(5, "Hello"), (6, " </e"), (7, "")]);
    assert_eq!(out, "Hello </e");
    assert_eq!(why, Some(StopReason::Token(7)));
    assert!(s.is_stopped());
}

#[test]
fn stop_string_split_across_tokens_is_not_emitted() {
    let mut s = StopChecker::new([], vec!["\nUser:".into()]);
    let (out, why) = run(
        &mut s,
        &[
            (1, "Sure."),
            (2, "\n"),
            (3, "Us"),
            (4, "er"),
            (5, ": hi"),
            (6, "more"),
        ],
    );
    assert_eq!(out, "Sure.");
    assert_eq!(why, Some(StopReason::String(0)));
}

#[test]
fn false_prefix_is_released() {
    let mut s = StopChecker::new([], vec!["STOP".into()]);
    let mut emitted = Vec::new();
    for t in ["ab", "ST", "O", "x", "yz"] {
        emitted.push(s.push(1, t).text);
    }
    assert_eq!(emitted, vec!["ab", "", "", "STOx", "yz"]);
    assert_eq!(s.finish(), "");
}

#[test]
fn earliest_of_several_stop_strings_wins() {
    let mut s = StopChecker::new([], vec!["world".into(), "o w".into()]);
    let (out, why) = run(&mut s, &[(1, "hello world")]);
    assert_eq!(out, "hell");
    assert_eq!(why, Some(StopReason::String(1)));
}

#[test]
fn held_text_flushed_at_length_limit_and_unicode_safe() {
    let mut s = StopChecker::new([], vec!["éé!".into()]);
    let step = s.push(1, "café");
    assert_eq!(step.text, "caf");
    assert_eq!(s.push(2, "é").text, "");
    assert_eq!(s.finish(), "éé");
}

#[test]
fn nothing_after_stop() {
    let mut s = StopChecker::new([0], vec![]);
    assert_eq!(s.push(0, "").stop, Some(StopReason::Token(0)));
    let step = s.push(5, "more");
    assert_eq!(step.text, "");
    assert_eq!(step.stop, None);
}

#[test]
fn text_stream_composes_utf8_and_stop_holdback() {
    use pocket_models::sampling::TextStream;
    use pocket_models::tokenizer::Tokenizer;
    let dir = match std::env::var_os("POCKET_SHARED_DIR") {
        Some(d) => std::path::PathBuf::from(d),
        None => std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared"),
    };
    let tok =
        Tokenizer::from_path(&dir.join("data/tokenizer-vectors/ggml-vocab-qwen2.gguf")).unwrap();
    let ids = tok
        .encode("Hello 🦙 world. STOP and more", false, false)
        .unwrap();
    let mut stream = TextStream::new(&tok, true, vec![". STOP".into()]);
    let mut out = String::new();
    let mut why = None;
    for &id in &ids {
        let step = stream.push(&tok, id).unwrap();
        assert!(!step.text.contains('\u{FFFD}'));
        out.push_str(&step.text);
        if step.stop.is_some() {
            why = step.stop;
            break;
        }
    }
    assert_eq!(out, "Hello 🦙 world");
    assert_eq!(why, Some(StopReason::String(0)));
    // an end-of-generation id stops and flushes what was held back
    let im_end = tok.token_id("<|im_end|>").unwrap();
    let mut stream = TextStream::new(&tok, true, vec!["xyz".into()]);
    let mut out = String::new();
    for &id in &tok.encode("abc x", false, false).unwrap() {
        out.push_str(&stream.push(&tok, id).unwrap().text);
    }
    let step = stream.push(&tok, im_end).unwrap();
    assert_eq!(step.stop, Some(StopReason::Token(im_end)));
    out.push_str(&step.text);
    assert_eq!(out, "abc x");
}
