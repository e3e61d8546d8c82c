//! Per-strategy counters and timings, printed as llama.cpp's statistics lines.

use crate::int::float64;
use std::fmt;
use std::time::Duration;

/// Counters and accumulated time of one strategy in a [`Speculative`](crate::Speculative).
///
/// `Display` prints llama.cpp's statistics line:
///
/// ```text
/// statistics ngram_mod: #calls(b,g,a) = 1 810 15, #gen drafts = 15, #acc drafts = 15, #gen tokens = 960, #acc tokens = 730, dur(b,g,a) = 0.149, 0.347, 0.005 ms
/// ```
///
/// One difference from llama.cpp: `gen_tokens` counts the tokens handed to the
/// engine (after `draft_max`), so `acc_tokens / gen_tokens` is the true acceptance.
///
/// With the `serde` feature the times (`t_begin`, `t_draft`, `t_accept`) are
/// written and read as seconds, an `f64` (`"t_draft": 0.000347` is 347 µs).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct DrafterStats {
    /// The strategy's statistics name (`ngram_simple`, ...).
    pub name: String,
    /// `begin` calls.
    pub calls_begin: u64,
    /// `draft` calls that reached this strategy.
    pub calls_draft: u64,
    /// `accept` calls forwarded to this strategy (never for 0 accepted tokens).
    pub calls_accept: u64,
    /// Drafts of this strategy handed to the engine.
    pub gen_drafts: u64,
    /// Drafts of which the engine accepted at least one token.
    pub acc_drafts: u64,
    /// Draft tokens handed to the engine.
    pub gen_tokens: u64,
    /// Draft tokens the engine accepted.
    pub acc_tokens: u64,
    /// Time spent in `begin`.
    #[cfg_attr(feature = "serde", serde(with = "secs"))]
    pub t_begin: Duration,
    /// Time spent in `draft`.
    #[cfg_attr(feature = "serde", serde(with = "secs"))]
    pub t_draft: Duration,
    /// Time spent in `accept`.
    #[cfg_attr(feature = "serde", serde(with = "secs"))]
    pub t_accept: Duration,
}

impl DrafterStats {
    /// Empty statistics for the strategy called `name`.
    pub fn new(name: impl Into<String>) -> DrafterStats {
        DrafterStats {
            name: name.into(),
            ..DrafterStats::default()
        }
    }

    /// Accepted draft tokens / drafted tokens (0 when nothing was drafted).
    #[must_use]
    pub fn acceptance(&self) -> f64 {
        if self.gen_tokens == 0 {
            0.0
        } else {
            float64(self.acc_tokens) / float64(self.gen_tokens)
        }
    }

    /// Adds `other`'s counters and times to these (names are kept).
    pub fn merge(&mut self, other: &DrafterStats) {
        self.calls_begin += other.calls_begin;
        self.calls_draft += other.calls_draft;
        self.calls_accept += other.calls_accept;
        self.gen_drafts += other.gen_drafts;
        self.acc_drafts += other.acc_drafts;
        self.gen_tokens += other.gen_tokens;
        self.acc_tokens += other.acc_tokens;
        self.t_begin += other.t_begin;
        self.t_draft += other.t_draft;
        self.t_accept += other.t_accept;
    }
}

impl DrafterStats {
    /// The counts and times accumulated since `earlier` (a copy of these
    /// statistics taken before), e.g. over one replay.
    #[must_use]
    pub fn since(&self, earlier: &DrafterStats) -> DrafterStats {
        DrafterStats {
            name: self.name.clone(),
            calls_begin: self.calls_begin.saturating_sub(earlier.calls_begin),
            calls_draft: self.calls_draft.saturating_sub(earlier.calls_draft),
            calls_accept: self.calls_accept.saturating_sub(earlier.calls_accept),
            gen_drafts: self.gen_drafts.saturating_sub(earlier.gen_drafts),
            acc_drafts: self.acc_drafts.saturating_sub(earlier.acc_drafts),
            gen_tokens: self.gen_tokens.saturating_sub(earlier.gen_tokens),
            acc_tokens: self.acc_tokens.saturating_sub(earlier.acc_tokens),
            t_begin: self.t_begin.saturating_sub(earlier.t_begin),
            t_draft: self.t_draft.saturating_sub(earlier.t_draft),
            t_accept: self.t_accept.saturating_sub(earlier.t_accept),
        }
    }
}

/// Serde for a `Duration` as seconds in an `f64` (`serde(with = ...)`).
#[cfg(feature = "serde")]
pub(crate) mod secs {
    use std::time::Duration;

    pub fn serialize<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_f64(d.as_secs_f64())
    }

    pub fn deserialize<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        let secs = <f64 as serde::Deserialize>::deserialize(d)?;
        Duration::try_from_secs_f64(secs).map_err(|_| {
            serde::de::Error::custom(format!(
                "{secs} is not a duration in seconds (a finite number >= 0)"
            ))
        })
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

impl fmt::Display for DrafterStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "statistics {}: #calls(b,g,a) = {} {} {}, #gen drafts = {}, #acc drafts = {}, \
             #gen tokens = {}, #acc tokens = {}, dur(b,g,a) = {:.3}, {:.3}, {:.3} ms",
            self.name,
            self.calls_begin,
            self.calls_draft,
            self.calls_accept,
            self.gen_drafts,
            self.acc_drafts,
            self.gen_tokens,
            self.acc_tokens,
            ms(self.t_begin),
            ms(self.t_draft),
            ms(self.t_accept),
        )
    }
}

/// Counts of a timed event, kept by atomics that whoever times the event
/// updates (the engine-wide state's writer waits and saves): how many, their
/// total, the longest and the last duration.
#[derive(Debug, Default)]
pub(crate) struct Timings {
    count: std::sync::atomic::AtomicU64,
    total_ns: std::sync::atomic::AtomicU64,
    longest_ns: std::sync::atomic::AtomicU64,
    last_ns: std::sync::atomic::AtomicU64,
}

/// A copy of [`Timings`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Timed {
    pub(crate) count: u64,
    pub(crate) total_ns: u64,
    pub(crate) longest_ns: u64,
    pub(crate) last_ns: u64,
}

impl Timings {
    /// Counts one event that took `ns` nanoseconds.
    pub(crate) fn record(&self, ns: u64) {
        use std::sync::atomic::Ordering::Relaxed;
        self.count.fetch_add(1, Relaxed);
        self.total_ns.fetch_add(ns, Relaxed);
        self.longest_ns.fetch_max(ns, Relaxed);
        self.last_ns.store(ns, Relaxed);
    }

    /// The counts now.
    pub(crate) fn get(&self) -> Timed {
        use std::sync::atomic::Ordering::Relaxed;
        Timed {
            count: self.count.load(Relaxed),
            total_ns: self.total_ns.load(Relaxed),
            longest_ns: self.longest_ns.load(Relaxed),
            last_ns: self.last_ns.load(Relaxed),
        }
    }
}
