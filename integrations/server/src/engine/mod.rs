//! The engine thread: it owns the llama.cpp context, the adapter's target,
//! the stepper and the engine-wide memory, takes requests from the HTTP
//! handlers through a bounded channel (the queue) as slots free up, and
//! sends each request's tokens back through its own unbounded channel, so
//! a slow client never holds up a step.

use std::num::NonZeroU32;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::Arc;
use std::time::Duration;

use llama_cpp_2::context::params::LlamaContextParams;
use llama_cpp_2::llama_backend::LlamaBackend;
use llama_cpp_2::model::LlamaModel;
use selfspec::step::{Decode, Finished, PassTimes, SeqId, Stepper, Stop};
use selfspec::{Config, Shared, Speculative};
use selfspec_llama_cpp::{end_tokens, LlamaTarget, Options};
use tokio::sync::mpsc::UnboundedSender;

use crate::error::StartError;
use crate::metrics::Metrics;
use crate::slots::{Placement, Restore, Slots};

/// How long an idle engine waits for a request before it looks at the
/// shutdown flag again.
const IDLE_WAIT: Duration = Duration::from_millis(100);

/// A request for the engine.
#[derive(Debug)]
pub struct Job {
    /// The prompt's tokens (chat template applied).
    pub prompt: Vec<u32>,
    /// Greedy or sampled, and the token limit.
    pub decode: Decode,
    /// Draft from the token history.
    pub speculative: bool,
    /// The speculation scope (`""`: the engine's default scope).
    pub scope: String,
    /// Where its tokens go.
    pub events: UnboundedSender<Event>,
    /// Set by the handler to end the request (a stop string was reached).
    pub cancel: Arc<AtomicBool>,
}

/// What the engine sends a request's handler.
#[derive(Clone, Debug, PartialEq)]
pub enum Event {
    /// Tokens accepted in one step, in order.
    Tokens(Vec<u32>),
    /// The request ended.
    Done(Summary),
    /// The request failed (it could not start, or a forward pass failed).
    Failed(String),
}

/// How a request ended.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Summary {
    /// Why.
    pub stop: Stop,
    /// Tokens generated.
    pub tokens: usize,
    /// From the start to the first token.
    pub prefill: Duration,
    /// From the first token to the last.
    pub decode: Duration,
    /// Draft tokens sent to verification.
    pub drafted: usize,
    /// Draft tokens accepted.
    pub accepted: usize,
}

/// The shape of the engine's llama.cpp context.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Settings {
    /// Slots: sequences of the context decoded together.
    pub slots: usize,
    /// Tokens each slot holds (prompt and reply).
    pub context: usize,
    /// llama.cpp's CPU threads.
    pub threads: usize,
    /// Rows one step puts in its pass at most (a joining prompt takes up
    /// to half of them a pass).
    pub step_rows: usize,
    /// One KV cache buffer for all slots (llama.cpp's `kv_unified`).
    pub kv_unified: bool,
    /// Host memory the prompt cache holds at most.
    pub prompt_cache_bytes: usize,
}

/// The model the engine thread makes its context of.
pub struct Weights {
    /// The model (also read by the handlers: template, tokens, text).
    pub model: Arc<LlamaModel>,
    /// llama.cpp's backend.
    pub backend: &'static LlamaBackend,
}

/// What the engine thread shares with the rest of the server.
pub struct Parts {
    /// The engine-wide memory.
    pub shared: Shared,
    /// The drafters' configuration.
    pub config: Config,
    /// Requests, as slots free up.
    pub jobs: Receiver<Job>,
    /// The server's counters.
    pub metrics: Arc<Metrics>,
    /// Set at shutdown: live requests are cancelled and the thread ends.
    pub shutdown: Arc<AtomicBool>,
    /// Set while the engine thread runs (cleared when it ends, panics
    /// included): what `/health` reports.
    pub running: Arc<AtomicBool>,
}

/// Clears the engine's running flag when dropped: at the end of the
/// engine thread, however it ends.
struct Running(Arc<AtomicBool>);

impl Running {
    /// Sets `flag` until the guard is dropped.
    fn set(flag: &Arc<AtomicBool>) -> Running {
        flag.store(true, Ordering::Relaxed);
        Running(Arc::clone(flag))
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Relaxed);
    }
}

