//! What a pass costs in llama.cpp (the pass-cost curve and the token cost
//! selfspec's recall weighs its drafts against), and how far a batched
//! pass's logits are from one-token passes' (the near-tie bound).

use std::time::{Duration, Instant};

use crate::{Decoder, Error};
use selfspec_conversations::argmax_gap;

/// The median time of one pass of `tokens` tokens (logits for each).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PassCost {
    /// Tokens in the pass.
    pub tokens: usize,
    /// Median wall-clock time of the pass.
    pub median: Duration,
}

/// Arbitrary in-vocabulary tokens for timing (the values do not change a
/// pass's cost).
fn filler(n: usize, seed: usize, vocab: usize) -> Vec<u32> {
    (0..n)
        .map(|i| u32::try_from((i * 7919 + seed * 104_729 + 1000) % vocab).unwrap_or(0))
        .collect()
}

/// Times passes of each of `sizes` tokens after a `context`-token cache in
/// `slot` (median of `reps`; each pass rolled back before the next). The
/// slot's cache is left empty.
///
/// # Errors
///
/// [`Error::Slot`] for a busy slot, [`Error::Setting`] for a size of 0 or
/// over the batch, [`Error::PromptTooLong`] when `context` plus the largest
/// size exceed the sequence's context, and llama.cpp's errors.
pub fn pass_cost_curve(
    decoder: &mut Decoder<'_>,
    slot: usize,
    context: usize,
    sizes: &[usize],
    reps: usize,
) -> Result<Vec<PassCost>, Error> {
    if decoder.is_busy(slot) || slot >= decoder.settings().sequences {
        return Err(Error::Slot {
            slot,
            slots: decoder.settings().sequences,
            problem: "does not exist or is busy",
        });
    }
    let settings = decoder.settings();
    let largest = sizes.iter().copied().max().unwrap_or(0);
    if context + largest >= settings.context {
        return Err(Error::PromptTooLong {
            tokens: context + largest,
            context: settings.context,
        });
    }
    let vocab = decoder.model().n_vocab();
    decoder.truncate(slot, 0)?;
    decoder.extend(slot, &filler(context.max(1), 0, vocab), false)?;
    let base = decoder.cached(slot).len();
    let mut curve = Vec::with_capacity(sizes.len());
    for &n in sizes {
        if n == 0 || n > settings.batch {
            return Err(Error::Setting {
                what: "pass size",
                value: n,
                allowed: "1 to the batch size",
            });
        }
        let pass = filler(n, 1, vocab);
        // one warm-up pass, then the timed ones
        let mut times = Vec::with_capacity(reps + 1);
        for _ in 0..=reps.max(1) {
            let t = Instant::now();
            decoder.extend(slot, &pass, true)?;
            std::hint::black_box(argmax_gap(decoder.row(0)?));
            times.push(t.elapsed());
            decoder.truncate(slot, base)?;
        }
        times.remove(0);
        times.sort();
        curve.push(PassCost {
            tokens: n,
            median: times[times.len() / 2],
        });
    }
    decoder.truncate(slot, 0)?;
    Ok(curve)
}

/// The token cost for selfspec ([`selfspec::Speculative::set_token_cost`])
/// when `sequences` sequences share each pass: one more token in a pass
/// costs `m = (t(S + 16) - t(S)) / 16`; a sequence's share of a pass is
/// `t(S) / S`; the cost is `m / (t(S) / S)`, clamped to `[0, 0.99]`.
#[must_use]
pub fn token_cost(sequences: usize, t_s: Duration, t_s16: Duration) -> f64 {
    let s = sequences.max(1) as f64;
    let (a, b) = (t_s.as_secs_f64(), t_s16.as_secs_f64());
    if a <= 0.0 {
        return 0.0;
    }
    (((b - a) / 16.0) / (a / s)).clamp(0.0, 0.99)
}

/// Measures the token cost for `sequences` sequences a pass on `decoder`
/// (passes of S and S + 16 tokens after a 256-token cache, median of 15).
///
/// # Errors
///
/// As [`pass_cost_curve`].
pub fn measure_token_cost(decoder: &mut Decoder<'_>, sequences: usize) -> Result<f64, Error> {
    let s = sequences.max(1);
    let curve = pass_cost_curve(decoder, 0, 256, &[s, s + 16], 15)?;
    Ok(token_cost(s, curve[0].median, curve[1].median))
}

