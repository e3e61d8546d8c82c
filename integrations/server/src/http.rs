//! The HTTP API (axum): chat completions, streamed or not, the model list,
//! the token endpoints ([`tokens`]), health and metrics. Handlers apply
//! the chat template, tokenize, and hand the request to the engine thread;
//! its reply ([`reply`]) turns the tokens into text as they arrive.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{SyncSender, TrySendError};
use std::sync::Arc;

use axum::extract::rejection::JsonRejection;
use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use llama_cpp_2::model::{LlamaChatMessage, LlamaChatTemplate, LlamaModel};
use selfspec::step::{Decode, Sampler};
use selfspec_llama_cpp::tokenize;
use serde_json::json;
use tokio::sync::mpsc::unbounded_channel;

use crate::api::{ChatRequest, Meta};
use crate::engine::Job;
use crate::error::ApiError;
use crate::metrics::Metrics;
use crate::reply::{self, Generation};
use crate::tokens;

/// The header that names a request's speculation scope.
pub const SCOPE_HEADER: &str = "x-selfspec-scope";

/// What every handler reads.
pub struct App {
    /// The model: chat template, tokenizer, token text.
    pub model: Arc<LlamaModel>,
    /// Its chat template.
    pub template: LlamaChatTemplate,
    /// The model's name in answers.
    pub model_id: String,
    /// Tokens a slot holds.
    pub context: usize,
    /// Slots.
    pub slots: usize,
    /// Requests to the engine (bounded: the queue).
    pub jobs: SyncSender<Job>,
    /// Counters.
    pub metrics: Arc<Metrics>,
    /// Set at shutdown: new requests get 503.
    pub shutdown: Arc<AtomicBool>,
    /// Whether the engine thread runs (see [`engine::Parts::running`]).
    ///
    /// [`engine::Parts::running`]: crate::engine::Parts::running
    pub running: Arc<AtomicBool>,
}

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

impl App {
    /// The messages with the model's chat template (the assistant's turn
    /// opened), tokenized; shorter than the context.
    fn prompt(&self, messages: &[(String, String)]) -> Result<Vec<u32>, ApiError> {
        let chat = messages
            .iter()
            .map(|(role, text)| LlamaChatMessage::new(role.clone(), text.clone()))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| ApiError::invalid("messages", format!("a message cannot be used: {e}")))?;
        let text = self
            .model
            .apply_chat_template(&self.template, &chat, true)
            .map_err(|e| ApiError::invalid("messages", format!("the chat template failed: {e}")))?;
        let prompt = tokenize(&self.model, &text);
        if prompt.len() >= self.context {
            let message = format!(
                "the prompt has {} tokens: a slot holds {} (prompt and reply)",
                prompt.len(),
                self.context
            );
            return Err(ApiError::invalid("messages", message).with_code("context_length_exceeded"));
        }
        Ok(prompt)
    }

    /// Whether the engine takes requests (see [`engine_state`]).
    fn engine_state(&self) -> Result<(), ApiError> {
        engine_state(
            self.running.load(Ordering::Relaxed),
            self.shutdown.load(Ordering::Relaxed),
        )
    }

    /// Queues `job` for the engine: 503 when the queue is full or the
    /// server is shutting down, 500 when the engine has stopped.
    fn submit(&self, job: Job) -> Result<(), ApiError> {
        self.engine_state()?;
        self.metrics.queued.fetch_add(1, Ordering::Relaxed);
        let sent = self.jobs.try_send(job);
        if sent.is_err() {
            self.metrics.queued.fetch_sub(1, Ordering::Relaxed);
        }
        match sent {
            Ok(()) => Ok(()),
            Err(TrySendError::Full(_)) => Err(ApiError::unavailable(
                "every slot is busy and the queue is full: retry later",
            )),
            // The engine thread ended between the check above and now.
            Err(TrySendError::Disconnected(_)) => Err(self
                .engine_state()
                .err()
                .unwrap_or_else(ApiError::engine_stopped)),
        }
    }
}

/// Whether the engine takes requests, from its flags: at shutdown 503
/// (`Retry-After`: another instance may take over); an engine thread that
/// ended otherwise (a bug: it does not end by itself) 500, for good.
pub(crate) fn engine_state(running: bool, shutdown: bool) -> Result<(), ApiError> {
    if shutdown {
        Err(ApiError::unavailable("the server is shutting down"))
    } else if !running {
        Err(ApiError::engine_stopped())
    } else {
        Ok(())
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

    #[test]
    fn the_engine_state_answers() {
        let cases = [
            // running, shutdown, status (None: takes requests), Retry-After
            (true, false, None, false),
            (false, false, Some(StatusCode::INTERNAL_SERVER_ERROR), false),
            (true, true, Some(StatusCode::SERVICE_UNAVAILABLE), true),
            (false, true, Some(StatusCode::SERVICE_UNAVAILABLE), true),
        ];
        for (running, shutdown, status, retry) in cases {
            let got = engine_state(running, shutdown).err();
            assert_eq!(
                got.as_ref().map(|e| e.status),
                status,
                "{running} {shutdown}"
            );
            if let Some(e) = got {
                let response = e.into_response();
                let has_retry = response.headers().contains_key(header::RETRY_AFTER);
                assert_eq!(has_retry, retry, "{running} {shutdown}");
            }
        }
        let stopped = engine_state(false, false).unwrap_err();
        assert_eq!(stopped.code, Some("engine_stopped"));
    }
}
