//! The owned-history mode ([`OwnedHistory`]): the `Speculative` keeps the
//! history itself, for engines whose ids are `i32` or that hold no `&[u32]`
//! history.

use super::Speculative;
use crate::token::{IntoToken, Token};

/// The history a [`Speculative`] keeps for the engine in the owned-history
/// mode: the prompt of `begin_owned`, then each `draft_next`'s `last` and the
/// accepted draft tokens. Empty, and never touched by the drafting path,
/// for engines that pass their own histories to `draft`.
#[derive(Clone, Debug, Default)]
pub(super) struct OwnedHistory {
    tokens: Vec<Token>,
    /// The pending draft came from `draft_next`: `accept` appends its
    /// accepted tokens.
    pending: bool,
    /// The last `draft_next` draft in `i32` ids.
    ids: Vec<i32>,
}

impl OwnedHistory {
    /// Forgets the history (keeping its buffer).
    pub(super) fn clear(&mut self) {
        self.tokens.clear();
    }

    /// A `draft` call on the engine's own history: nothing to append on
    /// `accept`.
    pub(super) fn external_draft(&mut self) {
        self.pending = false;
    }

    /// The first `n` tokens of `draft` were accepted.
    pub(super) fn accepted(&mut self, draft: &[Token], n: usize) {
        if self.pending {
            self.tokens.extend_from_slice(&draft[..n]);
        }
    }

    /// Heap bytes of the history and the id buffer.
    pub(super) fn heap_bytes(&self) -> usize {
        (self.tokens.capacity() + self.ids.capacity()) * 4
    }
}

impl Speculative {
    /// A new request starts with `prompt`, and this instance keeps the
    /// history itself: the owned-history API, for engines whose token type
    /// is not `u32` (llama.cpp bindings hold `i32` ids: see [`IntoToken`]) or
    /// that would rather not keep a `&[u32]` copy of the history. The engine
    /// then calls [`draft_next`](Speculative::draft_next) with each sampled
    /// token and [`accept`](Speculative::accept) as usual; the history grows
    /// by `[last] + draft[..n_accepted]` on its own. Tokens the target
    /// evaluates outside drafting go in with [`extend_history`](Speculative::extend_history),
    /// a rollback is [`truncate_history`](Speculative::truncate_history).
    ///
    /// The ids are converted on the way in (`i32` bit for bit, as llama.cpp's
    /// hashes see them), so the drafts are exactly those of
    /// [`begin`](Speculative::begin) / [`draft`](Speculative::draft) on the
    /// converted stream. The held copy is the one [`heap_bytes`](Speculative::heap_bytes)
    /// counts: 4 bytes a token.
    ///
    /// ```
    /// use selfspec::{Config, Speculative};
    ///
    /// // An engine with llama.cpp's i32 ids; -1 is an ordinary id here.
    /// let target: Vec<i32> = [-1, 10, 11, 12, 13, 14, 15, 16].repeat(8);
    /// let prompt = &target[..24];
    ///
    /// let mut spec = Speculative::new(&Config::recommended())?;
    /// spec.begin_owned(prompt);                    // no u32 copy on the engine's side
    /// let mut n = prompt.len();                    // tokens the target has evaluated
    /// let mut forward_passes = 0;
    /// while n < target.len() {
    ///     let last = target[n];                    // the token the target just sampled
    ///     let draft = spec.draft_next(last);       // drafts after history ++ [last]
    ///     let truth = &target[n + 1..];
    ///     let n_accepted = draft
    ///         .iter()                              // the engine's own i32 ids
    ///         .zip(truth)
    ///         .take_while(|(d, t)| d == t)
    ///         .count();
    ///     spec.accept(n_accepted);                 // the history grows by [last] + accepted
    ///     n += 1 + n_accepted;
    ///     forward_passes += 1;
    /// }
    /// assert_eq!(spec.history().len(), target.len());
    /// assert!(forward_passes < (target.len() - prompt.len()) / 2);
    /// # Ok::<(), selfspec::Error>(())
    /// ```
    pub fn begin_owned<T: IntoToken>(&mut self, prompt: impl IntoIterator<Item = T>) {
        let mut history = std::mem::take(&mut self.owned.tokens);
        history.clear();
        history.extend(prompt.into_iter().map(IntoToken::into_token));
        self.begin_drafters(&history);
        self.owned.tokens = history;
    }

    /// Appends tokens the target has evaluated to the owned history (see
    /// [`begin_owned`](Speculative::begin_owned)) outside the drafting steps:
    /// a tool's output, a user turn that continues the request. Not needed
    /// for `last` and the accepted draft tokens: [`draft_next`](Speculative::draft_next)
    /// and [`accept`](Speculative::accept) append those.
    pub fn extend_history<T: IntoToken>(&mut self, tokens: impl IntoIterator<Item = T>) {
        self.owned
            .tokens
            .extend(tokens.into_iter().map(IntoToken::into_token));
    }

    /// Cuts the owned history back to its first `len` tokens (a rollback of
    /// the target's cache); nothing happens when it is not longer.
    pub fn truncate_history(&mut self, len: usize) {
        self.owned.tokens.truncate(len);
    }

    /// The owned history: the prompt of [`begin_owned`](Speculative::begin_owned),
    /// then each [`draft_next`](Speculative::draft_next)'s `last` and the
    /// accepted draft tokens. Empty for engines that pass their own
    /// histories to [`draft`](Speculative::draft).
    #[must_use]
    pub fn history(&self) -> &[Token] {
        &self.owned.tokens
    }

    /// [`draft`](Speculative::draft) on the owned history (see
    /// [`begin_owned`](Speculative::begin_owned)): draft tokens to verify
    /// after `last`, the token the target just sampled. `last` then joins
    /// the history, and [`accept`](Speculative::accept) appends the accepted
    /// draft tokens to it.
    ///
    /// The draft comes in the engine's id type (`i32` ids: written into a
    /// buffer that is reused, so a warm call does not allocate).
    pub fn draft_next<T: IntoToken>(&mut self, last: T) -> &[T::Id] {
        let last = last.into_token();
        let history = std::mem::take(&mut self.owned.tokens);
        self.draft_from(&history, last);
        self.owned.tokens = history;
        self.owned.tokens.push(last);
        self.owned.pending = true;
        T::ids(&self.draft, &mut self.owned.ids)
    }
}
