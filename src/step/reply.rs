//! What a request asks for ([`Decode`]) and what it gets ([`Reply`], the
//! per-token [`TokenEvent`]s, [`Finished`]).

use std::time::Duration;

use super::sampler::Sampler;
use super::target::SeqId;
use crate::int::float;
use crate::token::Token;
use crate::Speculative;

/// How one request is decoded.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Decode {
    /// Tokens to generate at most (at least 1).
    pub max_tokens: usize,
    /// Greedy choices, or sampling.
    pub sampling: Sampling,
}

impl Decode {
    /// Greedy decoding of at most `max_tokens` tokens.
    #[must_use]
    pub fn greedy(max_tokens: usize) -> Decode {
        Decode {
            max_tokens,
            sampling: Sampling::Greedy,
        }
    }

    /// Sampling with `sampler`, at most `max_tokens` tokens.
    #[must_use]
    pub fn sampled(max_tokens: usize, sampler: Sampler) -> Decode {
        Decode {
            max_tokens,
            sampling: Sampling::Random(sampler),
        }
    }
}

/// How each token is chosen from the target's rows.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Sampling {
    /// The argmax: the reply is exactly plain greedy decoding's.
    Greedy,
    /// Sampled from the rows' distributions after the sampler's filters;
    /// drafts are verified by speculative sampling
    /// ([`verify::sampled`](crate::verify::sampled)), so every token is
    /// distributed exactly as plain sampling's.
    Random(Sampler),
}

/// Why a reply ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Stop {
    /// It has [`Decode::max_tokens`] tokens.
    MaxTokens,
    /// Its last token is one of the stepper's stop tokens
    /// ([`Stepper::with_stop_tokens`](super::Stepper::with_stop_tokens)).
    StopToken,
    /// The sequence's context has no room for the next token.
    ContextFull,
    /// [`Stepper::cancel`](super::Stepper::cancel).
    Cancelled,
    /// A forward pass failed (the step returned the engine's error).
    Failed,
}

impl std::fmt::Display for Stop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Stop::MaxTokens => "max tokens",
            Stop::StopToken => "stop token",
            Stop::ContextFull => "context full",
            Stop::Cancelled => "cancelled",
            Stop::Failed => "failed",
        })
    }
}

/// What one request produced: its tokens and how they were decoded.
#[derive(Clone, Debug, PartialEq)]
pub struct Reply {
    /// The generated tokens; a stop token, when reached, is the last.
    pub tokens: Vec<Token>,
    /// For each token, the top-1 / top-2 logit margin of the row that
    /// chose it (greedy decoding; NaN for sampled tokens).
    pub margins: Vec<f32>,
    /// Forward passes that evaluated the prompt (several when it was
    /// prefilled in chunks); the last one chose the first token.
    pub prefill_passes: usize,
    /// Forward passes after the first token: each verified `[last] +
    /// draft` and yielded the accepted tokens and one more.
    pub decode_passes: usize,
    /// Draft tokens sent to verification (with the draft budget's padding,
    /// which keeps a pass that splits by sequence in one computation).
    pub drafted: usize,
    /// Draft tokens the target kept.
    pub accepted: usize,
    /// Why it ended.
    pub stop: Stop,
    /// From [`Stepper::start`](super::Stepper::start) to the first token.
    pub prefill_time: Duration,
    /// From the first token to the last.
    pub decode_time: Duration,
}

impl Reply {
    pub(super) fn new(capacity: usize) -> Reply {
        Reply {
            tokens: Vec::with_capacity(capacity),
            margins: Vec::with_capacity(capacity),
            prefill_passes: 0,
            decode_passes: 0,
            drafted: 0,
            accepted: 0,
            stop: Stop::MaxTokens,
            prefill_time: Duration::ZERO,
            decode_time: Duration::ZERO,
        }
    }

    /// The margin of the last token chosen, where the next draft starts
    /// (NaN before any token, and for sampled tokens).
    pub(super) fn last_margin(&self) -> f32 {
        self.margins.last().copied().unwrap_or(f32::NAN)
    }

    /// Tokens per forward pass (tau), the pass that chose the first token
    /// counted as one: 1.0 is plain decoding.
    #[must_use]
    pub fn tau(&self) -> f64 {
        float(self.tokens.len()) / float(self.decode_passes + 1)
    }

    /// The share of drafted tokens the target kept (0 when nothing was
    /// drafted).
    #[must_use]
    pub fn acceptance(&self) -> f64 {
        float(self.accepted) / float(self.drafted.max(1))
    }
}

/// A token that joined a reply in the last step, for streaming: in the
/// order they were generated.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TokenEvent {
    /// The sequence.
    pub seq: SeqId,
    /// The token.
    pub token: Token,
    /// Its index in the reply.
    pub index: usize,
}

/// A reply that ended, with the sequence's [`Speculative`] (after its
/// [`end_request`](Speculative::end_request)) for the next request, if it had one.
#[derive(Debug)]
pub struct Finished {
    /// The sequence, free again.
    pub seq: SeqId,
    /// The reply.
    pub reply: Reply,
    /// Its drafter, given back: reuse it for the sequence's next request
    /// or drop it.
    pub spec: Option<Speculative>,
}
