//! The figures of a replay: tokens, forward passes, drafted and accepted
//! tokens, in total and per session kind.

use std::time::Duration;

use selfspec::DrafterStats;

/// The figures of one replay.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ReplayReport {
    /// Sessions replayed.
    pub sessions: usize,
    /// Requests replayed.
    pub requests: usize,
    /// Tokens generated (the recorded outputs' total length).
    pub tokens: u64,
    /// Target forward passes (one per draft call).
    pub steps: u64,
    /// Non-empty drafts handed to the engine.
    pub drafts: u64,
    /// Draft tokens handed to the engine.
    pub drafted: u64,
    /// Draft tokens accepted.
    pub accepted: u64,
    /// Time spent in `draft` calls, all strategies (serde: seconds, an `f64`).
    #[serde(with = "secs")]
    pub draft_time: Duration,
    /// Per-strategy statistics accumulated during this replay.
    pub stats: Vec<DrafterStats>,
    /// The figures of each session kind in the replay, in order of first
    /// appearance: how each kind fares in a mixed workload.
    #[serde(default)]
    pub kinds: Vec<KindFigures>,
}

/// One session kind's share of a [`ReplayReport`].
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct KindFigures {
    /// The sessions' `kind`.
    pub kind: String,
    /// Tokens generated in sessions of this kind.
    pub tokens: u64,
    /// Target forward passes they took.
    pub steps: u64,
    /// Draft tokens handed to the engine for them.
    pub drafted: u64,
    /// Draft tokens accepted.
    pub accepted: u64,
}

/// `a / b`, 0 when `b` is 0 (a replay that generated or drafted nothing).
fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 {
        0.0
    } else {
        a as f64 / b as f64
    }
}

impl KindFigures {
    /// Tokens per target forward pass (0 when nothing was generated).
    #[must_use]
    pub fn tau(&self) -> f64 {
        ratio(self.tokens, self.steps)
    }

    /// Accepted / drafted tokens (0 without drafts).
    #[must_use]
    pub fn acceptance(&self) -> f64 {
        ratio(self.accepted, self.drafted)
    }
}

impl ReplayReport {
    /// Counts a request of a session of kind `kind` that generated
    /// `tokens`; the kind's index in `kinds` (added on first use).
    pub(crate) fn count_request(&mut self, kind: &str, tokens: usize) -> usize {
        let k = match self.kinds.iter().position(|k| k.kind == kind) {
            Some(i) => i,
            None => {
                self.kinds.push(KindFigures {
                    kind: kind.to_string(),
                    ..KindFigures::default()
                });
                self.kinds.len() - 1
            }
        };
        self.requests += 1;
        self.tokens += tokens as u64;
        self.kinds[k].tokens += tokens as u64;
        k
    }

    /// Counts one step (a forward pass) of a session of kind `k` (an index
    /// from [`count_request`](ReplayReport::count_request)): `drafted`
    /// tokens offered, `accepted` kept.
    pub(crate) fn count_step(&mut self, k: usize, drafted: usize, accepted: usize) {
        self.steps += 1;
        if drafted > 0 {
            self.drafts += 1;
            self.drafted += drafted as u64;
            self.accepted += accepted as u64;
        }
        let k = &mut self.kinds[k];
        k.steps += 1;
        k.drafted += drafted as u64;
        k.accepted += accepted as u64;
    }

    /// Tokens per target forward pass (1.0 = no gain; 0 when nothing was generated).
    #[must_use]
    pub fn tau(&self) -> f64 {
        ratio(self.tokens, self.steps)
    }

    /// Accepted draft tokens / drafted tokens (0 when nothing was drafted).
    #[must_use]
    pub fn acceptance(&self) -> f64 {
        ratio(self.accepted, self.drafted)
    }

    /// Mean time of a draft call, in microseconds.
    #[must_use]
    pub fn micros_per_draft(&self) -> f64 {
        if self.steps == 0 {
            0.0
        } else {
            self.draft_time.as_secs_f64() * 1e6 / self.steps as f64
        }
    }
}

/// `Duration` as seconds in an `f64` (the format of the library's statistics).
mod secs {
    use std::time::Duration;

    pub(super) fn serialize<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_f64(d.as_secs_f64())
    }

    pub(super) fn deserialize<'de, D: serde::Deserializer<'de>>(
        d: D,
    ) -> Result<Duration, D::Error> {
        let secs = <f64 as serde::Deserialize>::deserialize(d)?;
        Duration::try_from_secs_f64(secs).map_err(|_| {
            serde::de::Error::custom(format!(
                "{secs} is not a duration in seconds (a finite number >= 0)"
            ))
        })
    }
}
