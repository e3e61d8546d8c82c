//! The [`Sampler`]: llama.cpp's sampling parameters, turned into each row's
//! distribution for speculative sampling.

use crate::int::{ix32, narrow, small};
use crate::Error;

/// Sampling parameters, applied to each row's logits in llama.cpp's order:
/// top-k, top-p, min-p, then the temperature, then a draw.
///
/// ```
/// use selfspec::step::Sampler;
///
/// let s = Sampler { temperature: 0.7, top_p: 0.9, seed: 42, ..Sampler::default() };
/// assert!(s.validate().is_ok());
/// assert!(Sampler { temperature: 0.0, ..Sampler::default() }.validate().is_err());
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Sampler {
    /// Logits are divided by it (> 0; greedy decoding is
    /// [`Sampling::Greedy`](super::Sampling::Greedy)).
    pub temperature: f32,
    /// Only the `top_k` most likely tokens (0: all).
    pub top_k: usize,
    /// Only the most likely tokens whose probabilities add up to `top_p`
    /// (in `(0, 1]`; 1: all).
    pub top_p: f32,
    /// Only tokens at least `min_p` times as likely as the most likely one
    /// (in `[0, 1]`; 0: all).
    pub min_p: f32,
    /// The seed of the request's random draws: the same seed, prompt and
    /// drafts give the same reply.
    pub seed: u64,
}

impl Default for Sampler {
    /// llama.cpp's defaults: temperature 0.8, top-k 40, top-p 0.95, min-p
    /// 0.05, seed 0.
    fn default() -> Self {
        Sampler {
            temperature: 0.8,
            top_k: 40,
            top_p: 0.95,
            min_p: 0.05,
            seed: 0,
        }
    }
}

impl Sampler {
    /// Checks each parameter's range.
    ///
    /// # Errors
    ///
    /// [`Error::Sampler`] naming the parameter and its allowed range.
    pub fn validate(&self) -> Result<(), Error> {
        let bad = |field: &'static str, value: f32, allowed: &'static str| {
            Err(Error::Sampler {
                field,
                value: f64::from(value),
                allowed,
            })
        };
        if !(self.temperature > 0.0 && self.temperature.is_finite()) {
            return bad("temperature", self.temperature, "a finite number above 0");
        }
        if !(self.top_p > 0.0 && self.top_p <= 1.0) {
            return bad("top_p", self.top_p, "0 < top_p <= 1");
        }
        if !(0.0..=1.0).contains(&self.min_p) {
            return bad("min_p", self.min_p, "0 <= min_p <= 1");
        }
        Ok(())
    }

    /// Writes the distribution `logits` give under these parameters into
    /// `probs` (as long as `logits`; zero outside the kept tokens).
    /// `order` is scratch (reused: no allocation once it has grown). A row
    /// with a NaN, or with no finite logit, gives all zeros.
    pub(crate) fn distribution(&self, logits: &[f32], probs: &mut Vec<f32>, order: &mut Vec<u32>) {
        probs.clear();
        probs.resize(logits.len(), 0.0);
        order.clear();
        if logits.iter().any(|l| l.is_nan()) {
            return;
        }
        order.extend(
            (0..logits.len())
                .map(small)
                .filter(|&t| logits[ix32(t)] > f32::NEG_INFINITY),
        );
        let logit = |t: u32| logits[ix32(t)];
        let by_logit = |a: &u32, b: &u32| logit(*b).total_cmp(&logit(*a)).then(a.cmp(b));
        if self.top_k > 0 && self.top_k < order.len() {
            order.select_nth_unstable_by(self.top_k - 1, by_logit);
            order.truncate(self.top_k);
        }
        // Sorted, most likely first: top-p keeps a prefix of this order.
        order.sort_unstable_by(by_logit);
        let Some(&first) = order.first() else {
            return;
        };
        let max = logit(first);
        if self.top_p < 1.0 || self.min_p > 0.0 {
            let total: f64 = order.iter().map(|&t| f64::from(logit(t) - max).exp()).sum();
            let mut cumulative = 0.0;
            let mut keep = order.len();
            for (i, &t) in order.iter().enumerate() {
                let p = f64::from(logit(t) - max).exp() / total;
                // min-p against the most likely token (p = 1 / total for it).
                if p < f64::from(self.min_p) / total {
                    keep = i.max(1);
                    break;
                }
                cumulative += p;
                if cumulative >= f64::from(self.top_p) {
                    keep = i + 1;
                    break;
                }
            }
            order.truncate(keep);
        }
        let inv_t = 1.0 / f64::from(self.temperature);
        let mut total = 0.0;
        for &t in order.iter() {
            let w = (f64::from(logit(t) - max) * inv_t).exp();
            probs[ix32(t)] = narrow(w);
            total += w;
        }
        let scale = narrow(1.0 / total);
        for &t in order.iter() {
            probs[ix32(t)] *= scale;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dist(s: Sampler, logits: &[f32]) -> Vec<f32> {
        let (mut p, mut o) = (Vec::new(), Vec::new());
        s.distribution(logits, &mut p, &mut o);
        p
    }

    #[test]
    fn filters_as_a_table() {
        let plain = Sampler {
            temperature: 1.0,
            top_k: 0,
            top_p: 1.0,
            min_p: 0.0,
            seed: 0,
        };
        let logits = [2.0f32, 1.0, 0.0, -1.0];
        let soft: Vec<f32> = {
            let e: Vec<f64> = logits.iter().map(|&l| f64::from(l).exp()).collect();
            let t: f64 = e.iter().sum();
            e.iter().map(|x| crate::int::narrow(x / t)).collect()
        };
        // (sampler, tokens kept)
        let cases: &[(Sampler, &[usize])] = &[
            (plain, &[0, 1, 2, 3]),
            (Sampler { top_k: 2, ..plain }, &[0, 1]),
            (Sampler { top_k: 1, ..plain }, &[0]),
            (
                Sampler {
                    top_p: 0.5,
                    ..plain
                },
                &[0],
            ),
            (
                Sampler {
                    top_p: 0.9,
                    ..plain
                },
                &[0, 1, 2],
            ),
            (
                Sampler {
                    min_p: 0.3,
                    ..plain
                },
                &[0, 1],
            ),
            (
                Sampler {
                    min_p: 1.0,
                    ..plain
                },
                &[0],
            ),
        ];
        for (s, kept) in cases {
            let p = dist(*s, &logits);
            let total: f32 = kept.iter().map(|&i| soft[i]).sum();
            for (i, &pi) in p.iter().enumerate() {
                let want = if kept.contains(&i) {
                    soft[i] / total
                } else {
                    0.0
                };
                assert!((pi - want).abs() < 1e-6, "{s:?}: token {i}: {pi} vs {want}");
            }
        }
    }

    #[test]
    fn temperature_sharpens_and_nan_rows_are_empty() {
        let s = Sampler {
            temperature: 0.5,
            top_k: 0,
            top_p: 1.0,
            min_p: 0.0,
            seed: 0,
        };
        let p = dist(s, &[1.0, 0.0]);
        let want = 1.0 / (1.0 + (-2.0f32).exp());
        assert!((p[0] - want).abs() < 1e-6);
        assert!(dist(s, &[f32::NAN, 1.0]).iter().all(|&x| x == 0.0));
        assert!(dist(s, &[f32::NEG_INFINITY; 3]).iter().all(|&x| x == 0.0));
        assert_eq!(dist(s, &[]), Vec::<f32>::new());
    }
}
