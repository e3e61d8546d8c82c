//! Choosing a draft token among the candidates: locality, votes, the
//! selector's features and score, and the calibrated probability.

use super::*;

/// The scratch buffers of the draft path (reused: no allocation once warm).
#[derive(Clone, Debug, Default)]
pub(super) struct Work {
    pub(super) scratch: Vec<Occurrence>,
    /// Match length of each scratch occurrence.
    pub(super) scratch_m: Vec<u32>,
    /// Candidates (token, features) of the positions of the last draft, and
    /// each position's range in it; a position past the draft is the one
    /// where it stopped.
    pub(super) candidates: Vec<(Token, Features)>,
    pub(super) ranges: Vec<(u32, u32)>,
    pub(super) chosen: Vec<Token>,
    /// The cells of the last draft's tokens, and their source positions.
    pub(super) pending: Vec<Cell>,
    pub(super) sources: Vec<Pos>,
    /// Each drafted token's probability of acceptance: its cell's, and
    /// that with the session's lean (the one the stop rule used).
    pub(super) cell_probabilities: Vec<f64>,
    pub(super) probabilities: Vec<f64>,
    /// Per draft position searched, the longest order worth probing one
    /// position later (see [`Recall::draft_tokens`]).
    pub(super) tops: Vec<usize>,
}

/// The prior of a token's acceptance (before its calibration cell has
/// counts) is its vote share times `PRIOR_BASE + PRIOR_SLOPE * reach`, where
/// `reach` grows with the context order up to [`REACH_ORDER`] (1 when the
/// copy pointer agrees): a vote over 1-token contexts is weak evidence, one
/// over 16-token contexts strong. The three trade tau for acceptance as the
/// threshold does (±50%: tau ±1-3%, up to -7.5% on code-edit at draft_max
/// 64 for half the slope; DESIGN.md, "Tuned constants").
const PRIOR_BASE: f64 = 0.3;
/// See [`PRIOR_BASE`].
const PRIOR_SLOPE: f64 = 0.65;
/// The context order from which a vote counts as fully specific.
const REACH_ORDER: f64 = 16.0;

/// The token chosen at one draft position.
pub(super) struct Choice {
    pub(super) token: Token,
    pub(super) source: Pos,
    pub(super) share: f64,
    /// `m_bucket` of the copy pointer's match when it agrees, else 0.
    pub(super) pointer: usize,
}

impl Choice {
    /// The calibration cell of this choice at order `o` with `support`
    /// voting occurrences, and its calibrated probability of acceptance:
    /// the prior is the vote share, discounted for short contexts unless
    /// the copy pointer agrees.
    pub(super) fn probability(
        &self,
        o: usize,
        support: usize,
        calibration: &calibrate::Calibration,
    ) -> (Cell, f64) {
        let cell = Cell::new(o, self.share, self.pointer, support);
        let reach = if self.pointer > 0 {
            1.0
        } else {
            (ORDERS[o] as f64 / REACH_ORDER).min(1.0)
        };
        let prior = self.share * (PRIOR_BASE + PRIOR_SLOPE * reach);
        (cell, calibration.probability(cell, prior))
    }
}

impl Work {
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

    /// Scores the distinct continuations of the occurrences in `scratch`
    /// (order `o`) and picks the best under the learned weights.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn choose(
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
            self.scratch_m.push(small(m));
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
                    extra = extra.max(m.saturating_sub(small(k)));
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
            .push((small(start), small(self.candidates.len())));
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
