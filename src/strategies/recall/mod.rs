//! recall: drafts from everything the engine has seen, with multi-order
//! context indexes, a copy pointer with locality, and a stop rule calibrated
//! online from the engine's own verifications.
//!
//! The state is split as an engine is: [`RecallMemory`] (engine-wide)
//! holds finished requests and what was learned from every sequence;
//! [`Recall`] (one per sequence or request) holds the current session
//! (`session`: its own index and its publishing), what it learns
//! (`learner`) and where copying resumes (`locality`); `draft` is the
//! drafting loop over them.

mod calibrate;
mod chains;
mod choose;
mod draft;
mod learner;
mod locality;
mod memory;
mod score;
mod session;
mod sources;

pub(crate) use learner::{Learned, LEARNED_NUMBERS};
pub use memory::RecallMemory;
pub(crate) use memory::RunContext;
pub(crate) use memory::{HeapMeter, RUN_CONTEXT};

/// The context orders, as saved in memory files.
pub(crate) const SAVED_ORDERS: [usize; K] = ORDERS;

use crate::drafter::{DraftLimits, Drafter};
use crate::int::float;
use crate::limits::{DEFAULT_MEMORY_BUDGET, DEFAULT_SEQUENCE_BUDGET, DEFAULT_THRESHOLD_PERMILLE};
use crate::sync::Arc;
use crate::token::Token;

use chains::{K, ORDERS};
use choose::Work;
use learner::Learner;
use locality::Locality;
use session::{Ingested, Session};

/// A draft's position whose true token the next call's `last` reveals, and
/// the length `history ++ [last]` must have then.
#[derive(Clone, Copy, Debug)]
struct Awaiting {
    position: usize,
    history_len: usize,
}

/// The recall drafter (`Strategy::Recall`).
///
/// Two memories of what the engine has seen, both indexed by hashed contexts
/// of 1 to 16 tokens: the current session's own text (per sequence), and
/// the engine-wide [`RecallMemory`] of earlier requests (shared by every
/// sequence of a [`Shared`](crate::Shared); a request's tokens reach it when
/// the request ends: at the next [`begin`](Drafter::begin) or when the
/// drafter is dropped). Each draft token is a continuation of the recent
/// occurrences of the longest context that occurred before: the votes
/// (occurrences in the current session count four times, the copy pointer,
/// the occurrence the previous token came from, extends long matches) and a
/// few features of each candidate (agreement with the copy pointer, locality,
/// the current request, recency) enter a linear score whose weights are
/// learned online, by softmax regression, from the tokens the target chose.
/// Each token's probability of acceptance is read from a table calibrated
/// online from the engine's verifications (longest order, vote share,
/// agreement with the copy pointer), its odds leaned by how the session's
/// own verifications departed from the table's word (so that code edits and
/// chat on one engine draft nearly as each would alone); the draft stops
/// where the running product of these probabilities falls below the
/// threshold. A low threshold drafts long and aggressively, a high one
/// short and safe. The weights and
/// the calibration are engine-wide too: a new drafter starts from what all
/// earlier ones learned.
///
/// ```
/// use selfspec::{DraftLimits, Drafter, strategies::Recall};
///
/// let mut recall = Recall::new(0.1);
/// let text: Vec<u32> = (0..60).map(|i| i % 20).collect();
/// recall.begin(&text);
/// let mut draft = Vec::new();
/// recall.draft(&text, 0, DraftLimits::default(), &mut draft);
/// assert_eq!(&draft[..4], &[1, 2, 3, 4]);
/// ```
///
/// A clone is a fork (parallel sampling, beam search): it continues from
/// the same state without re-indexing, and publishes only the tokens it
/// adds (the parent publishes what they share).
#[derive(Debug)]
pub struct Recall {
    threshold: f64,
    session: Session,
    learner: Learner,
    locality: Locality,
    work: Work,
    /// The draft position whose true token the next call reveals.
    awaiting: Option<Awaiting>,
}