/// Starts the engine thread; returns once its context is made.
///
/// # Errors
///
/// [`StartError::Context`] when llama.cpp cannot make the context or the
/// stepper refuses its shape.
pub fn spawn(
    settings: Settings,
    weights: Weights,
    parts: Parts,
) -> Result<std::thread::JoinHandle<()>, StartError> {
    let (ready_tx, ready_rx) = std::sync::mpsc::sync_channel(1);
    let handle = std::thread::Builder::new()
        .name("selfspec-engine".into())
        .spawn(move || {
            let made = make_target(&weights.model, weights.backend, settings);
            match made {
                Ok((target, stepper)) => {
                    let engine =
                        Engine::new(stepper, parts, settings.slots, settings.prompt_cache_bytes);
                    // Set before the server answers /health; cleared
                    // however the thread ends.
                    let _running = Running::set(&engine.parts.running);
                    let _ = ready_tx.send(Ok(()));
                    engine.run(target);
                }
                Err(e) => {
                    let _ = ready_tx.send(Err(e));
                }
            }
        })?;
    match ready_rx.recv() {
        Ok(Ok(())) => Ok(handle),
        Ok(Err(e)) => Err(StartError::Context(e)),
        Err(_) => Err(StartError::Context("the engine thread ended".into())),
    }
}

/// The llama.cpp context of `settings.slots` sequences, as the adapter's
/// target, and a stepper over it with the model's end tokens and the
/// draft budget.
fn make_target<'m>(
    model: &'m LlamaModel,
    backend: &LlamaBackend,
    s: Settings,
) -> Result<
    (
        LlamaTarget<'m, llama_cpp_2::context::LlamaContext<'m>>,
        Stepper,
    ),
    String,
> {
    let too_big = || {
        format!(
            "{} slots of {} tokens do not fit llama.cpp's sizes",
            s.slots, s.context
        )
    };
    let as_u32 = |v: usize| u32::try_from(v).map_err(|_| too_big());
    let threads = i32::try_from(s.threads).map_err(|_| too_big())?;
    let n_ctx = s.context.checked_mul(s.slots).ok_or_else(too_big)?;
    let batch = s.step_rows.max(512);
    let params = LlamaContextParams::default()
        .with_n_ctx(NonZeroU32::new(as_u32(n_ctx)?))
        .with_n_batch(as_u32(batch)?)
        .with_n_seq_max(as_u32(s.slots)?)
        .with_n_threads(threads)
        .with_n_threads_batch(threads)
        .with_kv_unified(s.kv_unified)
        // Off: llama.cpp's CPU flash attention is several times slower on
        // the small passes of decoding (BENCHMARKS.md).
        .with_flash_attention_policy(llama_cpp_sys_2::LLAMA_FLASH_ATTN_TYPE_DISABLED);
    let ctx = model
        .new_context(backend, params.clone())
        .map_err(|e| e.to_string())?;
    let options = Options::new(&params)
        .with_context(s.context)
        .with_batch(batch)
        .with_step_rows(s.step_rows);
    let target = LlamaTarget::new(model, ctx, options).map_err(|e| e.to_string())?;
    let stepper = Stepper::new(&target)
        .map_err(|e| e.to_string())?
        .with_stop_tokens(&end_tokens(model))
        .with_budget(PassTimes::new());
    Ok((target, stepper))
}

/// A request in a slot.
struct Active {
    events: UnboundedSender<Event>,
    cancel: Arc<AtomicBool>,
    /// Ended by its handler at a stop string (not by a client gone).
    cut: bool,
}

/// The engine thread's state.
struct Engine {
    stepper: Stepper,
    slots: Vec<Option<Active>>,
    /// Which slot a request takes; the prompt cache.
    slots_state: Slots,
    /// Each slot's tokens of the last step (reused).
    out: Vec<Vec<u32>>,
    parts: Parts,
}

impl Engine {
    fn new(stepper: Stepper, parts: Parts, slots: usize, cache_bytes: usize) -> Engine {
        Engine {
            stepper,
            slots: (0..slots).map(|_| None).collect(),
            slots_state: Slots::new(slots, cache_bytes),
            out: vec![Vec::new(); slots],
            parts,
        }
    }

    /// Steps until shutdown (or until every handler is gone), then ends
    /// the live requests.
    fn run<T: Restore>(mut self, mut target: T)
    where
        T::Error: std::fmt::Display,
    {
        let mut open = true;
        while open && !self.parts.shutdown.load(Ordering::Relaxed) {
            self.drop_gone();
            open = self.admit(&mut target);
            if !self.stepper.is_running() {
                continue;
            }
            if let Err(e) = self.stepper.step(&mut target) {
                // The sequences of the pass end as failed (in `finished`).
                eprintln!("selfspec-server: a forward pass failed: {e}");
            }
            if self.stepper.last_pass().is_some() {
                self.parts
                    .metrics
                    .forward_passes
                    .fetch_add(1, Ordering::Relaxed);
            }
            self.send_tokens();
            self.reap();
        }
        for i in 0..self.slots.len() {
            self.stepper.cancel(SeqId::new(i));
        }
        self.reap();
    }

    /// Cancels the requests whose handler went away or asked to stop.
    fn drop_gone(&mut self) {
        for (i, slot) in self.slots.iter_mut().enumerate() {
            if let Some(a) = slot {
                let gone = a.events.is_closed();
                if gone || a.cancel.load(Ordering::Relaxed) {
                    a.cut = !gone;
                    self.stepper.cancel(SeqId::new(i));
                }
            }
        }
        self.reap();
    }

