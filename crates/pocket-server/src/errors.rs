//! OpenAI-style error bodies: `{"error": {"message", "type", "param", "code"}}` with a 4xx/5xx status.

use hyper::StatusCode;
use serde_json::json;

use crate::backend::SubmitError;

/// An error answered to the client.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{status}: {message}")]
pub struct ApiError {
    /// HTTP status.
    pub status: StatusCode,
    /// Human-readable explanation.
    pub message: String,
    /// OpenAI error type (`invalid_request_error`, `authentication_error`, ...).
    pub kind: &'static str,
    /// The request parameter at fault, if one.
    pub param: Option<String>,
    /// A machine-readable code, if one.
    pub code: Option<&'static str>,
}

impl ApiError {
    /// A 400 `invalid_request_error` about `param`.
    pub fn invalid(param: impl Into<Option<String>>, message: impl Into<String>) -> Self {
        Self {
            status: StatusCode::BAD_REQUEST,
            message: message.into(),
            kind: "invalid_request_error",
            param: param.into(),
            code: None,
        }
    }

    /// A 400 for a field this server does not implement.
    pub fn unsupported(param: &str, message: impl Into<String>) -> Self {
        let mut e = Self::invalid(Some(param.to_string()), message);
        e.code = Some("unsupported_parameter");
        e
    }

    /// A 401 for a missing or wrong key.
    pub fn unauthorized(message: impl Into<String>) -> Self {
        Self {
            status: StatusCode::UNAUTHORIZED,
            message: message.into(),
            kind: "invalid_request_error",
            param: None,
            code: Some("invalid_api_key"),
        }
    }

    /// A 404 for an unknown path or model.
    pub fn not_found(message: impl Into<String>, code: &'static str) -> Self {
        Self {
            status: StatusCode::NOT_FOUND,
            message: message.into(),
            kind: "invalid_request_error",
            param: None,
            code: Some(code),
        }
    }

    /// A 405 for a known path with the wrong method.
    pub fn method_not_allowed(method: &str, path: &str) -> Self {
        Self {
            status: StatusCode::METHOD_NOT_ALLOWED,
            message: format!("Method {method} is not allowed on {path}"),
            kind: "invalid_request_error",
            param: None,
            code: Some("method_not_allowed"),
        }
    }

    /// A 413 for a body over the limit.
    pub fn too_large(limit: usize) -> Self {
        Self {
            status: StatusCode::PAYLOAD_TOO_LARGE,
            message: format!("The request body is larger than the limit of {limit} bytes"),
            kind: "invalid_request_error",
            param: None,
            code: Some("request_too_large"),
        }
    }

    /// A 504 when generation exceeded the per-request time limit.
    pub fn timeout(secs: f64) -> Self {
        Self {
            status: StatusCode::GATEWAY_TIMEOUT,
            message: format!("The request took longer than the server's limit of {secs} s"),
            kind: "timeout_error",
            param: None,
            code: Some("timeout"),
        }
    }

    /// A 500 for a backend failure.
    pub fn internal(message: impl Into<String>) -> Self {
        Self {
            status: StatusCode::INTERNAL_SERVER_ERROR,
            message: message.into(),
            kind: "server_error",
            param: None,
            code: None,
        }
    }

    /// The JSON body.
    pub fn body(&self) -> serde_json::Value {
        json!({
            "error": {
                "message": self.message,
                "type": self.kind,
                "param": self.param,
                "code": self.code,
            }
        })
    }
}

impl From<SubmitError> for ApiError {
    fn from(e: SubmitError) -> Self {
        let message = e.to_string();
        match e {
            SubmitError::UnknownModel(_) => {
                let mut a = ApiError::not_found(message, "model_not_found");
                a.param = Some("model".into());
                a
            }
            SubmitError::PromptTooLong { .. } | SubmitError::ContextExceeded { .. } => {
                let mut a = ApiError::invalid(Some("messages".to_string()), message);
                a.code = Some("context_length_exceeded");
                a
            }
            SubmitError::Invalid { param, .. } => ApiError::invalid(param, message),
            SubmitError::QueueFull { .. } => ApiError {
                status: StatusCode::TOO_MANY_REQUESTS,
                message,
                kind: "rate_limit_error",
                param: None,
                code: Some("queue_full"),
            },
            SubmitError::Unavailable(_) => ApiError {
                status: StatusCode::SERVICE_UNAVAILABLE,
                message,
                kind: "server_error",
                param: None,
                code: None,
            },
        }
    }
}
