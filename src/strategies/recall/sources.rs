//! Where a draft looks: the session's own index and the engine-wide memory
//! as one source of positions, occurrences, match lengths and locality.

use crate::index::{common_suffix, each_position_of};
use crate::int::{ix, wide};
use crate::token::Token;

use super::calibrate::Calibration;
use super::chains::{
    match_len, occurrences, tag_of, Chains, Hasher, SeqIndex, K, MAX_MATCH, ORDERS,
};
use super::memory::{Span, View};

/// Occurrences examined at the longest matching order.
/// Its sensitivity (replays at half and double, today's drafts):
/// BENCHMARKS.md, "Sensitivity of recall's tuned constants".
pub(super) const OCCURRENCES: usize = 8;
/// The engine-wide memory is asked at an order only when the session's own
/// index has fewer occurrences than this there: a memory probe is a few
/// cache misses, and the session's own evidence weighs four times more.
/// Its sensitivity (replays at half and double, today's drafts):
/// BENCHMARKS.md, "Sensitivity of recall's tuned constants".
const MEMORY_BELOW: usize = 1;
/// Weight of an occurrence in the current session relative to the
/// engine-wide memory's (earlier turns of a chat, the file being edited).
/// Its sensitivity (replays at half and double, today's drafts):
/// BENCHMARKS.md, "Sensitivity of recall's tuned constants".
const SESSION_WEIGHT: f64 = 4.0;
/// Weight of an occurrence in the current request's own output.
/// Its sensitivity (replays at half and double, today's drafts):
/// BENCHMARKS.md, "Sensitivity of recall's tuned constants".
const REQUEST_WEIGHT: f64 = 4.0;
/// How far after an anchor locality looks.
/// Its sensitivity (replays at half and double, today's drafts):
/// BENCHMARKS.md, "Sensitivity of recall's tuned constants".
pub(super) const LOCAL_WINDOW: u64 = 256;
/// A resumed copy needs this many matching context tokens.
/// Its sensitivity (replays at half and double, today's drafts):
/// BENCHMARKS.md, "Sensitivity of recall's tuned constants".
const LOCAL_MIN_MATCH: usize = 1;

/// A position in the sequence's own index or in the engine-wide memory: the
/// memory's positions carry the top bit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Pos(pub(super) u64);

impl Pos {
    const MEMORY: u64 = 1 << 63;

    pub(super) fn own(at: u64) -> Pos {
        Pos(at)
    }
    pub(super) fn memory(at: u64) -> Pos {
        Pos(at | Pos::MEMORY)
    }
    pub(super) fn in_memory(self) -> bool {
        self.0 & Pos::MEMORY != 0
    }
    pub(super) fn at(self) -> u64 {
        self.0 & !Pos::MEMORY
    }
    /// `d` positions later, in the same store.
    pub(super) fn later(self, d: u64) -> Pos {
        Pos(self.0 + d)
    }
    pub(super) fn same_store(self, other: Pos) -> bool {
        self.in_memory() == other.in_memory()
    }
}

/// The copy pointer: a position whose token is the next one's candidate,
/// and how many tokens before it match the end of the sequence.
#[derive(Clone, Copy, Debug)]
pub(super) struct Pointer {
    pub(super) pos: Pos,
    pub(super) matched: usize,
}

/// The copy pointer's candidate at one draft position: its token, position
/// and match length.
#[derive(Clone, Copy, Debug)]
pub(super) struct CopyCandidate {
    pub(super) token: Token,
    pub(super) pos: Pos,
    pub(super) matched: usize,
}

/// One occurrence of a context: its continuation, vote weight and position.
#[derive(Clone, Copy, Debug)]
pub(super) struct Occurrence {
    pub(super) token: Token,
    pub(super) weight: f64,
    pub(super) pos: Pos,
}

/// What one draft call reads: the sequence's own index (its positions are
/// the virtual sequence's) and the memory, the hasher of both and the
/// engine-wide calibration.
pub(super) struct Sources<'a> {
    pub(super) own: &'a SeqIndex,
    pub(super) memory: View<'a>,
    pub(super) request_start: u64,
    /// Memory ranges that are copies of own tokens (not counted twice).
    pub(super) mirrored: &'a [Span],
    pub(super) hasher: &'a Hasher,
    pub(super) calibration: &'a Calibration,
}

