//! The draft budget: how many tokens of each sequence's draft go into the
//! pass, chosen for the whole batch from the pass times the engine has
//! measured and each drafted token's estimated acceptance.
//!
//! With `q[s][j]` the probability that the first `j + 1` tokens of sequence
//! `s`'s draft are all accepted, a pass of `R` base rows (each decoding
//! sequence's `last`, tokens evaluated again, prompt chunks) and `m` draft
//! rows yields `S + (sum of the q's of the tokens sent)` tokens in
//! `t(R + m)`. Each `q[s]` falls along the draft, so for any `m` the best
//! `m` tokens are the `m` largest q's of all drafts (a prefix of each): the
//! budget sorts them once and takes the `m` with the most tokens per unit
//! of pass time, none when no draft pays.

use std::time::Duration;

mod acceptance;
mod calibration;
mod choose;
mod linear;
mod split;
mod times;

pub(crate) use acceptance::Acceptance;
use calibration::Calibration;
use linear::{Counts, SplitTimes};
pub(crate) use split::Load;
use split::Part;
pub use times::PassTimes;

use super::Split;
use crate::int::float;

/// How far below the budget's break-even probability a drafter that stops
/// on its own estimates (recall) is told to stop: it proposes a few tokens
/// more than the budget takes, and the budget cuts them. 0.25 or 1.0
/// moved the budget's simulated speed-ups by under 2.5% (BENCHMARKS.md,
/// "The drafters' stopping point").
const DRAFT_SLACK: f64 = 0.5;

/// One drafted token: the probability that the draft up to it is accepted.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Candidate {
    pub q: f64,
    /// Its sequence's index among the stepper's sequences.
    pub seq: u32,
    pub pos: u32,
}

/// One sequence of the pass being sized.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Slot {
    /// Its rows without a draft: `last` and tokens evaluated again when
    /// decoding, its prompt chunk when joining, none when idle.
    pub base: usize,
    /// Draft rows it has room for when decoding (none otherwise).
    pub room: Option<usize>,
    /// Idle, with room for a row in its cache: a filler row there can keep
    /// a pass that splits by sequence runs in one run.
    pub fillable: bool,
    /// Positions in its cache before the pass: what its rows read.
    pub cached: usize,
}

/// The budget's state: the pass-time models, the measured acceptance of
/// drafters without estimates, the correction of those with estimates,
/// and scratch.
#[derive(Clone, Debug)]
pub(crate) struct Budget {
    /// Pass times of a target that computes a pass whole.
    pub times: PassTimes,
    /// Pass times of a target whose passes split by sequence.
    split_times: SplitTimes,
    pub acceptance: Acceptance,
    pub calibration: Calibration,
    /// The pass's sequences, by index (filled by the caller each step).
    pub slots: Vec<Slot>,
    pub candidates: Vec<Candidate>,
    pub probabilities: Vec<f64>,
    /// Draft rows kept per sequence (scratch).
    pub keep: Vec<usize>,
    /// Idle sequences that get a filler row this pass.
    pub fill: Vec<bool>,
    /// The token cost drafters were last told (see [`DRAFT_SLACK`]).
    pub token_cost: f64,
    /// The tokens the last choice expected its pass to give.
    pub expected: Option<f64>,
    /// Of all drafts, the sum of the `q`s at each position.
    level_gain: Vec<f64>,
    /// Scratch: each sequence's rows in a plan, and its computations.
    plan: Vec<Load>,
    left: Vec<usize>,
    parts: Vec<Part>,
}

/// What the budget chose for one pass.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Choice {
    /// Draft rows in the pass: the first `rows` candidates.
    pub rows: usize,
    /// When not 0: every decoding sequence sends `level` draft rows, its
    /// draft's first ones and padding after them (instead of `rows`), so
    /// that a pass that splits by sequence stays one computation.
    pub level: usize,
    /// The acceptance probability at which one more row of a draft that
    /// is sent breaks even (past the row that opens a draft: see
    /// [`Budget::next_row_secs`]).
    pub break_even: f64,
    /// The tokens the plan is expected to give: one for each decoding
    /// sequence and the `q` of each draft row sent.
    pub tokens: f64,
}

