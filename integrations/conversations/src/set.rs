//! A drafting set: the strategies an engine command compares with plain
//! decoding, with their draft limits, token cost and engine-wide memory.

use selfspec::{Config, Shared, Speculative};

use selfspec::Error;

use crate::config::chain_config;
use crate::strategy_label;

/// A set's `--token-cost`.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub enum Cost {
    /// Measured from the engine's pass times at start.
    #[default]
    Auto,
    /// No token cost given to selfspec.
    Off,
    /// This one.
    Fixed(f64),
}

/// One drafting set compared with plain decoding: its name, drafting
/// configuration, token cost and its engine-wide memory ([`Shared`], one for the whole run: every request's
/// [`Speculative`] shares it).
///
/// ```
/// use selfspec_conversations::DraftSet;
///
/// let set = DraftSet::new(&["ngram-mod".into()], Some(16), None)?.with_token_cost(Some(0.25))?;
/// assert_eq!(set.label(), "ngram-mod (draft 0..=16, token cost 0.250)");
/// let spec = set.speculative()?; // one request's drafter
/// # drop(spec);
/// assert!(DraftSet::new(&[], None, None)?.with_token_cost(Some(1.5)).is_err());
/// # Ok::<(), selfspec::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct DraftSet {
    name: String,
    limits: bool,
    config: Config,
    token_cost: Option<f64>,
    shared: Shared,
}

impl DraftSet {
    /// The set of `--strategy` values as the replay tool takes them
    /// (`NAME[:key=value,...]`; several form a chain; none is
    /// [`Config::recommended`]) and the optional `--draft-max` /
    /// `--draft-min` ([`config`](crate::config)); no token cost.
    ///
    /// # Errors
    ///
    /// selfspec's error for an unknown strategy, a bad parameter or limits
    /// the configuration rejects.
    pub fn new(
        strategies: &[String],
        draft_max: Option<usize>,
        draft_min: Option<usize>,
    ) -> Result<DraftSet, Error> {
        let mut set = DraftSet::from_config(
            strategy_label(strategies),
            chain_config(strategies, draft_max, draft_min)?,
        )?;
        set.limits = draft_max.is_some() || draft_min.is_some();
        Ok(set)
    }

    /// The set of `config`, named `name` in the report; no token cost.
    ///
    /// # Errors
    ///
    /// selfspec's error for a configuration it rejects.
    pub fn from_config(name: impl Into<String>, config: Config) -> Result<DraftSet, Error> {
        let shared = Shared::new(&config)?;
        Ok(DraftSet {
            name: name.into(),
            limits: false,
            config,
            token_cost: None,
            shared,
        })
    }

    /// The set with the token cost each request's [`Speculative`] gets
    /// (`None`: none).
    ///
    /// # Errors
    ///
    /// [`Error::TokenCost`] for a cost outside `[0, 1)`.
    pub fn with_token_cost(mut self, cost: Option<f64>) -> Result<DraftSet, Error> {
        if let Some(c) = cost.filter(|c| !(0.0..1.0).contains(c)) {
            return Err(Error::TokenCost { cost: c });
        }
        self.token_cost = cost;
        Ok(self)
    }

    /// Its name in the report: the strategies joined by `+`, then in
    /// parentheses the draft limits (when given) and the token cost:
    /// `recall (draft 0..=16, token cost 0.130)`.
    #[must_use]
    pub fn label(&self) -> String {
        let mut parts = Vec::new();
        if self.limits {
            let (min, max) = (self.config.draft_min, self.config.draft_max);
            parts.push(format!("draft {min}..={max}"));
        }
        if let Some(c) = self.token_cost {
            parts.push(format!("token cost {c:.3}"));
        }
        if parts.is_empty() {
            self.name.clone()
        } else {
            format!("{} ({})", self.name, parts.join(", "))
        }
    }

    /// The same set (name, limits, configuration, token cost) on a new,
    /// empty engine-wide memory: for a repeated measurement that must not
    /// draft from what an earlier round taught.
    ///
    /// # Errors
    ///
    /// selfspec's error for a configuration it rejects (as when the set
    /// was made).
    pub fn fresh(&self) -> Result<DraftSet, Error> {
        Ok(DraftSet {
            shared: Shared::new(&self.config)?,
            ..self.clone()
        })
    }

    /// The drafting configuration.
    #[must_use]
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The engine-wide memory the set's requests share.
    #[must_use]
    pub fn shared(&self) -> &Shared {
        &self.shared
    }

    /// The token cost each request's drafter gets, if any.
    #[must_use]
    pub fn token_cost(&self) -> Option<f64> {
        self.token_cost
    }