impl Sources<'_> {
    /// One past the newest position of `p`'s store.
    pub(super) fn end(&self, p: Pos) -> u64 {
        if p.in_memory() {
            self.memory.end()
        } else {
            self.own.end()
        }
    }

    pub(super) fn floor(&self, p: Pos) -> u64 {
        if p.in_memory() {
            self.memory.floor()
        } else {
            self.own.floor()
        }
    }

    /// Whether `p` holds a token.
    pub(super) fn holds(&self, p: Pos) -> bool {
        p.at() >= self.floor(p) && p.at() < self.end(p)
    }

    pub(super) fn token(&self, p: Pos) -> Token {
        if p.in_memory() {
            self.memory.token(p.at())
        } else {
            self.own.token(p.at())
        }
    }

    /// How many tokens before `p` equal the last tokens of the own index
    /// followed by `drafted` (length `vlen`).
    pub(super) fn match_len(&self, p: Pos, vlen: u64, drafted: &[Token]) -> usize {
        let own = self.own;
        let len = own.end();
        let v = |j: u64| {
            if j < len {
                own.token(j)
            } else {
                drafted[ix(j - len)]
            }
        };
        let vlen = vlen.min(len + wide(drafted.len()));
        if p.in_memory() {
            return match_len(&self.memory, p.at(), (vlen, own.floor()), false, v);
        }
        // The own index: slices compared backwards, the drafted tail first
        // (the hot case: no per-token store dispatch or bounds checks).
        let stream = own.tokens_from(own.floor());
        let drafted = &drafted[..ix(vlen - len)];
        let before = &stream[..ix(p.at() - own.floor()).min(stream.len())];
        if p.at() == vlen {
            return 0;
        }
        let mut m = common_suffix(before, drafted, MAX_MATCH);
        if m == drafted.len() && m < MAX_MATCH {
            m += common_suffix(&before[..before.len() - m], stream, MAX_MATCH - m);
        }
        m
    }

    /// Age of `p`, in tokens before the own index's end.
    pub(super) fn age(&self, p: Pos) -> u64 {
        let len = self.own.end();
        if p.in_memory() {
            (len - self.own.floor()) + self.memory.end().saturating_sub(p.at())
        } else {
            len.saturating_sub(p.at())
        }
    }

    pub(super) fn weight(&self, p: Pos) -> f64 {
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
    pub(super) fn collect(&self, o: usize, hash: u64, scratch: &mut Vec<Occurrence>) -> usize {
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
                if self.mirrored.iter().any(|s| s.contains(e)) {
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
    pub(super) fn longest(
        &self,
        hashes: &[u64; K],
        top: usize,
        held: u64,
        scratch: &mut Vec<Occurrence>,
    ) -> Option<usize> {
        (0..=top)
            .rev()
            .filter(|&o| held > wide(ORDERS[o]))
            .find(|&o| self.collect(o, hashes[o], scratch) > 0)
    }

    /// Keeps `p` in `best` if its match with the own index's end (`len`)
    /// is longer (the first position with the longest match wins). `room`
    /// bounds that match (the text before `p` and before the end) and
    /// `token(j)` reads `p`'s store. A position can only beat the best match
    /// `bm` so far if the token `bm` before it matches too: that one compare
    /// rejects most positions before `match_len` sets up (same result; the
    /// instruction counts are in DESIGN.md, "The hot path").
    fn consider(
        &self,
        best: &mut Option<Pointer>,
        p: Pos,
        len: u64,
        room: u64,
        token: impl Fn(u64) -> Token,
    ) {
        let bm = wide(best.map_or(0, |b| b.matched));
        if bm > 0 && (bm >= room || token(p.at() - 1 - bm) != self.own.token(len - 1 - bm)) {
            return;
        }
        let m = self.match_len(p, len, &[]);
        if best.map_or(true, |b| m > b.matched) {
            *best = Some(Pointer { pos: p, matched: m });
        }
    }

    /// After a rejection: the position nearest after an anchor where the
    /// context matches best (an edit resumes copying near where it left off).
    pub(super) fn local(&self, anchors: &[Option<Pos>]) -> Option<Pointer> {
        let len = self.own.end();
        if len == self.own.floor() {
            return None;
        }
        let last = self.own.token(len - 1);
        let mut best: Option<Pointer> = None;
        for &anchor in anchors.iter().flatten() {
            if !self.holds(anchor) {
                continue;
            }
            let end = (anchor.at() + LOCAL_WINDOW).min(self.end(anchor) - 1);
            if anchor.in_memory() {
                let memory = &self.memory;
                let own_room = len - self.own.floor();
                memory.each_position_of(anchor.at(), end, last, |q| {
                    let p = q + 1;
                    let room = (p - memory.floor().min(p)).min(own_room);
                    self.consider(&mut best, Pos::memory(p), len, room, |j| memory.token(j));
                });
            } else {
                // The own window as a slice: a scan for `last`.
                let own = self.own;
                let window = &own.tokens_from(anchor.at())[..ix(end - anchor.at())];
                each_position_of(window, last, |i| {
                    let p = anchor.at() + 1 + wide(i);
                    self.consider(&mut best, Pos::own(p), len, p - own.floor(), |j| {
                        own.token(j)
                    });
                });
            }
        }
        best.filter(|b| b.matched >= LOCAL_MIN_MATCH)
    }
}
