//! The server's counters, and their Prometheus text format (`GET /metrics`).

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// Counters the HTTP handlers and the engine thread update.
#[derive(Debug, Default)]
pub struct Metrics {
    /// Requests that ended, by finish reason (`stop`, `length`,
    /// `cancelled`, `failed`).
    finished: Mutex<BTreeMap<&'static str, u64>>,
    /// Requests answered 400.
    pub invalid: AtomicU64,
    /// Requests answered 503 (queue full, shutting down).
    pub rejected: AtomicU64,
    /// Prompt tokens of started requests.
    pub prompt_tokens: AtomicU64,
    /// Tokens generated.
    pub generated_tokens: AtomicU64,
    /// Forward passes (engine steps that ran one).
    pub forward_passes: AtomicU64,
    /// Requests decoding in a slot now.
    pub slots_busy: AtomicU64,
    /// Requests waiting for a slot.
    pub queued: AtomicU64,
    /// Draft tokens sent and accepted, by strategy.
    drafts: Mutex<BTreeMap<String, (u64, u64)>>,
    /// Memory file saves that succeeded and failed.
    pub saves: AtomicU64,
    /// Memory file saves that failed.
    pub save_failures: AtomicU64,
}

/// One metric's samples: name, help, type, `(labels, value)` pairs.
type Family<'a> = (&'a str, &'a str, &'a str, Vec<(String, f64)>);

impl Metrics {
    /// Counts a request that ended with `reason`.
    pub fn count_finished(&self, reason: &'static str) {
        let mut f = self
            .finished
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        *f.entry(reason).or_default() += 1;
    }

    /// Adds a request's drafted and accepted tokens for `strategy`.
    pub fn count_drafts(&self, strategy: &str, drafted: u64, accepted: u64) {
        let mut d = self
            .drafts
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let e = d.entry(strategy.to_string()).or_default();
        e.0 += drafted;
        e.1 += accepted;
    }

    /// The Prometheus text exposition of every counter, for `slots` slots.
    #[must_use]
    pub fn render(&self, slots: usize) -> String {
        let get = |a: &AtomicU64| float(a.load(Ordering::Relaxed));
        let plain = |v: f64| vec![(String::new(), v)];
        let finished: Vec<(String, f64)> = {
            let f = self
                .finished
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            f.iter()
                .map(|(k, v)| (format!("finish=\"{k}\""), float(*v)))
                .collect()
        };
        let total: f64 = finished.iter().map(|(_, v)| v).sum();
        let (drafted, accepted): (Vec<_>, Vec<_>) = {
            let d = self
                .drafts
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            d.iter()
                .map(|(k, (g, a))| {
                    let label = format!("strategy=\"{}\"", escape(k));
                    ((label.clone(), float(*g)), (label, float(*a)))
                })
                .unzip()
        };
        let families: Vec<Family<'_>> = vec![
            (
                "selfspec_requests_total",
                "Chat completions that ended.",
                "counter",
                plain(total),
            ),
            (
                "selfspec_requests_finished_total",
                "Chat completions that ended, by finish reason.",
                "counter",
                finished,
            ),
            (
                "selfspec_requests_invalid_total",
                "Requests answered 400.",
                "counter",
                plain(get(&self.invalid)),
            ),
            (
                "selfspec_requests_rejected_total",
                "Requests answered 503 (queue full or shutting down).",
                "counter",
                plain(get(&self.rejected)),
            ),
            (
                "selfspec_prompt_tokens_total",
                "Prompt tokens of started requests.",
                "counter",
                plain(get(&self.prompt_tokens)),
            ),
            (
                "selfspec_generated_tokens_total",
                "Tokens generated.",
                "counter",
                plain(get(&self.generated_tokens)),
            ),
            (
                "selfspec_forward_passes_total",
                "Batched forward passes.",
                "counter",
                plain(get(&self.forward_passes)),
            ),
            (
                "selfspec_drafted_tokens_total",
                "Draft tokens sent to verification, by strategy.",
                "counter",
                drafted,
            ),
            (
                "selfspec_accepted_tokens_total",
                "Draft tokens accepted, by strategy.",
                "counter",
                accepted,
            ),
            (
                "selfspec_slots",
                "Slots (sequences of the llama.cpp context).",
                "gauge",
                plain(float(u64::try_from(slots).unwrap_or(u64::MAX))),
            ),
            (
                "selfspec_slots_busy",
                "Slots decoding a request.",
                "gauge",
                plain(get(&self.slots_busy)),
            ),
            (
                "selfspec_queue_length",
                "Requests waiting for a slot.",
                "gauge",
                plain(get(&self.queued)),
            ),
            (
                "selfspec_memory_saves_total",
                "Memory file saves.",
                "counter",
                plain(get(&self.saves)),
            ),
            (
                "selfspec_memory_save_failures_total",
                "Memory file saves that failed.",
                "counter",
                plain(get(&self.save_failures)),
            ),
        ];
        let mut out = String::new();
        for (name, help, kind, samples) in families {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
            for (labels, value) in samples {
                if labels.is_empty() {
                    let _ = writeln!(out, "{name} {value}");
                } else {
                    let _ = writeln!(out, "{name}{{{labels}}} {value}");
                }
            }
        }
        out
    }
}

/// A counter as Prometheus' float.
#[allow(clippy::cast_precision_loss)] // counters stay far below 2^53
fn float(v: u64) -> f64 {
    v as f64
}

/// A label value with `\`, `"` and newlines escaped.
fn escape(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_sample_line_is_name_labels_value() {
        let m = Metrics::default();
        m.count_finished("stop");
        m.count_finished("length");
        m.count_finished("stop");
        m.count_drafts("ngram_mod", 10, 7);
        m.count_drafts("recall\"x", 1, 0);
        m.generated_tokens.fetch_add(42, Ordering::Relaxed);
        let text = m.render(4);
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let (series, value) = line.rsplit_once(' ').expect("a value");
            value.parse::<f64>().expect("a float value");
            let name = series.split('{').next().unwrap_or("");
            assert!(
                name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'),
                "{line}"
            );
            if series.contains('{') {
                assert!(series.ends_with('}'), "{line}");
            }
        }
        assert!(text.contains("selfspec_requests_total 3\n"));
        assert!(text.contains("selfspec_requests_finished_total{finish=\"stop\"} 2\n"));
        assert!(text.contains("selfspec_generated_tokens_total 42\n"));
        assert!(text.contains("selfspec_drafted_tokens_total{strategy=\"ngram_mod\"} 10\n"));
        assert!(text.contains("selfspec_accepted_tokens_total{strategy=\"ngram_mod\"} 7\n"));
        assert!(text.contains("strategy=\"recall\\\"x\""));
        assert!(text.contains("selfspec_slots 4\n"));
        assert!(text.contains("# TYPE selfspec_slots_busy gauge\nselfspec_slots_busy 0\n"));
    }
}
