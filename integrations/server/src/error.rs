//! The server's errors: what a request gets back ([`ApiError`], OpenAI's
//! error body) and why the server could not start ([`StartError`]).

use std::path::PathBuf;

use axum::extract::rejection::JsonRejection;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::json;

/// An error answered to a client, with OpenAI's body:
/// `{"error": {"message", "type", "param", "code"}}`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ApiError {
    /// The HTTP status.
    pub status: StatusCode,
    /// What went wrong, for a person.
    pub message: String,
    /// OpenAI's error type (`invalid_request_error`, `server_error`, ...).
    pub kind: &'static str,
    /// The request field at fault, if one is.
    pub param: Option<&'static str>,
    /// A machine-readable code, if there is one.
    pub code: Option<&'static str>,
}

impl ApiError {
    /// 400: a request field (`param`) outside what the server takes.
    pub fn invalid(param: &'static str, message: impl Into<String>) -> ApiError {
        ApiError {
            status: StatusCode::BAD_REQUEST,
            message: message.into(),
            kind: "invalid_request_error",
            param: Some(param),
            code: None,
        }
    }

    /// The same error with a code.
    #[must_use]
    pub fn with_code(mut self, code: &'static str) -> ApiError {
        self.code = Some(code);
        self
    }

    /// 503 with `Retry-After: 1`: every slot is busy and the queue is full,
    /// or the server is shutting down.
    pub fn unavailable(message: impl Into<String>) -> ApiError {
        ApiError {
            status: StatusCode::SERVICE_UNAVAILABLE,
            message: message.into(),
            kind: "server_error",
            param: None,
            code: Some("overloaded"),
        }
    }

    /// 500: the engine thread has ended (not at shutdown): nothing can be
    /// decoded until the server is restarted, so no `Retry-After`.
    pub fn engine_stopped() -> ApiError {
        ApiError {
            status: StatusCode::INTERNAL_SERVER_ERROR,
            message: "the engine has stopped: restart the server".into(),
            kind: "server_error",
            param: None,
            code: Some("engine_stopped"),
        }
    }

    /// 500: the engine failed the request (a forward pass failed).
    pub fn internal(message: impl Into<String>) -> ApiError {
        ApiError {
            status: StatusCode::INTERNAL_SERVER_ERROR,
            message: message.into(),
            kind: "server_error",
            param: None,
            code: None,
        }
    }

    /// The body: `{"error": {...}}`.
    #[must_use]
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

impl From<JsonRejection> for ApiError {
    /// Every body axum cannot read as the request (not JSON, a field of the
    /// wrong type, a missing field, no JSON content type) is a 400 with
    /// serde's message; a body over the size limit keeps its 413.
    fn from(rejection: JsonRejection) -> ApiError {
        let status = match rejection.status() {
            StatusCode::PAYLOAD_TOO_LARGE => StatusCode::PAYLOAD_TOO_LARGE,
            _ => StatusCode::BAD_REQUEST,
        };
        let message = rejection.body_text();
        ApiError {
            status,
            param: field_of(&message),
            message,
            kind: "invalid_request_error",
            code: None,
        }
    }
}

/// The request fields an error can name.
const FIELDS: [&str; 11] = [
    "messages",
    "max_tokens",
    "max_completion_tokens",
    "temperature",
    "top_p",
    "seed",
    "stop",
    "stream",
    "user",
    "speculative",
    "model",
];

/// The field a serde error names (`...target type: messages[0].role: ...`),
/// or the missing one (`missing field `messages``).
fn field_of(message: &str) -> Option<&'static str> {
    let named = |s: &str| FIELDS.iter().copied().find(|f| *f == s);
    if let Some(rest) = message.split("missing field `").nth(1) {
        return rest.split('`').next().and_then(named);
    }
    let path = message.split("target type: ").nth(1)?.split(": ").next()?;
    named(path.split(['.', '[']).next()?)
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut response = (self.status, axum::Json(self.body())).into_response();
        if self.status == StatusCode::SERVICE_UNAVAILABLE {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, header::HeaderValue::from_static("1"));
        }
        response
    }
}

/// Why the server could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// No model file was given and none was found.
    #[error("{0}")]
    NoModel(String),
    /// llama.cpp's backend did not start.
    #[error("llama.cpp's backend: {0}")]
    Backend(String),
    /// llama.cpp could not load the model.
    #[error("cannot load the model {path}: {message}")]
    Model {
        /// The GGUF file.
        path: PathBuf,
        /// llama.cpp's error.
        message: String,
    },
    /// The llama.cpp context or the stepper could not be made.
    #[error("cannot make the llama.cpp context: {0}")]
    Context(String),
    /// The engine-wide memory could not be made or loaded.
    #[error("the engine-wide memory: {0}")]
    Memory(#[from] selfspec::Error),
    /// The address could not be bound, or the server failed.
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_field_of_a_serde_error() {
        let m = "Failed to deserialize the JSON body into the target type: messages[0].role: invalid type";
        assert_eq!(field_of(m), Some("messages"));
        let m = "Failed to deserialize the JSON body into the target type: temperature: invalid type: string";
        assert_eq!(field_of(m), Some("temperature"));
        let m = "Failed to deserialize the JSON body into the target type: missing field `messages` at line 1";
        assert_eq!(field_of(m), Some("messages"));
        assert_eq!(
            field_of("Failed to parse the request body as JSON: key must be a string"),
            None
        );
        let body = ApiError::invalid("top_p", "x").with_code("c").body();
        assert_eq!(body["error"]["param"], "top_p");
        assert_eq!(body["error"]["code"], "c");
        assert_eq!(body["error"]["type"], "invalid_request_error");
    }
}
