//! The fast splitter (regex crate plus a hand-applied `\s+(?!\S)`) must split exactly like the
//! original look-ahead regexes run by a backtracking engine, the way llama.cpp applies them
//! (matches and the unmatched text between them, regex after regex).

use pocket_models::tokenizer::PreTokenizer;
use rand_chacha::rand_core::{RngCore, SeedableRng};

/// Reference split: every pattern through fancy-regex, exactly as written.
fn reference<'a>(regexes: &[fancy_regex::Regex], text: &'a str) -> Vec<&'a str> {
    let mut pieces: Vec<&'a str> = if text.is_empty() { vec![] } else { vec![text] };
    for re in regexes {
        let mut next = Vec::new();
        for piece in pieces {
            let mut last = 0;
            for m in re.find_iter(piece) {
                let m = m.unwrap();
                if m.start() == m.end() {
                    continue;
                }
                if m.start() > last {
                    next.push(&piece[last..m.start()]);
                }
                next.push(m.as_str());
                last = m.end();
            }
            if last < piece.len() {
                next.push(&piece[last..]);
            }
        }
        pieces = next;
    }
    pieces
}

const ALPHABET: &[&str] = &[
    " ", " ", " ", "\n", "\n", "\r", "\t", "\u{a0}", "\u{3000}", "a", "b", "Z", "é", "ж", "中",
    "한", "1", "23", "٣", "'", "'s", "'LL", "!", ".", ",", "(", "$", "🦙", "\u{301}", "_", "-",
    "ー",
];

fn random_text(rng: &mut rand_chacha::ChaCha8Rng) -> String {
    let len = (rng.next_u32() % 24) as usize;
    (0..len)
        .map(|_| ALPHABET[(rng.next_u32() as usize) % ALPHABET.len()])
        .collect()
}

#[test]
fn fast_splitter_equals_lookahead_regex() {
    let names = [
        "llama3",
        "qwen2",
        "qwen35",
        "gpt-2",
        "smollm",
        "deepseek-llm",
        "deepseek-v3",
        "deepseek-coder",
        "falcon",
        "default",
    ];
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(17);
    let fixed = [
        "",
        " ",
        "  ",
        "a  b",
        "a \n b",
        "\n\n x",
        "x\t\ty",
        "  \t x",
        "hi   ",
        "1234567 89",
        "a\r\n\r\n  b",
    ];
    for name in names {
        let pre = PreTokenizer::by_name(Some(name)).unwrap();
        let regexes: Vec<_> = pre
            .patterns()
            .iter()
            .map(|p| fancy_regex::Regex::new(p).unwrap())
            .collect();
        let mut texts: Vec<String> = fixed.iter().map(|s| s.to_string()).collect();
        texts.extend((0..1500).map(|_| random_text(&mut rng)));
        for t in &texts {
            assert_eq!(
                pre.split(t).unwrap(),
                reference(&regexes, t),
                "{name}: {t:?}"
            );
        }
    }
}
