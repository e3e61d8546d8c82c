//! Choosing a draft token among the candidates: locality, votes, the
//! selector's features and score, and the calibrated probability.

use crate::int::{float, float64, ix, small};
use crate::token::Token;

use super::calibrate::{m_bucket, Calibration, Cell};
use super::chains::ORDERS;
use super::learner::Selector;
use super::score::Features;
use super::sources::{CopyCandidate, Occurrence, Pos, Sources, LOCAL_WINDOW, OCCURRENCES};

/// Vote bonus of the occurrence nearest after the anchor (locality).
/// Its sensitivity (replays at half and double, today's drafts):
/// BENCHMARKS.md, "Sensitivity of recall's tuned constants".
const LOCAL_BONUS: f64 = 32.0;
/// Vote weight of the copy pointer per token of match length.
/// Its sensitivity (replays at half and double, today's drafts):
/// BENCHMARKS.md, "Sensitivity of recall's tuned constants".
const POINTER_WEIGHT: f64 = 0.5;
/// How much more an occurrence weighs per extra matching token, relative to the order.
/// Its sensitivity (replays at half and double, today's drafts):
/// BENCHMARKS.md, "Sensitivity of recall's tuned constants".
const LONGER_WEIGHT: f64 = 16.0;
/// Distinct candidate tokens scored at a draft position.
/// Its sensitivity (replays at half and double, today's drafts):
/// BENCHMARKS.md, "Sensitivity of recall's tuned constants".
const CANDIDATES: usize = 8;

/// The prior of a token's acceptance (before its calibration cell has
/// counts) is its vote share times `PRIOR_BASE + PRIOR_SLOPE * reach`, where
/// `reach` grows with the context order up to [`REACH_ORDER`] (1 when the
/// copy pointer agrees): a vote over 1-token contexts is weak evidence, one
/// over 16-token contexts strong. The three trade tau for acceptance as the
/// threshold does.
/// Its sensitivity (replays at half and double, today's drafts):
/// BENCHMARKS.md, "Sensitivity of recall's tuned constants".
const PRIOR_BASE: f64 = 0.3;
/// See [`PRIOR_BASE`].
/// Its sensitivity (replays at half and double, today's drafts):
/// BENCHMARKS.md, "Sensitivity of recall's tuned constants".
const PRIOR_SLOPE: f64 = 0.65;
/// The context order from which a vote counts as fully specific.
/// Its sensitivity (replays at half and double, today's drafts):
/// BENCHMARKS.md, "Sensitivity of recall's tuned constants".
const REACH_ORDER: f64 = 16.0;

/// The candidates of one draft position: a range of [`Work::candidates`].
#[derive(Clone, Copy, Debug)]
pub(super) struct CandidateRange {
    start: u32,
    end: u32,
}

impl CandidateRange {
    /// The candidates in `all`.
    pub(super) fn of(self, all: &[(Token, Features)]) -> &[(Token, Features)] {
        &all[ix(self.start.into())..ix(self.end.into())]
    }
}

/// The scratch buffers of the draft path (reused: no allocation once warm).
#[derive(Clone, Debug, Default)]
pub(super) struct Work {
    pub(super) scratch: Vec<Occurrence>,
    /// Match length of each scratch occurrence.
    scratch_m: Vec<u32>,
    /// Candidates (token, features) of the positions of the last draft, and
    /// each position's range in it; a position past the draft is the one
    /// where it stopped.
    pub(super) candidates: Vec<(Token, Features)>,
    pub(super) ranges: Vec<CandidateRange>,
    pub(super) chosen: Vec<Token>,
    /// The cells of the last draft's tokens, and their source positions.
    pub(super) pending: Vec<Cell>,
    pub(super) sources: Vec<Pos>,
    /// Each drafted token's probability of acceptance: its cell's, and
    /// that with the session's lean (the one the stop rule used).
    pub(super) cell_probabilities: Vec<f64>,
    pub(super) probabilities: Vec<f64>,
    /// Per draft position searched, the longest order worth probing one
    /// position later (see `Recall::draft_tokens`).
    pub(super) tops: Vec<usize>,
}

/// The token chosen at one draft position.
pub(super) struct Choice {
    pub(super) token: Token,
    pub(super) source: Pos,
    pub(super) share: f64,
    /// `m_bucket` of the copy pointer's match when it agrees, else 0.
    pub(super) pointer: usize,
}

