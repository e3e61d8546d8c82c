//! Verification helpers: which draft tokens the target keeps, and the token
//! that follows them.
//!
//! The engine runs one batched forward pass over `[last] + draft` (`k` draft
//! tokens: `k + 1` positions). Row `i` of its output is the target's
//! prediction after `[last] + draft[..i]`: row 0 checks `draft[0]`, row `k`
//! predicts the token after a fully accepted draft (the *bonus* token). Both
//! helpers return a [`Verdict`]: keep `draft[..n_accepted]`, then the target's
//! own `next_token` (a correction at the first rejected position, or the
//! bonus), which becomes the next `last`.
//!
//! - [`greedy`] / [`greedy_next`] for greedy decoding (argmax per row): the
//!   output is exactly what decoding without drafts gives.
//! - [`sampled`] for sampling (temperature, top-p...: any distribution per
//!   row): the speculative-sampling rule for a deterministic draft, so every
//!   emitted token is distributed exactly as if sampled from the target.
//!
//! Where they go in an engine loop:
//!
//! ```
//! use selfspec::{verify, Config, Speculative, Token};
//!
//! // A mock target: its greedy choice after `t` is `(t + 1) % 8`, except after 5.
//! let argmax_after = |t: Token| if t == 5 { 0 } else { (t + 1) % 8 };
//! let mut spec = Speculative::new(&Config::recommended())?;
//! let prompt: Vec<Token> = (0..64).map(|i| argmax_after(i) % 8).collect();
//! spec.begin(&prompt);
//! let mut history = prompt.clone();
//! let mut last: Token = argmax_after(*history.last().unwrap()); // sampled after prefill
//! for _ in 0..20 {
//!     // 1. propose
//!     let draft = spec.draft(&history, last);
//!     // 2. one batched forward pass over [last] + draft: one row per position
//!     let rows: Vec<Token> = std::iter::once(last).chain(draft.iter().copied()).map(argmax_after).collect();
//!     // 3. verify
//!     let v = verify::greedy_next(draft, &rows).expect("one row more than the draft");
//!     // 4. commit: the history grows by [last] + the accepted tokens; the
//!     //    target's next token is the next `last`
//!     history.push(last);
//!     history.extend_from_slice(&draft[..v.n_accepted]);
//!     spec.accept(v.n_accepted);
//!     last = v.next_token;
//! }
//! assert_eq!(spec.misuse_count(), 0);
//! # Ok::<(), selfspec::Error>(())
//! ```
//!
//! With sampling, step 3 is [`sampled`] over the rows' probabilities (after
//! the engine's temperature / top-k / top-p), with the engine's random
//! source:
//!
//! ```
//! use selfspec::verify::{sampled, Verdict};
//!
//! // Rows after [last], [last, 7], [last, 7, 2]: distributions over 4 tokens.
//! let rows: [&[f32]; 3] = [&[0.0, 0.0, 0.0, 1.0], &[0.0, 0.0, 1.0, 0.0], &[0.5, 0.5, 0.0, 0.0]];
//! let draft = [3u32, 2];
//! let mut draws = [0.3, 0.9, 0.75].into_iter(); // the engine's uniform draws in [0, 1)
//! let v = sampled(&draft, &rows, || draws.next().unwrap());
//! assert_eq!(v, Some(Verdict { n_accepted: 2, next_token: 1 })); // both kept, bonus token 1
//! ```

use crate::{IntoToken, Token};

/// The outcome of verifying one draft, in the engine's token ids (`u32` by
/// default, or `i32`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Verdict<T = Token> {
    /// Draft tokens the target keeps: `draft[..n_accepted]`.
    pub n_accepted: usize,
    /// The target's token after them: at the first rejected position its own
    /// choice, after a fully accepted draft the bonus token. It is the next
    /// step's `last`.
    pub next_token: T,
}

/// Greedy verification: the length of the longest prefix of `draft` that the
/// target agrees with.
///
/// `target_argmax[i]` is the target's argmax after `[last] + draft[..i]`, so a
/// forward pass over `[last] + draft` gives `draft.len() + 1` of them; only
/// the first `min(draft.len(), target_argmax.len())` are compared.
///
/// ```
/// assert_eq!(selfspec::verify::greedy(&[4, 5, 6], &[4, 5, 9, 1]), 2);
/// ```
#[must_use]
pub fn greedy<T: PartialEq>(draft: &[T], target_argmax: &[T]) -> usize {
    draft
        .iter()
        .zip(target_argmax)
        .take_while(|(d, t)| d == t)
        .count()
}

/// [`greedy`] and the target's next token (`target_argmax[n_accepted]`: its
/// correction, or the bonus token after a fully accepted draft).
///
/// `None` when `target_argmax` has no row after the accepted prefix (it should
/// have `draft.len() + 1`).
///
/// ```
/// use selfspec::verify::{greedy_next, Verdict};
///
/// assert_eq!(greedy_next(&[4, 5, 6], &[4, 5, 9, 1]), Some(Verdict { n_accepted: 2, next_token: 9 }));
/// assert_eq!(greedy_next(&[4, 5], &[4, 5, 1]), Some(Verdict { n_accepted: 2, next_token: 1 }));
/// assert_eq!(greedy_next(&[], &[3]), Some(Verdict { n_accepted: 0, next_token: 3 }));
/// // i32 ids (llama.cpp's) as they are:
/// assert_eq!(greedy_next(&[-1i32, 5], &[-1, 6, 2]), Some(Verdict { n_accepted: 1, next_token: 6 }));
/// assert_eq!(greedy_next(&[4, 5], &[4, 5]), None); // no row after the accepted prefix
/// ```
#[must_use]
pub fn greedy_next<T: PartialEq + Copy>(draft: &[T], target_argmax: &[T]) -> Option<Verdict<T>> {
    let n_accepted = greedy(draft, target_argmax);
    target_argmax.get(n_accepted).map(|&next_token| Verdict {
        n_accepted,
        next_token,
    })
}

