//! What a decoder gives back: replies, why they ended, its counters.

use std::time::Duration;

#[cfg(doc)]
use super::Decoder;

/// Why a reply ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stop {
    /// The model ended its turn (an end-of-generation token, kept as the
    /// reply's last token).
    EndOfTurn,
    /// The reply reached its token limit.
    MaxTokens,
    /// The sequence's context is full.
    ContextFull,
}

/// One request's reply and what producing it took.
#[derive(Clone, Debug, PartialEq)]
pub struct Reply {
    /// The generated tokens: the first from the prefill pass.
    pub tokens: Vec<u32>,
    /// `gaps[i]`: top-1 minus top-2 logit of the row that chose `tokens[i]`.
    pub gaps: Vec<f32>,
    /// Decode steps this sequence took part in (prefill excluded).
    pub passes: usize,
    /// Draft tokens sent to verification.
    pub drafted: usize,
    /// Draft tokens kept.
    pub accepted: usize,
    /// Why it ended.
    pub stop: Stop,
}

/// A reply that ended, and the slot it ran in.
#[derive(Clone, Debug, PartialEq)]
pub struct Finished {
    /// The slot (the sequence id).
    pub slot: usize,
    /// The reply.
    pub reply: Reply,
}

/// Decode counters of a decoder since it was made (or [`Decoder::reset_counters`]).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Counters {
    /// Decode steps (`llama_decode` calls of [`Decoder::step`]).
    pub steps: usize,
    /// Time in [`Decoder::step`]: drafting, the pass, verification, rollback.
    pub decode_time: Duration,
    /// Time in prefill passes.
    pub prefill_time: Duration,
}
