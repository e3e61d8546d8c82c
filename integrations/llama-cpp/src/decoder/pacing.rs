//! Pacing: each draft token weighed against the speed-up reached so far.

/// Sets each draft's stop threshold to the token cost times the tokens a
/// unit of pass time has yielded so far.
///
/// A step whose draft has `k` tokens takes `1 + cost * k` units of a
/// one-token pass (its sequence's share of the pass) and yields `1 + a`
/// tokens, `a` of them accepted. What an engine maximizes is the ratio of
/// the sums: tokens over time. At the best ratio `r`, every step maximizes
/// `tokens - r * time`, so a draft token pays when the probability that the
/// draft up to it is accepted is at least `r * cost`, not `cost` (which
/// maximizes `tokens - time` and drafts too eagerly once speculation
/// already pays). `r` is not known in advance: pacing uses the ratio
/// measured so far (1 before the first step), which moves towards the
/// best one as it is used (the ratio iteration of fractional programming).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Pacing {
    cost: f64,
    tokens: f64,
    time: f64,
}

impl Pacing {
    /// Pacing for a token cost (clamped to `[0, 0.99]`; NaN is 0).
    #[must_use]
    pub fn new(cost: f64) -> Pacing {
        Pacing {
            cost: if cost.is_nan() {
                0.0
            } else {
                cost.clamp(0.0, 0.99)
            },
            tokens: 0.0,
            time: 0.0,
        }
    }

    /// Tokens a unit of pass time has yielded so far (1 before any step).
    #[must_use]
    pub fn rate(&self) -> f64 {
        if self.time > 0.0 {
            self.tokens / self.time
        } else {
            1.0
        }
    }

    /// The next draft's stop threshold: the token cost times
    /// [`rate`](Pacing::rate), at most 0.99.
    #[must_use]
    pub fn threshold(&self) -> f64 {
        (self.cost * self.rate()).min(0.99)
    }

    /// One step of a drafting sequence: `drafted` tokens verified,
    /// `accepted` kept.
    pub fn record(&mut self, drafted: usize, accepted: usize) {
        self.tokens += (1 + accepted) as f64;
        self.time += 1.0 + self.cost * drafted as f64;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A case: steps as (drafted, accepted), and what pacing says after them.
    struct Case {
        cost: f64,
        steps: &'static [(usize, usize)],
        rate: f64,
        threshold: f64,
    }

    #[test]
    fn the_threshold_follows_the_rate() {
        let case = |cost, steps, rate, threshold| Case {
            cost,
            steps,
            rate,
            threshold,
        };
        let cases = [
            // nothing yet: the token cost itself
            case(0.5, &[], 1.0, 0.5),
            // plain steps: rate 1
            case(0.5, &[(0, 0), (0, 0)], 1.0, 0.5),
            // 4 drafted, all kept: 5 tokens in 3 units
            case(0.5, &[(4, 4)], 5.0 / 3.0, 0.5 * 5.0 / 3.0),
            // 4 drafted, none kept: 1 token in 3 units
            case(0.5, &[(4, 0)], 1.0 / 3.0, 0.5 / 3.0),
            // a high rate: capped below 1
            case(0.9, &[(16, 16)], 17.0 / 15.4, 0.99),
        ];
        for c in cases {
            let mut p = Pacing::new(c.cost);
            for &(d, a) in c.steps {
                p.record(d, a);
            }
            let what = format!("cost {} after {:?}", c.cost, c.steps);
            assert!((p.rate() - c.rate).abs() < 1e-12, "{what}");
            assert!((p.threshold() - c.threshold).abs() < 1e-12, "{what}");
        }
    }

    #[test]
    fn bad_costs_are_clamped() {
        assert_eq!(Pacing::new(f64::NAN).threshold(), 0.0);
        assert_eq!(Pacing::new(-1.0).threshold(), 0.0);
        assert_eq!(Pacing::new(5.0).threshold(), 0.99);
    }
}
