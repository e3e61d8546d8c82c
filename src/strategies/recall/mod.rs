//! recall: drafts from everything the engine has seen, with multi-order
//! context indexes, a copy pointer with locality, and a stop rule calibrated
//! online from the engine's own verifications.
//!
//! The state is split as an engine is: [`RecallMemory`] (engine-wide, in
//! [`Shared`](crate::Shared)) holds finished requests and what was learned
//! from every sequence; [`Recall`] (one per sequence or request) holds the
//! current session's own index, the copy pointer and the locality anchors.

// Casts between token positions (u64), slot indexes (usize) and 32-bit
// links are bounded by the capacities (at most 2^30 tokens), and the
// feature arithmetic converts counts to f64: checked in the constructors.
#![allow(
    clippy::cast_possible_truncation,
    clippy::cast_sign_loss,
    clippy::cast_possible_wrap,
    clippy::cast_precision_loss
)]

mod calibrate;
mod index;
mod memory;
mod score;

pub use memory::{RecallMemory, RunContext};

/// The context orders, as saved in memory files.
pub(crate) const SAVED_ORDERS: [usize; K] = ORDERS;

use crate::drafter::{DraftLimits, Drafter, Token};
use crate::index::Roomy;
use crate::sync::{lock, Arc};

use calibrate::{m_bucket, Cell};
use index::{match_len, occurrences, tag_of, Chains, Hasher, SeqIndex, K, MAX_MATCH, ORDERS};
use memory::{Snapshot, View};
use score::{Features, Weights};

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
/// How many trailing tokens decide whether a history only grew.
const TAIL_CHECK: usize = 32;
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

/// The default engine-wide memory budget: 256 MiB, that is 2 Mi tokens at
/// 84 bytes each (budgets are rounded down to a power of two of tokens).
pub const DEFAULT_MEMORY_BUDGET: usize = 256 << 20;
/// The default per-sequence budget: 64 MiB, 512 Ki tokens of the current
/// session (a longer one keeps its most recent part).
pub const DEFAULT_SEQUENCE_BUDGET: usize = 64 << 20;
/// The default stop threshold in thousandths (0.13).
pub const DEFAULT_THRESHOLD_PERMILLE: usize = 130;

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

/// A position in the sequence's own index or in the engine-wide memory: the
/// memory's positions carry the top bit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Pos(u64);

impl Pos {
    const MEMORY: u64 = 1 << 63;

    fn own(at: u64) -> Pos {
        Pos(at)
    }
    fn memory(at: u64) -> Pos {
        Pos(at | Pos::MEMORY)
    }
    fn in_memory(self) -> bool {
        self.0 & Pos::MEMORY != 0
    }
    fn at(self) -> u64 {
        self.0 & !Pos::MEMORY
    }
    /// `d` positions later, in the same store.
    fn later(self, d: u64) -> Pos {
        Pos(self.0 + d)
    }
    fn same_store(self, other: Pos) -> bool {
        self.in_memory() == other.in_memory()
    }
}

/// One occurrence of a context: its continuation, vote weight and position.
#[derive(Clone, Copy, Debug)]
struct Occurrence {
    token: Token,
    weight: f64,
    pos: Pos,
}

/// What one draft call reads: the sequence's own index (its positions are
/// the virtual sequence's) and the memory.
struct Sources<'a> {
    own: &'a SeqIndex,
    memory: View<'a>,
    request_start: u64,
    mirrored: &'a [(u64, u64)],
}

