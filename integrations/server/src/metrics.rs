//! The server's counters, and their Prometheus text format (`GET /metrics`).

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};

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
    /// Of those, the ones reused from their slot's cache (not evaluated).
    pub prompt_tokens_cached: AtomicU64,
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
    /// Memory file saves that succeeded.
    pub saves: AtomicU64,
    /// Memory file saves that failed.
    pub save_failures: AtomicU64,
    /// Slot caches saved to the prompt cache.
    pub prompt_cache_saves: AtomicU64,
    /// Saved caches restored into a slot.
    pub prompt_cache_restores: AtomicU64,
    /// Saves and restores llama.cpp refused.
    pub prompt_cache_failures: AtomicU64,
    /// The prompt cache's bytes and entries now.
    prompt_cache_bytes: AtomicU64,
    prompt_cache_entries: AtomicU64,
}

impl Metrics {
    /// Counts a request that ended with `reason`.
    pub fn count_finished(&self, reason: &'static str) {
        let mut f = self.finished.lock().unwrap_or_else(PoisonError::into_inner);
        *f.entry(reason).or_default() += 1;
    }

    /// Records the prompt cache's size.
    pub fn set_prompt_cache(&self, bytes: usize, entries: usize) {
        let wide = |n: usize| u64::try_from(n).unwrap_or(u64::MAX);
        self.prompt_cache_bytes
            .store(wide(bytes), Ordering::Relaxed);
        self.prompt_cache_entries
            .store(wide(entries), Ordering::Relaxed);
    }

    /// Adds a request's drafted and accepted tokens for `strategy`.
    pub fn count_drafts(&self, strategy: &str, drafted: u64, accepted: u64) {
        let mut d = self.drafts.lock().unwrap_or_else(PoisonError::into_inner);
        let e = d.entry(strategy.to_string()).or_default();
        e.0 += drafted;
        e.1 += accepted;
    }

    /// The Prometheus text exposition of every counter, for `slots` slots.
    #[must_use]
    pub fn render(&self, slots: usize) -> String {
        let mut out = String::new();
        for (name, kind, help) in FAMILIES {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
            for (labels, value) in self.samples(name, slots) {
                if labels.is_empty() {
                    let _ = writeln!(out, "{name} {value}");
                } else {
                    let _ = writeln!(out, "{name}{{{labels}}} {value}");
                }
            }
        }
        out
    }

    /// The samples of the metric `name`: `(labels, value)` pairs.
    fn samples(&self, name: &str, slots: usize) -> Vec<(String, f64)> {
        let one = |a: &AtomicU64| vec![(String::new(), float(a.load(Ordering::Relaxed)))];
        let finished = || {
            let f = self.finished.lock().unwrap_or_else(PoisonError::into_inner);
            let by: Vec<_> = f
                .iter()
                .map(|(k, v)| (format!("finish=\"{k}\""), float(*v)))
                .collect();
            by
        };
        let drafts = |accepted: bool| {
            let d = self.drafts.lock().unwrap_or_else(PoisonError::into_inner);
            let by: Vec<_> = d
                .iter()
                .map(|(k, (g, a))| {
                    (
                        format!("strategy=\"{}\"", escape(k)),
                        float(if accepted { *a } else { *g }),
                    )
                })
                .collect();
            by
        };
        match name {
            "selfspec_requests_total" => {
                vec![(String::new(), finished().iter().map(|(_, v)| v).sum())]
            }
            "selfspec_requests_finished_total" => finished(),
            "selfspec_requests_invalid_total" => one(&self.invalid),
            "selfspec_requests_rejected_total" => one(&self.rejected),
            "selfspec_prompt_tokens_total" => one(&self.prompt_tokens),
            "selfspec_prompt_tokens_cached_total" => one(&self.prompt_tokens_cached),
            "selfspec_generated_tokens_total" => one(&self.generated_tokens),
            "selfspec_forward_passes_total" => one(&self.forward_passes),
            "selfspec_drafted_tokens_total" => drafts(false),
            "selfspec_accepted_tokens_total" => drafts(true),
            "selfspec_slots" => vec![(
                String::new(),
                float(u64::try_from(slots).unwrap_or(u64::MAX)),
            )],
            "selfspec_slots_busy" => one(&self.slots_busy),
            "selfspec_queue_length" => one(&self.queued),
            "selfspec_memory_saves_total" => one(&self.saves),
            "selfspec_memory_save_failures_total" => one(&self.save_failures),
            "selfspec_prompt_cache_saves_total" => one(&self.prompt_cache_saves),
            "selfspec_prompt_cache_restores_total" => one(&self.prompt_cache_restores),
            "selfspec_prompt_cache_failures_total" => one(&self.prompt_cache_failures),
            "selfspec_prompt_cache_bytes" => one(&self.prompt_cache_bytes),
            "selfspec_prompt_cache_entries" => one(&self.prompt_cache_entries),
            _ => Vec::new(),
        }
    }
}

/// Every metric: name, type, help.
const FAMILIES: [(&str, &str, &str); 20] = [
    ("selfspec_requests_total", "counter", "Chat completions that ended."),
    (
        "selfspec_requests_finished_total",
        "counter",
        "Chat completions that ended, by finish reason (stop, length, cancelled: client gone or shutdown, failed).",
    ),
    ("selfspec_requests_invalid_total", "counter", "Requests answered 400."),
    (
        "selfspec_requests_rejected_total",
        "counter",
        "Requests answered 503 (queue full or shutting down).",
    ),
    ("selfspec_prompt_tokens_total", "counter", "Prompt tokens of started requests."),
    (
        "selfspec_prompt_tokens_cached_total",
        "counter",
        "Prompt tokens of started requests reused from their slot's cache (not evaluated).",
    ),
    ("selfspec_generated_tokens_total", "counter", "Tokens generated."),
    ("selfspec_forward_passes_total", "counter", "Batched forward passes."),
    (
        "selfspec_drafted_tokens_total",
        "counter",
        "Draft tokens sent to verification, by strategy.",
    ),
    ("selfspec_accepted_tokens_total", "counter", "Draft tokens accepted, by strategy."),
    ("selfspec_slots", "gauge", "Slots (sequences of the llama.cpp context)."),
    ("selfspec_slots_busy", "gauge", "Slots decoding a request."),
    ("selfspec_queue_length", "gauge", "Requests waiting for a slot."),
    ("selfspec_memory_saves_total", "counter", "Memory file saves."),
    ("selfspec_memory_save_failures_total", "counter", "Memory file saves that failed."),
    (
        "selfspec_prompt_cache_saves_total",
        "counter",
        "Slot caches saved to the prompt cache before their slot took another prompt.",
    ),
    (
        "selfspec_prompt_cache_restores_total",
        "counter",
        "Saved caches restored into a slot for a prompt that starts with them.",
    ),
    (
        "selfspec_prompt_cache_failures_total",
        "counter",
        "Prompt cache saves and restores llama.cpp refused.",
    ),
    ("selfspec_prompt_cache_bytes", "gauge", "Host memory the prompt cache holds."),
    ("selfspec_prompt_cache_entries", "gauge", "Saved caches the prompt cache holds."),
];

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
