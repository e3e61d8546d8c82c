//! How well the draft budget weighed the passes it sent: each decoding
//! pass's price ([`Pass::predicted`]) beside its measured time, and the
//! tokens it expected of the passes with drafts
//! ([`Pass::expected_tokens`]) beside the tokens they gave, so a run shows
//! whether a draft that did not pay was priced wrong or expected to be
//! accepted more than it was.

use selfspec::step::Pass;

/// The relative errors of the budget's prices of decoding passes (passes
/// with prompt rows are left out: their rows cost otherwise, and a whole
/// pass's curve does not learn from them).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Prices {
    /// Of passes without draft rows: `(price - time) / time`.
    pub plain: Vec<f32>,
    /// Of passes with draft rows.
    pub drafted: Vec<f32>,
    /// Of passes with draft rows: the tokens the budget expected of them,
    /// and the tokens they gave.
    pub expected: f64,
    /// See [`expected`](Prices::expected).
    pub got: usize,
}

impl Prices {
    /// Counts `pass`, if it was a priced decoding pass.
    pub fn record(&mut self, pass: &Pass) {
        let (Some(price), 0) = (pass.predicted, pass.prompt_rows) else {
            return;
        };
        let took = pass.duration.as_secs_f64();
        if took <= 0.0 {
            return;
        }
        let error = ((price.as_secs_f64() - took) / took) as f32;
        if pass.rows > pass.sequences {
            self.drafted.push(error);
            self.expected += pass.expected_tokens.unwrap_or(0.0);
            self.got += pass.tokens;
        } else {
            self.plain.push(error);
        }
    }

    /// Adds `other`'s passes.
    pub fn extend(&mut self, other: &Prices) {
        self.plain.extend_from_slice(&other.plain);
        self.drafted.extend_from_slice(&other.drafted);
        self.expected += other.expected;
        self.got += other.got;
    }

    /// One line: the median error of each kind of pass and how many, and
    /// the tokens a pass with drafts was expected to give and gave. `None`
    /// when no pass was priced (the budget off).
    #[must_use]
    pub fn line(&self) -> Option<String> {
        if self.plain.is_empty() && self.drafted.is_empty() {
            return None;
        }
        let part = |errors: &[f32], what: &str| match median(errors, f32::abs) {
            Some(m) => format!(
                "{:.1}% (signed {:+.1}%) over {} passes {what}",
                m * 100.0,
                median(errors, |e| e).unwrap_or(0.0) * 100.0,
                errors.len()
            ),
            None => format!("no passes {what}"),
        };
        let mut line = format!(
            "median error {}, {}",
            part(&self.plain, "without drafts"),
            part(&self.drafted, "with drafts")
        );
        if !self.drafted.is_empty() {
            let n = self.drafted.len() as f64;
            line += &format!(
                "; tokens a pass with drafts: expected {:.2}, gave {:.2}",
                self.expected / n,
                self.got as f64 / n
            );
        }
        Some(line)
    }
}

/// The median of `f` of `errors` (the upper one of an even count).
fn median(errors: &[f32], f: impl Fn(f32) -> f32) -> Option<f32> {
    let mut sorted: Vec<f32> = errors.iter().map(|&e| f(e)).collect();
    sorted.sort_by(f32::total_cmp);
    sorted.get(sorted.len() / 2).copied()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn counts_priced_decoding_passes_by_kind() {
        let ms = Duration::from_millis;
        let mut p = Prices::default();
        // (rows, prompt rows, sequences, took, price, tokens given)
        let passes = [
            (4, 0, 4, ms(20), Some(ms(22)), 4),
            (6, 0, 4, ms(30), Some(ms(27)), 5),
            (4, 0, 4, ms(20), None, 4),
            (40, 36, 4, ms(90), Some(ms(50)), 4),
            (4, 0, 4, ms(20), Some(ms(20)), 4),
        ];
        for (rows, prompt_rows, sequences, duration, predicted, tokens) in passes {
            let mut pass = selfspec::step::Pass::default();
            (pass.rows, pass.prompt_rows, pass.sequences) = (rows, prompt_rows, sequences);
            (pass.duration, pass.predicted) = (duration, predicted);
            pass.tokens = tokens;
            pass.expected_tokens = Some(sequences as f64 + 1.5);
            p.record(&pass);
        }
        assert_eq!(p.plain.len(), 2);
        assert_eq!(p.drafted.len(), 1);
        assert!((p.drafted[0] + 0.1).abs() < 1e-6, "priced below: negative");
        let line = p.line().unwrap();
        assert!(
            line.contains("10.0% (signed +10.0%) over 2 passes without drafts"),
            "{line}"
        );
        assert!(
            line.contains("10.0% (signed -10.0%) over 1 passes with drafts"),
            "{line}"
        );
        assert!(
            line.ends_with("with drafts: expected 5.50, gave 5.00"),
            "{line}"
        );
        assert_eq!(Prices::default().line(), None);
    }
}
