//! The decoding loops over selfspec's [`Stepper`]: the model is the
//! stepper's [`Target`](selfspec::step::Target) (one sequence), and each
//! request is a [`Stepper::start`] followed by [`Stepper::step`]s until its
//! reply is finished. Plain greedy decoding is the same loop without a
//! drafter (one token a pass); speculative decoding gives the request a
//! [`Speculative`], whose drafts the stepper verifies, commits and rolls
//! back, sized by selfspec's draft budget unless [`Sizing::Drafter`] says
//! otherwise.

use std::time::Duration;

use candle_core::Tensor;
use selfspec::step::{Decode, Finished, PassTimes, Reply, SeqId, StepError, Stepper};
use selfspec::{Config, Shared, Speculative};
use selfspec_conversations::argmax_gap;

use crate::{Error, Model};

/// Prompt tokens evaluated in one pass at most while prefilling (bounds the
/// attention scores' memory on long prompts).
pub const PREFILL_CHUNK: usize = 256;

/// How a speculative request's drafts are sized.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub enum Sizing {
    /// selfspec's draft budget ([`Stepper::with_budget`]), on pass times
    /// learned from the stepper's own passes ([`PassTimes::new`]): each
    /// step keeps the drafted tokens that pay for their rows, none until a
    /// pass has been timed. The budget sets the drafter's token cost.
    #[default]
    Budget,
    /// No budget: each draft as its drafter sizes it (its draft limits),
    /// with this token cost ([`Speculative::set_token_cost`]) if given.
    Drafter(Option<f64>),
}

/// A stepper for `model`: its one sequence, prompts prefilled in chunks of
/// [`PREFILL_CHUNK`], a reply ended by any of `stop` (kept as its last
/// token), e.g. the chat template's end of turn, and with `budget`, drafts
/// sized by selfspec's draft budget ([`Sizing::Budget`]). Keep it for the
/// model's next requests: it knows what the cache holds (and, with the
/// budget, what a pass costs), and a prompt that shares a prefix with the
/// cache (a conversation's earlier turns) is only evaluated from where they
/// differ.
///
/// # Errors
///
/// [`Error::Selfspec`] for a model shape the stepper cannot drive.
pub fn stepper(model: &Model, stop: &[u32], budget: bool) -> Result<Stepper, Error> {
    let stepper = Stepper::new(model)?
        .with_stop_tokens(stop)
        .with_prefill_chunk(PREFILL_CHUNK);
    Ok(if budget {
        stepper.with_budget(PassTimes::new())
    } else {
        stepper
    })
}

/// One greedy request on `stepper` (which has driven `model` alone, or
/// [`forget`](Stepper::forget)s its sequence after the cache was touched):
/// `max_tokens` tokens at most after `prompt`, drafted by `spec` if given.
/// The reply, with the drafter after its `end_request`.
///
/// # Errors
///
/// [`Error::EmptyPrompt`], [`Error::TokenOutOfRange`] for a prompt token
/// outside the vocabulary, [`Error::ContextFull`] for a prompt that leaves
/// no room in the model's context, [`Error::Selfspec`] for `max_tokens` 0,
/// [`Error::Candle`] if a pass fails.
pub fn request(
    model: &mut Model,
    stepper: &mut Stepper,
    prompt: &[u32],
    max_tokens: usize,
    spec: Option<Speculative>,
) -> Result<Finished, Error> {
    let seq = SeqId::new(0);
    stepper
        .start(seq, prompt, Decode::greedy(max_tokens), spec)
        .map_err(start_error)?;
    let mut done = None;
    while stepper.is_running() {
        let stepped = stepper.step(model);
        done = done.or_else(|| stepper.finished().find(|f| f.seq == seq));
        stepped.map_err(step_error)?;
    }
    done.ok_or_else(|| Error::Batch("the request ended without a reply".into()))
}

fn start_error(e: selfspec::Error) -> Error {
    match e {
        selfspec::Error::EmptyPrompt => Error::EmptyPrompt,
        selfspec::Error::TokenOutOfRange { token, vocab } => {
            Error::TokenOutOfRange { token, vocab }
        }
        selfspec::Error::PromptTooLong { tokens, context } => Error::ContextFull {
            needed: tokens + 1,
            max: context,
        },
        e => Error::Selfspec(e),
    }
}