impl Budget {
    /// A budget for passes of up to `rows` rows over `sequences`
    /// sequences, its buffers sized for them up front: how many drafts a
    /// step weighs depends on what the engine accepted before, so a buffer
    /// grown on demand would allocate in a warm step.
    pub(crate) fn new(times: PassTimes, sequences: usize, rows: usize) -> Budget {
        Budget {
            times,
            split_times: SplitTimes::default(),
            acceptance: Acceptance::default(),
            calibration: Calibration::default(),
            slots: Vec::with_capacity(sequences),
            candidates: Vec::with_capacity(rows),
            probabilities: Vec::with_capacity(rows),
            keep: Vec::with_capacity(sequences),
            fill: Vec::with_capacity(sequences),
            token_cost: 0.0,
            expected: None,
            level_gain: Vec::with_capacity(rows),
            plan: Vec::with_capacity(sequences),
            left: Vec::with_capacity(sequences),
            parts: Vec::with_capacity(rows),
        }
    }

    /// Empties the candidates and slots for a new pass in which a draft
    /// has at most `rows` tokens (its room made once: a warm step does not
    /// allocate).
    pub(crate) fn clear(&mut self, rows: usize) {
        self.expected = None;
        self.candidates.clear();
        self.slots.clear();
        self.level_gain.clear();
        self.level_gain.reserve(rows);
    }

    /// Makes the tables of `spec`'s drafters, so that no step allocates
    /// them when a drafter drafts for the first time.
    pub(crate) fn register(&mut self, spec: &crate::Speculative) {
        for (i, d) in spec.stats().iter().enumerate() {
            let source = spec.drafter(i).and_then(|d| d.estimates_source());
            self.acceptance.register(&d.name);
            self.calibration.register(&d.name, source);
        }
    }

    /// Adds one sequence's draft: `probabilities[j]`, the chance token `j`
    /// is accepted given the ones before.
    pub(crate) fn add(&mut self, seq: u32, probabilities: &[f64]) {
        let mut q = 1.0;
        for (j, &p) in probabilities.iter().enumerate() {
            q *= p.clamp(0.0, 1.0);
            let pos = crate::int::small(j);
            self.candidates.push(Candidate { q, seq, pos });
            if self.level_gain.len() <= j {
                self.level_gain.push(0.0);
            }
            self.level_gain[j] += q;
        }
    }

    /// The time of a pass with `self.plan[s]` in sequence `s`: the sum of
    /// its computations' times.
    fn plan_secs(&mut self, split: Split) -> Option<f64> {
        split::computations(split, &self.plan, &mut self.left, &mut self.parts);
        match split {
            Split::Whole { .. } => {
                let sequences = self.plan.iter().filter(|l| l.rows > 0).count();
                let times = &self.times;
                self.parts
                    .iter()
                    .map(|p| times.secs(p.rows, sequences))
                    .sum()
            }
            _ => self.split_times.secs(counts(&self.parts)),
        }
    }

    /// The time of the plan in `self.plan` as the pass would be sent: with
    /// a filler row in each fillable idle sequence between sequences with
    /// rows when that is cheaper ([`fill_gaps`](Budget::fill_gaps)), so
    /// that a plan without drafts is weighed as the filled pass it would
    /// be, not as one a gap splits in two. `self.fill` says whether the
    /// fillers paid.
    fn sent_secs(&mut self, split: Split) -> Option<f64> {
        if !matches!(split, Split::EqualRuns { .. }) {
            return self.plan_secs(split);
        }
        let gaps = self.mark_gaps();
        let without = self.plan_secs(split);
        if !gaps || without.is_none() {
            self.fill.fill(false);
            return without;
        }
        let without = without?;
        for (p, &f) in self.plan.iter_mut().zip(&self.fill) {
            p.rows += usize::from(f);
        }
        let with = self.plan_secs(split);
        for (p, &f) in self.plan.iter_mut().zip(&self.fill) {
            p.rows -= usize::from(f);
        }
        match with {
            Some(with) if with < without => Some(with),
            _ => {
                self.fill.fill(false);
                Some(without)
            }
        }
    }

    /// Marks in `self.fill` the fillable idle sequences between the first
    /// and the last with rows in `self.plan`; whether there is any.
    fn mark_gaps(&mut self) -> bool {
        self.fill.clear();
        self.fill.resize(self.slots.len(), false);
        let first = self.plan.iter().position(|l| l.rows > 0);
        let last = self.plan.iter().rposition(|l| l.rows > 0);
        let (Some(first), Some(last)) = (first, last) else {
            return false;
        };
        let mut any = false;
        for i in first..last {
            if self.plan[i].rows == 0 && self.slots.get(i).is_some_and(|s| s.fillable) {
                self.fill[i] = true;
                any = true;
            }
        }
        any
    }