/// Speculative sampling for a deterministic draft (the draft puts probability
/// 1 on each of its tokens, as every selfspec strategy does).
///
/// `target_probs[i]` is the target's distribution over the vocabulary after
/// `[last] + draft[..i]` (indexed by token id; rows of `draft.len() + 1`
/// entries, each summing to 1 after the engine's temperature / top-k / top-p).
/// `uniform` returns independent draws in `[0, 1)` from the engine's random
/// source.
///
/// For `i = 0, 1, ...`, draft token `d = draft[i]` is kept with probability
/// `p_i(d)` (one draw each). At the first rejection the next token is
/// sampled from `p_i` with `d` removed and renormalised; when every draft
/// token is kept it is sampled from the last row (one more draw either way).
/// Every emitted token is thus distributed exactly as sampling from the
/// target token by token.
///
/// Only the first `target_probs.len() - 1` draft tokens are verified when
/// fewer rows are given. Token ids beyond a row's length have probability 0
/// (an `i32` id is read as the `u32` with the same bits).
///
/// `None` when `target_probs` is empty, or when the row the next token is
/// sampled from has no usable mass (empty, all zero or negative once the
/// rejected token is removed, or NaN): the rows are not distributions, and
/// no token would be distributed as the target's.
///
/// ```
/// use selfspec::verify::sampled;
///
/// assert_eq!(sampled::<u32, Vec<f32>>(&[], &[], || 0.5), None);
/// assert_eq!(sampled(&[1u32], &[vec![0.0, 0.0], vec![0.5, 0.5]], || 0.5), None);
/// assert_eq!(sampled(&[0u32], &[vec![f32::NAN, 1.0]], || 0.5), None);
/// ```
pub fn sampled<T: IntoToken, P: AsRef<[f32]>>(
    draft: &[T],
    target_probs: &[P],
    uniform: impl FnMut() -> f64,
) -> Option<Verdict<T::Id>> {
    sampled_rows(draft, &mut SliceRows(target_probs), uniform)
}

/// The rows [`sampled`] reads, one at a time and in order: a slice of rows,
/// or rows computed on demand from a target's logits (the stepper's, which
/// computes only the rows the verification reaches).
pub(crate) trait Rows {
    /// How many rows there are.
    fn count(&self) -> usize;
    /// Row `i` (`i < count()`): a distribution over the vocabulary.
    fn row(&mut self, i: usize) -> &[f32];
}

struct SliceRows<'a, P>(&'a [P]);

impl<P: AsRef<[f32]>> Rows for SliceRows<'_, P> {
    fn count(&self) -> usize {
        self.0.len()
    }
    fn row(&mut self, i: usize) -> &[f32] {
        self.0[i].as_ref()
    }
}

/// [`sampled`] over rows read on demand.
pub(crate) fn sampled_rows<T: IntoToken>(
    draft: &[T],
    rows: &mut impl Rows,
    mut uniform: impl FnMut() -> f64,
) -> Option<Verdict<T::Id>> {
    let k = draft.len().min(rows.count().checked_sub(1)?);
    for (i, &d) in draft[..k].iter().enumerate() {
        let row = rows.row(i);
        let d = d.into_token();
        let p = f64::from(row.get(crate::int::ix32(d)).copied().unwrap_or(0.0));
        if uniform() < p {
            continue;
        }
        return Some(Verdict {
            n_accepted: i,
            next_token: T::from_token(sample(row, Some(d), uniform())?),
        });
    }
    Some(Verdict {
        n_accepted: k,
        next_token: T::from_token(sample(rows.row(k), None, uniform())?),
    })
}

/// Samples from `row` (weights, renormalised) without `skip`, with the draw
/// `u`; `None` when no mass is left (or it is not a number).
fn sample(row: &[f32], skip: Option<Token>, u: f64) -> Option<Token> {
    let weight = |t: usize| -> f64 {
        if Token::try_from(t).ok() == skip {
            0.0
        } else {
            f64::from(row[t]).max(0.0)
        }
    };
    if row.iter().any(|p| p.is_nan()) {
        return None;
    }
    let total: f64 = (0..row.len()).map(weight).sum();
    if total.is_nan() || total <= 0.0 {
        return None;
    }
    let target = u * total;
    let mut cumulative = 0.0;
    let mut chosen = None;
    for t in 0..row.len() {
        let w = weight(t);
        if w <= 0.0 {
            continue;
        }
        cumulative += w;
        chosen = Some(t);
        if target < cumulative {
            break;
        }
    }
    chosen.and_then(|t| Token::try_from(t).ok())
}