impl Choice {
    /// The copy pointer's token, drafted without a vote (a long match).
    pub(super) fn copied(copy: CopyCandidate) -> Choice {
        Choice {
            token: copy.token,
            source: copy.pos,
            share: 1.0,
            pointer: m_bucket(copy.matched),
        }
    }

    /// The calibration cell of this choice at order `o` with `support`
    /// voting occurrences, and its calibrated probability of acceptance:
    /// the prior is the vote share, discounted for short contexts unless
    /// the copy pointer agrees.
    pub(super) fn probability(
        &self,
        o: usize,
        support: usize,
        calibration: &Calibration,
    ) -> (Cell, f64) {
        let cell = Cell::new(o, self.share, self.pointer, support);
        let reach = if self.pointer > 0 {
            1.0
        } else {
            (float(ORDERS[o]) / REACH_ORDER).min(1.0)
        };
        let prior = self.share * (PRIOR_BASE + PRIOR_SLOPE * reach);
        (cell, calibration.probability(cell, prior))
    }
}

/// Where a choice is made: the order whose occurrences are in the scratch,
/// the copy pointer's candidate, the newest anchor, and the virtual
/// sequence (the own index's tokens, then `drafted`, `vlen` in all).
pub(super) struct Position<'d> {
    pub(super) o: usize,
    pub(super) copy: Option<CopyCandidate>,
    pub(super) anchor: Option<Pos>,
    pub(super) vlen: u64,
    pub(super) drafted: &'d [Token],
}

/// What the occurrences of one candidate token add up to.
struct Tally {
    votes: f64,
    count: f64,
    extra: u32,
    age: u64,
    in_request: f64,
}

impl Work {
    /// Empties the buffers and makes room for a draft of up to `max`
    /// tokens: every buffer's bound is known before the draft starts, so
    /// none grows inside it (how far a draft gets depends on what the
    /// engine accepted, so growth there would allocate at any time).
    pub(super) fn clear_for(&mut self, max: usize) {
        self.clear();
        // A draft stops at position `max` at the latest, where it searched.
        let positions = max.saturating_add(1);
        self.scratch.reserve(OCCURRENCES + 1);
        self.scratch_m.reserve(OCCURRENCES + 1);
        self.candidates
            .reserve(positions.saturating_mul(CANDIDATES));
        self.ranges.reserve(positions);
        self.chosen.reserve(positions);
        self.pending.reserve(positions);
        self.sources.reserve(positions);
        self.cell_probabilities.reserve(positions);
        self.probabilities.reserve(positions);
        self.tops.reserve(positions);
    }

    /// Bytes the buffers hold (about 0.6 KiB per token of `draft_max`).
    pub(super) fn heap_bytes(&self) -> usize {
        fn bytes<T>(v: &Vec<T>) -> usize {
            v.capacity() * std::mem::size_of::<T>()
        }
        bytes(&self.scratch)
            + bytes(&self.scratch_m)
            + bytes(&self.candidates)
            + bytes(&self.ranges)
            + bytes(&self.chosen)
            + bytes(&self.pending)
            + bytes(&self.sources)
            + bytes(&self.cell_probabilities)
            + bytes(&self.probabilities)
            + bytes(&self.tops)
    }

    pub(super) fn clear(&mut self) {
        self.candidates.clear();
        self.ranges.clear();
        self.chosen.clear();
        self.pending.clear();
        self.sources.clear();
        self.cell_probabilities.clear();
        self.probabilities.clear();
        self.tops.clear();
    }

    /// Records a position with no candidates (a long match copied on).
    pub(super) fn no_candidates(&mut self) {
        let at = small(self.candidates.len());
        self.ranges.push(CandidateRange { start: at, end: at });
    }

