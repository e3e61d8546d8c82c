//! The per-kind report: sums of both modes' decoding, the table and the JSON
//! file.

use std::collections::BTreeMap;
use std::io::{self, Write};
use std::path::Path;
use std::time::Duration;

use selfspec::step::Reply;
use serde::Serialize;

use crate::{Divergence, Error};

/// One mode's decoding of one reply (or, for `decode_time`, of a batch):
/// the numbers of selfspec's [`Reply`] as the report sums them, made only
/// from a `Reply` (`Decoded::from(&reply)`), so that every engine counts
/// alike.
///
/// ```
/// use selfspec::step::{Reply, Stop};
/// use selfspec_conversations::Decoded;
/// use std::time::Duration;
///
/// // 6 tokens: the first from the prompt's pass, the others in 2 decode passes.
/// let reply = Reply {
///     tokens: vec![5, 6, 7, 8, 9, 10],
///     margins: vec![1.0; 6],
///     prefill_passes: 1,
///     decode_passes: 2,
///     drafted: 4,
///     accepted: 3,
///     stop: Stop::MaxTokens,
///     prefill_time: Duration::from_millis(5),
///     decode_time: Duration::from_millis(20),
/// };
/// let d = Decoded::from(&reply);
/// assert_eq!((d.generated, d.forward_passes), (6, 3));
/// assert_eq!(d.generated as f64 / d.forward_passes as f64, reply.tau());
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq)]
#[non_exhaustive]
pub struct Decoded {
    /// Generated tokens, the first (chosen by the prompt's last pass) included.
    pub generated: usize,
    /// Decoding time from the first token to the last (prefill excluded),
    /// as llama-server's `predicted_per_second` counts it.
    pub decode_time: Duration,
    /// Forward passes as [`Reply::tau`] counts them: the pass that chose
    /// the first token and each decode pass (`decode_passes + 1`), so that
    /// the report's tau is the replies'.
    pub forward_passes: usize,
    /// Draft tokens sent to verification.
    pub drafted: usize,
    /// Draft tokens the model kept.
    pub accepted: usize,
}

impl From<&Reply> for Decoded {
    fn from(r: &Reply) -> Decoded {
        Decoded {
            generated: r.tokens.len(),
            decode_time: r.decode_time,
            forward_passes: r.decode_passes + 1,
            drafted: r.drafted,
            accepted: r.accepted,
        }
    }
}

impl Decoded {
    fn add(&mut self, other: &Decoded) {
        self.generated += other.generated;
        self.decode_time += other.decode_time;
        self.forward_passes += other.forward_passes;
        self.drafted += other.drafted;
        self.accepted += other.accepted;
    }
}

/// One kind's sums.
#[derive(Clone, Debug, Default)]
struct KindSums {
    turns: usize,
    plain: Decoded,
    spec: Decoded,
    diverged: usize,
    diverged_not_near_tie: usize,
    skipped: usize,
    truncated: usize,
}

impl KindSums {
    fn add(&mut self, other: &KindSums) {
        self.turns += other.turns;
        self.plain.add(&other.plain);
        self.spec.add(&other.spec);
        self.diverged += other.diverged;
        self.diverged_not_near_tie += other.diverged_not_near_tie;
        self.skipped += other.skipped;
        self.truncated += other.truncated;
    }
}

/// Sums per kind of conversation, for plain and speculative decoding.
#[derive(Clone, Debug, Default)]
pub struct Tally {
    kinds: BTreeMap<String, KindSums>,
}

impl Tally {
    /// An empty tally.
    #[must_use]
    pub fn new() -> Tally {
        Tally::default()
    }

    fn kind(&mut self, kind: &str) -> &mut KindSums {
        self.kinds.entry(kind.to_string()).or_default()
    }

