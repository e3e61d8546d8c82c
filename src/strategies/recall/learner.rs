//! What a drafter learns as it drafts: the selector's weights (merged with
//! the engine-wide ones every few calls) and the session's lean on the
//! engine-wide calibration.

use crate::sync::{lock, try_lock};
use crate::token::Token;

use super::calibrate::{Calibration, Cell, Lean, CELLS};
use super::memory::RecallMemory;
use super::score::{Features, Weights, F};

/// Draft calls between two merges of this sequence's selector steps into the
/// engine-wide weights (and back).
/// Its sensitivity (replays at half and double, today's drafts):
/// BENCHMARKS.md, "Sensitivity of recall's tuned constants".
pub(super) const SYNC_EVERY: u32 = 4;

/// The selector's weights as every sequence learned them (behind a mutex in
/// the memory; each drafter keeps a copy and its own steps since, merged
/// every [`SYNC_EVERY`] draft calls).
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Learned {
    pub(super) weights: Weights,
}

/// How many numbers a memory's learned tables save as: (accepted, tried)
/// per calibration cell, then the selector's weights.
pub(crate) const LEARNED_NUMBERS: usize = 2 * CELLS + F;

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
        let (cells, weights) = numbers.split_at(2 * CELLS);
        if !self.calibration().set(cells) {
            return false;
        }
        lock(self.learned()).weights.0.copy_from_slice(weights);
        true
    }
}

/// The selector's weights as of the last merge plus this sequence's steps
/// since: what a candidate is scored with.
#[derive(Clone, Copy)]
pub(super) struct Selector<'a> {
    weights: &'a Weights,
    delta: &'a Weights,
}

impl Selector<'_> {
    /// The score of a candidate with features `x`.
    #[inline]
    pub(super) fn score(&self, x: &Features) -> f64 {
        self.weights.score(self.delta, x)
    }
}

/// One drafter's learning.
#[derive(Debug)]
pub(super) struct Learner {
    /// The selector's weights as of the last merge, and this sequence's steps since.
    weights: Weights,
    delta: Weights,
    /// Draft calls since the learned tables were last merged.
    since_sync: u32,
    /// The session's offset on the engine-wide calibration.
    pub(super) lean: Lean,
}

impl Learner {
    /// A learner starting from what every sequence of `memory` learned.
    pub(super) fn new(memory: &RecallMemory) -> Learner {
        Learner {
            weights: lock(memory.learned()).weights,
            delta: Weights::zero(),
            since_sync: 0,
            lean: Lean::default(),
        }
    }

    /// A fork's learner: the parent's unmerged steps are the parent's to
    /// merge; the child scores with the same sums.
    pub(super) fn fork(&self) -> Learner {
        let mut weights = self.weights;
        weights.merge(&mut self.delta.clone());
        Learner {
            weights,
            delta: Weights::zero(),
            since_sync: 0,
            lean: self.lean,
        }
    }

    /// The weights a candidate is scored with.
    pub(super) fn selector(&self) -> Selector<'_> {
        Selector {
            weights: &self.weights,
            delta: &self.delta,
        }
    }

    /// One step towards `truth` among `candidates`.
    pub(super) fn learn(&mut self, candidates: &[(Token, Features)], truth: Token) {
        self.weights.learn(&mut self.delta, candidates, truth);
    }

    /// Counts a verification of a token of cell `cell`, whose cell gave it
    /// probability `p` (`None`: the lean learns nothing).
    pub(super) fn record(
        &mut self,
        calibration: &Calibration,
        cell: Cell,
        p: Option<f64>,
        accepted: bool,
    ) {
        calibration.record(cell, accepted);
        if let Some(p) = p {
            self.lean.record(p, accepted);
        }
    }

    /// The odds factor the stop rule applies.
    pub(super) fn odds(&self) -> f64 {
        self.lean.odds()
    }

    /// A new session: its lean starts at 0.
    pub(super) fn new_session(&mut self) {
        self.lean = Lean::default();
    }

    /// Counts a draft call; true when a periodic merge is due.
    pub(super) fn tick(&mut self) -> bool {
        self.since_sync += 1;
        self.since_sync >= SYNC_EVERY
    }

    /// Merges what this drafter learned into the engine-wide tables of
    /// `memory` and takes theirs (everything other sequences merged
    /// meanwhile). Without `wait`, only if their lock is free: a draft call
    /// or a drop never waits for it, and under contention (many threads on
    /// one memory) a drafter syncs less often, its steps kept in its delta.
    /// Returns whether it synced.
    pub(super) fn sync(&mut self, memory: &RecallMemory, wait: bool) -> bool {
        let shared = if wait {
            Some(lock(memory.learned()))
        } else {
            try_lock(memory.learned())
        };
        let Some(mut shared) = shared else {
            return false;
        };
        shared.weights.merge(&mut self.delta);
        self.weights = shared.weights;
        self.since_sync = 0;
        true
    }
}