impl Recall {
    /// A drafter with a private memory of [`DEFAULT_MEMORY_BUDGET`](crate::limits::DEFAULT_MEMORY_BUDGET) that
    /// stops where the estimated probability that the whole draft is
    /// accepted falls below `threshold` (clamped to 0.001..=0.999; NaN gives
    /// 0.13). Does not validate: [`Strategy::validate`](crate::Strategy::validate)
    /// checks `threshold_permille`.
    #[must_use]
    pub fn new(threshold: f64) -> Recall {
        Recall::with_memory(
            threshold,
            Arc::new(RecallMemory::new(DEFAULT_MEMORY_BUDGET)),
            DEFAULT_SEQUENCE_BUDGET,
            false,
        )
    }

    /// A drafter on `memory`, with an own index of at most
    /// `sequence_budget` bytes (84 per token); `engine_wide` when other
    /// drafters read the memory.
    pub(crate) fn with_memory(
        threshold: f64,
        memory: Arc<RecallMemory>,
        sequence_budget: usize,
        engine_wide: bool,
    ) -> Recall {
        let threshold = if threshold.is_finite() {
            threshold.clamp(0.001, 0.999)
        } else {
            float(DEFAULT_THRESHOLD_PERMILLE) / 1000.0
        };
        Recall {
            threshold,
            learner: Learner::new(&memory),
            session: Session::new(memory, sequence_budget, engine_wide),
            locality: Locality::default(),
            work: Work::default(),
            awaiting: None,
        }
    }

    /// The engine-wide memory this drafter reads and feeds.
    #[must_use]
    pub fn memory(&self) -> &Arc<RecallMemory> {
        self.session.memory()
    }

    /// Tokens of the current session held by this drafter's own index.
    #[must_use]
    pub fn stream_len(&self) -> usize {
        self.session.len()
    }

    /// Hands the current request's tokens to the engine-wide memory (once)
    /// and merges what this drafter learned into it:
    /// [`Drafter::end_request`], and [`begin`](Drafter::begin) for a request
    /// not ended yet. Waits for the memory's writer lock.
    fn finish_request(&mut self) {
        self.session.end_request();
        self.learner.sync(self.session.memory(), true);
    }

    /// Brings the own index up to date with `history ++ [last]`; a new
    /// session starts from what every sequence learned, with no locality.
    fn ingest(&mut self, history: &[Token], last: Token) {
        if self.session.ingest(history, last) == Ingested::NewSession {
            self.learner.sync(self.session.memory(), true);
            self.locality.clear();
            self.learner.new_session();
        }
    }
}

impl Clone for Recall {
    fn clone(&self) -> Recall {
        Recall {
            threshold: self.threshold,
            session: self.session.fork(),
            learner: self.learner.fork(),
            locality: self.locality.clone(),
            work: self.work.clone(),
            awaiting: self.awaiting,
        }
    }
}

impl Drop for Recall {
    /// A drafter dropped without [`Drafter::end_request`] publishes what is
    /// left of its request only if no other writer holds the memory: a drop
    /// never waits for a lock.
    fn drop(&mut self) {
        if self.session.engine_wide() && self.session.try_publish() {
            self.learner.sync(self.session.memory(), false);
        }
    }
}

impl Drafter for Recall {
    fn name(&self) -> &str {
        "recall"
    }

    fn begin(&mut self, prompt: &[Token]) {
        // Whether the last draft was accepted is unknown: forget it.
        self.work.pending.clear();
        self.locality.forget_expected();
        self.awaiting = None;
        // The previous request has ended.
        self.finish_request();
        if let Some((&last, history)) = prompt.split_last() {
            self.ingest(history, last);
        }
        self.session.begin_request();
    }

    fn draft(
        &mut self,
        history: &[Token],
        last: Token,
        limits: DraftLimits,
        draft: &mut Vec<Token>,
    ) {
        let top = self.settle_last_draft(history, last);
        self.draft_after(history, last, limits, draft, top);
    }