impl Sources<'_> {
    /// One past the newest position of `p`'s store.
    fn end(&self, p: Pos) -> u64 {
        if p.in_memory() {
            self.memory.end()
        } else {
            self.own.end()
        }
    }

    fn floor(&self, p: Pos) -> u64 {
        if p.in_memory() {
            self.memory.floor()
        } else {
            self.own.floor()
        }
    }

    /// Whether `p` holds a token.
    fn holds(&self, p: Pos) -> bool {
        p.at() >= self.floor(p) && p.at() < self.end(p)
    }

    fn token(&self, p: Pos) -> Token {
        if p.in_memory() {
            self.memory.token(p.at())
        } else {
            self.own.token(p.at())
        }
    }

    /// How many tokens before `p` equal the last tokens of the own index
    /// followed by `drafted` (length `vlen`).
    fn match_len(&self, p: Pos, vlen: u64, drafted: &[Token]) -> usize {
        let own = self.own;
        let len = own.end();
        let v = |j: u64| {
            if j < len {
                own.token(j)
            } else {
                drafted[(j - len) as usize]
            }
        };
        let vlen = vlen.min(len + drafted.len() as u64);
        if p.in_memory() {
            return match_len(&self.memory, p.at(), (vlen, own.floor()), false, v);
        }
        // The own index: slices compared backwards, the drafted tail first
        // (the hot case: no per-token store dispatch or bounds checks).
        let stream = own.tokens_from(own.floor());
        let drafted = &drafted[..(vlen - len) as usize];
        let before = &stream[..((p.at() - own.floor()) as usize).min(stream.len())];
        if p.at() == vlen {
            return 0;
        }
        let same = |(a, b): &(&Token, &Token)| a == b;
        let tail = before.iter().rev().zip(drafted.iter().rev());
        let mut m = tail.take(MAX_MATCH).take_while(same).count();
        if m == drafted.len() && m < MAX_MATCH {
            let rest = before[..before.len() - m]
                .iter()
                .rev()
                .zip(stream.iter().rev());
            m += rest.take(MAX_MATCH - m).take_while(same).count();
        }
        m
    }

    /// Age of `p`, in tokens before the own index's end.
    fn age(&self, p: Pos) -> u64 {
        let len = self.own.end();
        if p.in_memory() {
            (len - self.own.floor()) + self.memory.end().saturating_sub(p.at())
        } else {
            len.saturating_sub(p.at())
        }
    }

    fn weight(&self, p: Pos) -> f64 {
        if p.in_memory() {
            1.0
        } else if p.at() >= self.request_start {
            REQUEST_WEIGHT
        } else {
            SESSION_WEIGHT
        }
    }

    /// Adds up to [`OCCURRENCES`] recent occurrences of the order-`o`
    /// context with hash `hash` to `scratch`: the session's first, then the
    /// memory's (except its copies of this session's text).
    fn collect(&self, o: usize, hash: u64, scratch: &mut Vec<Occurrence>) -> usize {
        let tag = tag_of(hash);
        let mut added = 0;
        occurrences(self.own, o, tag, |e| {
            let pos = Pos::own(e);
            scratch.push(Occurrence {
                token: self.own.token(e),
                weight: self.weight(pos),
                pos,
            });
            added += 1;
            added < OCCURRENCES
        });
        if added < MEMORY_BELOW && !self.memory.is_empty() {
            occurrences(&self.memory, o, tag, |e| {
                if self.mirrored.iter().any(|&(a, b)| e >= a && e < b) {
                    return true;
                }
                scratch.push(Occurrence {
                    token: self.memory.token(e),
                    weight: 1.0,
                    pos: Pos::memory(e),
                });
                added += 1;
                added < OCCURRENCES
            });
        }
        added
    }

    /// The longest order, from `top` down, whose context (hashed in
    /// `hashes`; `held` tokens of it exist) occurred before, its
    /// occurrences added to `scratch`.
    fn longest(
        &self,
        hashes: &[u64; K],
        top: usize,
        held: u64,
        scratch: &mut Vec<Occurrence>,
    ) -> Option<usize> {
        (0..=top)
            .rev()
            .filter(|&o| held > ORDERS[o] as u64)
            .find(|&o| self.collect(o, hashes[o], scratch) > 0)
    }

    /// After a rejection: the position nearest after an anchor where the
    /// context matches best (an edit resumes copying near where it left off).
    fn local(&self, anchors: &[Option<Pos>; ANCHORS]) -> Option<(Pos, usize)> {
        let len = self.own.end();
        if len == self.own.floor() {
            return None;
        }
        let last = self.own.token(len - 1);
        let mut best: Option<(Pos, usize)> = None;
        for &anchor in anchors.iter().flatten() {
            if !self.holds(anchor) {
                continue;
            }
            let end = (anchor.at() + LOCAL_WINDOW).min(self.end(anchor) - 1);
            let mut consider = |p: Pos| {
                let m = self.match_len(p, len, &[]);
                if best.map_or(true, |(_, bm)| m > bm) {
                    best = Some((p, m));
                }
            };
            if anchor.in_memory() {
                for at in anchor.at() + 1..=end {
                    if self.memory.token(at - 1) == last {
                        consider(Pos::memory(at));
                    }
                }
            } else {
                // The own window as a slice: a scan for `last`.
                let floor = self.own.floor();
                let window = &self.own.tokens_from(anchor.at())[..(end - anchor.at()) as usize];
                for (i, _) in window.iter().enumerate().filter(|(_, &t)| t == last) {
                    consider(Pos::own(anchor.at() + 1 + i as u64));
                }
                debug_assert!(anchor.at() >= floor);
            }
        }
        best.filter(|&(_, m)| m >= LOCAL_MIN_MATCH)
    }
}

