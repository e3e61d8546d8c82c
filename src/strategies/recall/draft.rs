//! The drafting loop: one token per step while the running product of
//! acceptance probabilities stays above the threshold.

use crate::drafter::DraftLimits;
use crate::int::{ix, wide};
use crate::token::Token;

use super::calibrate::Lean;
use super::chains::{Chains, K};
use super::choose::{Choice, Position, Work};
use super::learner::Selector;
use super::sources::{CopyCandidate, Pointer, Pos, Sources};
use super::Recall;

/// With a match this long, the copy pointer drafts without a vote.
/// Its sensitivity (replays at half and double, today's drafts):
/// BENCHMARKS.md, "Sensitivity of recall's tuned constants".
const COPY_MATCH: usize = 24;

/// One draft call's loop state.
struct Drafting<'a> {
    src: Sources<'a>,
    work: &'a mut Work,
    selector: Selector<'a>,
    anchor: Option<Pos>,
    /// The session's lean on the calibration, as an odds factor.
    odds: f64,
    threshold: f64,
    /// Every order's context hash at the end of the virtual sequence.
    hashes: [u64; K],
    /// The probability that the draft so far is accepted.
    cumulative: f64,
    pointer: Option<Pointer>,
    /// The longest order worth probing at the next position.
    top: usize,
}

impl Recall {
    /// Drafts onto `draft`.
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
    /// each a memory probe too (most of all probes on the chat and agent
    /// samples; the drafts are the same).
    pub(super) fn draft_tokens(&mut self, limits: DraftLimits, draft: &mut Vec<Token>, top: usize) {
        let base = draft.len();
        let src = self.session.sources();
        if src.own.end() == src.own.floor() {
            return;
        }
        let mut run = Drafting {
            hashes: src.own.rolling(),
            pointer: self.locality.start(&src),
            src,
            work: &mut self.work,
            selector: self.learner.selector(),
            anchor: self.locality.anchor(),
            odds: self.learner.odds(),
            threshold: self.threshold,
            cumulative: 1.0,
            top: top.min(K - 1),
        };
        while draft.len() - base < limits.max && run.step(draft, base) {}
    }
}

impl Drafting<'_> {
    /// Drafts one token onto `draft` (drafted from `base` on); false when
    /// the draft stops here.
    fn step(&mut self, draft: &mut Vec<Token>, base: usize) -> bool {
        let src = &self.src;
        let len = src.own.end();
        let vlen = len + wide(draft.len() - base);
        let copy = self
            .pointer
            .filter(|p| src.holds(p.pos))
            .map(|p| CopyCandidate {
                token: src.token(p.pos),
                pos: p.pos,
                matched: p.matched,
            });
        let Some((o, choice)) = self.choose(copy, vlen, &draft[base..]) else {
            return false;
        };
        let (cell, cell_p) = choice.probability(o, self.work.scratch.len(), self.src.calibration);
        let p = Lean::apply(cell_p, self.odds);
        if self.cumulative * p < self.threshold {
            return false;
        }
        self.cumulative *= p;
        let token = choice.token;
        draft.push(token);
        let work = &mut *self.work;
        work.chosen.push(token);
        work.pending.push(cell);
        work.sources.push(choice.source);
        work.cell_probabilities.push(cell_p);
        work.probabilities.push(p);
        self.advance(copy, &choice, vlen, &draft[base..]);
        true
    }

    /// The order found at this position and the token chosen, or `None`
    /// when no context of any order occurred before and there is no copy
    /// pointer.
    fn choose(
        &mut self,
        copy: Option<CopyCandidate>,
        vlen: u64,
        drafted: &[Token],
    ) -> Option<(usize, Choice)> {
        let src = &self.src;
        let work = &mut *self.work;
        // Longest order whose context occurred before, with its
        // occurrences (not needed while a long match is copied).
        work.scratch.clear();
        let found = if copy.map_or(true, |c| c.matched < COPY_MATCH) {
            let found = src.longest(
                &self.hashes,
                self.top,
                vlen - src.own.floor(),
                &mut work.scratch,
            );
            // Nothing found: no context of any order matched here.
            self.top = found.map_or(0, |o| (o + 1).min(K - 1));
            found
        } else {
            Some(K - 1)
        };
        work.tops.push(self.top);
        if found.is_none() && copy.is_none() {
            return None;
        }
        let o = found.unwrap_or(0);
        let choice = match copy {
            // A long match: copy on.
            Some(c) if c.matched >= COPY_MATCH => {
                work.no_candidates();
                Choice::copied(c)
            }
            _ => {
                let at = Position {
                    o,
                    copy,
                    anchor: self.anchor,
                    vlen,
                    drafted,
                };
                work.choose(src, &at, self.selector)
            }
        };
        Some((o, choice))
    }

    /// Moves the copy pointer past the drafted token and rolls every
    /// order's hash over it (`drafted` ends with it; `vlen` was the virtual
    /// sequence's length before it).
    fn advance(
        &mut self,
        copy: Option<CopyCandidate>,
        choice: &Choice,
        vlen: u64,
        drafted: &[Token],
    ) {
        let src = &self.src;
        self.pointer = Some(match copy {
            Some(c) if c.token == choice.token && c.pos == choice.source => Pointer {
                pos: c.pos.later(1),
                matched: c.matched + 1,
            },
            _ => Pointer {
                pos: choice.source.later(1),
                matched: src.match_len(choice.source.later(1), vlen + 1, drafted),
            },
        });
        let own = src.own;
        let (len, floor) = (own.end(), own.floor());
        src.hasher.roll(&mut self.hashes, floor, vlen + 1, |j| {
            if j < len {
                own.token(j)
            } else {
                drafted[ix(j - len)]
            }
        });
    }
}
