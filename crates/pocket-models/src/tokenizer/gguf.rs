//! Reading a [`GgufVocab`] out of a GGUF file's metadata (`tokenizer.ggml.*`).

use pocket_formats::{GgufFile, GgufMetadata};

use super::{GgufVocab, Tokenizer, TokenizerError};

fn meta_err(e: pocket_formats::FormatError) -> TokenizerError {
    TokenizerError::Metadata(e.to_string())
}

impl GgufVocab {
    /// Collects the tokenizer keys of a GGUF file's metadata.
    pub fn from_metadata(md: &GgufMetadata) -> Result<Self, TokenizerError> {
        let opt_u32 = |k: &str| md.get_u32_opt(k).map_err(meta_err);
        let opt_bool = |k: &str| md.get_bool_opt(k).map_err(meta_err);
        let types = match md
            .get_array_opt("tokenizer.ggml.token_type")
            .map_err(meta_err)?
        {
            Some(_) => md
                .get_int_array("tokenizer.ggml.token_type")
                .map_err(meta_err)?
                .into_iter()
                .map(|x| x as i32)
                .collect(),
            None => Vec::new(),
        };
        let scores = match md
            .get_array_opt("tokenizer.ggml.scores")
            .map_err(meta_err)?
        {
            Some(_) => md
                .get_f32_array("tokenizer.ggml.scores")
                .map_err(meta_err)?
                .to_vec(),
            None => Vec::new(),
        };
        let merges = match md
            .get_array_opt("tokenizer.ggml.merges")
            .map_err(meta_err)?
        {
            Some(_) => md
                .get_str_array("tokenizer.ggml.merges")
                .map_err(meta_err)?
                .to_vec(),
            None => Vec::new(),
        };
        Ok(Self {
            model: md
                .get_str("tokenizer.ggml.model")
                .map_err(meta_err)?
                .to_string(),
            pre: md
                .get_str_opt("tokenizer.ggml.pre")
                .map_err(meta_err)?
                .map(str::to_string),
            tokens: md
                .get_str_array("tokenizer.ggml.tokens")
                .map_err(meta_err)?
                .to_vec(),
            token_types: types,
            merges,
            scores,
            bos_token_id: opt_u32("tokenizer.ggml.bos_token_id")?,
            eos_token_id: opt_u32("tokenizer.ggml.eos_token_id")?,
            eot_token_id: opt_u32("tokenizer.ggml.eot_token_id")?,
            unknown_token_id: opt_u32("tokenizer.ggml.unknown_token_id")?,
            padding_token_id: opt_u32("tokenizer.ggml.padding_token_id")?,
            add_bos_token: opt_bool("tokenizer.ggml.add_bos_token")?,
            add_eos_token: opt_bool("tokenizer.ggml.add_eos_token")?,
            add_space_prefix: opt_bool("tokenizer.ggml.add_space_prefix")?,
            chat_template: md
                .get_str_opt("tokenizer.chat_template")
                .map_err(meta_err)?
                .map(str::to_string),
        })
    }
}

impl Tokenizer {
    /// Builds the tokenizer a GGUF file carries in its metadata.
    pub fn from_gguf(file: &GgufFile) -> Result<Self, TokenizerError> {
        Self::from_gguf_vocab(&GgufVocab::from_metadata(file.metadata())?)
    }

    /// Opens a GGUF file (memory-mapped) and builds its tokenizer.
    pub fn from_gguf_path(path: &std::path::Path) -> Result<Self, TokenizerError> {
        let file = GgufFile::open(path).map_err(meta_err)?;
        Self::from_gguf(&file)
    }
}