/// The scratch buffers of the draft path (reused: no allocation once warm).
#[derive(Clone, Debug, Default)]
struct Work {
    scratch: Vec<Occurrence>,
    /// Match length of each scratch occurrence.
    scratch_m: Vec<u32>,
    /// Candidates (token, features) of the positions of the last draft, and
    /// each position's range in it; a position past the draft is the one
    /// where it stopped.
    candidates: Vec<(Token, Features)>,
    ranges: Vec<(u32, u32)>,
    chosen: Vec<Token>,
    /// The cells of the last draft's tokens, and their source positions.
    pending: Vec<Cell>,
    sources: Vec<Pos>,
    /// Each drafted token's calibrated probability of acceptance.
    probabilities: Vec<f64>,
}

/// The token chosen at one draft position.
struct Choice {
    token: Token,
    source: Pos,
    share: f64,
    /// `m_bucket` of the copy pointer's match when it agrees, else 0.
    pointer: usize,
}

impl Choice {
    /// The calibration cell of this choice at order `o` with `support`
    /// voting occurrences, and its calibrated probability of acceptance:
    /// the prior is the vote share, discounted for short contexts unless
    /// the copy pointer agrees.
    fn probability(
        &self,
        o: usize,
        support: usize,
        calibration: &calibrate::Calibration,
    ) -> (Cell, f64) {
        let cell = Cell::new(o, self.share, self.pointer, support);
        let reach = if self.pointer > 0 {
            1.0
        } else {
            (ORDERS[o] as f64 / 16.0).min(1.0)
        };
        let prior = self.share * (0.3 + 0.65 * reach);
        (cell, calibration.probability(cell, prior))
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
/// agreement with the copy pointer); the draft stops where the running
/// product of these probabilities falls below the threshold. A low threshold
/// drafts long and aggressively, a high one short and safe. The weights and
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
    snapshot: Snapshot,
    /// `history ++ [last]` as last seen, to tell a grown history from a new prompt.
    mirror: Roomy<Token>,
    /// Own position where the current request's output starts.
    request_start: u64,
    /// Own tokens before this are in the memory already (but `deferred`).
    published: u64,
    /// Own tokens left for the request's end (a long prompt).
    deferred: Option<(u64, u64)>,
    /// Memory ranges that are copies of own tokens (not counted twice).
    mirrored: Vec<(u64, u64)>,
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
}

impl Recall {
    /// A drafter with a private memory of [`DEFAULT_MEMORY_BUDGET`] that
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
        )
    }

    /// A drafter on the engine-wide `memory`, with an own index of at most
    /// `sequence_budget` bytes (84 per token).
    pub fn with_memory(
        threshold: f64,
        memory: Arc<RecallMemory>,
        sequence_budget: usize,
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
            mirror: Roomy::default(),
            request_start: 0,
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
        (self.own.end() - self.own.floor()) as usize
    }

    /// Hands the current request's tokens to the engine-wide memory (once)
    /// and merges what this drafter learned into it. [`begin`](Drafter::begin)
    /// and dropping the drafter do it; call it when a request ends and the
    /// drafter lives on idle.
    pub fn finish_request(&mut self) {
        self.publish();
        self.sync_learned();
    }

    /// Hands the own tokens not yet in the memory to it, after the tokens
    /// before them as context.
    fn publish(&mut self) {
        if let Some((from, to)) = self.deferred.take() {
            self.publish_range(from, to, false);
        }
        self.publish_range(self.published, self.own.end(), false);
        self.published = self.own.end();
    }

    /// Publishes in flight: what is new since the last time, except a long
    /// backlog (a new long prompt), which waits for the request's end so
    /// that no draft call indexes more than [`INFLIGHT_MAX`] tokens into the
    /// memory.
    fn publish_in_flight(&mut self) {
        let from = self.published.max(self.own.floor());
        let end = self.own.end();
        if end - from > INFLIGHT_MAX {
            self.deferred = match self.deferred {
                None => Some((from, end)),
                // Adjacent backlogs wait together.
                Some((a, b)) if b == from => Some((a, end)),
                // Otherwise the older waits; the newer's tail goes now.
                Some(older) => {
                    self.published = end - PUBLISH_EVERY;
                    Some(older)
                }
            };
            if self.published != end - PUBLISH_EVERY {
                self.published = end;
                return;
            }
        }
        if self.publish_range(self.published, end, true) {
            self.published = end;
        }
    }

    /// Appends the own tokens `from..to` (what is still held of them) to the
    /// memory, after the tokens before them as context; in flight, only if
    /// no other writer is at work (false: nothing appended).
    fn publish_range(&mut self, from: u64, to: u64, in_flight: bool) -> bool {
        let floor = self.own.floor();
        let from = from.max(floor);
        if from >= to {
            return true;
        }
        let before = from - (from - floor).min(ORDERS[K - 1] as u64);
        let held = self.own.tokens_from(before);
        let held = &held[..held.len().min((to - before) as usize)];
        let (context, tokens) = held.split_at((from - before) as usize);
        let start = if in_flight {
            match self.memory.try_append_after(context, tokens) {
                Some(start) => start,
                None => return false,
            }
        } else {
            self.memory.append_after(context, tokens)
        };
        let end = start + tokens.len() as u64;
        match self.mirrored.last_mut() {
            Some(last) if last.1 == start => last.1 = end,
            _ => {
                if self.mirrored.len() == MIRRORED {
                    self.mirrored.remove(0);
                }
                self.mirrored.push((start, end));
            }
        }
        true
    }

    /// Merges what this drafter learned into the engine-wide tables and
    /// takes theirs (everything other sequences merged meanwhile).
    fn sync_learned(&mut self) {
        let mut shared = lock(self.memory.learned());
        shared.weights.merge(&mut self.delta);
        self.weights = shared.weights;
        self.since_sync = 0;
    }

    /// Starts a new session: the own index forgets (its text is in the memory).
    fn new_session(&mut self) {
        self.finish_request();
        self.own.clear();
        self.mirror.clear();
        self.mirrored.clear();
        self.anchors = [None; ANCHORS];
        self.expect = None;
    }

    /// Brings the own index up to date with `history ++ [last]`.
    fn ingest(&mut self, history: &[Token], last: Token) {
        let at = |j: usize| if j < history.len() { history[j] } else { last };
        let len = history.len() + 1;
        let have = self.mirror.len();
        let tail = have.saturating_sub(TAIL_CHECK);
        let extends = len >= have && (tail..have).all(|j| self.mirror[j] == at(j));
        let common = if extends {
            have
        } else {
            (0..have.min(len))
                .find(|&j| self.mirror[j] != at(j))
                .unwrap_or(have.min(len))
        };
        let mut from = have;
        if common < have {
            if common < have / 2 || common < SESSION_MIN_COMMON {
                // Mostly new text: a new session.
                self.new_session();
                from = 0;
            } else {
                // A new block in the own index: repeat the context before
                // the divergence, so the index's tail is the history's.
                from = common.saturating_sub(ORDERS[K - 1]);
                self.mirror.truncate(from);
            }
        }
        if len <= from {
            return;
        }
        let fresh = self.own.end() == self.own.floor();
        self.mirror.extend((from..len).map(at));
        self.own.extend(&self.hasher, &self.mirror[from..]);
        if fresh {
            self.skip_known();
        }
    }

    /// A new session's text may be in the memory already (the earlier
    /// turns of a chat that another drafter served): from the end of the
    /// own index backwards, the first position whose context the memory
    /// holds with a long match marks what need not be published again, and
    /// the memory's copy is not counted twice.
    fn skip_known(&mut self) {
        self.published = self.own.floor();
        let mut snapshot = self.memory.snapshot();
        let view = self.memory.view(&mut snapshot);
        if view.is_empty() {
            return;
        }
        let own = &self.own;
        let (floor, end) = (own.floor(), own.end());
        let k = ORDERS[K - 1] as u64;
        let mut j = end;
        while j >= floor + k {
            let hash = self.hasher_hash(j);
            let mut found = None;
            occurrences(&view, K - 1, tag_of(hash), |e| {
                let m = match_len(&view, e, (j, floor), false, |p| own.token(p));
                if m >= 2 * k as usize || m as u64 == j - floor {
                    found = Some(e);
                    return false;
                }
                true
            });
            if let Some(e) = found {
                // Extend the match backwards as far as it goes.
                let mut m = 0;
                while j - m > floor
                    && e - m > view.floor()
                    && view.token(e - m - 1) == own.token(j - m - 1)
                {
                    m += 1;
                }
                self.published = j;
                self.mirrored.push((e - m, e));
                return;
            }
            j = j.saturating_sub(KNOWN_STRIDE as u64);
        }
    }

    /// The order-16 context hash of the own tokens ending at `j`.
    fn hasher_hash(&self, j: u64) -> u64 {
        let mut rolling = [0; K];
        let k = ORDERS[K - 1] as u64;
        let own = &self.own;
        // Only the longest order is needed: hash it directly.
        self.hasher.roll(&mut rolling, j - k, j, |p| own.token(p));
        rolling[K - 1]
    }
}

