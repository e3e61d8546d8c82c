//! The decoding loops: plain greedy decoding (one token per forward pass) and
//! self-speculative greedy decoding (selfspec drafts from the token history,
//! one forward pass verifies `[last] + draft`), and a runtime measurement of
//! the token cost selfspec's recall strategy weighs its drafts against.
//!
//! The engine hooks are marked in [`speculative`] with `// prefill`,
//! `// propose`, `// verify`, `// commit`, `// rollback` and
//! `// end of request`.

use std::time::{Duration, Instant};

use candle_core::Tensor;
use selfspec::{verify, Config, Shared, Speculative};
use selfspec_conversations::argmax_gap;

use crate::{Error, Model};

/// Prompt tokens evaluated in one pass at most while prefilling (bounds the
/// attention scores' memory on long prompts).
pub const PREFILL_CHUNK: usize = 256;

/// When a request ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Tokens to generate at most.
    pub max_tokens: usize,
    /// A token that ends the reply (kept as its last token), e.g. the chat
    /// template's end of turn.
    pub stop: Option<u32>,
}

impl Limits {
    /// `max_tokens` tokens, no stop token.
    #[must_use]
    pub fn tokens(max_tokens: usize) -> Limits {
        Limits {
            max_tokens,
            stop: None,
        }
    }
}

/// What one request produced.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Generation {
    /// The generated tokens (the first comes from the prefill pass; a stop
    /// token, when reached, is the last).
    pub tokens: Vec<u32>,
    /// For each generated token, the top-1 / top-2 logit gap of the row that
    /// chose it (infinite for a one-token vocabulary).
    pub gaps: Vec<f32>,
    /// Forward passes, the prefill's counted as one.
    pub forward_passes: usize,
    /// Draft tokens sent to verification.
    pub drafted: usize,
    /// Draft tokens the model kept.
    pub accepted: usize,
    /// Wall-clock time of the request (prefill included).
    pub elapsed: Duration,
    /// Wall-clock time after the prefill (the decoding proper).
    pub decode_time: Duration,
    /// The smallest of `gaps`.
    pub min_margin: f32,
}

impl Generation {
    fn new() -> Generation {
        Generation {
            min_margin: f32::INFINITY,
            ..Generation::default()
        }
    }

    /// Generated tokens per forward pass (tau).
    #[must_use]
    #[allow(clippy::cast_precision_loss)]
    pub fn tau(&self) -> f64 {
        self.tokens.len() as f64 / self.forward_passes.max(1) as f64
    }

