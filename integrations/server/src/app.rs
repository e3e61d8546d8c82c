//! [`App`]: what every handler reads (the model, the engine's queue, the
//! counters and flags), the prompt it makes of a request and the queueing
//! of a job for the engine thread.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{SyncSender, TrySendError};
use std::sync::Arc;

use llama_cpp_2::model::{LlamaChatMessage, LlamaChatTemplate, LlamaModel};
use selfspec_llama_cpp::tokenize;

use crate::engine::Job;
use crate::error::ApiError;
use crate::metrics::Metrics;

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

impl App {
    /// The messages with the model's chat template (the assistant's turn
    /// opened), tokenized; shorter than the context.
    pub(crate) fn prompt(&self, messages: &[(String, String)]) -> Result<Vec<u32>, ApiError> {
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
    pub(crate) fn engine_state(&self) -> Result<(), ApiError> {
        engine_state(
            self.running.load(Ordering::Relaxed),
            self.shutdown.load(Ordering::Relaxed),
        )
    }

    /// Queues `job` for the engine: 503 when the queue is full or the
    /// server is shutting down, 500 when the engine has stopped.
    pub(crate) fn submit(&self, job: Job) -> Result<(), ApiError> {
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

#[cfg(test)]
mod tests {
    use axum::http::{header, StatusCode};
    use axum::response::IntoResponse;

    use super::*;

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