impl Work {
    fn clear(&mut self) {
        self.candidates.clear();
        self.ranges.clear();
        self.chosen.clear();
        self.pending.clear();
        self.sources.clear();
        self.probabilities.clear();
    }

    /// Scores the distinct continuations of the occurrences in `scratch`
    /// (order `o`) and picks the best under the learned weights.
    #[allow(clippy::too_many_arguments)]
    fn choose(
        &mut self,
        src: &Sources<'_>,
        o: usize,
        copy: Option<(Token, Pos, usize)>,
        anchor: Option<Pos>,
        vlen: u64,
        drafted: &[Token],
        weights: (&Weights, &Weights),
    ) -> Choice {
        // Locality: the occurrence nearest after the anchor gets a bonus.
        let mut near_token = None;
        if let Some(anchor) = anchor {
            let near = self
                .scratch
                .iter()
                .enumerate()
                .filter(|(_, c)| {
                    c.pos.same_store(anchor)
                        && c.pos.at() > anchor.at()
                        && c.pos.at() <= anchor.at() + LOCAL_WINDOW
                })
                .min_by_key(|(_, c)| c.pos.at())
                .map(|(i, _)| i);
            if let Some(i) = near {
                self.scratch[i].weight += LOCAL_BONUS;
                near_token = Some(self.scratch[i].token);
            }
        }
        if let Some((ct, cp, m)) = copy {
            self.scratch.push(Occurrence {
                token: ct,
                weight: POINTER_WEIGHT * m as f64,
                pos: cp,
            });
        }
        // Occurrences that share more of the context than the order weigh
        // more: the most specific context is the best evidence.
        let k = ORDERS[o];
        self.scratch_m.clear();
        for c in &mut self.scratch {
            let m = src.match_len(c.pos, vlen, drafted);
            self.scratch_m.push(m as u32);
            if m > k {
                c.weight *= 1.0 + LONGER_WEIGHT * (m - k) as f64 / k as f64;
            }
        }
        let total: f64 = self.scratch.iter().map(|c| c.weight).sum();
        let n = self.scratch.len() as f64;
        let start = self.candidates.len();
        let mut best: Option<(f64, Choice)> = None;
        for i in 0..self.scratch.len() {
            let t = self.scratch[i].token;
            if self.scratch[..i].iter().any(|c| c.token == t)
                || self.candidates.len() - start == CANDIDATES
            {
                continue;
            }
            let (mut votes, mut count, mut extra, mut age) = (0.0, 0.0, 0u32, u64::MAX);
            let mut in_request = 0.0;
            for (c, &m) in self.scratch.iter().zip(&self.scratch_m) {
                if c.token == t {
                    votes += c.weight;
                    count += 1.0;
                    extra = extra.max(m.saturating_sub(k as u32));
                    age = age.min(src.age(c.pos));
                    if !c.pos.in_memory() && c.pos.at() >= src.request_start {
                        in_request = 1.0;
                    }
                }
            }
            let (agrees, m) = match copy {
                Some((ct, _, m)) if ct == t => (1.0, m),
                _ => (0.0, 0),
            };
            let x = Features {
                vote_share: if total > 0.0 { votes / total } else { 0.0 },
                count_share: count / n,
                pointer_agrees: agrees,
                pointer_match: agrees * (1.0 + m as f64).ln() / 5.0,
                extra_match: (1.0 + f64::from(extra)).ln() / 5.0,
                near_anchor: if near_token == Some(t) { 1.0 } else { 0.0 },
                in_request,
                recency: 1.0 / (1.0 + (1.0 + age as f64).ln()),
            };
            let score = weights.0.score(weights.1, &x);
            self.candidates.push((t, x));
            if best.as_ref().map_or(true, |(s, _)| score > s + 1e-9) {
                let choice = Choice {
                    token: t,
                    source: self.scratch[i].pos,
                    share: if total > 0.0 { votes / total } else { 0.0 },
                    pointer: 0,
                };
                best = Some((score, choice));
            }
        }
        self.ranges
            .push((start as u32, self.candidates.len() as u32));
        let (_, mut choice) = best.expect("collect found an occurrence or the pointer added one");
        if let Some((ct, cp, m)) = copy {
            if ct == choice.token {
                choice.source = cp;
                choice.pointer = m_bucket(m);
            }
        }
        choice
    }
}

