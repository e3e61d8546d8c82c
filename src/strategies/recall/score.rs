//! The candidate selector: a linear score over named features of each
//! candidate token, learned online by softmax regression from the tokens the
//! target chose.

use crate::token::Token;

/// Step size of the online selector.
/// Its sensitivity (replays at half and double, today's drafts):
/// BENCHMARKS.md, "Sensitivity of recall's tuned constants".
const LEARNING_RATE: f64 = 0.1;
/// Bound on each weight, so that no run of one-sided evidence saturates one.
/// Its sensitivity (replays at half and double, today's drafts):
/// BENCHMARKS.md, "Sensitivity of recall's tuned constants".
const MAX_WEIGHT: f64 = 50.0;
/// Initial weight of the vote share (the others start at 0): before any
/// evidence the selector picks the most voted token.
/// Its sensitivity (replays at half and double, today's drafts):
/// BENCHMARKS.md, "Sensitivity of recall's tuned constants".
const VOTE_WEIGHT: f64 = 6.0;
/// Number of features.
pub(super) const F: usize = 8;

/// What is known of one candidate token at a draft position.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(super) struct Features {
    /// Its share of the (weighted) votes.
    pub(super) vote_share: f64,
    /// Its share of the occurrences.
    pub(super) count_share: f64,
    /// 1 when the copy pointer proposes it.
    pub(super) pointer_agrees: f64,
    /// `ln(1 + pointer match length) / 5` when the pointer proposes it.
    pub(super) pointer_match: f64,
    /// `ln(1 + matched tokens beyond the order) / 5`, its best occurrence's.
    pub(super) extra_match: f64,
    /// 1 when it is the continuation nearest after the locality anchor.
    pub(super) near_anchor: f64,
    /// 1 when one of its occurrences is in the current request.
    pub(super) in_request: f64,
    /// `1 / (1 + ln(1 + age))` of its newest occurrence.
    pub(super) recency: f64,
}

impl Features {
    fn array(&self) -> [f64; F] {
        [
            self.vote_share,
            self.count_share,
            self.pointer_agrees,
            self.pointer_match,
            self.extra_match,
            self.near_anchor,
            self.in_request,
            self.recency,
        ]
    }
}

/// The selector's weights, one per feature.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct Weights(pub(super) [f64; F]);

impl Weights {
    pub(super) fn new() -> Weights {
        let mut w = [0.0; F];
        w[0] = VOTE_WEIGHT;
        Weights(w)
    }

    pub(super) fn zero() -> Weights {
        Weights([0.0; F])
    }

    /// The score of `x` under `self + delta` (this sequence's steps not yet merged).
    #[inline]
    pub(super) fn score(&self, delta: &Weights, x: &Features) -> f64 {
        x.array()
            .iter()
            .zip(self.0.iter().zip(&delta.0))
            .map(|(a, (w, d))| a * (w + d))
            .sum()
    }

    /// One step of softmax regression on `candidates` towards `truth`
    /// (nothing when the truth was not a candidate), added to `delta`.
    pub(super) fn learn(
        &self,
        delta: &mut Weights,
        candidates: &[(Token, Features)],
        truth: Token,
    ) {
        if candidates.len() < 2 || !candidates.iter().any(|c| c.0 == truth) {
            return;
        }
        let top = candidates
            .iter()
            .map(|c| self.score(delta, &c.1))
            .fold(f64::MIN, f64::max);
        let z: f64 = candidates
            .iter()
            .map(|c| (self.score(delta, &c.1) - top).exp())
            .sum();
        let mut grad = [0.0; F];
        for (t, x) in candidates {
            let p = (self.score(delta, x) - top).exp() / z;
            let y = if *t == truth { 1.0 } else { 0.0 };
            for (g, xj) in grad.iter_mut().zip(x.array()) {
                *g += (y - p) * xj;
            }
        }
        for ((d, w), g) in delta.0.iter_mut().zip(self.0).zip(grad) {
            let next = (w + *d + LEARNING_RATE * g).clamp(-MAX_WEIGHT, MAX_WEIGHT);
            *d = next - w;
        }
    }

    /// Adds `delta` (bounded) and clears it.
    pub(super) fn merge(&mut self, delta: &mut Weights) {
        for (w, d) in self.0.iter_mut().zip(delta.0.iter_mut()) {
            *w = (*w + *d).clamp(-MAX_WEIGHT, MAX_WEIGHT);
            *d = 0.0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_selector_learns_which_candidate_the_target_takes() {
        // Two candidates: the voted one (share 0.8) and one from the current
        // request (share 0.2). The target keeps taking the second.
        let voted = Features {
            vote_share: 0.8,
            count_share: 0.5,
            recency: 0.5,
            ..Features::default()
        };
        let request = Features {
            vote_share: 0.2,
            count_share: 0.5,
            in_request: 1.0,
            recency: 0.5,
            ..Features::default()
        };
        let candidates = [(1, voted), (2, request)];
        let weights = Weights::new();
        let mut delta = Weights::zero();
        assert!(weights.score(&delta, &voted) > weights.score(&delta, &request));
        // A truth that was no candidate teaches nothing.
        weights.learn(&mut delta, &candidates, 3);
        assert_eq!(delta, Weights::zero());
        for _ in 0..100 {
            weights.learn(&mut delta, &candidates, 2);
        }
        assert!(
            weights.score(&delta, &request) > weights.score(&delta, &voted),
            "{delta:?}"
        );
        assert!(delta.0[6] > 0.0);
        // Merging keeps the scores and clears the delta.
        let before = weights.score(&delta, &request);
        let mut merged = weights;
        merged.merge(&mut delta);
        assert_eq!(delta, Weights::zero());
        assert!((merged.score(&delta, &request) - before).abs() < 1e-9);
    }
}