    /// Adds one reply decoded both ways, times included (sequential decoding).
    pub fn add_turn(
        &mut self,
        kind: &str,
        plain: &Decoded,
        spec: &Decoded,
        divergence: &Divergence,
    ) {
        self.add_counts(kind, plain, spec, divergence);
        self.add_time(kind, plain.decode_time, spec.decode_time);
    }

    /// Adds one reply's counts without its times (batched decoding, where
    /// time belongs to the batch: add it with [`Tally::add_time`]).
    pub fn add_counts(
        &mut self,
        kind: &str,
        plain: &Decoded,
        spec: &Decoded,
        divergence: &Divergence,
    ) {
        let sums = self.kind(kind);
        sums.turns += 1;
        let untimed = |d: &Decoded| Decoded {
            decode_time: Duration::ZERO,
            ..*d
        };
        sums.plain.add(&untimed(plain));
        sums.spec.add(&untimed(spec));
        sums.diverged += usize::from(divergence.diverged());
        sums.diverged_not_near_tie +=
            usize::from(matches!(divergence, Divergence::NotNearTie { .. }));
    }

    /// Adds decoding time to a kind.
    pub fn add_time(&mut self, kind: &str, plain: Duration, spec: Duration) {
        let sums = self.kind(kind);
        sums.plain.decode_time += plain;
        sums.spec.decode_time += spec;
    }

    /// Counts a turn skipped because its prompt did not fit the context.
    pub fn note_skipped(&mut self, kind: &str) {
        self.kind(kind).skipped += 1;
    }

    /// Counts a turn whose prompt was cut to fit the context.
    pub fn note_truncated(&mut self, kind: &str) {
        self.kind(kind).truncated += 1;
    }

    /// One summary per kind (in name order), then one for `all`.
    #[must_use]
    pub fn summaries(&self, strategy: &str, parallel: Option<usize>) -> Vec<Summary> {
        let mut all = KindSums::default();
        let mut out: Vec<Summary> = self
            .kinds
            .iter()
            .map(|(kind, sums)| {
                all.add(sums);
                Summary::new(strategy, kind, parallel, sums)
            })
            .collect();
        out.push(Summary::new(strategy, "all", parallel, &all));
        out
    }
}

/// One kind's figures (or `all`'s), as printed and as written to the JSON
/// file.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Summary {
    /// The drafting chain, e.g. `recall` or `ngram-simple+ngram-map-k`.
    pub strategy: String,
    /// The kind of conversation, or `all`.
    pub kind: String,
    /// Sequences decoded in one batch (engines that batch).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parallel: Option<usize>,
    /// Replies decoded.
    pub turns: usize,
    /// Tokens speculative decoding generated.
    pub generated: usize,
    /// Tokens plain decoding generated.
    pub plain_generated: usize,
    /// Plain decoding's tokens per second of decoding time.
    pub plain_tokens_per_s: f64,
    /// Speculative decoding's tokens per second of decoding time.
    pub spec_tokens_per_s: f64,
    /// `spec_tokens_per_s / plain_tokens_per_s`.
    pub speedup: f64,
    /// Speculative decoding's generated tokens per forward pass, the pass
    /// that chose each reply's first token counted ([`Reply::tau`] over
    /// all the replies).
    pub tau: f64,
    /// Accepted draft tokens over drafted ones (0 when nothing was drafted).
    pub acceptance: f64,
    /// Plain decoding's forward passes.
    pub plain_forward_passes: usize,
    /// Speculative decoding's forward passes.
    pub spec_forward_passes: usize,
    /// Draft tokens sent to verification.
    pub drafted: usize,
    /// Draft tokens the model kept.
    pub accepted: usize,
    /// Whether every reply equals plain decoding's, token for token.
    pub identical: bool,
    /// Replies that differ from plain decoding's.
    pub diverged: usize,
    /// Of those, the ones whose first difference is not a near tie of the
    /// plain pass (0 unless the loop is wrong).
    pub diverged_not_near_tie: usize,
    /// Turns skipped: the prompt did not fit the model's context.
    pub skipped: usize,
    /// Turns whose prompt was cut to fit.
    pub truncated: usize,
}

