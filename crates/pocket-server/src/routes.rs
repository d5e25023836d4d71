//! Request routing and the endpoint handlers.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full, LengthLimitError, Limited};
use hyper::body::Incoming;
use hyper::header::{HeaderValue, CACHE_CONTROL, CONTENT_LENGTH, CONTENT_TYPE};
use hyper::{Method, Request, Response, StatusCode};
use serde_json::{json, Value};

use crate::backend::{GenerationHandle, InferenceBackend};
use crate::errors::ApiError;
use crate::metrics::Metrics;
use crate::response::Assembler;
use crate::sse::{Generation, SseBody};
use crate::validate::{self, EchoPrompt, Endpoint, ParsedRequest};
use crate::{auth, ServerConfig};

/// The response body type of every route.
pub type RespBody = UnsyncBoxBody<Bytes, Infallible>;

/// What every request handler shares.
pub struct AppState {
    /// The token generator.
    pub backend: Arc<dyn InferenceBackend>,
    /// Server settings.
    pub config: ServerConfig,
    /// Metrics.
    pub metrics: Arc<Metrics>,
}

fn full(
    status: StatusCode,
    content_type: &'static str,
    body: impl Into<Bytes>,
) -> Response<RespBody> {
    let mut r = Response::new(Full::new(body.into()).boxed_unsync());
    *r.status_mut() = status;
    r.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    r
}

fn json_response(status: StatusCode, v: &Value) -> Response<RespBody> {
    full(status, "application/json", v.to_string())
}

fn error_response(e: &ApiError) -> Response<RespBody> {
    json_response(e.status, &e.body())
}

/// Routes one request; never fails (errors become OpenAI error bodies).
pub async fn handle(
    state: Arc<AppState>,
    req: Request<Incoming>,
) -> Result<Response<RespBody>, Infallible> {
    let path = req.uri().path().trim_end_matches('/').to_string();
    let method = req.method().clone();
    let label = match path.as_str() {
        "/v1/chat/completions" => "chat",
        "/v1/completions" => "completions",
        "/v1/models" => "models",
        "/health" => "health",
        "/metrics" => "metrics",
        p if p.starts_with("/v1/models/") => "models",
        _ => "other",
    };
    let result = route(&state, req, &method, &path).await;
    let resp = result.unwrap_or_else(|e| error_response(&e));
    state.metrics.request(label, resp.status().as_u16());
    Ok(resp)
}

async fn route(
    state: &Arc<AppState>,
    req: Request<Incoming>,
    method: &Method,
    path: &str,
) -> Result<Response<RespBody>, ApiError> {
    let needs_auth = path.starts_with("/v1/");
    if needs_auth {
        auth::check(state.config.api_key.as_deref(), req.headers())?;
    }
    match (method, path) {
        (&Method::GET, "/health") => {
            let s = state.backend.stats();
            let models: Vec<Value> = state
                .backend
                .model_stats()
                .iter()
                .map(|(id, m)| {
                    json!({"id": id, "queued": m.queued, "running": m.running,
                           "cache_blocks_used": m.cache_blocks_used,
                           "cache_blocks_total": m.cache_blocks_total})
                })
                .collect();
            Ok(json_response(
                StatusCode::OK,
                &json!({"status": "ok", "queued": s.queued, "running": s.running,
                        "cache_blocks_used": s.cache_blocks_used, "cache_blocks_total": s.cache_blocks_total,
                        "models": models}),
            ))
        }
        (&Method::GET, "/metrics") => Ok(full(
            StatusCode::OK,
            "text/plain; version=0.0.4",
            state
                .metrics
                .render(&state.backend.stats(), &state.backend.model_stats()),
        )),
        (&Method::GET, "/v1/models") => {
            let data: Vec<Value> = state.backend.models().iter().map(model_json).collect();
            Ok(json_response(
                StatusCode::OK,
                &json!({"object": "list", "data": data}),
            ))
        }
        (&Method::GET, p) if p.starts_with("/v1/models/") => {
            let id = &p["/v1/models/".len()..];
            match state.backend.models().iter().find(|m| m.id == id) {
                Some(m) => Ok(json_response(StatusCode::OK, &model_json(m))),
                None => Err(ApiError::not_found(
                    format!("The model `{id}` does not exist"),
                    "model_not_found",
                )),
            }
        }
        (&Method::POST, "/v1/chat/completions") => generate(state, req, Endpoint::Chat).await,
        (&Method::POST, "/v1/completions") => generate(state, req, Endpoint::Completions).await,
        (
            m,
            p
            @ ("/health" | "/metrics" | "/v1/models" | "/v1/chat/completions" | "/v1/completions"),
        ) => Err(ApiError::method_not_allowed(m.as_str(), p)),
        (_, p) => Err(ApiError::not_found(
            format!("Unknown path {p}"),
            "unknown_url",
        )),
    }
}

fn model_json(m: &crate::backend::ModelInfo) -> Value {
    json!({"id": m.id, "object": "model", "created": m.created, "owned_by": m.owned_by,
           "context_length": m.context_length})
}

async fn read_body(req: Request<Incoming>, limit: usize) -> Result<Bytes, ApiError> {
    if let Some(len) = req
        .headers()
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok())
    {
        if len > limit as u64 {
            return Err(ApiError::too_large(limit));
        }
    }
    match Limited::new(req.into_body(), limit).collect().await {
        Ok(c) => Ok(c.to_bytes()),
        Err(e) if e.is::<LengthLimitError>() => Err(ApiError::too_large(limit)),
        Err(e) => Err(ApiError::invalid(
            None,
            format!("could not read the request body: {e}"),
        )),
    }
}

fn echo_texts(state: &AppState, parsed: &ParsedRequest) -> Result<Vec<String>, ApiError> {
    let Some(prompts) = &parsed.echo else {
        return Ok(Vec::new());
    };
    prompts
        .iter()
        .map(|p| match p {
            EchoPrompt::Text(t) => Ok(t.clone()),
            EchoPrompt::Tokens(t) => Ok(state.backend.detokenize(&parsed.model, t)?),
        })
        .collect()
}

async fn generate(
    state: &Arc<AppState>,
    req: Request<Incoming>,
    endpoint: Endpoint,
) -> Result<Response<RespBody>, ApiError> {
    let started = Instant::now();
    let body = read_body(req, state.config.max_body_bytes).await?;
    let parsed = validate::parse(endpoint, &body)?;
    if !state.backend.models().iter().any(|m| m.id == parsed.model) {
        let mut e = ApiError::not_found(
            format!("The model `{}` does not exist", parsed.model),
            "model_not_found",
        );
        e.param = Some("model".into());
        return Err(e);
    }
    let echo = echo_texts(state, &parsed)?;
    // All choices in one submission, so a batching backend starts them at the same step.
    let handles: Vec<GenerationHandle> = state.backend.submit_all(parsed.choices.clone())?;
    let asm = Assembler::new(&parsed, echo, started);
    let gen = Generation::new(
        handles,
        asm,
        state.config.request_timeout,
        state.metrics.clone(),
    );
    if parsed.stream {
        let body = SseBody::new(gen, parsed.include_usage);
        let mut r = Response::new(body.boxed_unsync());
        r.headers_mut()
            .insert(CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
        r.headers_mut()
            .insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
        Ok(r)
    } else {
        let v = gen.collect().await?;
        Ok(json_response(StatusCode::OK, &v))
    }
}