    /// A drafter for one request: the configuration on the set's
    /// [`Shared`], with its token cost.
    ///
    /// # Errors
    ///
    /// selfspec's error when it cannot build it.
    pub fn speculative(&self) -> Result<Speculative, Error> {
        self.drafter(&self.shared)
    }

    /// A drafter for one request on scope `scope` of the set's memory
    /// ([`Shared::scope`]: its own memory and learned calibration, the
    /// engine's budget shared; `""` is the default scope, the one
    /// [`speculative`](DraftSet::speculative) drafts on), with the set's
    /// token cost. Requests of one application in one scope do not carry
    /// what they teach into another application's.
    ///
    /// # Errors
    ///
    /// selfspec's error when it cannot build it.
    pub fn speculative_in(&self, scope: &str) -> Result<Speculative, Error> {
        self.drafter(&self.shared.scope(scope))
    }

    fn drafter(&self, shared: &Shared) -> Result<Speculative, Error> {
        let mut spec = Speculative::with_shared(&self.config, shared)?;
        if let Some(cost) = self.token_cost {
            spec.set_token_cost(cost)?;
        }
        Ok(spec)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_say_what_differs_from_the_defaults() {
        let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        let cases = [
            (DraftSet::new(&[], None, None), None, "recall"),
            (
                DraftSet::new(&[], None, None),
                Some(0.13),
                "recall (token cost 0.130)",
            ),
            (
                DraftSet::new(&s(&["ngram-simple", "ngram-map-k"]), None, Some(2)),
                None,
                "ngram-simple+ngram-map-k (draft 2..=16)",
            ),
            (
                DraftSet::new(&s(&["ngram-mod"]), Some(8), None),
                Some(0.5),
                "ngram-mod (draft 0..=8, token cost 0.500)",
            ),
        ];
        for (set, cost, want) in cases {
            let set = set.unwrap().with_token_cost(cost).unwrap();
            assert_eq!(set.label(), want);
            assert_eq!(set.token_cost(), cost);
        }
    }

    #[test]
    fn requests_share_the_sets_memory_and_get_its_cost() {
        let set = DraftSet::new(&[], Some(8), None).unwrap();
        assert_eq!(set.config().draft_max, 8);
        let set = set.with_token_cost(Some(0.5)).unwrap();
        assert!(set.speculative().is_ok());
        for bad in [1.0, -0.1, f64::NAN] {
            let e = DraftSet::new(&[], None, None)
                .unwrap()
                .with_token_cost(Some(bad));
            assert!(e.unwrap_err().to_string().contains("token cost"), "{bad}");
        }
        assert!(DraftSet::new(&["no-such".into()], None, None).is_err());
    }

    #[test]
    fn a_scope_keeps_its_requests_memory_to_itself() {
        let set = DraftSet::new(&[], None, None).unwrap();
        let text: Vec<u32> = (0..64).map(|i| (i * 7 + 3) % 50).collect();
        let mut chat = set.speculative_in("chat").unwrap();
        chat.begin(&text);
        chat.end_request();
        let held = |scope: &str| set.shared().scope(scope).stats().memory_tokens;
        assert_eq!(held("chat"), 64);
        assert_eq!(held("code"), 0);
        assert_eq!(set.shared().stats().memory_tokens, 0);
        let mut plain = set.speculative().unwrap();
        plain.begin(&text[..10]);
        plain.end_request();
        assert_eq!(set.shared().stats().memory_tokens, 10);
        assert_eq!(held("chat"), 64);
        assert!(DraftSet::new(&[], Some(2), Some(3)).is_err());
    }

    #[test]
    fn a_fresh_set_drafts_as_the_set_on_an_empty_memory() {
        let set = DraftSet::new(&[], Some(8), None)
            .unwrap()
            .with_token_cost(Some(0.25))
            .unwrap();
        let text: Vec<u32> = (0..64).map(|i| (i * 7 + 3) % 50).collect();
        for scope in ["", "chat"] {
            let mut spec = set.speculative_in(scope).unwrap();
            spec.begin(&text);
            spec.end_request();
        }
        let fresh = set.fresh().unwrap();
        assert_eq!(fresh.label(), set.label());
        assert_eq!(fresh.config().draft_max, 8);
        for scope in ["", "chat"] {
            let held = |s: &DraftSet| s.shared().scope(scope).stats().memory_tokens;
            assert_eq!(held(&set), 64, "{scope:?}");
            assert_eq!(held(&fresh), 0, "{scope:?}");
        }
        // and the old set's requests do not reach the fresh one's memory
        let mut spec = set.speculative().unwrap();
        spec.begin(&text[..10]);
        spec.end_request();
        assert_eq!(fresh.shared().stats().memory_tokens, 0);
    }
}
