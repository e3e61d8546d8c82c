//! selfspec's measurements ([`PassCurve`], [`LogitNoise`]) on a decoder's
//! llama.cpp context: what a pass costs (and the token cost selfspec's
//! recall weighs its drafts against), and how far llama.cpp's batched
//! passes move logits from its one-token passes (the near-tie bound).
//!
//! Each runs on idle slots only and leaves the slots it used empty; the
//! stepper's view of every slot is emptied with them, so the next request
//! of each slot evaluates its prompt whole.

use std::time::{Duration, Instant};

pub use selfspec::step::{LogitNoise, PassCost, PassCurve, RowNoise};
use selfspec::step::{Row, SeqId, Target};

use crate::{Decoder, Error};

/// Times passes of each of `sizes` tokens after a `cache`-token cache in
/// `slot` (median of `reps`, each rolled back before the next, after one
/// warm-up pass): [`PassCurve::measure`] on the decoder's context. The
/// slot's cache is left empty.
///
/// # Errors
///
/// [`Error::Slot`] for a slot that does not exist or is busy (or any busy
/// slot), [`Error::Selfspec`] for a size of 0 or over the step
/// ([`Settings::step_tokens`](crate::Settings::step_tokens)) or a cache
/// that leaves no room for the largest size, and llama.cpp's errors.
pub fn pass_cost_curve(
    decoder: &mut Decoder<'_>,
    slot: usize,
    cache: usize,
    sizes: &[usize],
    reps: usize,
) -> Result<PassCurve, Error> {
    let target = decoder.idle_target()?;
    Ok(PassCurve::measure(
        target,
        SeqId::new(slot),
        cache,
        sizes,
        reps,
    )?)
}

/// Times passes of several shapes (`shape[s]`: the rows of slot `s`, each
/// after a `cache`-token cache of its own; median of `reps`, each rolled
/// back, after one warm-up), to show what a pass costs as llama.cpp
/// computes it: several sequences of one row, of several rows, and one
/// sequence's draft beside the others' one row. Every slot is left empty.
///
/// # Errors
///
/// [`Error::Slot`] for a busy slot or a shape of more slots than the
/// decoder has, and llama.cpp's errors.
pub fn pass_shapes(
    decoder: &mut Decoder<'_>,
    cache: usize,
    shapes: &[Vec<usize>],
    reps: usize,
) -> Result<Vec<Duration>, Error> {
    let slots = decoder.settings().sequences;
    if let Some(shape) = shapes.iter().find(|s| s.len() > slots) {
        return Err(Error::Slot {
            slot: shape.len() - 1,
            slots,
            problem: "is not in the decoder",
        });
    }
    let target = decoder.idle_target()?;
    let vocab = target.shape().vocab.max(1);
    let token = |s: usize, p: usize| u32::try_from((s * 7919 + p * 104_729) % vocab).unwrap_or(0);
    for s in 0..slots {
        target.clear(SeqId::new(s))?;
        for start in (0..cache).step_by(64) {
            let rows = (start..cache.min(start + 64)).map(|pos| Row {
                seq: SeqId::new(s),
                token: token(s, pos),
                pos,
                output: false,
            });
            target.decode_rows(rows)?;
        }
    }
    let mut medians = Vec::with_capacity(shapes.len());
    for shape in shapes {
        let mut times = Vec::with_capacity(reps);
        for rep in 0..=reps {
            let rows = shape.iter().enumerate().flat_map(|(s, &k)| {
                (cache..cache + k).map(move |pos| Row {
                    seq: SeqId::new(s),
                    token: token(s, pos),
                    pos,
                    output: true,
                })
            });
            let t = Instant::now();
            target.decode_rows(rows)?;
            if rep > 0 {
                times.push(t.elapsed());
            }
            for s in 0..shape.len() {
                target.truncate(SeqId::new(s), cache)?;
            }
        }
        times.sort_unstable();
        medians.push(times.get(times.len() / 2).copied().unwrap_or_default());
    }
    for s in 0..slots {
        target.clear(SeqId::new(s))?;
    }
    Ok(medians)
}

/// The token cost for `sequences` sequences a pass on `decoder`
/// ([`PassCurve::measure_for_token_cost`] in slot 0, then
/// [`PassCurve::token_cost`]: passes of S and S + 16 tokens after a
/// 256-token cache, median of 15).
///
/// # Errors
///
/// As [`pass_cost_curve`].
pub fn measure_token_cost(decoder: &mut Decoder<'_>, sequences: usize) -> Result<f64, Error> {
    let target = decoder.idle_target()?;
    let curve = PassCurve::measure_for_token_cost(target, SeqId::new(0), sequences)?;
    Ok(curve.token_cost(sequences))
}

/// Evaluates `tokens[start..]` one token a pass in slot 0 and again in
/// passes of each of `pass_lens` tokens after the same cached
/// `tokens[..start]`, with slots `1..=others` evaluating tokens of their
/// own in the same batches, and compares every row:
/// [`LogitNoise::measure`] on the decoder's context. Every slot it used is
/// left empty.
///
/// # Errors
///
/// [`Error::Slot`] for a busy slot or too few slots,
/// [`Error::TokenOutOfRange`], [`Error::Selfspec`] for a `start` outside
/// `1..tokens.len()` or a pass length of 0 or over the step less 4 tokens
/// for each other slot, and llama.cpp's errors.
pub fn measure_logit_noise(
    decoder: &mut Decoder<'_>,
    tokens: &[u32],
    start: usize,
    pass_lens: &[usize],
    others: usize,
) -> Result<LogitNoise, Error> {
    let target = decoder.idle_target()?;
    Ok(LogitNoise::measure(
        target, tokens, start, pass_lens, others,
    )?)
}

/// The near-tie calibration on the model's own text: `prompt` and up to
/// `reply_tokens` tokens the model writes after it (plain greedy, slot 0),
/// then [`LogitNoise::calibrate`] over that text (the reply, and windows of
/// it repeated ending at each of [`LogitNoise::CALIBRATION_CACHES`] that
/// start below `reach`, the longest cache the replies to check are decoded
/// after: see [`run::cache_reach`](crate::run::cache_reach)), with passes
/// up to the step size ([`Settings::step_tokens`](crate::Settings::step_tokens));
/// with more than one slot, also with the other slots decoding beside slot 0.
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
    let mut text = prompt.to_vec();
    if let Some(f) = finished.first() {
        text.extend_from_slice(&f.reply.tokens);
    }
    let step = decoder.settings().step_tokens;
    let target = decoder.idle_target()?;
    Ok(LogitNoise::calibrate(
        target,
        &text,
        prompt.len(),
        step,
        reach,
    )?)
}
