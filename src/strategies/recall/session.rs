//! The session's life: the own index of the current session, taking in
//! histories, and publishing to the engine-wide memory (in flight and at
//! the request's end).

use crate::index::mirror::change;
use crate::index::Roomy;
use crate::int::{ix, wide};
use crate::sync::Arc;
use crate::token::Token;

use super::chains::{match_len, occurrences, tag_of, Chains, Hasher, SeqIndex, K, ORDERS};
use super::memory::{capacity_of, RecallMemory, Snapshot, Span};
use super::sources::Sources;

/// A new prompt that keeps less than this much of the previous history (or
/// less than half of it) starts a new session.
/// Its sensitivity (replays at half and double, today's drafts):
/// BENCHMARKS.md, "Sensitivity of recall's tuned constants".
const SESSION_MIN_COMMON: usize = 64;
/// Steps between the probes of a new prompt for text the memory already holds.
/// Its sensitivity (replays at half and double, today's drafts):
/// BENCHMARKS.md, "Sensitivity of recall's tuned constants".
const KNOWN_STRIDE: usize = 64;
/// Memory ranges remembered as copies of this sequence's own text.
/// Its sensitivity (replays at half and double, today's drafts):
/// BENCHMARKS.md, "Sensitivity of recall's tuned constants".
const MIRRORED: usize = 32;
/// A request in flight publishes its tokens to the engine-wide memory once
/// this many are new, so that the requests decoded beside it draft from
/// them (parallel sampling, agent fan-out, similar tasks in one batch).
/// Its sensitivity (replays at half and double, today's drafts):
/// BENCHMARKS.md, "Sensitivity of recall's tuned constants".
const PUBLISH_EVERY: u64 = 16;
/// The most tokens a draft call publishes in flight; a longer backlog (a
/// new long prompt) is published when the request ends.
/// Its sensitivity (replays at half and double, today's drafts):
/// BENCHMARKS.md, "Sensitivity of recall's tuned constants".
const INFLIGHT_MAX: u64 = 256;

/// Whether taking in a history kept the session or started a new one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Ingested {
    /// The same session, grown or edited.
    Kept,
    /// Mostly new text: the own index started over (what was learned of the
    /// last session's locality no longer applies).
    NewSession,
}

/// One sequence's session: its own index and what of it the engine-wide
/// memory holds.
#[derive(Debug)]
pub(super) struct Session {
    hasher: Hasher,
    own: SeqIndex,
    memory: Arc<RecallMemory>,
    /// Other drafters read `memory` (it is an engine's): publish in flight
    /// and merge learned steps periodically. A private memory takes a
    /// request's tokens at its end only.
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
    deferred: Option<Span>,
    /// Memory ranges that are copies of own tokens (not counted twice).
    mirrored: Vec<Span>,
}

impl Session {
    /// An empty session on `memory` with an own index of at most
    /// `sequence_budget` bytes; `engine_wide` when other drafters read the
    /// memory.
    pub(super) fn new(
        memory: Arc<RecallMemory>,
        sequence_budget: usize,
        engine_wide: bool,
    ) -> Session {
        Session {
            hasher: Hasher::new(),
            own: SeqIndex::new(capacity_of(sequence_budget)),
            snapshot: memory.snapshot(),
            memory,
            engine_wide,
            mirror: Roomy::default(),
            request_start: 0,
            in_request: false,
            published: 0,
            deferred: None,
            mirrored: Vec::with_capacity(MIRRORED),
        }
    }

    /// A fork's session: the same state without re-indexing; what the two
    /// share is the parent's to publish, and the parent's request the
    /// parent's to count.
    pub(super) fn fork(&self) -> Session {
        Session {
            hasher: self.hasher.clone(),
            own: self.own.clone(),
            memory: Arc::clone(&self.memory),
            engine_wide: self.engine_wide,
            snapshot: self.snapshot.clone(),
            mirror: self.mirror.clone(),
            request_start: self.request_start,
            in_request: false,
            published: self.own.end(),
            deferred: None,
            mirrored: self.mirrored.clone(),
        }
    }

    pub(super) fn memory(&self) -> &Arc<RecallMemory> {
        &self.memory
    }

    pub(super) fn engine_wide(&self) -> bool {
        self.engine_wide
    }

    /// Tokens of the current session held by the own index.
    pub(super) fn len(&self) -> usize {
        ix(self.own.end() - self.own.floor())
    }

    /// Heap bytes of the own index and the history's copy.
    pub(super) fn heap_bytes(&self) -> usize {
        self.own.heap_bytes() + 4 * self.mirror.capacity()
    }