impl Clone for Recall {
    fn clone(&self) -> Recall {
        Recall {
            threshold: self.threshold,
            hasher: self.hasher.clone(),
            own: self.own.clone(),
            memory: Arc::clone(&self.memory),
            snapshot: self.snapshot.clone(),
            mirror: self.mirror.clone(),
            request_start: self.request_start,
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
        }
    }
}

impl Drop for Recall {
    /// A dropped drafter's request has ended: its tokens go to the memory
    /// (unless nobody else holds the memory).
    fn drop(&mut self) {
        if Arc::strong_count(&self.memory) > 1 {
            self.finish_request();
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
        }
        // The token the target chose where the last draft was rejected or stopped.
        if let Some((i, expect)) = self.awaiting.take() {
            if history.len() + 1 == expect && i < self.work.ranges.len() {
                let (a, b) = self.work.ranges[i];
                let cands = &self.work.candidates[a as usize..b as usize];
                self.weights.learn(&mut self.delta, cands, last);
            }
        }
        self.work.clear();
        self.since_sync += 1;
        if self.since_sync >= SYNC_EVERY && Arc::strong_count(&self.memory) > 1 {
            self.sync_learned();
        }
        self.ingest(history, last);
        if self.own.end() - self.published.max(self.own.floor()) >= PUBLISH_EVERY
            && Arc::strong_count(&self.memory) > 1
        {
            self.publish_in_flight();
        }
        let base = draft.len();
        self.draft_tokens(limits, draft);
        if draft.len() - base < limits.min {
            draft.truncate(base);
            self.work.pending.clear();
            self.work.sources.clear();
            self.work.probabilities.clear();
        }
        self.awaiting = Some((0, history.len() + 2));
    }

