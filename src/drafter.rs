//! The [`Drafter`] trait: the one interface every strategy implements.

use std::fmt;

use crate::limits::{check_range, MAX_DRAFT};
use crate::token::Token;
use crate::Error;

/// The engine's limits on one draft, passed to every [`Drafter::draft`] call.
///
/// The orchestrator ([`crate::Speculative`]) enforces them on what it hands the
/// engine; strategies may read them too (ngram-mod stops after `max` tokens and
/// gives up below `min`, as llama.cpp's does).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct DraftLimits {
    /// Drafts shorter than this are not worth verifying (llama.cpp's `--draft-min`).
    pub min: usize,
    /// The engine verifies at most this many draft tokens (llama.cpp's `--draft-max`).
    pub max: usize,
}

impl Default for DraftLimits {
    /// llama.cpp's engine defaults: `min = 0`, `max = 16` (the one place they
    /// are written: [`Config::default`](crate::Config::default) and
    /// configuration files take them from here).
    fn default() -> Self {
        DraftLimits { min: 0, max: 16 }
    }
}

impl DraftLimits {
    /// Checks `1 <= max <= MAX_DRAFT` and `min <= max`: the one check of the
    /// limits, used by [`Config::validate`](crate::Config::validate) and
    /// [`Speculative::from_drafters`](crate::Speculative::from_drafters).
    ///
    /// ```
    /// use selfspec::DraftLimits;
    ///
    /// assert!(DraftLimits::default().validate().is_ok());
    /// assert!(DraftLimits { min: 17, max: 16 }.validate().is_err());
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::OutOfRange`] for `max` (reported as `config`'s `draft_max`),
    /// [`Error::DraftMinAboveMax`] when `min > max`.
    pub fn validate(&self) -> Result<(), Error> {
        check_range("config", "draft_max", self.max, 1, MAX_DRAFT)?;
        if self.min > self.max {
            return Err(Error::DraftMinAboveMax {
                draft_min: self.min,
                draft_max: self.max,
            });
        }
        Ok(())
    }
}

/// A source of draft tokens: one llama.cpp "speculative implementation".
///
/// The trait is object-safe so an engine can chain its own drafters (a draft
/// model included) with this crate's through
/// [`Speculative::from_drafters`](crate::Speculative::from_drafters).
/// One drafter serves one sequence; the engine calls, per request:
///
/// 1. [`begin`](Drafter::begin) once with the prompt (the whole history the
///    target holds when generation starts),
/// 2. per decoding step [`draft`](Drafter::draft) with the tokens the target has
///    evaluated (`history`) and the token it just sampled (`last`, not yet in
///    `history`),
/// 3. [`accept`](Drafter::accept) with how many of this drafter's tokens the target
///    kept, when it drafted.
///
/// Implementations must not panic on any input: a history may shrink, change or
/// be empty, `accept` may come without a draft or with more tokens than drafted.
///
/// # Example
///
/// A drafter that always proposes repeating the last token:
///
/// ```
/// use selfspec::{DraftLimits, Drafter, Token};
///
/// #[derive(Debug)]
/// struct Repeat;
///
/// impl Drafter for Repeat {
///     fn name(&self) -> &str { "repeat" }
///     fn begin(&mut self, _prompt: &[Token]) {}
///     fn draft(&mut self, _history: &[Token], last: Token, limits: DraftLimits, draft: &mut Vec<Token>) {
///         draft.extend(std::iter::repeat(last).take(limits.max.min(4)));
///     }
///     fn accept(&mut self, _n_accepted: usize) {}
/// }
///
/// let mut d = Repeat;
/// let mut out = Vec::new();
/// d.draft(&[1, 2, 3], 7, DraftLimits::default(), &mut out);
/// assert_eq!(out, [7, 7, 7, 7]);
/// ```
pub trait Drafter: Send + fmt::Debug {
    /// The name printed in statistics lines (`ngram_simple`, `ngram_mod`, ...).
    fn name(&self) -> &str;

    /// A new request starts with `prompt` as the target's history.
    fn begin(&mut self, prompt: &[Token]);

    /// Appends draft tokens for the continuation of `history ++ [last]` to `draft`.
    ///
    /// `draft` is empty on entry; leaving it empty means "no draft". The buffer
    /// is reused across calls, so a warmed-up drafter need not allocate.
    fn draft(
        &mut self,
        history: &[Token],
        last: Token,
        limits: DraftLimits,
        draft: &mut Vec<Token>,
    );

