//! How far the model's batched passes move its logits from one-token
//! passes, and the near-tie bound that follows, measured by selfspec
//! ([`LogitNoise`]) on the model as its target.
//!
//! Greedy verification keeps a draft token where the batched pass's argmax
//! is that token; plain decoding takes the one-token pass's argmax. With f32
//! weights the two agree to about 1e-4 in a logit; with quantized weights
//! candle rounds a batched pass differently (the activations are quantized
//! per row and different kernels run), so where the plain pass's top two
//! candidates are close, the argmax can flip. A speculative reply that
//! differs from the plain one first where the plain pass's top-1 / top-2
//! gap is below [`LogitNoise::near_tie_bound`] differs at a near tie.

use selfspec::step::LogitNoise;

use crate::decode::{self, plain_until};
use crate::{Error, Model};

/// The logit noise of `model` where replies are decoded, as the command
/// measures its near-tie bound: a plain reply of up to `reply_tokens`
/// tokens to `prompt` (ended by any of `stop`), then
/// [`LogitNoise::calibrate`] over the prompt and that reply, with passes of
/// up to `max_pass` rows (one plus the longest draft) and caches up to
/// `reach` tokens (the longest cache a reply is decoded after, see
/// [`chat::cache_reach`](crate::chat::cache_reach)). Leaves the cache
/// empty.
///
/// # Errors
///
/// As [`decode::request`] for the reply; [`Error::Selfspec`] for a text
/// the measurement refuses (longer than the context); the model's errors
/// during the measurement.
pub fn calibrate(
    model: &mut Model,
    prompt: &[u32],
    reply_tokens: usize,
    stop: &[u32],
    max_pass: usize,
    reach: usize,
) -> Result<LogitNoise, Error> {
    model.reset();
    let mut stepper = decode::stepper(model, stop, false)?;
    let reply = plain_until(model, &mut stepper, prompt, reply_tokens.max(1))?;
    let mut text = prompt.to_vec();
    text.extend_from_slice(&reply.tokens);
    let noise = LogitNoise::calibrate(model, &text, prompt.len(), max_pass, reach)?;
    model.reset();
    Ok(noise)
}

/// [`LogitNoise::measure`] on `model` alone: `text[start..]` one token a
/// pass, then in passes of each of `pass_lens` tokens, after the same
/// cached `text[..start]`, every row compared. Leaves the cache empty.
///
/// # Errors
///
/// [`Error::Selfspec`] for a `start` outside `1..text.len()`, a pass length
/// of 0 or over the batch, a text longer than the context; the model's
/// errors.
pub fn measure(
    model: &mut Model,
    text: &[u32],
    start: usize,
    pass_lens: &[usize],
) -> Result<LogitNoise, Error> {
    let noise = LogitNoise::measure(model, text, start, pass_lens, 0)?;
    model.reset();
    Ok(noise)
}