    fn accept(&mut self, n_accepted: usize) {
        // Tokens before the first rejection were accepted; the first
        // rejected one was tried; later ones are unknown.
        let calibration = self.memory.calibration();
        for (i, &cell) in self.work.pending.iter().enumerate() {
            calibration.record(cell, i < n_accepted);
            if i >= n_accepted {
                break;
            }
        }
        // Accepted tokens were the right choices; the next call's `last`
        // tells the one after them.
        let w = &self.work;
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
    fn draft_tokens(&mut self, limits: DraftLimits, draft: &mut Vec<Token>) {
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
        // The longest order worth probing: a context that matches k tokens
        // after a drafted token matched k - 1 before it, so the search
        // starts one order above the last one found.
        let mut top = K - 1;
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
                if let Some(o) = found {
                    top = (o + 1).min(K - 1);
                }
                found
            } else {
                Some(K - 1)
            };
            if found.is_none() && copy.is_none() {
                break;
            }
            let o = found.unwrap_or(0);
            let choice = match copy {
                // A long match: copy on.
                Some((ct, cp, m)) if m >= COPY_MATCH => {
                    let at = work.candidates.len() as u32;
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
            let (cell, p) = choice.probability(o, work.scratch.len(), calibration);
            if cumulative * p < self.threshold {
                break;
            }
            cumulative *= p;
            let token = choice.token;
            draft.push(token);
            work.chosen.push(token);
            work.pending.push(cell);
            work.sources.push(choice.source);
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
                    drafted[(j - len) as usize]
                }
            });
        }
    }
}
#[cfg(test)]
mod tests {
    use super::*;