/// How far llama.cpp's batched passes move logits from one-token passes.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LogitNoise {
    /// The largest |batched - one-token| logit difference seen.
    pub max_abs_diff: f32,
    /// The largest change of a one-token pass's margin between its greedy
    /// choice and another token (top logit minus that token's) that a
    /// batched pass made, over the tokens close enough to the top to be
    /// overtaken (see [`RowNoise`]).
    pub max_margin_shift: f32,
    /// Positions compared, each over the whole vocabulary.
    pub rows: usize,
}

impl LogitNoise {
    /// Nothing compared yet.
    pub const NONE: LogitNoise = LogitNoise {
        max_abs_diff: 0.0,
        max_margin_shift: 0.0,
        rows: 0,
    };

    /// The near-tie bound: the largest margin shift measured. A batched
    /// pass picks another token than the one-token pass only where the
    /// margin between them moved by more than that token's gap, so a
    /// choice whose top-1 / top-2 gap is above every shift measured did
    /// not flip in any compared row.
    #[must_use]
    pub fn near_tie_bound(&self) -> f32 {
        self.max_margin_shift
    }

    /// Both measurements' worst rows.
    #[must_use]
    pub fn max(self, other: LogitNoise) -> LogitNoise {
        LogitNoise {
            max_abs_diff: self.max_abs_diff.max(other.max_abs_diff),
            max_margin_shift: self.max_margin_shift.max(other.max_margin_shift),
            rows: self.rows + other.rows,
        }
    }
}

/// One row's comparison: a batched pass's logits (`got`) against the
/// one-token pass's (`want`) at the same position.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RowNoise {
    /// max |got - want| over the vocabulary.
    pub abs_diff: f32,
    /// max |(got[a] - got[j]) - (want[a] - want[j])|, `a` the one-token
    /// pass's greedy choice, over the tokens `j` whose margin
    /// `want[a] - want[j]` is at most `2 * abs_diff`: a token farther
    /// below cannot overtake `a` (each logit moved by at most
    /// `abs_diff`). A shift both logits share (a whole row moved up or
    /// down) changes no margin, which is why this is far below
    /// `2 * abs_diff` on llama.cpp's quantized kernels.
    pub margin_shift: f32,
}

impl RowNoise {
    /// Compares `got` with `want` (same length).
    #[must_use]
    pub fn of(got: &[f32], want: &[f32]) -> RowNoise {
        let abs_diff = got
            .iter()
            .zip(want)
            .map(|(g, w)| (g - w).abs())
            .fold(0.0f32, f32::max);
        let (choice, _) = selfspec_conversations::argmax_gap(want);
        let a = usize::try_from(choice).unwrap_or(usize::MAX);
        let (Some(&got_a), Some(&want_a)) = (got.get(a), want.get(a)) else {
            return RowNoise {
                abs_diff,
                margin_shift: 0.0,
            };
        };
        let reach = 2.0 * abs_diff;
        let margin_shift = got
            .iter()
            .zip(want)
            .filter(|&(_, w)| want_a - w <= reach)
            .map(|(g, w)| ((got_a - g) - (want_a - w)).abs())
            .fold(0.0f32, f32::max);
        RowNoise {
            abs_diff,
            margin_shift,
        }
    }
}

