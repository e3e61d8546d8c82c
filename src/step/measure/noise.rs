//! How far a target's batched passes move logits from its one-token
//! passes, and the near-tie bound that follows.
//!
//! Greedy verification keeps a draft token where the batched pass's argmax
//! is that token; plain decoding takes the one-token pass's argmax. Where
//! the engine rounds a batched pass differently (other kernels, rows
//! quantized together, attention split otherwise), the two can pick
//! different tokens where the plain pass's top two candidates are close:
//! a near tie. [`LogitNoise::measure`] bounds how close.

use super::{check_target, feed, filler, push_rows, rewind, MeasureError};
use crate::limits::check_range;
use crate::step::choice::Choice;
use crate::step::target::{Batch, SeqId, Shape, Target};
use crate::token::Token;
use crate::Error;

/// One row's comparison: a batched pass's logits (`got`) against the
/// one-token pass's (`want`) at the same position.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RowNoise {
    /// `max |got - want|` over the vocabulary.
    pub abs_diff: f32,
    /// `max |(got[a] - got[j]) - (want[a] - want[j])|`, `a` the one-token
    /// pass's greedy choice, over the tokens `j` whose margin
    /// `want[a] - want[j]` is at most `2 * abs_diff`: a token farther below
    /// cannot overtake `a` (each logit moved by at most `abs_diff`). A
    /// shift the whole row shares changes no margin, which is why this is
    /// often far below `2 * abs_diff`.
    pub margin_shift: f32,
}

impl RowNoise {
    /// Compares `got` with `want`; `None` when they differ in length, are
    /// empty, or `want` has a NaN (no greedy choice to compare at).
    ///
    /// ```
    /// use selfspec::step::RowNoise;
    ///
    /// // The top down by 0.25, the runner-up up by 0.25: the margin moved by 0.5.
    /// let row = RowNoise::of(&[2.75, 3.0, 0.0], &[3.0, 2.75, 0.0]).unwrap();
    /// assert_eq!((row.abs_diff, row.margin_shift), (0.25, 0.5));
    /// // The whole row moved up: no margin changed.
    /// let row = RowNoise::of(&[3.5, 3.0, 0.5], &[3.0, 2.5, 0.0]).unwrap();
    /// assert_eq!((row.abs_diff, row.margin_shift), (0.5, 0.0));
    /// ```
    #[must_use]
    pub fn of(got: &[f32], want: &[f32]) -> Option<RowNoise> {
        if got.len() != want.len() {
            return None;
        }
        let a = crate::int::ix32(Choice::of(want)?.token);
        let abs_diff = got
            .iter()
            .zip(want)
            .map(|(g, w)| (g - w).abs())
            .fold(0.0f32, f32::max);
        let (got_a, want_a) = (*got.get(a)?, *want.get(a)?);
        let reach = 2.0 * abs_diff;
        let margin_shift = got
            .iter()
            .zip(want)
            .filter(|&(_, w)| want_a - w <= reach)
            .map(|(g, w)| ((got_a - g) - (want_a - w)).abs())
            .fold(0.0f32, f32::max);
        Some(RowNoise {
            abs_diff,
            margin_shift,
        })
    }
}

/// How far a target's batched passes moved logits from its one-token
/// passes, over the rows compared.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LogitNoise {
    /// The largest `|batched - one-token|` logit difference seen.
    pub max_abs_diff: f32,
    /// The largest [`RowNoise::margin_shift`] seen.
    pub max_margin_shift: f32,
    /// Rows compared, each over the whole vocabulary.
    pub rows: usize,
}

impl LogitNoise {
    /// Nothing compared yet.
    pub const NONE: LogitNoise = LogitNoise {
        max_abs_diff: 0.0,
        max_margin_shift: 0.0,
        rows: 0,
    };

    /// Pass lengths [`calibrate`](LogitNoise::calibrate) compares one-token
    /// passes with (each capped to the longest decoding pass): from a
    /// one-token draft to a full pass.
    pub const CALIBRATION_PASSES: [usize; 6] = [2, 5, 9, 17, 33, usize::MAX];

