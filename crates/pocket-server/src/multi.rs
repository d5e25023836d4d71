//! Several models behind one server: each model keeps its own backend (engine, scheduler, cache,
//! queue) and requests are routed by their `model` field.

use std::sync::Arc;

use crate::backend::{
    BackendStats, GenerationHandle, GenerationRequest, InferenceBackend, ModelInfo, SubmitError,
};

/// Routes each request to the backend that serves its model.
pub struct MultiBackend {
    backends: Vec<Arc<dyn InferenceBackend>>,
}

impl MultiBackend {
    /// Combines `backends`; fails when two of them serve the same model id or none is given.
    pub fn new(backends: Vec<Arc<dyn InferenceBackend>>) -> Result<Self, String> {
        if backends.is_empty() {
            return Err("no model to serve".into());
        }
        let mut seen: Vec<String> = Vec::new();
        for b in &backends {
            for m in b.models() {
                if seen.contains(&m.id) {
                    return Err(format!(
                        "the model id `{}` is given twice: give each --model a distinct \
                         name (--model NAME=ALIAS|PATH)",
                        m.id
                    ));
                }
                seen.push(m.id);
            }
        }
        Ok(Self { backends })
    }

    /// The backend serving `model`.
    fn route(&self, model: &str) -> Result<&Arc<dyn InferenceBackend>, SubmitError> {
        self.backends
            .iter()
            .find(|b| b.models().iter().any(|m| m.id == model))
            .ok_or_else(|| SubmitError::UnknownModel(model.to_string()))
    }
}

impl InferenceBackend for MultiBackend {
    fn models(&self) -> Vec<ModelInfo> {
        self.backends.iter().flat_map(|b| b.models()).collect()
    }

    fn submit(&self, req: GenerationRequest) -> Result<GenerationHandle, SubmitError> {
        self.route(&req.model)?.submit(req)
    }

    /// All to the backend of the first request's model (a request's choices share a model; a
    /// mixed list is refused by that backend as an unknown model).
    fn submit_all(
        &self,
        reqs: Vec<GenerationRequest>,
    ) -> Result<Vec<GenerationHandle>, SubmitError> {
        match reqs.first() {
            Some(r) => self.route(&r.model)?.submit_all(reqs),
            None => Ok(Vec::new()),
        }
    }

    fn detokenize(&self, model: &str, tokens: &[u32]) -> Result<String, SubmitError> {
        self.route(model)?.detokenize(model, tokens)
    }

    /// The sum over every model's backend.
    fn stats(&self) -> BackendStats {
        self.backends
            .iter()
            .map(|b| b.stats())
            .fold(BackendStats::default(), |a, s| BackendStats {
                queued: a.queued + s.queued,
                running: a.running + s.running,
                cache_blocks_used: a.cache_blocks_used + s.cache_blocks_used,
                cache_blocks_total: a.cache_blocks_total + s.cache_blocks_total,
            })
    }

    fn model_stats(&self) -> Vec<(String, BackendStats)> {
        self.backends.iter().flat_map(|b| b.model_stats()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fake::{FakeBackend, FakeConfig};
    use crate::{Prompt, SamplingOptions};

    fn fake(ids: &[&str], blocks: usize) -> Arc<dyn InferenceBackend> {
        Arc::new(FakeBackend::new(FakeConfig {
            models: ids.iter().map(|s| s.to_string()).collect(),
            cache_blocks: blocks,
            ..FakeConfig::default()
        }))
    }

    fn req(model: &str) -> GenerationRequest {
        GenerationRequest {
            model: model.into(),
            prompt: Prompt::Text("hello".into()),
            max_tokens: Some(3),
            sampling: SamplingOptions::default(),
            stop: Vec::new(),
            logprobs: None,
        }
    }

    #[test]
    fn routes_lists_sums_and_rejects_duplicates() {
        let m = MultiBackend::new(vec![fake(&["a"], 10), fake(&["b"], 20)]).unwrap();
        let ids: Vec<String> = m.models().into_iter().map(|m| m.id).collect();
        assert_eq!(ids, ["a", "b"]);
        assert_eq!(m.stats().cache_blocks_total, 30);
        let per: Vec<(String, usize)> = m
            .model_stats()
            .into_iter()
            .map(|(id, s)| (id, s.cache_blocks_total))
            .collect();
        assert_eq!(per, [("a".to_string(), 10), ("b".to_string(), 20)]);
        assert!(matches!(
            m.submit(req("c")),
            Err(SubmitError::UnknownModel(c)) if c == "c"
        ));
        assert!(m.detokenize("c", &[1]).is_err());
        assert!(m.detokenize("b", &[1]).is_ok());
        let dup = MultiBackend::new(vec![fake(&["a"], 1), fake(&["x", "a"], 1)]);
        assert!(dup.err().unwrap().contains("`a` is given twice"));
        assert!(MultiBackend::new(Vec::new()).is_err());
    }

    /// Each model keeps its own limits: 100 new tokens fit b's context (256), not a's (64).
    #[tokio::test]
    async fn submits_to_the_named_model() {
        let ctx = |id: &str, n: usize| -> Arc<dyn InferenceBackend> {
            Arc::new(FakeBackend::new(FakeConfig {
                models: vec![id.into()],
                context_length: n,
                ..FakeConfig::default()
            }))
        };
        let m = MultiBackend::new(vec![ctx("a", 64), ctx("b", 256)]).unwrap();
        let long = |model: &str| GenerationRequest {
            max_tokens: Some(100),
            ..req(model)
        };
        assert!(matches!(
            m.submit(long("a")),
            Err(SubmitError::ContextExceeded {
                context_length: 64,
                ..
            })
        ));
        let mut h = m.submit(long("b")).unwrap();
        let mut tokens = 0;
        while let Some(ev) = h.next().await {
            match ev {
                crate::GenerationEvent::Token { .. } => tokens += 1,
                crate::GenerationEvent::Finished { .. } => break,
                _ => {}
            }
        }
        assert!(tokens > 0);
    }
}
