//! Engine, model registry, tokenizers, chat templates, sampling and the model store.

pub mod chat_template;
pub mod sampling;
pub mod store;
pub mod tokenizer;