    /// Cache lengths [`calibrate`](LogitNoise::calibrate) also compares at
    /// (windows of [`CALIBRATION_WINDOW`](LogitNoise::CALIBRATION_WINDOW)
    /// positions ending there). An engine may compute a pass differently
    /// once its cache grows (llama.cpp pads its KV view to 256 cells and
    /// splits attention over threads by it), so a pass's logits depend on
    /// the cache length as well as on the pass length: the bound has to
    /// hold at the lengths a multi-turn conversation's cache reaches.
    pub const CALIBRATION_CACHES: [usize; 5] = [460, 1060, 1660, 2260, 3460];

    /// Positions compared in each of
    /// [`CALIBRATION_CACHES`](LogitNoise::CALIBRATION_CACHES)' windows.
    pub const CALIBRATION_WINDOW: usize = 120;

    /// The near-tie bound: the largest margin shift measured. A batched
    /// pass picks another token than the one-token pass only where the
    /// margin between them moved by more than that token's gap, so a
    /// choice whose top-1 / top-2 gap is above every shift measured did
    /// not flip in any row compared.
    #[must_use]
    pub fn near_tie_bound(&self) -> f32 {
        self.max_margin_shift
    }

    /// Both measurements' worst rows, and their rows together.
    #[must_use]
    pub fn max(self, other: LogitNoise) -> LogitNoise {
        LogitNoise {
            max_abs_diff: self.max_abs_diff.max(other.max_abs_diff),
            max_margin_shift: self.max_margin_shift.max(other.max_margin_shift),
            rows: self.rows + other.rows,
        }
    }

    /// Evaluates `tokens[start..]` in sequence 0 one token a pass (plain
    /// decoding's way), then again in passes of each of `pass_lens` tokens
    /// (speculative decoding's way: later passes read the cache earlier
    /// batched passes wrote), after the same cached `tokens[..start]`, and
    /// compares every row ([`RowNoise`]). With `others` > 0, sequences
    /// `1..=others` evaluate tokens of their own in the same batches (1 to
    /// 4 rows each, after caches of other lengths, every row's output read
    /// as a decoding step reads a draft's: an engine may compute a pass
    /// differently by its output rows): a server's step. Every
    /// sequence used is left empty.
    ///
    /// # Errors
    ///
    /// [`Error::Sequence`] when the target has no sequence `others`,
    /// [`Error::TokenOutOfRange`], [`Error::OutOfRange`] for fewer than 2
    /// tokens or more than the context, `start` outside
    /// `1..tokens.len()`, a pass length of 0 or over the batch less 4 rows
    /// for each other sequence; [`Error::Rows`] for a row that cannot be
    /// compared (its length is not the one-token row's, or it has a NaN);
    /// the target's errors.
    pub fn measure<T: Target + ?Sized>(
        target: &mut T,
        tokens: &[Token],
        start: usize,
        pass_lens: &[usize],
        others: usize,
    ) -> Result<LogitNoise, MeasureError<T::Error>> {
        let shape = target.shape();
        check_measure(shape, tokens, start, pass_lens, others)?;
        let mut beside = Beside::new(tokens, start, others, shape);
        beside.clear(target).map_err(MeasureError::Target)?;
        let reference = one_token_rows(target, tokens, start)?;
        beside.prefill(target).map_err(MeasureError::Target)?;
        let mut noise = LogitNoise::NONE;
        for &len in pass_lens {
            rewind(target, SeqId::new(0), tokens, start).map_err(MeasureError::Target)?;
            beside.restart(target).map_err(MeasureError::Target)?;
            let rest = tokens.get(start..).unwrap_or_default();
            for (c, chunk) in rest.chunks(len).enumerate() {
                let at = start + c * len;
                let want = reference.get(c * len..).unwrap_or_default();
                let pass = batched_pass(target, &mut beside, c, (at, chunk), want)?;
                noise = noise.max(pass);
            }
        }
        beside.clear(target).map_err(MeasureError::Target)?;
        Ok(noise)
    }

