//! Configuration: which strategies, in which order, with which engine limits.

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

use crate::{DraftLimits, Error};

pub(crate) use crate::limits::{check_pool_size, check_range};
use crate::limits::{
    DEFAULT_M, DEFAULT_MIN_HITS, DEFAULT_N, DEFAULT_POOL_SIZE, MAX_MIN_HITS, MAX_NGRAM,
};

/// One drafting strategy and its parameters.
///
/// Names parse and print as on llama.cpp's command line (`--spec-type`), with
/// optional parameters after a colon:
///
/// ```
/// use selfspec::Strategy;
///
/// let s: Strategy = "ngram-map-k4v".parse()?;
/// assert_eq!(s, Strategy::NgramMapK4v { n: 12, m: 48, min_hits: 1 });
/// let s: Strategy = "ngram-mod:n=24".parse()?;
/// assert_eq!(s.to_string(), "ngram-mod:n=24");
/// # Ok::<(), selfspec::Error>(())
/// ```
///
/// With the `serde` feature a strategy is written in the tagged form
/// (`{"type": "ngram-mod", "n": 24}`) and read from either that form or the
/// string `FromStr` takes (`"ngram-mod:n=24"`, `"recall"`). In the tagged form
/// unknown keys are errors and left-out parameters take the same defaults as
/// in a string: `n` 12, `m` 48, `min_hits` 1, `threshold_permille` 130, no
/// cache files (`static_cache` / `dynamic_cache`, or `static` / `dynamic`).
/// Both forms are validated ([`Strategy::validate`]).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Strategy {
    /// Copy the `m` tokens that followed the most recent earlier occurrence of the
    /// last `n` tokens (llama.cpp `ngram-simple`).
    NgramSimple {
        /// Key size: how many trailing tokens must match.
        n: usize,
        /// Draft size: how many tokens to copy.
        m: usize,
    },
    /// Like `NgramSimple` through a hash index of keys, drafting as many tokens as
    /// the target accepted last time from the same key (llama.cpp `ngram-map-k`).
    NgramMapK {
        /// Key size.
        n: usize,
        /// Value (draft) size.
        m: usize,
    },
    /// Keeps up to four distinct continuations per key and drafts only when one
    /// dominates (llama.cpp `ngram-map-k4v`).
    NgramMapK4v {
        /// Key size.
        n: usize,
        /// Value size.
        m: usize,
        /// Times a key must have been seen before it drafts.
        min_hits: usize,
    },
    /// A fixed-size hash pool from n-gram to next token, shared by every
    /// sequence, drafting token by token (llama.cpp `ngram-mod`).
    NgramMod {
        /// Key size (llama.cpp recommends 24; below 16 drafts poorly).
        n: usize,
    },
    /// Lookup decoding (llama.cpp `ngram-cache`): n-gram -> follower-count
    /// caches of sizes 1..4 learned from the history, plus optional static and
    /// dynamic caches read from llama.cpp's cache files. Drafts up to 8 tokens.
    NgramCache {
        /// A static cache file (`--lookup-cache-static`, as `llama-lookup-create` writes).
        static_cache: Option<PathBuf>,
        /// A dynamic cache file (`--lookup-cache-dynamic`).
        dynamic_cache: Option<PathBuf>,
    },
    /// `NgramCache` without the reference's two quirks: the context cache learns
    /// every n-gram of the history (across the boundaries of what each step
    /// adds) and learns a new prompt from where it departs from what was seen.
    NgramCacheLive {
        /// A static cache file.
        static_cache: Option<PathBuf>,
        /// A dynamic cache file.
        dynamic_cache: Option<PathBuf>,
    },
    /// selfspec's own drafter ([`Recall`](crate::strategies::Recall)): one
    /// memory of everything seen with contexts of 1 to 16 tokens, a copy
    /// pointer with locality, and a stop rule calibrated online.
    Recall {
        /// Stop where the estimated probability that the whole draft is
        /// accepted falls below this, in thousandths (1..=999; 130 = 0.13,
        /// [`DEFAULT_THRESHOLD_PERMILLE`](crate::limits::DEFAULT_THRESHOLD_PERMILLE), the default).
        /// Lower drafts longer and more aggressively.
        threshold_permille: usize,
    },
}

/// One strategy's names and defaults: a row of [`STRATEGIES`].
struct Row {
    /// The command-line name (`--spec-type`, [`Strategy::name`]).
    name: &'static str,
    /// The name in statistics lines ([`Strategy::stats_name`]).
    stats_name: &'static str,
    /// What the bare name parses to ([`Strategy::from_name`]).
    default: fn() -> Strategy,
}

