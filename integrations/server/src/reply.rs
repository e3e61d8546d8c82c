//! A request's reply: its tokens as the engine sends them, turned into
//! text and cut at its stop strings, answered whole or streamed as
//! server-sent events; its usage and timings.

use std::convert::Infallible;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use axum::body::Body;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::Json;
use llama_cpp_2::model::LlamaModel;
use selfspec::step::Stop;
use selfspec_llama_cpp::TextStream;
use serde_json::json;
use tokio::sync::mpsc::UnboundedReceiver;

use crate::api::{self, Checked, Meta, Outcome, Timings, Usage};
use crate::app::{engine_state, App};
use crate::engine::{Event, Summary};
use crate::error::ApiError;
use crate::stop::StopCutter;

/// A piece of a reply.
enum Piece {
    /// Text to send.
    Text(String),
    /// The end.
    End(Outcome),
}

/// One request's tokens as they arrive, turned into text and cut at its
/// stop strings. Dropping it ends the request at the engine's next step.
pub struct Generation {
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
    pub fn new(
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
pub async fn whole(mut g: Generation, meta: &Meta) -> Result<Response, ApiError> {
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
pub fn stream(generation: Generation, meta: Meta) -> Response {
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

#[cfg(test)]
mod tests {
    use super::*;

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
