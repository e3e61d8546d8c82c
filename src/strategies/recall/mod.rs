//! recall: drafts from everything the engine has seen, with multi-order
//! context indexes, a copy pointer with locality, and a stop rule calibrated
//! online from the engine's own verifications.
//!
//! The state is split as an engine is: [`RecallMemory`] (engine-wide, in
//! [`Shared`](crate::Shared)) holds finished requests and what was learned
//! from every sequence; [`Recall`] (one per sequence or request) holds the
//! current session's own index, the copy pointer and the locality anchors.

mod calibrate;
mod choose;
mod index;
mod memory;
mod score;
mod session;
mod sources;

pub(crate) use memory::{HeapMeter, RUN_CONTEXT};
pub use memory::{RecallMemory, RunContext};

/// The context orders, as saved in memory files.
pub(crate) const SAVED_ORDERS: [usize; K] = ORDERS;

use crate::drafter::{DraftLimits, Drafter};
use crate::index::Roomy;
use crate::int::{ix, small};
use crate::sync::{lock, try_lock, Arc};
use crate::token::Token;

use calibrate::{m_bucket, Cell, Lean};
use choose::{Choice, Work};
use index::{match_len, occurrences, tag_of, Chains, Hasher, SeqIndex, K, MAX_MATCH, ORDERS};
use memory::{Snapshot, Span, View};
use score::{Features, Weights};
use sources::{Occurrence, Pos, Sources};

// The tuned constants. How the replay figures move when each changes by
// ±50%: DESIGN.md, "Tuned constants" (most are flat; `MEMORY_BELOW`,
// `LOCAL_MIN_MATCH`, calibrate's `PRIOR_WEIGHT` and `SUPPORT_BUCKETS` are
// the sensitive ones, each at the good end of its range).

/// Occurrences examined at the longest matching order.
const OCCURRENCES: usize = 8;
/// The engine-wide memory is asked at an order only when the session's own
/// index has fewer occurrences than this there: a memory probe is a few
/// cache misses, and the session's own evidence weighs four times more.
const MEMORY_BELOW: usize = 1;
/// Weight of an occurrence in the current session relative to the
/// engine-wide memory's (earlier turns of a chat, the file being edited).
const SESSION_WEIGHT: f64 = 4.0;
/// Weight of an occurrence in the current request's own output.
const REQUEST_WEIGHT: f64 = 4.0;
/// Vote bonus of the occurrence nearest after the anchor (locality).
const LOCAL_BONUS: f64 = 32.0;
/// How far after an anchor locality looks.
const LOCAL_WINDOW: u64 = 256;
/// A resumed copy needs this many matching context tokens.
const LOCAL_MIN_MATCH: usize = 1;
/// With a match this long, the copy pointer drafts without a vote.
const COPY_MATCH: usize = 24;
/// Vote weight of the copy pointer per token of match length.
const POINTER_WEIGHT: f64 = 0.5;
/// How much more an occurrence weighs per extra matching token, relative to the order.
const LONGER_WEIGHT: f64 = 16.0;
/// Copy regions remembered for locality.
const ANCHORS: usize = 4;
/// Sources closer than this belong to the same region.
const REGION: u64 = 512;
/// Distinct candidate tokens scored at a draft position.
const CANDIDATES: usize = 8;
/// A new prompt that keeps less than this much of the previous history (or
/// less than half of it) starts a new session.
const SESSION_MIN_COMMON: usize = 64;
/// Steps between the probes of a new prompt for text the memory already holds.
const KNOWN_STRIDE: usize = 64;
/// Memory ranges remembered as copies of this sequence's own text.
const MIRRORED: usize = 32;
/// A request in flight publishes its tokens to the engine-wide memory once
/// this many are new, so that the requests decoded beside it draft from
/// them (parallel sampling, agent fan-out, similar tasks in one batch).
const PUBLISH_EVERY: u64 = 16;
/// The most tokens a draft call publishes in flight; a longer backlog (a
/// new long prompt) is published when the request ends.
const INFLIGHT_MAX: u64 = 256;
/// Draft calls between two merges of this sequence's selector steps into the
/// engine-wide weights (and back).
const SYNC_EVERY: u32 = 4;

use crate::limits::{DEFAULT_MEMORY_BUDGET, DEFAULT_SEQUENCE_BUDGET, DEFAULT_THRESHOLD_PERMILLE};

/// The selector's weights as every sequence learned them (behind a mutex in
/// the memory; each drafter keeps a copy and its own steps since, merged
/// every [`SYNC_EVERY`] draft calls).
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Learned {
    weights: Weights,
}

