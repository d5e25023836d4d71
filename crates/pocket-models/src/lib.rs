//! Engine, model registry, tokenizers, chat templates, sampling and the model store.