/// The one table of strategies: names, statistics names and defaults.
/// [`Strategy::name`], [`Strategy::stats_name`], [`Strategy::from_name`],
/// [`Strategy::names`], `FromStr`, serde and the [`Error::UnknownStrategy`]
/// message all read it. A variant's row is found by its discriminant.
const STRATEGIES: &[Row] = &[
    Row {
        name: "ngram-simple",
        stats_name: "ngram_simple",
        default: || Strategy::NgramSimple {
            n: DEFAULT_N,
            m: DEFAULT_M,
        },
    },
    Row {
        name: "ngram-map-k",
        stats_name: "ngram_map_k",
        default: || Strategy::NgramMapK {
            n: DEFAULT_N,
            m: DEFAULT_M,
        },
    },
    Row {
        name: "ngram-map-k4v",
        stats_name: "ngram_map_k4v",
        default: || Strategy::NgramMapK4v {
            n: DEFAULT_N,
            m: DEFAULT_M,
            min_hits: DEFAULT_MIN_HITS,
        },
    },
    Row {
        name: "ngram-mod",
        stats_name: "ngram_mod",
        default: || Strategy::NgramMod { n: DEFAULT_N },
    },
    Row {
        name: "ngram-cache",
        stats_name: "ngram_cache",
        default: || Strategy::NgramCache {
            static_cache: None,
            dynamic_cache: None,
        },
    },
    Row {
        name: "ngram-cache-live",
        stats_name: "ngram_cache_live",
        default: || Strategy::NgramCacheLive {
            static_cache: None,
            dynamic_cache: None,
        },
    },
    Row {
        name: "recall",
        stats_name: "recall",
        default: || Strategy::Recall {
            threshold_permille: crate::limits::DEFAULT_THRESHOLD_PERMILLE,
        },
    },
];

/// One parameter of a strategy, as strings, configuration files, printing
/// and validation see it.
enum Param<'a> {
    /// A number in `min..=max` (`key=12`).
    Number {
        key: &'static str,
        value: &'a mut usize,
        min: usize,
        max: usize,
    },
    /// An optional file path (`static=PATH`; `key` or its short `alias`).
    File {
        key: &'static str,
        alias: &'static str,
        value: &'a mut Option<PathBuf>,
    },
}

impl Param<'_> {
    /// The field's full name (the key configuration files write).
    #[cfg(feature = "serde")]
    fn field(&self) -> &'static str {
        match self {
            Param::Number { key, .. } | Param::File { key, .. } => key,
        }
    }

    /// The key strings and files name it by (the short alias for files, as printed).
    fn key(&self) -> &'static str {
        match self {
            Param::Number { key, .. } => key,
            Param::File { alias, .. } => alias,
        }
    }

    fn answers_to(&self, name: &str) -> bool {
        match self {
            Param::Number { key, .. } => *key == name,
            Param::File { key, alias, .. } => *key == name || *alias == name,
        }
    }

    /// How an error message lists it (`n`, `static=PATH`).
    fn usage(&self) -> String {
        match self {
            Param::Number { key, .. } => (*key).to_string(),
            Param::File { alias, .. } => format!("{alias}=PATH"),
        }
    }

    /// Sets it from the text after `key=` (`Err`: what is wrong).
    fn set(&mut self, key: &str, text: &str) -> Result<(), String> {
        match self {
            Param::Number { value, .. } => {
                **value = text
                    .parse()
                    .map_err(|_| format!("`{key}` = `{text}` is not a non-negative integer"))?;
            }
            Param::File { value, .. } => {
                if text.is_empty() {
                    return Err(format!("`{key}` needs a file path"));
                }
                **value = Some(PathBuf::from(text));
            }
        }
        Ok(())
    }
}