/// How many numbers a memory's learned tables save as: (accepted, tried)
/// per calibration cell, then the selector's weights.
pub(crate) const LEARNED_NUMBERS: usize = 2 * calibrate::CELLS + score::F;

impl RecallMemory {
    /// The learned tables as numbers (saving).
    pub(crate) fn learned_numbers(&self) -> Vec<f64> {
        let mut out: Vec<f64> = self.calibration().numbers().flatten().collect();
        out.extend_from_slice(&lock(self.learned()).weights.0);
        out
    }

    /// Sets the learned tables from [`learned_numbers`](RecallMemory::learned_numbers);
    /// false (nothing set) when they are not such numbers.
    pub(crate) fn set_learned_numbers(&self, numbers: &[f64]) -> bool {
        if numbers.len() != LEARNED_NUMBERS || !numbers.iter().all(|x| x.is_finite()) {
            return false;
        }
        let (cells, weights) = numbers.split_at(2 * calibrate::CELLS);
        if !self.calibration().set(cells) {
            return false;
        }
        lock(self.learned()).weights.0.copy_from_slice(weights);
        true
    }
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
    hasher: Hasher,
    own: SeqIndex,
    memory: Arc<RecallMemory>,
    /// Other drafters read `memory` (it is a [`Shared`](crate::Shared)'s):
    /// publish in flight and merge learned steps periodically. A private
    /// memory takes a request's tokens at its end only.
    engine_wide: bool,
    snapshot: Snapshot,
    /// `history ++ [last]` as last seen, to tell a grown history from a new prompt.
    mirror: Roomy<Token>,
    /// Own position where the current request's output starts.
    request_start: u64,
    /// A request began and has not ended (for the published-requests count).
    in_request: bool,
    /// Own tokens before this are in the memory already (but `deferred`).
    published: u64,
    /// Own tokens left for the request's end (a long prompt).
    deferred: Option<(u64, u64)>,
    /// Memory ranges that are copies of own tokens (not counted twice).
    mirrored: Vec<Span>,
    /// The selector's weights as of the last merge, and this sequence's steps since.
    weights: Weights,
    delta: Weights,
    work: Work,
    /// Draft calls since the learned tables were last merged.
    since_sync: u32,
    /// Where the next token is expected (locality across calls).
    expect: Option<Pos>,
    /// Recent distinct copy regions (their latest accepted source positions),
    /// newest first. Occurrences just after the first (the source of the
    /// last accepted token) are preferred, and after an excursion (an edited
    /// line copied from a diff) copying resumes near one of them.
    anchors: [Option<Pos>; ANCHORS],
    /// The position whose true token the next call's `last` reveals, and the
    /// length `history ++ [last]` must have then.
    awaiting: Option<(usize, usize)>,
    /// Whether a call's search starts from the order bound the last call
    /// left (always, but for the tests that check it changes nothing).
    carry_top: bool,
    /// The session's offset on the engine-wide calibration.
    lean: Lean,
    /// Whether the stop rule applies `lean` (always, but for the tests that
    /// check the rest of the draft path on its own).
    leans: bool,
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
            DEFAULT_THRESHOLD_PERMILLE as f64 / 1000.0
        };
        let weights = lock(memory.learned()).weights;
        Recall {
            threshold,
            hasher: Hasher::new(),
            own: SeqIndex::new(memory::capacity_of(sequence_budget)),
            snapshot: memory.snapshot(),
            memory,
            engine_wide,
            mirror: Roomy::default(),
            request_start: 0,
            in_request: false,
            published: 0,
            deferred: None,
            mirrored: Vec::with_capacity(MIRRORED),
            weights,
            delta: Weights::zero(),
            work: Work::default(),
            since_sync: 0,
            expect: None,
            anchors: [None; ANCHORS],
            awaiting: None,
            carry_top: true,
            lean: Lean::default(),
            leans: true,
        }
    }

    /// The engine-wide memory this drafter reads and feeds.
    #[must_use]
    pub fn memory(&self) -> &Arc<RecallMemory> {
        &self.memory
    }

    /// Tokens of the current session held by this drafter's own index.
    #[must_use]
    pub fn stream_len(&self) -> usize {
        ix(self.own.end() - self.own.floor())
    }
}