fn step_error(e: StepError<Error>) -> Error {
    match e {
        StepError::Target(e) => e,
        StepError::Selfspec(e) => Error::Selfspec(e),
        e => Error::Batch(e.to_string()),
    }
}

/// Plain greedy decoding: `max_tokens` tokens after `prompt`, one forward
/// pass each (the baseline), from an empty cache.
///
/// # Errors
///
/// As [`request`].
pub fn plain(model: &mut Model, prompt: &[u32], max_tokens: usize) -> Result<Reply, Error> {
    model.reset();
    let mut stepper = stepper(model, &[], false)?;
    plain_until(model, &mut stepper, prompt, max_tokens)
}

/// Plain greedy decoding on `stepper` (see [`request`]): the cached
/// positions that are a prefix of `prompt` are reused.
///
/// # Errors
///
/// As [`request`].
pub fn plain_until(
    model: &mut Model,
    stepper: &mut Stepper,
    prompt: &[u32],
    max_tokens: usize,
) -> Result<Reply, Error> {
    Ok(request(model, stepper, prompt, max_tokens, None)?.reply)
}

/// Speculative greedy decoding with selfspec: the same tokens as [`plain`],
/// in fewer forward passes where the drafts are accepted.
///
/// One [`Speculative`] per request on the engine-wide `shared` (built with
/// `config`), its drafts sized as `sizing` says (a new stepper: the budget
/// learns pass times from this request's passes). Starts from an empty
/// cache.
///
/// # Errors
///
/// As [`request`], and [`Error::Selfspec`] for an invalid `config` or
/// token cost.
pub fn speculative(
    model: &mut Model,
    config: &Config,
    shared: &Shared,
    prompt: &[u32],
    max_tokens: usize,
    sizing: Sizing,
) -> Result<Reply, Error> {
    let mut spec = Speculative::with_shared(config, shared)?;
    if let Sizing::Drafter(Some(cost)) = sizing {
        spec.set_token_cost(cost)?;
    }
    model.reset();
    let mut stepper = stepper(model, &[], sizing == Sizing::Budget)?;
    speculative_until(model, &mut stepper, spec, prompt, max_tokens)
}

/// Speculative greedy decoding of one request with `spec` (new for the
/// request, or another's given back by [`request`]) on `stepper`, its
/// drafts sized by the stepper's budget if it has one; the cached prefix of
/// `prompt` is reused.
///
/// # Errors
///
/// As [`request`].
pub fn speculative_until(
    model: &mut Model,
    stepper: &mut Stepper,
    spec: Speculative,
    prompt: &[u32],
    max_tokens: usize,
) -> Result<Reply, Error> {
    Ok(request(model, stepper, prompt, max_tokens, Some(spec))?.reply)
}

/// Forward passes of `reply`, its prompt's counted as one (as
/// [`Reply::tau`] counts them): 1 + decode passes.
#[must_use]
pub fn passes(reply: &Reply) -> usize {
    reply.decode_passes + 1
}

/// The smallest top-1 / top-2 logit margin of `reply`'s tokens (infinite
/// for none).
#[must_use]
pub fn min_margin(reply: &Reply) -> f32 {
    reply.margins.iter().copied().fold(f32::INFINITY, f32::min)
}

/// Wall-clock time of a request: its prefill and its decoding.
#[must_use]
pub fn elapsed(reply: &Reply) -> Duration {
    reply.prefill_time + reply.decode_time
}

/// The argmax of each row of `logits` (`[rows, vocab]`, first index on a
/// tie) and each row's top-1 / top-2 gap.
///
/// # Errors
///
/// [`Error::Candle`] if `logits` is not a 2-d f32 tensor.
pub fn argmax_rows(logits: &Tensor) -> Result<Vec<(u32, f32)>, Error> {
    let rows = logits.to_vec2::<f32>()?;
    Ok(rows.iter().map(|row| argmax_gap(row)).collect())
}
