//! Measured acceptance by draft position, for drafters that make no
//! estimate of their own (llama.cpp's strategies).

/// Positions kept apart; later ones share the last.
const POSITIONS: usize = 64;

/// Per drafter name: how often the token at each draft position was
/// accepted when it was verified.
#[derive(Clone, Debug, Default)]
pub(crate) struct Acceptance {
    drafters: Vec<(String, Vec<Rate>)>,
}

#[derive(Clone, Copy, Debug, Default)]
struct Rate {
    tried: u32,
    accepted: u32,
}

impl Rate {
    /// Laplace's estimate: 1/2 before anything is known.
    fn estimate(self) -> f64 {
        (f64::from(self.accepted) + 1.0) / (f64::from(self.tried) + 2.0)
    }
}

impl Acceptance {
    fn rates(&mut self, name: &str) -> &mut Vec<Rate> {
        let i = match self.drafters.iter().position(|(n, _)| n == name) {
            Some(i) => i,
            None => {
                self.drafters
                    .push((name.to_string(), vec![Rate::default(); POSITIONS]));
                self.drafters.len() - 1
            }
        };
        &mut self.drafters[i].1
    }

    /// Makes `name`'s table (when a request starts: a step then finds it).
    pub(crate) fn register(&mut self, name: &str) {
        self.rates(name);
    }

    /// Appends to `out` the estimated probability that each of `len` draft
    /// tokens from `name` is accepted, given the ones before it.
    pub(crate) fn estimates(&mut self, name: &str, len: usize, out: &mut Vec<f64>) {
        let rates = self.rates(name);
        out.extend((0..len).map(|i| rates[i.min(POSITIONS - 1)].estimate()));
    }

    /// A draft of `verified` tokens from `name` had its first `accepted`
    /// kept: each position up to the first rejected one was tried.
    pub(crate) fn record(&mut self, name: &str, verified: usize, accepted: usize) {
        let rates = self.rates(name);
        for i in 0..verified.min(accepted + 1) {
            let r = &mut rates[i.min(POSITIONS - 1)];
            r.tried = r.tried.saturating_add(1);
            if i < accepted {
                r.accepted = r.accepted.saturating_add(1);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn learns_by_position() {
        let mut a = Acceptance::default();
        let mut out = Vec::new();
        a.estimates("x", 2, &mut out);
        assert_eq!(out, [0.5, 0.5]);
        for _ in 0..8 {
            a.record("x", 3, 1); // the first kept, the second rejected
        }
        out.clear();
        a.estimates("x", 3, &mut out);
        assert_eq!(out, [0.9, 0.1, 0.5]);
        out.clear();
        a.estimates("y", 1, &mut out);
        assert_eq!(out, [0.5], "per drafter");
    }
}
