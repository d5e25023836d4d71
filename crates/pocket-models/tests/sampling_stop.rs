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
