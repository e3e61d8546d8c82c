//! One sequence of the stepper: what its cache holds, and its request in
//! flight.

use std::time::Instant;

use super::reply::{Decode, Reply, Sampling, Stop};
use crate::token::Token;
use crate::Speculative;

/// A slot of the target: the tokens its cache should hold and how many it
/// does hold, and the request it decodes.
#[derive(Debug, Default)]
pub(super) struct Sequence {
    /// The evaluated history: prompt and committed reply tokens (not the
    /// pending `last`). Kept after a request ends, for the next prompt's
    /// common prefix.
    pub tokens: Vec<Token>,
    /// Positions of `tokens` the target's cache holds: a prefix (fewer
    /// after a checkpoint restore, or while a prompt is prefilled).
    pub cached: usize,
    /// The cache holds positions from here on that are not `tokens`'
    /// (a new prompt's, after a forgotten or failed sequence): the next
    /// step removes them before the sequence's rows.
    pub cut_to: Option<usize>,
    /// Rows in this step's batch (not counting a filler row).
    pub rows: usize,
    /// Whether it is idle with a filler row in this step's batch.
    pub filler: bool,
    /// The draft buffer of the last request, for the next one's.
    pub spare: Vec<Token>,
    /// The request in flight.
    pub live: Option<Live>,
}

/// Where a request is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Phase {
    /// Its prompt is being evaluated; the pass that evaluates its last
    /// token chooses the first reply token.
    Prefill,
    /// Decoding: `last` is the token chosen last, not evaluated yet.
    Decode {
        /// The token the target just chose.
        last: Token,
    },
}

/// A request in flight.
#[derive(Debug)]
pub(super) struct Live {
    pub phase: Phase,
    pub prompt_len: usize,
    pub decode: Decode,
    pub reply: Reply,
    pub spec: Option<Speculative>,
    /// The request's random draws (sampled decoding).
    pub rng: fastrand::Rng,
    /// This step's draft, cut to the room the reply, the context and the
    /// batch leave.
    pub draft: Vec<Token>,
    /// Of `draft`, the tokens its drafter proposed: the rest is the
    /// budget's padding.
    pub drafted: usize,
    /// This step's first row whose output is read (the `last` row, or the
    /// prompt's last row), when the sequence has rows in the pass.
    pub out_row: Option<usize>,
    pub started: Instant,
    pub first_token: Option<Instant>,
    /// Set when the reply has ended (the stepper then hands it back).
    pub done: bool,
}

impl Live {
    pub(super) fn new(
        prompt_len: usize,
        decode: Decode,
        spec: Option<Speculative>,
        mut draft: Vec<Token>,
    ) -> Live {
        draft.clear();
        // Room for the longest draft now, not at a step whose draft is the
        // longest yet (which depends on what was accepted).
        if let Some(spec) = &spec {
            draft.reserve(spec.limits().max);
        }
        let seed = match decode.sampling {
            Sampling::Greedy => 0,
            Sampling::Random(s) => s.seed,
        };
        Live {
            phase: Phase::Prefill,
            prompt_len,
            decode,
            reply: Reply::new(decode.max_tokens.min(4096)),
            spec,
            // Mixed first: the generator's first draws from nearby seeds
            // (a client's seeds 1, 2, 3, ...) are correlated.
            rng: fastrand::Rng::with_seed(crate::index::hash::mix(seed)),
            draft,
            drafted: 0,
            out_row: None,
            started: Instant::now(),
            first_token: None,
            done: false,
        }
    }

    /// Appends `token` (chosen with `margin`) to the reply; whether the
    /// reply has ended (a stop token, or `max_tokens`).
    pub(super) fn push(&mut self, token: Token, margin: f32, stop_tokens: &[Token]) -> bool {
        self.reply.tokens.push(token);
        self.reply.margins.push(margin);
        if stop_tokens.contains(&token) {
            self.end(Stop::StopToken);
        } else if self.reply.tokens.len() >= self.decode.max_tokens {
            self.end(Stop::MaxTokens);
        }
        self.done
    }

    pub(super) fn end(&mut self, stop: Stop) {
        self.reply.stop = stop;
        self.done = true;
    }

    /// Draft tokens this step may verify: the reply's room (a pass yields
    /// the accepted tokens and one more), the context's (`evaluated`
    /// tokens held, `last` to come) and `batch_room` draft rows.
    pub(super) fn draft_room(&self, evaluated: usize, context: usize, batch_room: usize) -> usize {
        let reply_room = self
            .decode
            .max_tokens
            .saturating_sub(self.reply.tokens.len() + 1);
        let context_room = context.saturating_sub(evaluated + 1);
        reply_room.min(context_room).min(batch_room)
    }
}
