//! Pre-tokenizers of byte-level BPE vocabularies, selected by `tokenizer.ggml.pre`.
//!
//! The split regexes are the ones llama.cpp uses for each pre-tokenizer name (format data from
//! llama-vocab.cpp). Regexes are applied in sequence: each one splits every piece left by the
//! previous ones into its matches and the unmatched text between them.

use fancy_regex::Regex;

use super::TokenizerError;

const GPT2_WORDS: &str = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)";
const LLAMA3: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
const QWEN2: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
const QWEN35: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
const DEEPSEEK_LLM_LETTERS: &str = "\\s?[A-Za-zµÀ-ÖØ-öø-ƺƼ-ƿǄ-ʓʕ-ʯͰ-ͳͶͷͻ-ͽͿΆΈ-ΊΌΎ-ΡΣ-ϵϷ-ҁҊ-ԯԱ-ՖႠ-ჅᎠ-Ᏽᏸ-ᏽᲐ-ᲺᲽ-Ჿᴀ-ᴫᵫ-ᵷᵹ-ᶚḀ-ἕἘ-Ἕἠ-ὅὈ-Ὅὐ-ὗὙὛὝὟ-\u{1F7D}ᾀ-ᾴᾶ-ᾼ\u{1FBE}ῂ-ῄῆ-ῌῐ-\u{1FD3}ῖ-\u{1FDB}ῠ-Ῥῲ-ῴῶ-ῼℂℇℊ-ℓℕℙ-ℝℤ\u{2126}ℨ\u{212A}-ℭℯ-ℴℹℼ-ℿⅅ-ⅉⅎↃↄⰀ-ⱻⱾ-ⳤⳫ-ⳮⳲⳳꙀ-ꙭꚀ-ꚛꜢ-ꝯꝱ-ꞇꞋ-ꞎꭰ-ꮿﬀ-ﬆﬓ-ﬗＡ-Ｚａ-ｚ𐐀-𐑏𐒰-𐓓𐓘-𐓻𐲀-𐲲𐳀-𐳲𑢠-𑣟𞤀-𞥃]+";
const DEEPSEEK_LLM_PUNCT: &str = "\\s?[!-/:-~！-／：-～‘-‟　-。]+";
const CJK_HANGUL: &str = "[一-龥ࠀ-一가-퟿]+";
const DEEPSEEK3_CJK: &str = "[一-龥぀-ゟ゠-ヿ]+";
const DEEPSEEK3_WORDS: &str = r##"[!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"##;

/// One compiled split regex.
#[derive(Debug)]
enum Splitter {
    /// A pattern the `regex` crate runs directly. With `ws_lookahead`, the pattern's trailing
    /// `\s+(?!\S)|\s+` (or `\s+(?!\S)`) was replaced by `\s+`, and the look-ahead is applied by
    /// hand: a whitespace-only match not ending in a newline that is followed by a non-space
    /// character gives its last character back.
    Fast {
        re: regex::Regex,
        ws_lookahead: bool,
        newline_alt: bool,
    },
    /// Anything else, run by the backtracking engine.
    Fancy(fancy_regex::Regex),
}

const LOOKAHEAD_TAILS: [&str; 2] = [r"|\s+(?!\S)|\s+", r"|\s+(?!\S)"];

impl Splitter {
    fn new(pattern: &str) -> Result<Self, String> {
        for tail in LOOKAHEAD_TAILS {
            if let Some(head) = pattern.strip_suffix(tail) {
                if !head.contains("(?=") && !head.contains("(?!") {
                    let re =
                        regex::Regex::new(&format!(r"{head}|\s+")).map_err(|e| e.to_string())?;
                    // whitespace ending in a newline came from `\s*[\r\n]+`, which has no look-ahead
                    let newline_alt = head.contains(r"\s*[\r\n]+");
                    return Ok(Self::Fast {
                        re,
                        ws_lookahead: true,
                        newline_alt,
                    });
                }
            }
        }
        match regex::Regex::new(pattern) {
            Ok(re) => Ok(Self::Fast {
                re,
                ws_lookahead: false,
                newline_alt: false,
            }),
            Err(_) => Regex::new(pattern)
                .map(Self::Fancy)
                .map_err(|e| format!("{e:?}")),
        }
    }

    /// Appends the matches of `piece` and the unmatched text between them to `out`.
    fn split_into<'a>(&self, piece: &'a str, out: &mut Vec<&'a str>) -> Result<(), TokenizerError> {
        let mut last = 0;
        let push = |out: &mut Vec<&'a str>, start: usize, end: usize, last: &mut usize| {
            if start > *last {
                out.push(&piece[*last..start]);
            }
            out.push(&piece[start..end]);
            *last = end;
        };
        match self {
            Self::Fast {
                re,
                ws_lookahead,
                newline_alt,
            } => {
                let mut pos = 0;
                while pos < piece.len() {
                    let Some(m) = re.find_at(piece, pos) else {
                        break;
                    };
                    let (start, mut end) = (m.start(), m.end());
                    if end == start {
                        // an empty match: step over one character
                        pos = end + piece[end..].chars().next().map_or(1, char::len_utf8);
                        continue;
                    }
                    if *ws_lookahead {
                        let text = m.as_str();
                        let followed_by_non_space = piece[end..]
                            .chars()
                            .next()
                            .is_some_and(|c| !c.is_whitespace());
                        if followed_by_non_space
                            && !(*newline_alt && text.ends_with(['\r', '\n']))
                            && text.chars().all(char::is_whitespace)
                        {
                            if let Some((i, _)) = text.char_indices().last() {
                                if i > 0 {
                                    end = start + i;
                                }
                            }
                        }
                    }
                    push(out, start, end, &mut last);
                    pos = end;
                }
            }
            Self::Fancy(re) => {
                for m in re.find_iter(piece) {
                    let m = m.map_err(|e| TokenizerError::Regex(e.to_string()))?;
                    if m.start() < m.end() {
                        push(out, m.start(), m.end(), &mut last);
                    }
                }
            }
        }
        if last < piece.len() {
            out.push(&piece[last..]);
        }
        Ok(())
    }
}