#[allow(clippy::cast_precision_loss)] // token counts far below 2^52
fn ratio(num: usize, den: usize) -> f64 {
    if den == 0 {
        0.0
    } else {
        num as f64 / den as f64
    }
}

#[allow(clippy::cast_precision_loss)]
fn per_second(tokens: usize, time: Duration) -> f64 {
    let s = time.as_secs_f64();
    if s > 0.0 {
        tokens as f64 / s
    } else {
        0.0
    }
}

impl Summary {
    fn new(strategy: &str, kind: &str, parallel: Option<usize>, s: &KindSums) -> Summary {
        let plain_tps = per_second(s.plain.generated, s.plain.decode_time);
        let spec_tps = per_second(s.spec.generated, s.spec.decode_time);
        Summary {
            strategy: strategy.to_string(),
            kind: kind.to_string(),
            parallel,
            turns: s.turns,
            generated: s.spec.generated,
            plain_generated: s.plain.generated,
            plain_tokens_per_s: plain_tps,
            spec_tokens_per_s: spec_tps,
            speedup: if plain_tps > 0.0 {
                spec_tps / plain_tps
            } else {
                0.0
            },
            tau: ratio(s.spec.generated, s.spec.forward_passes),
            acceptance: ratio(s.spec.accepted, s.spec.drafted),
            plain_forward_passes: s.plain.forward_passes,
            spec_forward_passes: s.spec.forward_passes,
            drafted: s.spec.drafted,
            accepted: s.spec.accepted,
            identical: s.diverged == 0,
            diverged: s.diverged,
            diverged_not_near_tie: s.diverged_not_near_tie,
            skipped: s.skipped,
            truncated: s.truncated,
        }
    }
}

/// Prints the summaries as a table, one row each.
///
/// # Errors
///
/// The writer's.
pub fn print_table(out: &mut impl Write, summaries: &[Summary]) -> io::Result<()> {
    writeln!(
        out,
        "{:<28} {:<10} {:>5} {:>7} {:>9} {:>9} {:>7} {:>6} {:>6} {:>9} {:>9}",
        "strategy",
        "kind",
        "turns",
        "tokens",
        "plain t/s",
        "spec t/s",
        "speedup",
        "tau",
        "accept",
        "identical",
        "near-tie"
    )?;
    for s in summaries {
        let identical = if s.identical { "yes" } else { "no" };
        let near_ties = s.diverged - s.diverged_not_near_tie;
        writeln!(
            out,
            "{:<28} {:<10} {:>5} {:>7} {:>9.1} {:>9.1} {:>6.3}x {:>6.3} {:>6.3} {:>9} {:>4}/{:<4}",
            s.strategy,
            s.kind,
            s.turns,
            s.generated,
            s.plain_tokens_per_s,
            s.spec_tokens_per_s,
            s.speedup,
            s.tau,
            s.acceptance,
            identical,
            near_ties,
            s.diverged
        )?;
    }
    let skipped: usize = summaries
        .iter()
        .filter(|s| s.kind == "all")
        .map(|s| s.skipped)
        .sum();
    let truncated: usize = summaries
        .iter()
        .filter(|s| s.kind == "all")
        .map(|s| s.truncated)
        .sum();
    if skipped + truncated > 0 {
        writeln!(
            out,
            "turns whose prompt did not fit the context: {skipped} skipped, {truncated} cut"
        )?;
    }
    Ok(())
}

/// Writes the summaries to `path` as one JSON array.
///
/// # Errors
///
/// [`Error::Io`] if the file cannot be written.
pub fn write_json(path: &Path, summaries: &[Summary]) -> Result<(), Error> {
    let mut text = serde_json::to_string_pretty(summaries)?;
    text.push('\n');
    std::fs::write(path, text).map_err(|source| Error::Io {
        path: path.to_path_buf(),
        source,
    })
}

#[cfg(test)]
mod tests;