    /// The target kept the first `n_accepted` tokens of this drafter's last draft.
    ///
    /// The orchestrator never forwards `n_accepted == 0` (as llama.cpp).
    fn accept(&mut self, n_accepted: usize);

    /// The current request has ended: a drafter that learns across requests
    /// hands what it holds of this one to the engine-wide state (recall
    /// publishes the request's tokens to the [`Shared`](crate::Shared)
    /// memory). The next request starts with [`begin`](Drafter::begin).
    /// Nothing by default.
    fn end_request(&mut self) {}

    /// The engine verifies only the first `len` tokens of this drafter's
    /// last draft (it cut the rest, to fit its batch): the ones after them
    /// were never tried, and a drafter that learns from acceptance must not
    /// count them as rejected. Called before [`accept`](Drafter::accept);
    /// `len` 0 means the draft was dropped. Nothing by default.
    fn truncate_draft(&mut self, _len: usize) {}

    /// Heap bytes this drafter holds for its sequence (shared state, such as
    /// ngram-mod's pool, is not counted). For memory accounting; 0 by default.
    fn heap_bytes(&self) -> usize {
        0
    }

    /// The concrete drafter, for introspection through
    /// [`Speculative::drafter`](crate::Speculative::drafter) (e.g.
    /// `as_any()?.downcast_ref::<NgramMap>()`). `None` by default.
    fn as_any(&self) -> Option<&dyn std::any::Any> {
        None
    }

    /// A copy of this drafter that continues from its state, for a sequence
    /// that branches from this one (parallel sampling, beam search): on the
    /// same calls the copy drafts as this drafter would (recall's, see
    /// [`Speculative::fork`](crate::Speculative::fork)), and nothing is
    /// re-indexed. Shared state (ngram-mod's pool, recall's engine-wide
    /// memory) stays shared. `None` by default: the drafter cannot fork, and
    /// neither can a [`Speculative`](crate::Speculative) holding it
    /// ([`Speculative::fork`](crate::Speculative::fork)). Every strategy of
    /// this crate forks.
    fn fork(&self) -> Option<Box<dyn Drafter>> {
        None
    }

    /// The engine's price of one more verified token, relative to a forward
    /// pass, in `[0, 1)` (see [`Speculative::set_token_cost`](crate::Speculative::set_token_cost)):
    /// a drafter that estimates its tokens' acceptance stops where the
    /// expected gain of the next one falls below it. Ignored by default.
    fn set_token_cost(&mut self, _cost: f64) {}

    /// The estimated probability that each token of the last draft is
    /// accepted, given that the ones before it were (empty when the drafter
    /// makes no estimate, the default).
    fn probabilities(&self) -> &[f64] {
        &[]
    }

    /// What the drafter's [`probabilities`](Drafter::probabilities) are
    /// learned over, when it learns them from an engine-wide memory: a
    /// number of that memory's own (each scope of a
    /// [`Shared`](crate::Shared) has one). The stepper's draft budget
    /// corrects estimates by what it measured separately for each, so that
    /// one scope's traffic does not shorten or lengthen another's drafts.
    /// `None` (the default): one correction for every drafter of this name.
    fn estimates_source(&self) -> Option<u64> {
        None
    }
}

impl<D: Drafter + ?Sized> Drafter for Box<D> {
    fn name(&self) -> &str {
        (**self).name()
    }
    fn begin(&mut self, prompt: &[Token]) {
        (**self).begin(prompt)
    }
    fn draft(
        &mut self,
        history: &[Token],
        last: Token,
        limits: DraftLimits,
        draft: &mut Vec<Token>,
    ) {
        (**self).draft(history, last, limits, draft)
    }
    fn accept(&mut self, n_accepted: usize) {
        (**self).accept(n_accepted)
    }
    fn end_request(&mut self) {
        (**self).end_request()
    }
    fn truncate_draft(&mut self, len: usize) {
        (**self).truncate_draft(len)
    }
    fn heap_bytes(&self) -> usize {
        (**self).heap_bytes()
    }
    fn as_any(&self) -> Option<&dyn std::any::Any> {
        (**self).as_any()
    }
    fn fork(&self) -> Option<Box<dyn Drafter>> {
        (**self).fork()
    }
    fn set_token_cost(&mut self, cost: f64) {
        (**self).set_token_cost(cost)
    }
    fn probabilities(&self) -> &[f64] {
        (**self).probabilities()
    }
    fn estimates_source(&self) -> Option<u64> {
        (**self).estimates_source()
    }
}
