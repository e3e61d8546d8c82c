//! Configuration: which strategies, in which order, with which engine limits.

mod strategy;

pub(crate) use strategy::strategy_names;
#[cfg(feature = "serde")]
use strategy::Param;
pub use strategy::Strategy;

use crate::limits::{check_pool_size, DEFAULT_M, DEFAULT_N, DEFAULT_POOL_SIZE};
use crate::{DraftLimits, Error};

/// The whole drafting setup of one [`Speculative`](crate::Speculative).
///
/// Plain data with public fields, so the usual struct-update syntax works:
///
/// ```
/// use selfspec::{Config, Strategy};
///
/// let config = Config {
///     strategies: vec![Strategy::NgramMod { n: 24 }],
///     draft_max: 64,
///     draft_min: 48,
///     ..Config::default()
/// };
/// config.validate()?;
/// # Ok::<(), selfspec::Error>(())
/// ```
///
/// # Configuration files (feature `serde`)
///
/// `strategies` is required (a file without it is an error, not a silent
/// default chain); `draft_max` (16), `draft_min` (0) and `pool_size`
/// (4194304) default as in [`Config::default`]; unknown keys are errors.
/// Strategies are strings or tagged objects (see [`Strategy`]):
///
/// ```json
/// {"strategies": ["recall", {"type": "ngram-mod", "n": 24}], "draft_max": 64}
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(deny_unknown_fields))]
pub struct Config {
    /// Strategies in priority order: the first non-empty draft wins.
    pub strategies: Vec<Strategy>,
    /// The engine verifies at most this many draft tokens (`--draft-max`, default 16).
    #[cfg_attr(feature = "serde", serde(default = "serde_defaults::draft_max"))]
    pub draft_max: usize,
    /// Drafts shorter than this are dropped and the next strategy is asked
    /// (`--draft-min`, default 0).
    #[cfg_attr(feature = "serde", serde(default = "serde_defaults::draft_min"))]
    pub draft_min: usize,
    /// Cells of the ngram-mod pool (8 bytes each; default 4 Mi, llama.cpp's size).
    #[cfg_attr(feature = "serde", serde(default = "serde_defaults::pool_size"))]
    pub pool_size: usize,
}

impl Default for Config {
    /// ngram-simple (n = 12, m = 48) alone, the default [`DraftLimits`]
    /// (`draft_max` 16, `draft_min` 0), a 4 Mi-cell pool.
    fn default() -> Self {
        let limits = DraftLimits::default();
        Config {
            strategies: vec![Strategy::NgramSimple {
                n: DEFAULT_N,
                m: DEFAULT_M,
            }],
            draft_max: limits.max,
            draft_min: limits.min,
            pool_size: DEFAULT_POOL_SIZE,
        }
    }
}

impl Config {
    /// A configuration with `strategies` and the default limits.
    pub fn new(strategies: impl IntoIterator<Item = Strategy>) -> Config {
        Config {
            strategies: strategies.into_iter().collect(),
            ..Config::default()
        }
    }

    /// llama.cpp's full chain in its priority order: ngram-simple, ngram-map-k,
    /// ngram-map-k4v, ngram-mod, all with their defaults.
    #[must_use]
    pub fn llama_cpp_chain() -> Config {
        Config::new(
            ["ngram-simple", "ngram-map-k", "ngram-map-k4v", "ngram-mod"]
                .iter()
                .filter_map(|name| Strategy::from_name(name)),
        )
    }

    /// selfspec's recommended chain: [`Strategy::Recall`] alone with a
    /// threshold of 0.13, `draft_max` 16. On the public samples it drafts
    /// about as much as SuffixDecoding on chat and copies longer and more
    /// often on code edits (see the README's figures); raise `draft_max` to
    /// 64 for code rewrites when verifying 64 tokens is cheap for the engine.
    ///
    /// ```
    /// use selfspec::{Config, Speculative};
    ///
    /// let mut spec = Speculative::new(&Config::recommended())?;
    /// # Ok::<(), selfspec::Error>(())
    /// ```
    #[must_use]
    pub fn recommended() -> Config {
        Config::new([Strategy::Recall {
            threshold_permille: crate::limits::DEFAULT_THRESHOLD_PERMILLE,
        }])
    }

    /// Sets `draft_max`.
    #[must_use]
    pub fn with_draft_max(mut self, draft_max: usize) -> Config {
        self.draft_max = draft_max;
        self
    }

    /// Sets `draft_min`.
    #[must_use]
    pub fn with_draft_min(mut self, draft_min: usize) -> Config {
        self.draft_min = draft_min;
        self
    }

    /// Sets `pool_size` (ngram-mod cells).
    #[must_use]
    pub fn with_pool_size(mut self, pool_size: usize) -> Config {
        self.pool_size = pool_size;
        self
    }

    /// Appends a strategy to the chain.
    #[must_use]
    pub fn with_strategy(mut self, strategy: Strategy) -> Config {
        self.strategies.push(strategy);
        self
    }

    /// Whether the chain has ngram-mod (which uses the pool).
    pub(crate) fn uses_pool(&self) -> bool {
        self.strategies
            .iter()
            .any(|s| matches!(s, Strategy::NgramMod { .. }))
    }

    /// `draft_min` and `draft_max` as the [`DraftLimits`] every draft call gets.
    #[must_use]
    pub fn limits(&self) -> DraftLimits {
        DraftLimits {
            min: self.draft_min,
            max: self.draft_max,
        }
    }

    /// Checks the limits ([`DraftLimits::validate`]), the pool size and every strategy.
    ///
    /// # Errors
    ///
    /// [`Error::EmptyChain`], [`Error::DraftMinAboveMax`], or [`Error::OutOfRange`] for the limits,
    /// the pool size or a strategy's parameter.
    pub fn validate(&self) -> Result<(), Error> {
        if self.strategies.is_empty() {
            return Err(Error::EmptyChain);
        }
        self.limits().validate()?;
        check_pool_size("config", self.pool_size)?;
        self.strategies.iter().try_for_each(Strategy::validate)
    }
}

#[cfg(feature = "serde")]
mod serde_defaults;
#[cfg(feature = "serde")]
mod serde_strategy;