    /// Starts waiting requests in free slots (waiting for one when nothing
    /// runs). Whether the channel is still open.
    fn admit<T: Restore>(&mut self, target: &mut T) -> bool {
        while self.stepper.idle().is_some() {
            let job = if self.stepper.is_running() {
                match self.parts.jobs.try_recv() {
                    Ok(job) => job,
                    Err(std::sync::mpsc::TryRecvError::Empty) => return true,
                    Err(std::sync::mpsc::TryRecvError::Disconnected) => return false,
                }
            } else {
                match self.parts.jobs.recv_timeout(IDLE_WAIT) {
                    Ok(job) => job,
                    Err(RecvTimeoutError::Timeout) => return true,
                    Err(RecvTimeoutError::Disconnected) => return false,
                }
            };
            self.parts.metrics.queued.fetch_sub(1, Ordering::Relaxed);
            if !job.events.is_closed() && !job.cancel.load(Ordering::Relaxed) {
                self.start(job, target);
            }
        }
        true
    }

    fn start<T: Restore>(&mut self, job: Job, target: &mut T) {
        let m = &self.parts.metrics;
        let placed = self
            .slots_state
            .place(&mut self.stepper, target, &job.prompt, &job.scope, m);
        let Some(Placement {
            seq,
            reused,
            restored,
        }) = placed
        else {
            let _ = job.events.send(Event::Failed("no free slot".into()));
            return;
        };
        let spec = if job.speculative {
            let scope = self.parts.shared.scope(&job.scope);
            match Speculative::with_shared(&self.parts.config, &scope) {
                Ok(s) => Some(s),
                Err(e) => {
                    let _ = job.events.send(Event::Failed(e.to_string()));
                    return;
                }
            }
        } else {
            None
        };
        if let Err(e) = self.stepper.start(seq, &job.prompt, job.decode, spec) {
            let _ = job.events.send(Event::Failed(e.to_string()));
            return;
        }
        let m = &self.parts.metrics;
        m.prompt_tokens
            .fetch_add(wide(job.prompt.len()), Ordering::Relaxed);
        m.prompt_tokens_cached
            .fetch_add(wide(reused), Ordering::Relaxed);
        if restored {
            m.prompt_cache_restores.fetch_add(1, Ordering::Relaxed);
        }
        m.slots_busy.fetch_add(1, Ordering::Relaxed);
        self.slots[seq.index()] = Some(Active {
            events: job.events,
            cancel: job.cancel,
            cut: false,
        });
    }

    /// Sends each request its tokens of the last step; a request whose
    /// handler is gone is cancelled.
    fn send_tokens(&mut self) {
        let events = self.stepper.events();
        self.parts
            .metrics
            .generated_tokens
            .fetch_add(wide(events.len()), Ordering::Relaxed);
        for e in events {
            if let Some(out) = self.out.get_mut(e.seq.index()) {
                out.push(e.token);
            }
        }
        for i in 0..self.slots.len() {
            if self.out[i].is_empty() {
                continue;
            }
            let tokens = std::mem::take(&mut self.out[i]);
            let sent = self.slots[i]
                .as_ref()
                .is_some_and(|a| a.events.send(Event::Tokens(tokens)).is_ok());
            if !sent {
                self.stepper.cancel(SeqId::new(i));
            }
        }
    }

    /// Frees the slots of ended requests and tells their handlers.
    fn reap(&mut self) {
        let done: Vec<Finished> = self.stepper.finished().collect();
        for f in done {
            let Some(active) = self.slots.get_mut(f.seq.index()).and_then(Option::take) else {
                continue;
            };
            let m = &self.parts.metrics;
            m.slots_busy.fetch_sub(1, Ordering::Relaxed);
            for s in f.spec.iter().flat_map(|s| s.stats()) {
                m.count_drafts(&s.name, s.gen_tokens, s.acc_tokens);
            }
            let r = &f.reply;
            m.count_finished(match r.stop {
                Stop::StopToken => "stop",
                Stop::MaxTokens | Stop::ContextFull => "length",
                Stop::Cancelled if active.cut => "stop",
                Stop::Cancelled => "cancelled",
                _ => "failed",
            });
            let event = if r.stop == Stop::Failed {
                Event::Failed("a forward pass failed".into())
            } else {
                Event::Done(Summary {
                    stop: r.stop,
                    tokens: r.tokens.len(),
                    prefill: r.prefill_time,
                    decode: r.decode_time,
                    drafted: r.drafted,
                    accepted: r.accepted,
                })
            };
            let _ = active.events.send(event);
        }
    }
}

/// A count as a counter's `u64`.
fn wide(n: usize) -> u64 {
    u64::try_from(n).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests;