    /// What a draft call reads (the memory's view refreshed).
    pub(super) fn sources(&mut self) -> Sources<'_> {
        Sources {
            own: &self.own,
            memory: self.memory.view(&mut self.snapshot),
            request_start: self.request_start,
            mirrored: &self.mirrored,
            hasher: &self.hasher,
            calibration: self.memory.calibration(),
        }
    }

    /// A request starts after what the own index holds.
    pub(super) fn begin_request(&mut self) {
        self.request_start = self.own.end();
        self.in_request = true;
    }

    /// Counts the request (once) and hands its tokens to the memory.
    /// Waits for the memory's writer lock.
    pub(super) fn end_request(&mut self) {
        if self.in_request {
            self.in_request = false;
            self.memory.count_request();
        }
        self.publish();
    }

    /// Publishes what is left if no other writer holds the memory: what a
    /// drop does. Returns whether everything was published.
    pub(super) fn try_publish(&mut self) -> bool {
        if let Some(Span { start, end }) = self.deferred {
            if !self.publish_range(start, end, true) {
                return false;
            }
            self.deferred = None;
        }
        if !self.publish_range(self.published, self.own.end(), true) {
            return false;
        }
        self.published = self.own.end();
        true
    }

    /// Hands the own tokens not yet in the memory to it, after the tokens
    /// before them as context.
    fn publish(&mut self) {
        if let Some(Span { start, end }) = self.deferred.take() {
            self.publish_range(start, end, false);
        }
        self.publish_range(self.published, self.own.end(), false);
        self.published = self.own.end();
    }

    /// On an engine-wide memory, once [`PUBLISH_EVERY`] tokens are new:
    /// publishes in flight what is new since the last time, except a long
    /// backlog (a new long prompt), which waits for the request's end so
    /// that no draft call indexes more than [`INFLIGHT_MAX`] tokens into the
    /// memory.
    pub(super) fn publish_in_flight(&mut self) {
        let from = self.published.max(self.own.floor());
        let end = self.own.end();
        if !self.engine_wide || end - from < PUBLISH_EVERY {
            return;
        }
        if end - from > INFLIGHT_MAX {
            self.deferred = match self.deferred {
                None => Some(Span { start: from, end }),
                // Adjacent backlogs wait together.
                Some(Span { start, end: b }) if b == from => Some(Span { start, end }),
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
        let Some(Span { start, end }) = self.memory.append_own(&self.own, from, to, !in_flight)
        else {
            return false;
        };
        if end == start {
            return true;
        }
        match self.mirrored.last_mut() {
            Some(last) if last.end == start => last.end = end,
            _ => {
                if self.mirrored.len() == MIRRORED {
                    self.mirrored.remove(0);
                }
                self.mirrored.push(Span { start, end });
            }
        }
        true
    }

    /// Brings the own index up to date with `history ++ [last]`. Mostly new
    /// text ends the request (published) and starts a new session.
    pub(super) fn ingest(&mut self, history: &[Token], last: Token) -> Ingested {
        let at = |j: usize| if j < history.len() { history[j] } else { last };
        let len = history.len() + 1;
        let have = self.mirror.len();
        // The shared rule of `index::mirror`: extended, or diverged where
        // the two first differ.
        let common = change(&self.mirror, history, Some(last)).common();
        let mut from = have;
        let mut ingested = Ingested::Kept;
        if common < have {
            if common < have / 2 || common < SESSION_MIN_COMMON {
                // Mostly new text: a new session.
                self.end_request();
                self.own.clear();
                self.mirror.clear();
                self.mirrored.clear();
                ingested = Ingested::NewSession;
                from = 0;
            } else {
                // A new block in the own index: repeat the context before
                // the divergence, so the index's tail is the history's.
                from = common.saturating_sub(ORDERS[K - 1]);
                self.mirror.truncate(from);
            }
        }
        if len <= from {
            return ingested;
        }
        let fresh = self.own.end() == self.own.floor();
        self.mirror.extend((from..len).map(at));
        self.own.extend(&self.hasher, &self.mirror[from..]);
        if fresh {
            self.skip_known();
        }
        ingested
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
        let k = wide(ORDERS[K - 1]);
        let mut j = end;
        while j >= floor + k {
            let hash = self.hash_before(j);
            let mut found = None;
            occurrences(&view, K - 1, tag_of(hash), |e| {
                let m = match_len(&view, e, (j, floor), false, |p| own.token(p));
                if m >= 2 * ix(k) || wide(m) == j - floor {
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
                self.mirrored.push(Span {
                    start: e - m,
                    end: e,
                });
                return;
            }
            j = j.saturating_sub(wide(KNOWN_STRIDE));
        }
    }

    /// The order-16 context hash of the own tokens ending at `j`.
    fn hash_before(&self, j: u64) -> u64 {
        let mut rolling = [0; K];
        let k = wide(ORDERS[K - 1]);
        let own = &self.own;
        // Only the longest order is needed: hash it directly.
        self.hasher.roll(&mut rolling, j - k, j, |p| own.token(p));
        rolling[K - 1]
    }
}