/// A named pre-tokenizer: the regexes applied in order, and whether whole-word vocabulary hits
/// skip the merges (`ignore_merges`).
#[derive(Debug)]
pub struct PreTokenizer {
    name: String,
    patterns: Vec<&'static str>,
    splitters: Vec<Splitter>,
    ignore_merges: bool,
}

/// Returns the regex list and `ignore_merges` for a `tokenizer.ggml.pre` name.
fn patterns(name: &str) -> Option<(Vec<&'static str>, bool)> {
    let p =
        match name {
            "llama3" | "llama-v3" | "llama-bpe" | "falcon3" | "falcon-h1" | "pixtral"
            | "midm-2.0" | "lfm2" => (vec![LLAMA3], true),
            "dbrx" | "smaug-bpe" | "chatglm-bpe" | "glm4" => (vec![LLAMA3], false),
            "deepseek-llm" => (
                vec![
                    "[\r\n]",
                    DEEPSEEK_LLM_LETTERS,
                    DEEPSEEK_LLM_PUNCT,
                    r"\s+$",
                    CJK_HANGUL,
                    r"\p{N}+",
                ],
                false,
            ),
            "deepseek-v3" | "hunyuan-dense" => {
                (vec![r"\p{N}{1,3}", DEEPSEEK3_CJK, DEEPSEEK3_WORDS], false)
            }
            "deepseek-coder" => (
                vec!["[\r\n]", r"\s?\p{L}+", r"\s?\p{P}+", CJK_HANGUL, r"\p{N}"],
                false,
            ),
            "falcon" => (
                vec![r"[\p{P}\$\+<=>\^~\|`]+", GPT2_WORDS, "[0-9][0-9][0-9]"],
                false,
            ),
            "starcoder" | "refact" | "command-r" | "smollm" | "codeshell" | "exaone"
            | "minerva-7b" => (vec![r"\p{N}", GPT2_WORDS], false),
            "gpt-2" | "phi-2" | "jina-es" | "jina-de" | "gigachat" | "jina-v1-en"
            | "jina-v2-es" | "jina-v2-de" | "jina-v2-code" | "roberta-bpe" | "mpt" | "olmo"
            | "jais" | "trillion" | "granite-docling" => (vec![GPT2_WORDS], false),
            "qwen2" | "deepseek-r1-qwen" | "megrez" | "stablelm2" | "hunyuan" | "grok-2"
            | "qwen3" => (vec![QWEN2], false),
            "qwen35" => (vec![QWEN35], false),
            "default" => (
                vec![
                    r"[\p{P}\$\+<=>\^~\|]+",
                    GPT2_WORDS,
                    r"\p{N}+",
                    "[0-9][0-9][0-9]",
                ],
                false,
            ),
            _ => return None,
        };
    Some(p)
}

impl PreTokenizer {
    /// Builds the pre-tokenizer named by `tokenizer.ggml.pre` (`None` or unknown names are errors,
    /// except that a missing name falls back to llama.cpp's `default`).
    pub fn by_name(name: Option<&str>) -> Result<Self, TokenizerError> {
        let name = name.unwrap_or("default");
        let (pats, ignore_merges) =
            patterns(name).ok_or_else(|| TokenizerError::UnknownPreTokenizer(name.to_string()))?;
        let splitters = pats
            .iter()
            .map(|p| {
                Splitter::new(p).map_err(|e| TokenizerError::Regex(format!("{name}: {p:?}: {e}")))
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self {
            name: name.to_string(),
            patterns: pats,
            splitters,
            ignore_merges,
        })
    }

    /// The pre-tokenizer's name as given in the metadata.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The regexes as llama.cpp writes them, in the order they are applied.
    pub fn patterns(&self) -> &[&'static str] {
        &self.patterns
    }

    /// Whether a word found whole in the vocabulary is emitted without merging.
    pub fn ignore_merges(&self) -> bool {
        self.ignore_merges
    }

    /// Splits `text` into words (slices of `text`).
    pub fn split<'a>(&self, text: &'a str) -> Result<Vec<&'a str>, TokenizerError> {
        let mut pieces: Vec<&'a str> = if text.is_empty() {
            Vec::new()
        } else {
            vec![text]
        };
        for sp in &self.splitters {
            let mut next = Vec::with_capacity(pieces.len() * 2);
            for piece in pieces {
                sp.split_into(piece, &mut next)?;
            }
            pieces = next;
        }
        Ok(pieces)
    }
}