    /// Sets the token cost drafters are told from the last choice.
    pub(crate) fn settle(&mut self, choice: Choice) -> f64 {
        self.token_cost = (choice.break_even * DRAFT_SLACK).clamp(0.001, 0.99);
        self.token_cost
    }

    /// The acceptance of each token of `spec`'s draft of `len` tokens,
    /// given the ones before, into `probabilities`: its drafter's own
    /// estimates as corrected by what the stepper measured, or the
    /// acceptance measured by position for a drafter without estimates.
    /// `margin`: the target's top-1 / top-2 logit margin for the token the
    /// draft follows (NaN when unknown).
    pub(crate) fn estimate(
        &mut self,
        spec: &crate::Speculative,
        len: usize,
        sampled: bool,
        margin: f32,
    ) {
        self.probabilities.clear();
        let Some((d, source)) = drafted_by(spec) else {
            return;
        };
        let own = spec.draft_probabilities();
        if own.len() == len {
            let band = calibration::band(margin);
            self.calibration
                .correct(&d.name, source, sampled, band, own, &mut self.probabilities);
        } else {
            self.acceptance
                .estimates(&d.name, len, &mut self.probabilities);
        }
    }

    /// Learns from a verified draft of `verified` tokens with `accepted`
    /// kept: the acceptance by position of a drafter without estimates,
    /// the correction of one with estimates; `margin` as
    /// [`estimate`](Budget::estimate) was given it.
    pub(crate) fn learn(
        &mut self,
        spec: &crate::Speculative,
        verified: usize,
        accepted: usize,
        sampled: bool,
        margin: f32,
    ) {
        if verified == 0 {
            return;
        }
        let Some((d, source)) = drafted_by(spec) else {
            return;
        };
        let own = spec.draft_probabilities();
        if own.len() >= verified {
            let band = calibration::band(margin);
            self.calibration
                .record(&d.name, source, sampled, band, &own[..verified], accepted);
        } else {
            self.acceptance.record(&d.name, verified, accepted);
        }
    }

    /// The price of a pass in which sequence `s` has `loads[s]`, computed
    /// as `split` computes it: `None` before a pass is timed.
    pub(crate) fn price(
        &mut self,
        split: Split,
        loads: impl Iterator<Item = Load>,
    ) -> Option<Duration> {
        self.plan.clear();
        self.plan.extend(loads);
        Duration::try_from_secs_f64(self.plan_secs(split)?).ok()
    }

    /// Records a pass in which sequence `s` had `loads[s]`, computed as
    /// `split` computes it. (A whole pass in several chunks: each chunk its
    /// share of the time by rows.)
    pub(crate) fn record(
        &mut self,
        split: Split,
        loads: impl Iterator<Item = Load>,
        took: Duration,
    ) {
        self.plan.clear();
        self.plan.extend(loads);
        split::computations(split, &self.plan, &mut self.left, &mut self.parts);
        if let Split::Whole { .. } = split {
            let total: usize = self.parts.iter().map(|p| p.rows).sum();
            let sequences = self.plan.iter().filter(|l| l.rows > 0).count();
            for p in &self.parts {
                let share = took.mul_f64(float(p.rows) / float(total));
                self.times.record(p.rows, sequences, share);
            }
        } else if !self.parts.is_empty() {
            self.split_times
                .record(counts(&self.parts), took.as_secs_f64());
        }
    }
}

/// The stats of the drafter that made `spec`'s last draft, and the source
/// of its estimates.
fn drafted_by(spec: &crate::Speculative) -> Option<(&crate::DrafterStats, Option<u64>)> {
    let d = spec.drafted_by()?;
    let source = spec.drafter(d).and_then(|d| d.estimates_source());
    Some((spec.stats().get(d)?, source))
}

/// A split pass's [`Counts`]: computations, rows, sequences in
/// computations of several rows a sequence, rows times the positions
/// their computation reads, and the positions each computation reads.
fn counts(parts: &[Part]) -> Counts {
    let mut x = [0.0; linear::N];
    for p in parts {
        x[0] += 1.0;
        x[1] += float(p.rows);
        if p.each > 1 {
            x[2] += float(p.rows / p.each);
        }
        x[3] += float(p.rows) * float(p.span);
        x[4] += float(p.span);
    }
    x
}

#[cfg(test)]
mod tests;
