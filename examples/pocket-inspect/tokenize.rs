//! `tokenize PATH --text TEXT`: token ids from the file's own vocabulary.
//!
//! OWNED BY THE TOKENIZER WORK: replace the body of [`run`]. Contract (issue 2): print the ids
//! space-separated (with `--json`: `{"ids": [...]}`), by default adding no BOS/EOS and not parsing
//! special-token text; `add_special` / `parse_special` turn those on.

use std::path::PathBuf;

use pocket_models::tokenizer::Tokenizer;

/// Arguments of the `tokenize` command.
#[derive(Debug, Clone, PartialEq)]
pub struct TokenizeArgs {
    /// GGUF file (or checkpoint folder) whose vocabulary to use.
    pub path: PathBuf,
    /// Text to tokenize.
    pub text: String,
    /// Add BOS/EOS as the vocabulary's settings say.
    pub add_special: bool,
    /// Recognise special-token text (`<|im_start|>`) as special tokens.
    pub parse_special: bool,
    /// Print `{"ids": [...]}` instead of space-separated ids.
    pub json: bool,
}

/// Tokenizes and prints the ids to stdout.
pub fn run(args: &TokenizeArgs) -> Result<(), Box<dyn std::error::Error>> {
    let tok = Tokenizer::from_path(&args.path)?;
    let ids = tok.encode(&args.text, args.add_special, args.parse_special)?;
    if args.json {
        println!("{}", serde_json::json!({ "ids": ids }));
    } else {
        let s: Vec<String> = ids.iter().map(u32::to_string).collect();
        println!("{}", s.join(" "));
    }
    Ok(())
}