    /// [`measure`](LogitNoise::measure) where speculative decoding runs:
    /// over `text` (a prompt of `prompt` tokens and the model's own plain
    /// reply after it), compared from the prompt's end (from its middle
    /// when the reply is under 8 tokens), and over windows ending at each
    /// of [`CALIBRATION_CACHES`](LogitNoise::CALIBRATION_CACHES) of that
    /// text repeated (those within the context and starting below `reach`,
    /// the longest cache replies are decoded after), with
    /// [`CALIBRATION_PASSES`](LogitNoise::CALIBRATION_PASSES) capped to
    /// `max_pass` (the rows a decoding pass has at most); with more than
    /// one sequence, both alone and with every other sequence beside
    /// sequence 0 (the pass lengths then leave 4 rows for each).
    ///
    /// # Errors
    ///
    /// As [`measure`](LogitNoise::measure); [`Error::OutOfRange`] for a
    /// `prompt` of 0 or over the text's length.
    pub fn calibrate<T: Target + ?Sized>(
        target: &mut T,
        text: &[Token],
        prompt: usize,
        max_pass: usize,
        reach: usize,
    ) -> Result<LogitNoise, MeasureError<T::Error>> {
        check_range("near-tie calibration", "prompt", prompt, 1, text.len())?;
        let start = if text.len() >= prompt + 8 {
            prompt
        } else {
            prompt / 2
        };
        let mut noise = noise_at(target, text, start.max(1), max_pass)?;
        let context = target.shape().context;
        let window = Self::CALIBRATION_WINDOW;
        for end in Self::CALIBRATION_CACHES {
            if end >= context || end - window >= reach {
                continue;
            }
            let long: Vec<Token> = text.iter().copied().cycle().take(end).collect();
            noise = noise.max(noise_at(target, &long, end - window, max_pass)?);
        }
        Ok(noise)
    }
}

/// [`LogitNoise::measure`] over `tokens[start..]` with the calibration's
/// pass lengths, alone and (with several sequences) beside the others.
fn noise_at<T: Target + ?Sized>(
    target: &mut T,
    tokens: &[Token],
    start: usize,
    max_pass: usize,
) -> Result<LogitNoise, MeasureError<T::Error>> {
    let shape = target.shape();
    let others = shape.sequences.saturating_sub(1);
    let step = max_pass.min(shape.batch).saturating_sub(4 * others).max(1);
    let lens = LogitNoise::CALIBRATION_PASSES.map(|l| l.min(step));
    let alone = LogitNoise::measure(target, tokens, start, &lens, 0)?;
    if others == 0 {
        return Ok(alone);
    }
    let beside = LogitNoise::measure(target, tokens, start, &lens, others)?;
    Ok(alone.max(beside))
}

/// [`LogitNoise::measure`]'s arguments against the target's shape.
fn check_measure(
    shape: Shape,
    tokens: &[Token],
    start: usize,
    pass_lens: &[usize],
    others: usize,
) -> Result<(), Error> {
    check_target(shape, SeqId::new(others))?;
    let what = "near-tie measurement";
    check_range(what, "tokens", tokens.len(), 2, shape.context)?;
    check_range(what, "start", start, 1, tokens.len() - 1)?;
    let widest = shape.batch.saturating_sub(4 * others);
    for &len in pass_lens {
        check_range(what, "pass length", len, 1, widest)?;
    }
    let vocab = shape.vocab;
    if let Some(&token) = tokens.iter().find(|&&t| crate::int::ix32(t) >= vocab) {
        return Err(Error::TokenOutOfRange { token, vocab });
    }
    Ok(())
}

/// Sequence 0's one-token rows over `tokens[start..]`, after
/// `tokens[..start]` evaluated (the sequence is empty when called).
fn one_token_rows<T: Target + ?Sized>(
    target: &mut T,
    tokens: &[Token],
    start: usize,
) -> Result<Vec<Vec<f32>>, MeasureError<T::Error>> {
    let seq = SeqId::new(0);
    let prefix = tokens.get(..start).unwrap_or_default();
    feed(target, seq, prefix, 0).map_err(MeasureError::Target)?;
    let mut rows = Vec::with_capacity(tokens.len() - start);
    let mut batch = Batch::default();
    for (pos, &token) in tokens.iter().enumerate().skip(start) {
        batch.clear();
        push_rows(&mut batch, seq, pos, &[token], true);
        target.forward(&batch).map_err(MeasureError::Target)?;
        rows.push(target.logits(0).map_err(MeasureError::Target)?.to_vec());
    }
    Ok(rows)
}