    /// Generated tokens per second.
    #[must_use]
    #[allow(clippy::cast_precision_loss)]
    pub fn tokens_per_second(&self) -> f64 {
        self.tokens.len() as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    /// Appends `tokens` (with their rows' gaps) up to the limits; whether
    /// the request is done.
    fn push(&mut self, tokens: &[(u32, f32)], limits: Limits) -> bool {
        for &(token, gap) in tokens {
            self.tokens.push(token);
            self.gaps.push(gap);
            self.min_margin = self.min_margin.min(gap);
            if Some(token) == limits.stop || self.tokens.len() >= limits.max_tokens {
                return true;
            }
        }
        false
    }
}

/// The argmax of each row of `logits` (`[rows, vocab]`, first index on a
/// tie) and each row's top-1 / top-2 gap.
///
/// # Errors
///
/// [`Error::Candle`] if `logits` is not a 2-d f32 tensor.
pub fn argmax_rows(logits: &Tensor) -> Result<Vec<(u32, f32)>, Error> {
    let rows = logits.to_vec2::<f32>()?;
    Ok(rows.iter().map(|row| argmax_gap(row)).collect())
}

/// Plain greedy decoding: `max_tokens` tokens after `prompt`, one forward
/// pass each (the baseline), from an empty cache.
///
/// # Errors
///
/// [`Error::EmptyPrompt`], [`Error::TokenOutOfRange`] for a prompt token
/// outside the vocabulary, [`Error::Candle`] if a pass fails.
pub fn plain(model: &mut Model, prompt: &[u32], max_tokens: usize) -> Result<Generation, Error> {
    model.reset();
    plain_until(model, prompt, Limits::tokens(max_tokens))
}

/// Plain greedy decoding until `limits`. The cached positions that are a
/// prefix of `prompt` are reused ([`Model::prefill`]).
///
/// # Errors
///
/// As [`plain`], and [`Error::ContextFull`] when the model's context ends
/// first.
pub fn plain_until(model: &mut Model, prompt: &[u32], limits: Limits) -> Result<Generation, Error> {
    let start = Instant::now();
    let mut g = Generation::new();
    if limits.max_tokens == 0 {
        return Ok(g);
    }
    let mut row = argmax_rows(&model.prefill(prompt, PREFILL_CHUNK)?)?;
    g.forward_passes = 1;
    let decoding = Instant::now();
    while !g.push(&row, limits) {
        let next = row[0].0;
        row = argmax_rows(&model.forward(&[next])?)?;
        g.forward_passes += 1;
    }
    g.decode_time = decoding.elapsed();
    g.elapsed = start.elapsed();
    Ok(g)
}

/// Speculative greedy decoding with selfspec: the same tokens as [`plain`],
/// in fewer forward passes where the drafts are accepted.
///
/// One [`Speculative`] per request on the engine-wide `shared` (built with
/// `config`); `token_cost`, if given, goes to
/// [`Speculative::set_token_cost`]. Starts from an empty cache.
///
/// # Errors
///
/// As [`plain`], and [`Error::Selfspec`] for an invalid `config` or
/// `token_cost`.
pub fn speculative(
    model: &mut Model,
    config: &Config,
    shared: &Shared,
    prompt: &[u32],
    max_tokens: usize,
    token_cost: Option<f64>,
) -> Result<Generation, Error> {
    let mut spec = Speculative::with_shared(config, shared)?;
    if let Some(cost) = token_cost {
        spec.set_token_cost(cost)?;
    }
    model.reset();
    speculative_until(model, &mut spec, prompt, Limits::tokens(max_tokens))
}

/// Speculative greedy decoding of one request with `spec` (new for the
/// request, or reused: [`Speculative::begin`] starts it) until `limits`.
///
/// # Errors
///
/// As [`plain_until`].
pub fn speculative_until(
    model: &mut Model,
    spec: &mut Speculative,
    prompt: &[u32],
    limits: Limits,
) -> Result<Generation, Error> {
    let start = Instant::now();
    let mut g = Generation::new();
    if limits.max_tokens == 0 {
        return Ok(g);
    }

    // prefill: the cache holds the prompt; its last row gives the first token.
    let first = argmax_rows(&model.prefill(prompt, PREFILL_CHUNK)?)?;
    g.forward_passes = 1;
    let decoding = Instant::now();
    spec.begin(prompt);
    // The tokens the model has evaluated (= the KV cache); `last` is not in it.
    let mut history = prompt.to_vec();
    let mut last = first[0].0;
    let mut done = g.push(&first, limits);

    let mut input = Vec::new();
    while !done {
        // propose: at most as many draft tokens as the request still needs
        // (a pass yields the accepted ones and one more).
        let room = limits.max_tokens - g.tokens.len();
        let draft = spec.draft(&history, last);
        let draft = &draft[..draft.len().min(room - 1)];

        // verify: one pass over [last] + draft at positions len..len + 1 + k;
        // row i predicts the token after [last] + draft[..i].
        input.clear();
        input.push(last);
        input.extend_from_slice(draft);
        let rows = argmax_rows(&model.forward(&input)?)?;
        g.forward_passes += 1;
        let argmax: Vec<u32> = rows.iter().map(|&(t, _)| t).collect();
        let v = verify::greedy_next(draft, &argmax).ok_or(Error::Candle(
            candle_core::Error::Msg("a pass returned fewer rows than tokens".into()),
        ))?;

        // commit: history grows by `last` and the kept draft tokens; the
        // correction (or bonus) token is the next `last`. A stop token ends
        // the request where it appears.
        g.drafted += draft.len();
        g.accepted += v.n_accepted;
        history.push(last);
        history.extend_from_slice(&draft[..v.n_accepted]);
        done = g.push(&rows[..=v.n_accepted], limits);
        last = v.next_token;

        // rollback: drop the rejected draft positions from the KV cache.
        model.truncate(history.len());
        spec.accept(v.n_accepted);
    }
    // end of request: the request's tokens join the engine-wide memory
    // (`shared`), for the next requests' drafts.
    spec.end_request();
    g.decode_time = decoding.elapsed();
    g.elapsed = start.elapsed();
    Ok(g)
}

/// Times forward passes of 1 and 17 tokens after a 256-token context and
/// returns the marginal cost of one more token in a pass relative to a
/// one-token pass, `(t(17) - t(1)) / 16 / t(1)`, clamped to `[0, 0.99]`
/// (the range [`Speculative::set_token_cost`] accepts). Leaves the cache
/// empty.
///
/// # Errors
///
/// [`Error::Candle`] if a pass fails.
pub fn measure_token_cost(model: &mut Model) -> Result<f64, Error> {
    let (t1, t17) = (pass_time(model, 256, 1, 9)?, pass_time(model, 256, 17, 9)?);
    model.reset();
    Ok(token_cost_from(t1, t17))
}

/// `(t17 - t1) / 16 / t1`, clamped to `[0, 0.99]`.
#[must_use]
pub fn token_cost_from(t1: Duration, t17: Duration) -> f64 {
    let (a, b) = (t1.as_secs_f64(), t17.as_secs_f64());
    if a <= 0.0 {
        return 0.0;
    }
    ((b - a) / 16.0 / a).clamp(0.0, 0.99)
}

/// The median time of `reps` forward passes of `tokens` tokens after a
/// `context`-token cache (the pass is rolled back after each timing).
///
/// # Errors
///
/// [`Error::Candle`] if a pass fails.
pub fn pass_time(
    model: &mut Model,
    context: usize,
    tokens: usize,
    reps: usize,
) -> Result<Duration, Error> {
    let vocab = u32::try_from(model.config().vocab_size).unwrap_or(u32::MAX);
    let token = |i: usize| u32::try_from(i % 97).unwrap_or(0) % vocab;
    let ctx: Vec<u32> = (0..context.max(1)).map(token).collect();
    let pass: Vec<u32> = (0..tokens.max(1)).map(|i| token(i + 7)).collect();
    model.reset();
    model.forward(&ctx)?;
    let mut times = Vec::with_capacity(reps.max(1));
    for _ in 0..reps.max(1) {
        let t = Instant::now();
        let logits = model.forward(&pass)?;
        argmax_rows(&logits)?;
        times.push(t.elapsed());
        model.truncate(ctx.len());
    }
    times.sort();
    Ok(times[times.len() / 2])
}