/// Decodes `tokens[start..]` one token a pass in slot 0 (the plain loop's
/// way) and again in passes of each of `pass_lens` tokens (the speculative
/// loop's way: later passes read the KV cache earlier batched passes wrote),
/// after the same cached `tokens[..start]`, and compares every logit. With
/// `others` > 0, slots 1..=others decode their own tokens in the same
/// batches (a server's step: sequences of other lengths beside it). Leaves
/// the slots' caches empty.
///
/// # Errors
///
/// [`Error::EmptyPrompt`] when `start` is 0 or not below `tokens.len()`,
/// [`Error::Setting`] for a pass length of 0 or one that leaves no room for
/// the other sequences in a step, [`Error::Slot`] for too few slots, and
/// llama.cpp's errors.
pub fn measure_logit_noise(
    decoder: &mut Decoder<'_>,
    tokens: &[u32],
    start: usize,
    pass_lens: &[usize],
    others: usize,
) -> Result<LogitNoise, Error> {
    if start == 0 || start >= tokens.len() {
        return Err(Error::EmptyPrompt);
    }
    let step = decoder.settings().step_tokens;
    if let Some(&bad) = pass_lens.iter().find(|&&l| l == 0 || l + 4 * others > step) {
        return Err(Error::Setting {
            what: "pass length",
            value: bad,
            allowed: "1 to the step size, less 4 tokens for each other sequence",
        });
    }
    let slots = decoder.settings().sequences;
    if others >= slots {
        return Err(Error::Slot {
            slot: others,
            slots,
            problem: "does not exist",
        });
    }
    decoder.clear()?;
    decoder.extend(0, &tokens[..start], false)?;
    let mut reference = Vec::with_capacity(tokens.len() - start);
    for &t in &tokens[start..] {
        reference.push(decoder.evaluate(0, &[t])?.remove(0));
    }
    // other sequences: shorter caches of their own, prefilled once
    let prefix = |j: usize| (start / 2 + 13 * j).min(start);
    for j in 1..=others {
        decoder.extend(j, &tokens[..prefix(j)], false)?;
    }
    let mut noise = LogitNoise::NONE;
    for &len in pass_lens {
        decoder.truncate(0, start)?;
        for j in 1..=others {
            decoder.truncate(j, prefix(j))?;
        }
        for (c, chunk) in tokens[start..].chunks(len).enumerate() {
            let extra: Vec<Vec<u32>> = (1..=others)
                .map(|j| filler(1 + (c + j) % 4, c * 8 + j, decoder.model().n_vocab()))
                .collect();
            let mut parts: Vec<(usize, &[u32])> = vec![(0, chunk)];
            parts.extend(extra.iter().enumerate().map(|(j, e)| (j + 1, &e[..])));
            let rows = decoder.evaluate_batch(&parts)?.remove(0);
            for (i, got) in rows.iter().enumerate() {
                let want = &reference[c * len + i];
                let row = RowNoise::of(got, want);
                noise = noise.max(LogitNoise {
                    max_abs_diff: row.abs_diff,
                    max_margin_shift: row.margin_shift,
                    rows: 1,
                });
            }
        }
    }
    decoder.clear()?;
    Ok(noise)
}

/// Pass lengths [`calibrate`] compares one-token passes with (each capped
/// to the decoder's step size): from a one-token draft to a full step.
pub const CALIBRATION_PASSES: [usize; 6] = [2, 5, 9, 17, 33, usize::MAX];

/// Cache lengths [`calibrate`] also compares at (windows of
/// [`CALIBRATION_WINDOW`] positions ending there). With several threads,
/// llama.cpp splits a one-token pass's attention differently once the
/// cache passes 256 cells (its KV view is padded to 256), so a pass's
/// logits depend on the cache length as well as on the pass length: a
/// calibration over a short reply alone measured 0 where replies after a
/// few hundred cached tokens then differed at gaps of 0.1. The windows
/// reach the lengths a multi-turn conversation's cache grows to (a few
/// thousand tokens): the bound has to hold where replies are decoded.
pub const CALIBRATION_CACHES: [usize; 5] = [460, 1060, 1660, 2260, 3460];

/// Positions compared in each of [`CALIBRATION_CACHES`]' windows.
pub const CALIBRATION_WINDOW: usize = 120;

