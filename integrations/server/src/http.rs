//! The HTTP API (axum): chat completions, streamed or not, the model list,
//! the token endpoints ([`tokens`]), health and metrics. Handlers apply
//! the chat template, tokenize, and hand the request to the engine thread;
//! its reply ([`reply`]) turns the tokens into text as they arrive.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use axum::extract::rejection::JsonRejection;
use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use selfspec::step::{Decode, Sampler};
use serde_json::json;
use tokio::sync::mpsc::unbounded_channel;

use crate::api::{ChatRequest, Meta};
use crate::app::App;
use crate::engine::Job;
use crate::error::ApiError;
use crate::reply::{self, Generation};
use crate::tokens;

/// The header that names a request's speculation scope.
pub const SCOPE_HEADER: &str = "x-selfspec-scope";

/// The routes.
pub fn router(app: Arc<App>) -> Router {
    Router::new()
        .route("/v1/chat/completions", post(chat))
        .route("/v1/models", get(models))
        .route("/tokenize", post(tokens::tokenize))
        .route("/detokenize", post(tokens::detokenize))
        .route("/health", get(health))
        .route("/metrics", get(metrics))
        .with_state(app)
}

/// 200 `{"status": "ok"}` while the engine thread runs; 503 at shutdown;
/// once the engine thread has ended otherwise, 500 with an
/// `engine_stopped` error body, so that a supervisor restarts the server.
async fn health(State(app): State<Arc<App>>) -> Response {
    match app.engine_state() {
        Ok(()) => Json(json!({"status": "ok"})).into_response(),
        Err(e) => e.into_response(),
    }
}

async fn models(State(app): State<Arc<App>>) -> Json<serde_json::Value> {
    Json(json!({
        "object": "list",
        "data": [{"id": app.model_id, "object": "model", "created": now(), "owned_by": "selfspec"}],
    }))
}

async fn metrics(State(app): State<Arc<App>>) -> impl IntoResponse {
    let text = app.metrics.render(app.slots);
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], text)
}

async fn chat(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    body: Result<Json<ChatRequest>, JsonRejection>,
) -> Response {
    match run_chat(&app, &headers, body).await {
        Ok(response) => response,
        Err(e) => {
            let counter = match e.status {
                StatusCode::SERVICE_UNAVAILABLE => &app.metrics.rejected,
                s if s.is_client_error() => &app.metrics.invalid,
                _ => return e.into_response(),
            };
            counter.fetch_add(1, Ordering::Relaxed);
            e.into_response()
        }
    }
}

async fn run_chat(
    app: &Arc<App>,
    headers: &HeaderMap,
    body: Result<Json<ChatRequest>, JsonRejection>,
) -> Result<Response, ApiError> {
    let Json(request) = body?;
    let scope = scope_of(headers, request.user.as_deref());
    let checked = request.check(app.context)?;
    // Templating and tokenizing a long prompt take a while: off the
    // async workers.
    let (template_app, messages) = (Arc::clone(app), checked.messages.clone());
    let prompt = tokio::task::spawn_blocking(move || template_app.prompt(&messages))
        .await
        .map_err(|e| ApiError::internal(format!("tokenizing failed: {e}")))??;
    let room = app.context - prompt.len();
    let max_tokens = checked.max_tokens.unwrap_or(room);
    let decode = if checked.temperature == 0.0 {
        Decode::greedy(max_tokens)
    } else {
        Decode::sampled(
            max_tokens,
            Sampler {
                temperature: checked.temperature,
                top_p: checked.top_p,
                seed: checked.seed.unwrap_or_else(fresh_seed),
                ..Sampler::default()
            },
        )
    };
    let (events, rx) = unbounded_channel();
    let cancel = Arc::new(AtomicBool::new(false));
    let prompt_tokens = prompt.len();
    app.submit(Job {
        prompt,
        decode,
        speculative: checked.speculative,
        scope,
        events,
        cancel: Arc::clone(&cancel),
    })?;
    let generation = Generation::new(app, rx, cancel, &checked, prompt_tokens);
    let meta = Meta {
        id: format!("chatcmpl-{}", next_id()),
        created: now(),
        model: app.model_id.clone(),
    };
    if checked.stream {
        Ok(reply::stream(generation, meta))
    } else {
        reply::whole(generation, &meta).await
    }
}

/// The scope: the `X-Selfspec-Scope` header, else `user`, else the default
/// scope (`""`, which `default` also names).
fn scope_of(headers: &HeaderMap, user: Option<&str>) -> String {
    let header = headers.get(SCOPE_HEADER).and_then(|v| v.to_str().ok());
    match header.or(user).map(str::trim) {
        None | Some("" | "default") => String::new(),
        Some(name) => name.to_string(),
    }
}

/// Unix seconds.
fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Request ids: the server's start time, then a counter.
fn next_id() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    format!(
        "{:x}-{}",
        start_nanos(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

fn start_nanos() -> u128 {
    static START: std::sync::OnceLock<u128> = std::sync::OnceLock::new();
    *START.get_or_init(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos())
    })
}

/// A seed for a sampled request that gave none.
fn fresh_seed() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let nanos = u64::try_from(start_nanos() % u128::from(u64::MAX)).unwrap_or(0);
    nanos ^ n.wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scope_from_the_header_then_the_user() {
        let mut h = HeaderMap::new();
        assert_eq!(scope_of(&h, None), "");
        assert_eq!(scope_of(&h, Some("default")), "");
        assert_eq!(scope_of(&h, Some("alice")), "alice");
        h.insert(SCOPE_HEADER, "tenant-a".parse().unwrap());
        assert_eq!(scope_of(&h, Some("alice")), "tenant-a");
    }
}
