//! [`Strategy`]: one drafting strategy and its parameters, the table of
//! strategies' names and defaults, and the string form they parse from and
//! print as.

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

use crate::limits::check_range;
use crate::limits::{DEFAULT_M, DEFAULT_MIN_HITS, DEFAULT_N, MAX_MIN_HITS, MAX_NGRAM};
use crate::Error;

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
pub(super) enum Param<'a> {
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
    pub(super) fn field(&self) -> &'static str {
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

    pub(super) fn answers_to(&self, name: &str) -> bool {
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
    pub(super) fn params(&mut self) -> Vec<Param<'_>> {
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
