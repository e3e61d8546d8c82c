//! The HTTP API (axum): chat completions, streamed or not, the model list,
//! the token endpoints ([`tokens`]), health and metrics. Handlers apply the chat template, tokenize, and
//! hand the request to the engine thread; they turn its tokens into text
//! (cut at stop strings) as they arrive.

use std::convert::Infallible;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{SyncSender, TrySendError};
use std::sync::Arc;

use axum::body::Body;
use axum::extract::rejection::JsonRejection;
use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use llama_cpp_2::model::{LlamaChatMessage, LlamaChatTemplate, LlamaModel};
use selfspec::step::{Decode, Sampler, Stop};
use selfspec_llama_cpp::{tokenize, TextStream};
use serde_json::json;
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver};

use crate::api::{self, ChatRequest, Checked, Meta, Outcome, Timings, Usage};
use crate::engine::{Event, Job, Summary};
use crate::error::ApiError;
use crate::metrics::Metrics;
use crate::stop::StopCutter;
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
        Ok(stream(generation, meta))
    } else {
        whole(generation, &meta).await
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
fn engine_state(running: bool, shutdown: bool) -> Result<(), ApiError> {
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

/// A piece of a reply.
enum Piece {
    /// Text to send.
    Text(String),
    /// The end.
    End(Outcome),
}

/// One request's tokens as they arrive, turned into text and cut at its
/// stop strings. Dropping it ends the request at the engine's next step.
struct Generation {
    model: Arc<LlamaModel>,
    rx: UnboundedReceiver<Event>,
    cancel: Arc<AtomicBool>,
    /// The engine's flags ([`App::running`], [`App::shutdown`]): why a
    /// channel closed.
    running: Arc<AtomicBool>,
    shutdown: Arc<AtomicBool>,
    text: TextStream,
    cutter: StopCutter,
    prompt_tokens: usize,
    tokens: usize,
    /// A stop string was reached.
    cut: bool,
    end: Option<Outcome>,
}

impl Generation {
    fn new(
        app: &App,
        rx: UnboundedReceiver<Event>,
        cancel: Arc<AtomicBool>,
        c: &Checked,
        prompt_tokens: usize,
    ) -> Generation {
        Generation {
            model: Arc::clone(&app.model),
            rx,
            cancel,
            running: Arc::clone(&app.running),
            shutdown: Arc::clone(&app.shutdown),
            text: TextStream::new(),
            cutter: StopCutter::new(c.stop.clone()),
            prompt_tokens,
            tokens: 0,
            cut: false,
            end: None,
        }
    }

    /// The next piece: text (never empty), then the end.
    async fn next(&mut self) -> Result<Piece, ApiError> {
        loop {
            if let Some(end) = self.end.take() {
                return Ok(Piece::End(end));
            }
            let event = self.rx.recv().await;
            let text = match event {
                Some(Event::Tokens(tokens)) => self.push(&tokens),
                Some(Event::Done(summary)) => self.finish(&summary),
                Some(Event::Failed(message)) => return Err(ApiError::internal(message)),
                // The engine ends a request's channel only after its end.
                None => {
                    let (running, shutdown) = (&self.running, &self.shutdown);
                    let state = engine_state(
                        running.load(Ordering::Relaxed),
                        shutdown.load(Ordering::Relaxed),
                    );
                    return Err(state
                        .err()
                        .unwrap_or_else(|| ApiError::internal("the engine dropped the request")));
                }
            };
            if !text.is_empty() {
                return Ok(Piece::Text(text));
            }
        }
    }

    /// The text of one step's tokens, up to a stop string.
    fn push(&mut self, tokens: &[u32]) -> String {
        let mut out = String::new();
        for &t in tokens {
            if self.cut {
                break;
            }
            self.tokens += 1;
            let (text, hit) = self.cutter.push(self.text.push(&self.model, t));
            out.push_str(&text);
            if hit {
                self.cut = true;
                self.cancel.store(true, Ordering::Relaxed);
            }
        }
        out
    }

    /// The text held back, and the outcome for the next call.
    fn finish(&mut self, s: &Summary) -> String {
        let mut out = String::new();
        if !self.cut {
            let (text, hit) = self.cutter.push(self.text.finish());
            out.push_str(&text);
            self.cut = hit;
            if !hit {
                out.push_str(&self.cutter.finish());
            }
        }
        let finish = match s.stop {
            _ if self.cut => "stop",
            Stop::MaxTokens | Stop::ContextFull => "length",
            _ => "stop",
        };
        self.end = Some(outcome(finish, self.prompt_tokens, self.tokens, s));
        out
    }
}

impl Drop for Generation {
    fn drop(&mut self) {
        self.cancel.store(true, Ordering::Relaxed);
    }
}

/// Usage and timings of a reply of `tokens` tokens.
#[allow(clippy::cast_precision_loss)] // token counts
fn outcome(finish: &'static str, prompt: usize, tokens: usize, s: &Summary) -> Outcome {
    let prompt_ms = s.prefill.as_secs_f64() * 1e3;
    let predicted_ms = s.decode.as_secs_f64() * 1e3;
    let per_second = |n: usize, ms: f64| if ms > 0.0 { n as f64 * 1e3 / ms } else { 0.0 };
    let after_first = tokens.saturating_sub(1);
    Outcome {
        finish,
        usage: Usage {
            prompt_tokens: prompt,
            completion_tokens: tokens,
            total_tokens: prompt + tokens,
        },
        timings: Timings {
            prompt_n: prompt,
            prompt_ms,
            prompt_per_second: per_second(prompt, prompt_ms),
            predicted_n: tokens,
            predicted_ms,
            predicted_per_token_ms: if after_first > 0 {
                predicted_ms / after_first as f64
            } else {
                0.0
            },
            predicted_per_second: per_second(after_first, predicted_ms),
            draft_n: s.drafted,
            draft_n_accepted: s.accepted,
        },
    }
}

/// A reply that is not streamed: collected, then answered whole.
async fn whole(mut g: Generation, meta: &Meta) -> Result<Response, ApiError> {
    let mut text = String::new();
    loop {
        match g.next().await? {
            Piece::Text(t) => text.push_str(&t),
            Piece::End(outcome) => {
                return Ok(Json(api::completion(meta, &text, &outcome)).into_response())
            }
        }
    }
}

/// Where a stream is.
enum Phase {
    Start,
    Body,
    Over,
}

/// A streamed reply: server-sent events in OpenAI's chunk format, the
/// role first, then the text as it comes, the finish reason with the usage
/// and timings, then `data: [DONE]`.
fn stream(generation: Generation, meta: Meta) -> Response {
    let events = futures_util::stream::unfold(
        (generation, meta, Phase::Start),
        |(mut g, meta, phase)| async move {
            let data = match phase {
                Phase::Over => return None,
                Phase::Start => {
                    let first =
                        api::chunk(&meta, &json!({"role": "assistant", "content": ""}), None);
                    return Some((
                        Ok::<_, Infallible>(api::sse(&first.to_string())),
                        (g, meta, Phase::Body),
                    ));
                }
                Phase::Body => g.next().await,
            };
            let (event, phase) = match data {
                Ok(Piece::Text(t)) => {
                    let c = api::chunk(&meta, &json!({ "content": t }), None);
                    (api::sse(&c.to_string()), Phase::Body)
                }
                Ok(Piece::End(o)) => {
                    let c = api::chunk(&meta, &json!({}), Some(&o));
                    (api::sse(&c.to_string()) + api::DONE, Phase::Over)
                }
                Err(e) => (api::sse(&e.body().to_string()) + api::DONE, Phase::Over),
            };
            Some((Ok(event), (g, meta, phase)))
        },
    );
    (
        [
            (header::CONTENT_TYPE, "text/event-stream"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        Body::from_stream(events),
    )
        .into_response()
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

    #[test]
    fn timings_of_a_reply() {
        let s = Summary {
            stop: Stop::MaxTokens,
            tokens: 11,
            prefill: std::time::Duration::from_millis(20),
            decode: std::time::Duration::from_millis(100),
            drafted: 8,
            accepted: 5,
        };
        let o = outcome("length", 30, 11, &s);
        assert_eq!(o.usage.total_tokens, 41);
        assert!((o.timings.predicted_per_second - 100.0).abs() < 1e-9);
        assert!((o.timings.prompt_per_second - 1500.0).abs() < 1e-9);
        assert_eq!((o.timings.draft_n, o.timings.draft_n_accepted), (8, 5));
    }
}
