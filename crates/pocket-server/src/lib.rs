//! OpenAI-compatible HTTP server over the pocket-models Engine.