/// One batched pass: sequence 0's `chunk` at position `at` and the other
/// sequences' rows; sequence 0's rows compared with `want`'s.
fn batched_pass<T: Target + ?Sized>(
    target: &mut T,
    beside: &mut Beside,
    c: usize,
    (at, chunk): (usize, &[Token]),
    want: &[Vec<f32>],
) -> Result<LogitNoise, MeasureError<T::Error>> {
    let mut batch = Batch::default();
    push_rows(&mut batch, SeqId::new(0), at, chunk, true);
    beside
        .rows(target, c, &mut batch)
        .map_err(MeasureError::Target)?;
    target.forward(&batch).map_err(MeasureError::Target)?;
    let mut noise = LogitNoise::NONE;
    for (i, want) in want.iter().enumerate().take(chunk.len()) {
        let got = target.logits(i).map_err(MeasureError::Target)?;
        let row = RowNoise::of(got, want).ok_or(Error::Rows { seq: 0 })?;
        noise = noise.max(LogitNoise {
            max_abs_diff: row.abs_diff,
            max_margin_shift: row.margin_shift,
            rows: 1,
        });
    }
    Ok(noise)
}

/// The other sequences of a measurement: each one's history (a prefix of
/// the text, then arbitrary tokens a pass).
struct Beside {
    /// Sequence `j + 1`'s tokens and the prefix it restarts from.
    seqs: Vec<(Vec<Token>, usize)>,
    vocab: usize,
    context: usize,
}

impl Beside {
    /// Sequences `1..=others`: sequence `j` after `tokens[..start / 2 + 13 j]`
    /// (at most `start`).
    fn new(tokens: &[Token], start: usize, others: usize, shape: Shape) -> Beside {
        let seqs = (1..=others)
            .map(|j| {
                let prefix = (start / 2 + 13 * j).min(start);
                (tokens.get(..prefix).unwrap_or_default().to_vec(), prefix)
            })
            .collect();
        Beside {
            seqs,
            vocab: shape.vocab,
            context: shape.context,
        }
    }

    /// Empties sequence 0 and the others.
    fn clear<T: Target + ?Sized>(&self, target: &mut T) -> Result<(), T::Error> {
        for j in 0..=self.seqs.len() {
            target.truncate(SeqId::new(j), 0)?;
        }
        Ok(())
    }

    /// Evaluates each other sequence's prefix (they are empty).
    fn prefill<T: Target + ?Sized>(&self, target: &mut T) -> Result<(), T::Error> {
        for (j, (history, _)) in self.seqs.iter().enumerate() {
            feed(target, SeqId::new(j + 1), history, 0)?;
        }
        Ok(())
    }

    /// Cuts each other sequence back to its prefix.
    fn restart<T: Target + ?Sized>(&mut self, target: &mut T) -> Result<(), T::Error> {
        for (j, (history, prefix)) in self.seqs.iter_mut().enumerate() {
            if history.len() > *prefix {
                rewind(target, SeqId::new(j + 1), history, *prefix)?;
                history.truncate(*prefix);
            }
        }
        Ok(())
    }

    /// Appends each other sequence's rows for pass `c` (1 to 4 tokens,
    /// outputs read as a decoding sequence's `[last] + draft` are; a
    /// sequence whose context would overflow restarts from its prefix
    /// first).
    fn rows<T: Target + ?Sized>(
        &mut self,
        target: &mut T,
        c: usize,
        batch: &mut Batch,
    ) -> Result<(), T::Error> {
        for (j, (history, prefix)) in self.seqs.iter_mut().enumerate() {
            let seq = j + 1;
            let extra = filler(1 + (c + seq) % 4, c * 8 + seq, self.vocab);
            if history.len() + extra.len() > self.context {
                rewind(target, SeqId::new(seq), history, *prefix)?;
                history.truncate(*prefix);
            }
            if history.len() + extra.len() <= self.context {
                push_rows(batch, SeqId::new(seq), history.len(), &extra, true);
                history.extend_from_slice(&extra);
            }
        }
        Ok(())
    }
}