    /// Scores the distinct continuations of the occurrences in `scratch`
    /// (order `at.o`) and picks the best under the learned weights.
    pub(super) fn choose(
        &mut self,
        src: &Sources<'_>,
        at: &Position<'_>,
        selector: Selector<'_>,
    ) -> Choice {
        let near_token = self.favour_near(at.anchor);
        if let Some(copy) = at.copy {
            self.scratch.push(Occurrence {
                token: copy.token,
                weight: POINTER_WEIGHT * float(copy.matched),
                pos: copy.pos,
            });
        }
        self.weigh_matches(src, at);
        let total: f64 = self.scratch.iter().map(|c| c.weight).sum();
        let n = float(self.scratch.len());
        let start = self.candidates.len();
        let mut best: Option<(f64, Choice)> = None;
        for i in 0..self.scratch.len() {
            let t = self.scratch[i].token;
            if self.scratch[..i].iter().any(|c| c.token == t)
                || self.candidates.len() - start == CANDIDATES
            {
                continue;
            }
            let tally = self.tally(src, t, ORDERS[at.o]);
            let share = if total > 0.0 {
                tally.votes / total
            } else {
                0.0
            };
            let x = features(
                &tally,
                share,
                n,
                at.copy.filter(|c| c.token == t),
                near_token == Some(t),
            );
            let score = selector.score(&x);
            self.candidates.push((t, x));
            if best.as_ref().map_or(true, |(s, _)| score > s + 1e-9) {
                let choice = Choice {
                    token: t,
                    source: self.scratch[i].pos,
                    share,
                    pointer: 0,
                };
                best = Some((score, choice));
            }
        }
        self.ranges.push(CandidateRange {
            start: small(start),
            end: small(self.candidates.len()),
        });
        let (_, mut choice) = best.expect("collect found an occurrence or the pointer added one");
        if let Some(copy) = at.copy.filter(|c| c.token == choice.token) {
            choice.source = copy.pos;
            choice.pointer = m_bucket(copy.matched);
        }
        choice
    }

    /// Locality: the occurrence nearest after the anchor gets a bonus;
    /// returns its token.
    fn favour_near(&mut self, anchor: Option<Pos>) -> Option<Token> {
        let anchor = anchor?;
        let i = self
            .scratch
            .iter()
            .enumerate()
            .filter(|(_, c)| {
                c.pos.same_store(anchor)
                    && c.pos.at() > anchor.at()
                    && c.pos.at() <= anchor.at() + LOCAL_WINDOW
            })
            .min_by_key(|(_, c)| c.pos.at())
            .map(|(i, _)| i)?;
        self.scratch[i].weight += LOCAL_BONUS;
        Some(self.scratch[i].token)
    }

    /// Occurrences that share more of the context than the order weigh
    /// more: the most specific context is the best evidence.
    fn weigh_matches(&mut self, src: &Sources<'_>, at: &Position<'_>) {
        let k = ORDERS[at.o];
        self.scratch_m.clear();
        for c in &mut self.scratch {
            let m = src.match_len(c.pos, at.vlen, at.drafted);
            self.scratch_m.push(small(m));
            if m > k {
                c.weight *= 1.0 + LONGER_WEIGHT * float(m - k) / float(k);
            }
        }
    }

    /// The occurrences of `t` in the scratch, added up (`k`: the order's
    /// context length).
    fn tally(&self, src: &Sources<'_>, t: Token, k: usize) -> Tally {
        let mut tally = Tally {
            votes: 0.0,
            count: 0.0,
            extra: 0,
            age: u64::MAX,
            in_request: 0.0,
        };
        for (c, &m) in self.scratch.iter().zip(&self.scratch_m) {
            if c.token == t {
                tally.votes += c.weight;
                tally.count += 1.0;
                tally.extra = tally.extra.max(m.saturating_sub(small(k)));
                tally.age = tally.age.min(src.age(c.pos));
                if !c.pos.in_memory() && c.pos.at() >= src.request_start {
                    tally.in_request = 1.0;
                }
            }
        }
        tally
    }
}

/// A candidate's features: its tally, vote `share`, the number `n` of
/// occurrences, the copy pointer if it agrees, and whether it is the
/// token nearest after the anchor.
fn features(
    tally: &Tally,
    share: f64,
    n: f64,
    agreeing: Option<CopyCandidate>,
    near: bool,
) -> Features {
    let (agrees, m) = agreeing.map_or((0.0, 0), |c| (1.0, c.matched));
    Features {
        vote_share: share,
        count_share: tally.count / n,
        pointer_agrees: agrees,
        pointer_match: agrees * (1.0 + float(m)).ln() / 5.0,
        extra_match: (1.0 + f64::from(tally.extra)).ln() / 5.0,
        near_anchor: if near { 1.0 } else { 0.0 },
        in_request: tally.in_request,
        recency: 1.0 / (1.0 + (1.0 + float64(tally.age)).ln()),
    }
}