    fn draft(r: &mut Recall, history: &[Token], last: Token, max: usize) -> Vec<Token> {
        let mut out = Vec::new();
        r.draft(history, last, DraftLimits { min: 0, max }, &mut out);
        out
    }

    #[test]
    fn copies_long_repeats_and_stops_at_the_limit() {
        let text: Vec<Token> = (0..500).map(|i| (i * 7919 % 1000) as Token).collect();
        let mut r = Recall::new(0.1);
        // The text, then its first 100 tokens again: the rest is a long copy.
        let history: Vec<Token> = text.iter().chain(&text[..100]).copied().collect();
        r.begin(&history);
        let d = draft(&mut r, &history, text[100], 64);
        assert_eq!(d, &text[101..101 + d.len()]);
        assert!(d.len() >= 16, "a long match drafts long: {}", d.len());
        assert!(draft(&mut r, &history, text[100], 5).len() <= 5);
    }

    #[test]
    fn calibration_learns_from_rejections() {
        // A periodic history, but the target never follows the pattern: every
        // draft is rejected at its first token (the orchestrator then calls no
        // accept). The calibrated probabilities fall and the drafts stop.
        let mut r = Recall::new(0.2);
        let mut history: Vec<Token> = [1, 2, 3].repeat(30);
        let mut drafted = Vec::new();
        for round in 0..300 {
            let last = [1, 2, 3][round % 3];
            drafted.push(!draft(&mut r, &history, last, 16).is_empty());
            history.push(last);
        }
        assert!(
            drafted[..10].iter().all(|&d| d),
            "drafts at first: {:?}",
            &drafted[..10]
        );
        assert!(
            drafted[250..].iter().all(|&d| !d),
            "no drafts once calibrated"
        );
    }

    #[test]
    fn odd_inputs_do_not_panic() {
        let mut r = Recall::new(f64::NAN);
        r.begin(&[]);
        assert!(draft(&mut r, &[], 0, 16).is_empty());
        r.accept(usize::MAX);
        let h: Vec<Token> = (0..300).map(|i| [u32::MAX, 0, 7][i % 3]).collect();
        r.begin(&h);
        for len in [300, 10, 0, 299, 1] {
            let d = draft(&mut r, &h[..len], u32::MAX, 16);
            r.accept(d.len());
        }
        assert!(r.stream_len() > 0);
    }
}
