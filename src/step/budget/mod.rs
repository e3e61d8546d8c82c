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
mod times;

pub(crate) use acceptance::Acceptance;
use calibration::Calibration;
pub use times::PassTimes;

use crate::int::float;

/// How far below the budget's break-even probability a drafter that stops
/// on its own estimates (recall) is told to stop: it proposes a few tokens
/// more than the budget takes, and the budget cuts them.
const DRAFT_SLACK: f64 = 0.5;

/// One drafted token: the probability that the draft up to it is accepted.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Candidate {
    pub q: f64,
    /// Its sequence's index among the step's drafting sequences.
    pub seq: u32,
    pub pos: u32,
}

/// The budget's state: the pass-time model, the measured acceptance of
/// drafters without estimates, the correction of those with estimates,
/// and scratch.
#[derive(Clone, Debug)]
pub(crate) struct Budget {
    pub times: PassTimes,
    pub acceptance: Acceptance,
    pub calibration: Calibration,
    pub candidates: Vec<Candidate>,
    pub probabilities: Vec<f64>,
    /// Draft rows kept per sequence (scratch).
    pub keep: Vec<usize>,
    /// The token cost drafters were last told (see [`DRAFT_SLACK`]).
    pub token_cost: f64,
}

/// What the budget chose for one pass.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Choice {
    /// Draft rows in the pass.
    pub rows: usize,
    /// The acceptance probability at which one more draft row breaks even.
    pub break_even: f64,
}

impl Budget {
    pub(crate) fn new(times: PassTimes) -> Budget {
        Budget {
            times,
            acceptance: Acceptance::default(),
            calibration: Calibration::default(),
            candidates: Vec::new(),
            probabilities: Vec::new(),
            keep: Vec::new(),
            token_cost: 0.0,
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
        }
    }

    /// Chooses the draft rows of a pass with `base_rows` other rows and
    /// `sequences` decoding sequences, from the candidates added; sorts
    /// them so that the first `rows` are the ones to send. Before any pass
    /// time is known: no draft rows (the first pass is timed plain).
    pub(crate) fn choose(&mut self, base_rows: usize, sequences: usize) -> Option<Choice> {
        let Some(base) = self.times.secs(base_rows.max(1)) else {
            return Some(Choice {
                rows: 0,
                break_even: 1.0,
            });
        };
        self.candidates.sort_unstable_by(|a, b| {
            b.q.total_cmp(&a.q)
                .then(a.seq.cmp(&b.seq))
                .then(a.pos.cmp(&b.pos))
        });
        let mut tokens = float(sequences);
        let (mut best_rows, mut best) = (0, tokens / base);
        for (m, c) in self.candidates.iter().enumerate() {
            tokens += c.q;
            let t = self.times.secs(base_rows + m + 1)?;
            if t > 0.0 && tokens / t > best {
                (best_rows, best) = (m + 1, tokens / t);
            }
        }
        let now = self.times.secs(base_rows + best_rows)?;
        let next = self.times.secs(base_rows + best_rows + 1)?;
        Some(Choice {
            rows: best_rows,
            break_even: best * (next - now),
        })
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
    pub(crate) fn estimate(&mut self, spec: &crate::Speculative, len: usize, sampled: bool) {
        self.probabilities.clear();
        let Some(d) = spec.drafted_by().and_then(|d| spec.stats().get(d)) else {
            return;
        };
        let own = spec.draft_probabilities();
        if own.len() == len {
            self.calibration
                .correct(&d.name, sampled, own, &mut self.probabilities);
        } else {
            self.acceptance
                .estimates(&d.name, len, &mut self.probabilities);
        }
    }

    /// Learns from a verified draft of `verified` tokens with `accepted`
    /// kept: the acceptance by position of a drafter without estimates,
    /// the correction of one with estimates.
    pub(crate) fn learn(
        &mut self,
        spec: &crate::Speculative,
        verified: usize,
        accepted: usize,
        sampled: bool,
    ) {
        if verified == 0 {
            return;
        }
        let Some(d) = spec.drafted_by().and_then(|d| spec.stats().get(d)) else {
            return;
        };
        let own = spec.draft_probabilities();
        if own.len() >= verified {
            self.calibration
                .record(&d.name, sampled, &own[..verified], accepted);
        } else {
            self.acceptance.record(&d.name, verified, accepted);
        }
    }

    /// Records a pass.
    pub(crate) fn record(&mut self, rows: usize, took: Duration) {
        self.times.record(rows, took);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(x: f64) -> Duration {
        Duration::from_secs_f64(x / 1000.0)
    }

    /// A budget whose passes cost `fixed + per_row * rows` ms.
    fn budget(fixed: f64, per_row: f64) -> Budget {
        let mut times = PassTimes::new();
        for rows in [1, 2, 4, 8, 16, 32, 64] {
            times.record(rows, ms(fixed + per_row * float(rows)));
        }
        Budget::new(times)
    }

    #[test]
    fn chooses_as_a_table() {
        /// (fixed ms, per-row ms, sequences, each one's acceptance, expected rows)
        type Case<'a> = (f64, f64, usize, &'a [&'a [f64]], usize);
        let cases: &[Case] = &[
            // Rows almost free (a GPU at batch 1): take every likely token.
            (10.0, 0.01, 1, &[&[0.9, 0.9, 0.9, 0.9]], 4),
            // Rows as dear as a pass: nothing pays.
            (0.0, 1.0, 1, &[&[0.9, 0.9]], 0),
            // Middle: the sure tokens only.
            (10.0, 2.0, 1, &[&[0.99, 0.99, 0.3, 0.3]], 2),
            // A full batch: rows cost more per sequence; the best draft wins.
            (
                10.0,
                1.0,
                8,
                &[&[0.95, 0.95], &[0.2], &[], &[], &[], &[], &[], &[]],
                2,
            ),
        ];
        for (i, &(fixed, per_row, sequences, drafts, want)) in cases.iter().enumerate() {
            let mut b = budget(fixed, per_row);
            for (s, p) in drafts.iter().enumerate() {
                b.add(crate::int::small(s), p);
            }
            let c = b.choose(sequences, sequences).unwrap();
            assert_eq!(c.rows, want, "case {i}: {c:?}");
            if want > 0 {
                assert!(b.candidates[..want]
                    .iter()
                    .all(|c| c.seq == b.candidates[0].seq || sequences == 1));
            }
        }
    }

    #[test]
    fn a_dear_second_row_does_not_price_out_longer_drafts() {
        // A CPU at one sequence: the second row of a pass costs 90% of a
        // pass, the next few little; only passes of 1 and 2 rows measured.
        let mut times = PassTimes::new();
        times.record(1, ms(28.0));
        times.record(2, ms(53.0));
        let mut b = Budget::new(times);
        b.add(0, &[0.95; 8]);
        let c = b.choose(1, 1).unwrap();
        assert!(c.rows > 2, "{c:?}");
    }

    #[test]
    fn nothing_measured_sends_no_draft() {
        let mut b = Budget::new(PassTimes::new());
        b.add(0, &[0.9]);
        assert_eq!(b.choose(1, 1).map(|c| c.rows), Some(0));
    }

    #[test]
    fn the_break_even_follows_the_row_cost() {
        let cheap = budget(10.0, 0.1).choose(1, 1).unwrap().break_even;
        let dear = budget(10.0, 2.0).choose(1, 1).unwrap().break_even;
        assert!(cheap < dear, "{cheap} vs {dear}");
    }
}
