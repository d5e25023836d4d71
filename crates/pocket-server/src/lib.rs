//! OpenAI-compatible HTTP server over the pocket-models Engine.
//!
//! The HTTP layer ([`routes`], [`sse`], [`validate`], [`response`]) talks only to an
//! [`InferenceBackend`]; [`fake::FakeBackend`] is a deterministic one for tests.

pub mod auth;
pub mod backend;
pub mod cli;
pub mod engine_backend;
pub mod errors;
pub mod fake;
pub mod metrics;
pub mod multi;
pub mod response;
pub mod routes;
pub mod scheduler;
pub mod server;
pub mod sse;
pub mod stop;
pub mod types;
pub mod validate;

pub use backend::{
    BackendStats, ChatMessage, FinishReason, GenerationEvent, GenerationHandle, GenerationRequest,
    InferenceBackend, ModelInfo, Prompt, SamplingOptions, SubmitError,
};
pub use errors::ApiError;
pub use multi::MultiBackend;
pub use server::{Server, ServerConfig, ServerHandle};