    fn accept(&mut self, n_accepted: usize) {
        // Tokens before the first rejection were accepted; the first
        // rejected one was tried; later ones are unknown.
        let calibration = self.session.memory().calibration();
        let w = &self.work;
        for (i, (&cell, &p)) in w.pending.iter().zip(&w.cell_probabilities).enumerate() {
            self.learner
                .record(calibration, cell, Some(p), i < n_accepted);
            if i >= n_accepted {
                break;
            }
        }
        // Accepted tokens were the right choices; the next call's `last`
        // tells the one after them.
        for i in 0..n_accepted.min(w.chosen.len()).min(w.ranges.len()) {
            self.learner
                .learn(w.ranges[i].of(&w.candidates), w.chosen[i]);
        }
        self.awaiting = self.awaiting.map(|a| Awaiting {
            position: n_accepted,
            history_len: a.history_len.saturating_add(n_accepted),
        });
        // The next token is expected right after the last accepted one's source.
        let source = n_accepted
            .checked_sub(1)
            .and_then(|i| w.sources.get(i))
            .copied();
        self.locality.accepted(source);
        self.work.pending.clear();
    }

    fn end_request(&mut self) {
        self.finish_request();
    }

    /// Tokens past `len` were never verified: only the first `len` are
    /// recorded when `accept` (or the next draft) settles the draft.
    fn truncate_draft(&mut self, len: usize) {
        let w = &mut self.work;
        w.pending.truncate(len);
        w.cell_probabilities.truncate(len);
        w.probabilities.truncate(len);
    }

    fn heap_bytes(&self) -> usize {
        self.session.heap_bytes() + self.work.heap_bytes()
    }

    fn as_any(&self) -> Option<&dyn std::any::Any> {
        Some(self)
    }

    /// The stop threshold is the token cost: drafting stops where the
    /// probability that the draft up to the next token is accepted falls
    /// below it.
    fn set_token_cost(&mut self, cost: f64) {
        if cost.is_finite() {
            self.threshold = cost.clamp(0.001, 0.999);
        }
    }

    fn probabilities(&self) -> &[f64] {
        &self.work.probabilities
    }

    fn estimates_source(&self) -> Option<u64> {
        Some(self.session.memory().id())
    }

    /// A clone (see [`Recall`]): the child shares the engine-wide memory,
    /// copies the rest (nothing is re-indexed) and publishes only the
    /// tokens it adds.
    fn fork(&self) -> Option<Box<dyn Drafter>> {
        Some(Box::new(self.clone()))
    }
}

impl Recall {
    /// What a draft call learns of the last draft: a draft never followed
    /// by `accept` had its first token rejected (the orchestrator does not
    /// forward 0), and the token the target chose where the last draft was
    /// rejected or stopped (`last`, if the history grew by the accepted
    /// tokens and that one) teaches the selector. Returns the order bound
    /// the search starts from (see [`draft_tokens`](Recall::draft_tokens)).
    fn settle_last_draft(&mut self, history: &[Token], last: Token) -> usize {
        if let Some(&cell) = self.work.pending.first() {
            let p = self.work.cell_probabilities.first().copied();
            self.learner
                .record(self.session.memory().calibration(), cell, p, false);
        }
        let mut top = K - 1;
        let Some(a) = self
            .awaiting
            .take()
            .filter(|a| history.len() + 1 == a.history_len)
        else {
            return top;
        };
        if let Some(&t) = self.work.tops.get(a.position) {
            top = t;
        }
        if let Some(range) = self.work.ranges.get(a.position) {
            self.learner.learn(range.of(&self.work.candidates), last);
        }
        top
    }

    /// The rest of a draft call, once [`settle_last_draft`](Recall::settle_last_draft)
    /// returned `top`: takes in `history ++ [last]` and drafts onto `draft`.
    fn draft_after(
        &mut self,
        history: &[Token],
        last: Token,
        limits: DraftLimits,
        draft: &mut Vec<Token>,
        top: usize,
    ) {
        self.work.clear_for(limits.max);
        if self.learner.tick() && self.session.engine_wide() {
            self.learner.sync(self.session.memory(), false);
        }
        self.ingest(history, last);
        self.session.publish_in_flight();
        let base = draft.len();
        self.draft_tokens(limits, draft, top);
        if draft.len() - base < limits.min {
            draft.truncate(base);
            self.work.pending.clear();
            self.work.sources.clear();
            self.work.cell_probabilities.clear();
            self.work.probabilities.clear();
        }
        self.awaiting = Some(Awaiting {
            position: 0,
            history_len: history.len() + 2,
        });
    }
}

#[cfg(all(test, loom))]
mod loom_tests;
#[cfg(all(test, not(loom)))]
mod tests;