impl Clone for Recall {
    fn clone(&self) -> Recall {
        Recall {
            threshold: self.threshold,
            hasher: self.hasher.clone(),
            own: self.own.clone(),
            memory: Arc::clone(&self.memory),
            engine_wide: self.engine_wide,
            snapshot: self.snapshot.clone(),
            mirror: self.mirror.clone(),
            request_start: self.request_start,
            // The parent's request: the parent counts it.
            in_request: false,
            // What the two share is the parent's to publish.
            published: self.own.end(),
            deferred: None,
            mirrored: self.mirrored.clone(),
            // The parent's unmerged steps are the parent's to merge; the
            // child scores with the same sums.
            weights: {
                let mut w = self.weights;
                w.merge(&mut self.delta.clone());
                w
            },
            delta: Weights::zero(),
            work: self.work.clone(),
            since_sync: 0,
            expect: self.expect,
            anchors: self.anchors,
            awaiting: self.awaiting,
            carry_top: self.carry_top,
            lean: self.lean,
            leans: self.leans,
        }
    }
}

impl Drop for Recall {
    /// A drafter dropped without [`Drafter::end_request`] publishes what is
    /// left of its request only if no other writer holds the memory: a drop
    /// never waits for a lock.
    fn drop(&mut self) {
        if self.engine_wide {
            self.try_finish_request();
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
        self.expect = None;
        self.awaiting = None;
        // The previous request has ended.
        self.finish_request();
        if let Some((&last, history)) = prompt.split_last() {
            self.ingest(history, last);
        }
        self.request_start = self.own.end();
        self.in_request = true;
    }

    fn draft(
        &mut self,
        history: &[Token],
        last: Token,
        limits: DraftLimits,
        draft: &mut Vec<Token>,
    ) {
        // A draft never followed by `accept` had its first token rejected
        // (the orchestrator does not forward 0).
        if let Some(&cell) = self.work.pending.first() {
            self.memory.calibration().record(cell, false);
            if let Some(&p) = self.work.cell_probabilities.first() {
                self.lean.record(p, false);
            }
        }
        // The token the target chose where the last draft was rejected or
        // stopped; the history grew by the accepted tokens and that one.
        let mut top = K - 1;
        if let Some((i, _)) = self
            .awaiting
            .take()
            .filter(|&(_, e)| history.len() + 1 == e)
        {
            if let Some(&t) = self.work.tops.get(i).filter(|_| self.carry_top) {
                top = t;
            }
            if i < self.work.ranges.len() {
                let (a, b) = self.work.ranges[i];
                let cands = &self.work.candidates[a as usize..b as usize];
                self.weights.learn(&mut self.delta, cands, last);
            }
        }
        self.work.clear();
        self.since_sync += 1;
        if self.since_sync >= SYNC_EVERY && self.engine_wide {
            self.sync_learned(false);
        }
        self.ingest(history, last);
        if self.own.end() - self.published.max(self.own.floor()) >= PUBLISH_EVERY
            && self.engine_wide
        {
            self.publish_in_flight();
        }
        let base = draft.len();
        self.draft_tokens(limits, draft, top);
        if draft.len() - base < limits.min {
            draft.truncate(base);
            self.work.pending.clear();
            self.work.sources.clear();
            self.work.cell_probabilities.clear();
            self.work.probabilities.clear();
        }
        self.awaiting = Some((0, history.len() + 2));
    }

    fn accept(&mut self, n_accepted: usize) {
        // Tokens before the first rejection were accepted; the first
        // rejected one was tried; later ones are unknown.
        let calibration = self.memory.calibration();
        let w = &self.work;
        for (i, (&cell, &p)) in w.pending.iter().zip(&w.cell_probabilities).enumerate() {
            calibration.record(cell, i < n_accepted);
            self.lean.record(p, i < n_accepted);
            if i >= n_accepted {
                break;
            }
        }
        // Accepted tokens were the right choices; the next call's `last`
        // tells the one after them.
        for i in 0..n_accepted.min(w.chosen.len()).min(w.ranges.len()) {
            let (a, b) = w.ranges[i];
            self.weights.learn(
                &mut self.delta,
                &w.candidates[a as usize..b as usize],
                w.chosen[i],
            );
        }
        self.awaiting = self
            .awaiting
            .map(|(_, expect)| (n_accepted, expect.saturating_add(n_accepted)));
        // The next token is expected right after the last accepted one's source.
        let source = n_accepted
            .checked_sub(1)
            .and_then(|i| w.sources.get(i))
            .copied();
        self.expect = source.map(|s| s.later(2));
        if let Some(s) = source {
            // Move the region's anchor to the front (or evict the oldest).
            let i = self
                .anchors
                .iter()
                .position(|a| {
                    a.is_some_and(|a| a.same_store(s) && a.at().abs_diff(s.at()) < REGION)
                })
                .unwrap_or(ANCHORS - 1);
            self.anchors.copy_within(0..i, 1);
            self.anchors[0] = Some(s);
        }
        self.work.pending.clear();
    }

    fn end_request(&mut self) {
        self.finish_request();
    }

    fn heap_bytes(&self) -> usize {
        self.own.heap_bytes() + 4 * self.mirror.capacity()
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

    /// A clone (see [`Recall`]): the child shares the engine-wide memory,
    /// copies the rest (nothing is re-indexed) and publishes only the
    /// tokens it adds.
    fn fork(&self) -> Option<Box<dyn Drafter>> {
        Some(Box::new(self.clone()))
    }
}

impl Recall {
    /// The drafting loop: one token per step while the running product of
    /// acceptance probabilities stays above the threshold.
    ///
    /// `top` is the longest order worth probing at the first position. A
    /// context that matches k tokens one position later matched k - 1
    /// before, so the search at each position starts one order above the
    /// one found at the position before: within a call, and across calls
    /// from the position where the last draft stopped being accepted (the
    /// next call's context ends one token after it). Across calls the bound
    /// misses only what another sequence published meanwhile, or a context
    /// that first occurs in the accepted tokens themselves; without it, the
    /// first position of a call probed every order down to the one found,
    /// each a memory probe too: 60 to 80% of all probes on the chat and
    /// agent samples (seq drafts are the same with it; 32 slots move by at
    /// most 0.3% tau).
    fn draft_tokens(&mut self, limits: DraftLimits, draft: &mut Vec<Token>, top: usize) {
        let base = draft.len();
        let calibration = self.memory.calibration();
        let view = self.memory.view(&mut self.snapshot);
        let src = Sources {
            own: &self.own,
            memory: view,
            request_start: self.request_start,
            mirrored: &self.mirrored,
        };
        let len = src.own.end();
        let floor = src.own.floor();
        if len == floor {
            return;
        }
        let mut hashes = src.own.rolling();
        let mut cumulative = 1.0;
        let mut pointer = {
            let expect = self.expect.take();
            let last = src.own.token(len - 1);
            expect
                .filter(|&e| {
                    src.holds(e) && e.at() > src.floor(e) && src.token(Pos(e.0 - 1)) == last
                })
                .map(|e| (e, src.match_len(e, len, &[])))
                .or_else(|| src.local(&self.anchors))
        };
        let mut top = top.min(K - 1);
        let odds = if self.leans { self.lean.odds() } else { 1.0 };
        let work = &mut self.work;
        while draft.len() - base < limits.max {
            let drafted = &draft[base..];
            let vlen = len + drafted.len() as u64;
            let copy = pointer
                .filter(|&(p, _)| src.holds(p))
                .map(|(p, m)| (src.token(p), p, m));
            // Longest order whose context occurred before, with its
            // occurrences (not needed while a long match is copied).
            work.scratch.clear();
            let found = if copy.map_or(true, |(_, _, m)| m < COPY_MATCH) {
                let found = src.longest(&hashes, top, vlen - floor, &mut work.scratch);
                // Nothing found: no context of any order matched here.
                top = found.map_or(0, |o| (o + 1).min(K - 1));
                found
            } else {
                Some(K - 1)
            };
            work.tops.push(top);
            if found.is_none() && copy.is_none() {
                break;
            }
            let o = found.unwrap_or(0);
            let choice = match copy {
                // A long match: copy on.
                Some((ct, cp, m)) if m >= COPY_MATCH => {
                    let at = small(work.candidates.len());
                    work.ranges.push((at, at));
                    Choice {
                        token: ct,
                        source: cp,
                        share: 1.0,
                        pointer: m_bucket(m),
                    }
                }
                _ => work.choose(
                    &src,
                    o,
                    copy,
                    self.anchors[0],
                    vlen,
                    drafted,
                    (&self.weights, &self.delta),
                ),
            };
            let (cell, cell_p) = choice.probability(o, work.scratch.len(), calibration);
            let p = Lean::apply(cell_p, odds);
            if cumulative * p < self.threshold {
                break;
            }
            cumulative *= p;
            let token = choice.token;
            draft.push(token);
            work.chosen.push(token);
            work.pending.push(cell);
            work.sources.push(choice.source);
            work.cell_probabilities.push(cell_p);
            work.probabilities.push(p);
            let drafted = &draft[base..];
            pointer = Some(match copy {
                Some((ct, cp, m)) if ct == token && cp == choice.source => (cp.later(1), m + 1),
                _ => (
                    choice.source.later(1),
                    src.match_len(choice.source.later(1), vlen + 1, drafted),
                ),
            });
            // Roll every order's hash over the drafted token.
            let own = src.own;
            self.hasher.roll(&mut hashes, floor, vlen + 1, |j| {
                if j < len {
                    own.token(j)
                } else {
                    drafted[ix(j - len)]
                }
            });
        }
    }
}

#[cfg(all(test, loom))]
mod loom_tests;
#[cfg(all(test, not(loom)))]
mod tests;