impl Strategy {
    /// The row of [`STRATEGIES`] for this variant.
    fn row(&self) -> &'static Row {
        let variant = std::mem::discriminant(self);
        STRATEGIES
            .iter()
            .find(|row| std::mem::discriminant(&(row.default)()) == variant)
            .expect("every Strategy variant has a row in STRATEGIES")
    }

    /// The command-line name: `ngram-simple`, `ngram-map-k`, `ngram-map-k4v`, `ngram-mod`, ...
    #[must_use]
    pub fn name(&self) -> &'static str {
        self.row().name
    }

    /// The name in statistics lines: `ngram_simple`, `ngram_map_k`, ...
    #[must_use]
    pub fn stats_name(&self) -> &'static str {
        self.row().stats_name
    }

    /// Every strategy's command-line name, in the order of the variants.
    ///
    /// ```
    /// use selfspec::Strategy;
    ///
    /// let names: Vec<&str> = Strategy::names().collect();
    /// assert_eq!(names[..4], ["ngram-simple", "ngram-map-k", "ngram-map-k4v", "ngram-mod"]);
    /// assert!(names.iter().all(|name| Strategy::from_name(name).is_some()));
    /// ```
    #[must_use]
    pub fn names() -> impl ExactSizeIterator<Item = &'static str> + Clone {
        STRATEGIES.iter().map(|row| row.name)
    }

    /// llama.cpp's defaults for the strategy called `name` (n = 12, m = 48,
    /// min_hits = 1; recall: [`DEFAULT_THRESHOLD_PERMILLE`](crate::limits::DEFAULT_THRESHOLD_PERMILLE) = 130), or `None`
    /// for an unknown name.
    #[must_use]
    pub fn from_name(name: &str) -> Option<Strategy> {
        STRATEGIES
            .iter()
            .find(|row| row.name == name)
            .map(|row| (row.default)())
    }

    /// Checks every parameter against its allowed range.
    ///
    /// # Errors
    ///
    /// [`Error::OutOfRange`] naming the first parameter outside its range.
    pub fn validate(&self) -> Result<(), Error> {
        let context = self.name();
        let mut copy = self.clone();
        copy.params().into_iter().try_for_each(|param| match param {
            Param::Number {
                key,
                value,
                min,
                max,
            } => check_range(context, key, *value, min, max),
            // Cache files are checked when the drafter is built.
            Param::File { .. } => Ok(()),
        })
    }

    /// Every parameter with its key and allowed range: the one place a
    /// variant's fields are listed (parsing, printing, validation, serde).
    fn params(&mut self) -> Vec<Param<'_>> {
        let ngram = |key, value| Param::Number {
            key,
            value,
            min: 1,
            max: MAX_NGRAM,
        };
        match self {
            Strategy::NgramSimple { n, m } | Strategy::NgramMapK { n, m } => {
                vec![ngram("n", n), ngram("m", m)]
            }
            Strategy::NgramMapK4v { n, m, min_hits } => vec![
                ngram("n", n),
                ngram("m", m),
                Param::Number {
                    key: "min_hits",
                    value: min_hits,
                    min: 0,
                    max: MAX_MIN_HITS,
                },
            ],
            Strategy::NgramMod { n } => vec![ngram("n", n)],
            Strategy::NgramCache {
                static_cache,
                dynamic_cache,
            }
            | Strategy::NgramCacheLive {
                static_cache,
                dynamic_cache,
            } => vec![
                Param::File {
                    key: "static_cache",
                    alias: "static",
                    value: static_cache,
                },
                Param::File {
                    key: "dynamic_cache",
                    alias: "dynamic",
                    value: dynamic_cache,
                },
            ],
            Strategy::Recall { threshold_permille } => vec![Param::Number {
                key: "threshold_permille",
                value: threshold_permille,
                min: 1,
                max: 999,
            }],
        }
    }

    /// Sets the parameter `key` from `text` (`Err`: what is wrong, for [`Error::ParseStrategy`]).
    fn set(&mut self, key: &str, text: &str) -> Result<(), String> {
        let name = self.name();
        let mut params = self.params();
        let takes = || {
            let usage: Vec<String> = params.iter().map(Param::usage).collect();
            usage.join(", ")
        };
        match params.iter().position(|p| p.answers_to(key)) {
            Some(i) => params[i].set(key, text),
            None => Err(format!(
                "unknown parameter `{key}`; {name} takes {}",
                takes()
            )),
        }
    }
}

/// The names of [`STRATEGIES`], comma-separated (for error messages).
pub(crate) fn strategy_names() -> String {
    Strategy::names().collect::<Vec<_>>().join(", ")
}

impl fmt::Display for Strategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())?;
        let mut sep = ':';
        let mut copy = self.clone();
        for param in copy.params() {
            match &param {
                Param::Number { value, .. } => write!(f, "{sep}{}={value}", param.key())?,
                Param::File {
                    value: Some(path), ..
                } => write!(f, "{sep}{}={}", param.key(), path.display())?,
                Param::File { value: None, .. } => continue,
            }
            sep = ',';
        }
        Ok(())
    }
}

impl FromStr for Strategy {
    type Err = Error;

    /// Parses `name` or `name:key=value,key=value` (keys `n`, `m`, `min_hits`,
    /// `threshold_permille`; `static`, `dynamic` for cache file paths of
    /// `ngram-cache`; unset keys keep llama.cpp's defaults), then validates the result.
    fn from_str(input: &str) -> Result<Self, Error> {
        let input = input.trim();
        let (name, params) = match input.split_once(':') {
            Some((name, params)) => (name, Some(params)),
            None => (input, None),
        };
        let mut strategy = Strategy::from_name(name).ok_or_else(|| Error::UnknownStrategy {
            name: name.to_string(),
        })?;
        let bad = |reason: String| Error::ParseStrategy {
            input: input.to_string(),
            reason,
        };
        for pair in params.into_iter().flat_map(|p| p.split(',')) {
            let (key, value) = pair
                .split_once('=')
                .ok_or_else(|| bad(format!("`{pair}` is not of the form key=value")))?;
            strategy.set(key.trim(), value.trim()).map_err(bad)?;
        }
        strategy.validate()?;
        Ok(strategy)
    }
}

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
