//! The session's life: taking in histories, publishing to the engine-wide
//! memory (in flight and at the request's end), merging what was learned.

use super::*;
use crate::index::mirror::change;

impl Recall {
    /// Hands the current request's tokens to the engine-wide memory (once)
    /// and merges what this drafter learned into it:
    /// [`Drafter::end_request`], and [`begin`](Drafter::begin) for a request
    /// not ended yet. Waits for the memory's writer lock.
    pub(super) fn finish_request(&mut self) {
        if self.in_request {
            self.in_request = false;
            self.memory.count_request();
        }
        self.publish();
        self.sync_learned(true);
    }

    /// [`finish_request`](Recall::finish_request) if neither the writer
    /// lock nor the learned tables' lock is held by another thread: what a
    /// drop does. Returns whether it published.
    pub(super) fn try_finish_request(&mut self) -> bool {
        if let Some((from, to)) = self.deferred {
            if !self.publish_range(from, to, true) {
                return false;
            }
            self.deferred = None;
        }
        if !self.publish_range(self.published, self.own.end(), true) {
            return false;
        }
        self.published = self.own.end();
        self.sync_learned(false)
    }

    /// Hands the own tokens not yet in the memory to it, after the tokens
    /// before them as context.
    pub(super) fn publish(&mut self) {
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
    pub(super) fn publish_in_flight(&mut self) {
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
    pub(super) fn publish_range(&mut self, from: u64, to: u64, in_flight: bool) -> bool {
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

    /// Merges what this drafter learned into the engine-wide tables and
    /// takes theirs (everything other sequences merged meanwhile). Without
    /// `wait`, only if their lock is free: a draft call or a drop never
    /// waits for it, and under contention (many threads on one memory) a
    /// drafter syncs less often, its steps kept in its delta. Returns
    /// whether it synced.
    pub(super) fn sync_learned(&mut self, wait: bool) -> bool {
        let shared = if wait {
            Some(lock(self.memory.learned()))
        } else {
            try_lock(self.memory.learned())
        };
        let Some(mut shared) = shared else {
            return false;
        };
        shared.weights.merge(&mut self.delta);
        self.weights = shared.weights;
        self.since_sync = 0;
        true
    }

    /// Starts a new session: the own index forgets (its text is in the memory).
    pub(super) fn new_session(&mut self) {
        self.finish_request();
        self.own.clear();
        self.mirror.clear();
        self.mirrored.clear();
        self.anchors = [None; ANCHORS];
        self.expect = None;
        self.lean = Lean::default();
    }

    /// Brings the own index up to date with `history ++ [last]`.
    pub(super) fn ingest(&mut self, history: &[Token], last: Token) {
        let at = |j: usize| if j < history.len() { history[j] } else { last };
        let len = history.len() + 1;
        let have = self.mirror.len();
        // The shared rule of `index::mirror`: extended, or diverged where
        // the two first differ.
        let common = change(&self.mirror, history, Some(last)).common();
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
    pub(super) fn skip_known(&mut self) {
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
                if m >= 2 * ix(k) || m as u64 == j - floor {
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
            j = j.saturating_sub(KNOWN_STRIDE as u64);
        }
    }

    /// The order-16 context hash of the own tokens ending at `j`.
    pub(super) fn hasher_hash(&self, j: u64) -> u64 {
        let mut rolling = [0; K];
        let k = ORDERS[K - 1] as u64;
        let own = &self.own;
        // Only the longest order is needed: hash it directly.
        self.hasher.roll(&mut rolling, j - k, j, |p| own.token(p));
        rolling[K - 1]
    }
}
