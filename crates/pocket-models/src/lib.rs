//! Engine, model registry, tokenizers, chat templates, sampling and the model store.

pub mod chat_template;
pub mod engine;
pub mod model;
pub mod registry;
pub mod sampling;
pub mod store;
pub mod tokenizer;

pub use engine::{
    cache_dtype_by_name, default_cache_dtype, Engine, EngineBuilder, FinishReason, GenerateParams,
    Generation, GenerationStream, StreamEvent, TokenEvent, Usage,
};
pub use model::Model;