/// [`measure_logit_noise`] on the model's own text: `prompt` and up to
/// `reply_tokens` tokens the model writes after it (plain greedy, slot 0),
/// compared over the reply (over the prompt's second half if the reply is
/// under 8 tokens), and over windows ending at each of
/// [`CALIBRATION_CACHES`] (within the context, and starting below `reach`:
/// the longest cache the replies to check are decoded after, see
/// [`run::cache_reach`](crate::run::cache_reach)) of that text repeated, with
/// [`CALIBRATION_PASSES`] capped to the step size
/// ([`Settings::step_tokens`](crate::Settings::step_tokens)); with more
/// than one sequence, also with the other slots decoding beside slot 0.
///
/// # Errors
///
/// As [`Decoder::start`] and [`measure_logit_noise`].
pub fn calibrate(
    decoder: &mut Decoder<'_>,
    prompt: &[u32],
    reply_tokens: usize,
    reach: usize,
) -> Result<LogitNoise, Error> {
    decoder.clear()?;
    decoder.start(0, prompt, reply_tokens.max(1), None)?;
    let mut finished = Vec::new();
    while decoder.any_busy() {
        decoder.step(&mut finished)?;
    }
    let mut tokens = prompt.to_vec();
    if let Some(f) = finished.first() {
        tokens.extend_from_slice(&f.reply.tokens);
    }
    let start = if tokens.len() >= prompt.len() + 8 {
        prompt.len()
    } else {
        prompt.len() / 2
    };
    let mut noise = noise_at(decoder, &tokens, start.max(1))?;
    let context = decoder.settings().context;
    let text_len = tokens.len();
    for &end in &CALIBRATION_CACHES {
        if end >= context || end - CALIBRATION_WINDOW >= reach || text_len == 0 {
            continue;
        }
        let long: Vec<u32> = tokens.iter().copied().cycle().take(end).collect();
        let at = noise_at(decoder, &long, end - CALIBRATION_WINDOW)?;
        noise = noise.max(at);
    }
    Ok(noise)
}

/// [`measure_logit_noise`] over `tokens[start..]` with the calibration's
/// pass lengths, alone and (with several slots) beside the others.
fn noise_at(decoder: &mut Decoder<'_>, tokens: &[u32], start: usize) -> Result<LogitNoise, Error> {
    let others = decoder.settings().sequences - 1;
    let step = decoder
        .settings()
        .step_tokens
        .saturating_sub(4 * others)
        .max(1);
    let lens: Vec<usize> = CALIBRATION_PASSES.iter().map(|&l| l.min(step)).collect();
    let alone = measure_logit_noise(decoder, tokens, start, &lens, 0)?;
    if others == 0 {
        return Ok(alone);
    }
    let beside = measure_logit_noise(decoder, tokens, start, &lens, others)?;
    Ok(alone.max(beside))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_row_moves_margins_by_what_differs_between_its_logits() {
        // (got, want, abs_diff, margin_shift)
        let cases: [(&[f32], &[f32], f32, f32); 5] = [
            // the same row
            (&[3.0, 1.0, 0.0], &[3.0, 1.0, 0.0], 0.0, 0.0),
            // a whole row moved: no margin changes
            (&[3.5, 3.0, 0.5], &[3.0, 2.5, 0.0], 0.5, 0.0),
            // the top down, the runner-up up: the margin moves by both
            (&[2.75, 3.0, 0.0], &[3.0, 2.75, 0.0], 0.25, 0.5),
            // a token too far below the top to overtake it does not count
            (&[3.0, 1.0, -9.0], &[3.0, 1.0, -10.0], 1.0, 0.0),
            // nothing to compare
            (&[], &[], 0.0, 0.0),
        ];
        for (got, want, abs_diff, margin_shift) in cases {
            let row = RowNoise::of(got, want);
            assert_eq!(
                row,
                RowNoise {
                    abs_diff,
                    margin_shift
                },
                "{got:?} against {want:?}"
            );
        }
    }

    #[test]
    fn the_bound_is_the_worst_margin_shift_of_every_row() {
        let a = LogitNoise {
            max_abs_diff: 2.0,
            max_margin_shift: 0.3,
            rows: 10,
        };
        let b = LogitNoise {
            max_abs_diff: 1.0,
            max_margin_shift: 0.5,
            rows: 5,
        };
        let both = a.max(b);
        assert_eq!(both.rows, 15);
        assert_eq!(both.max_abs_diff, 2.0);
        assert_eq!(both.near_tie_bound(), 0.5);
        assert_eq!(LogitNoise::NONE.max(a), a);
    }
}
