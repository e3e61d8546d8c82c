//! The engine's contract on histories: what the previous `draft` and
//! `accept` imply for the next history, and the two mistakes reported.

use super::Speculative;
use crate::token::Token;

/// The shape of the previous `draft` call (or of `begin`'s prompt), from
/// which the next history's length and tail follow.
#[derive(Clone, Copy, Debug)]
pub(super) struct Expect {
    /// Length of the previous history (or of the prompt).
    pub(super) base: usize,
    /// Its last token.
    pub(super) base_tail: Option<Token>,
    /// The previous `last` (`None` right after `begin`: the next history is
    /// the prompt itself).
    pub(super) last: Option<Token>,
    /// Draft tokens accepted since (the first `accepted` of `draft`).
    pub(super) accepted: usize,
}

/// The two engine mistakes [`Speculative::draft`] reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Misuse {
    /// The history already holds `last`.
    LastIncluded,
    /// The history did not grow by `last` and the accepted draft tokens.
    NotExtended,
    /// `accept(n)` with `n` above the draft's length.
    AcceptedMore,
}

impl Expect {
    pub(super) fn len(&self) -> usize {
        self.base + usize::from(self.last.is_some()) + self.accepted
    }

    /// `h[..base]` ends as the previous history did, then `[last] + accepted`
    /// follows from `base` on (only as far as `h` reaches).
    pub(super) fn tail_matches(&self, h: &[Token], base: usize, accepted: &[Token]) -> bool {
        if let Some(before) = base.checked_sub(1) {
            if h.get(before) != self.base_tail.as_ref() {
                return false;
            }
        }
        let mut i = base;
        if let Some(last) = self.last {
            match h.get(i) {
                Some(&t) if t == last => i += 1,
                Some(_) => return false,
                None => return true,
            }
        }
        let rest = &h[i.min(h.len())..];
        let n = rest.len().min(accepted.len());
        rest[..n] == accepted[..n]
    }

    /// Classifies `history` (with the new `last`) against this expectation;
    /// `accepted` are the accepted draft tokens. `None`: right, or a rewrite.
    pub(super) fn check(
        &self,
        history: &[Token],
        last: Token,
        accepted: &[Token],
    ) -> Option<Misuse> {
        let want = self.len();
        let len = history.len();
        // Right: exactly the previous history + [last] + accepted.
        if len == want && self.tail_matches(history, self.base, accepted) {
            return None;
        }
        let ends_with_last = history.last() == Some(&last);
        // (a) The same, with the new `last` already appended.
        if len == want + 1 && ends_with_last && self.tail_matches(history, self.base, accepted) {
            return Some(Misuse::LastIncluded);
        }
        // (a), made every step: the previous history already ended with its
        // `last` (so it sits at base - 1), then the accepted tokens and the new `last`.
        if let (Some(prev_last), Some(before)) = (self.last, self.base.checked_sub(1)) {
            if len == self.base + self.accepted + 1
                && ends_with_last
                && self.base_tail == Some(prev_last)
                && history.get(before) == Some(&prev_last)
                && history[self.base..len - 1] == *accepted
            {
                return Some(Misuse::LastIncluded);
            }
            // (b) `last` appended, the accepted tokens not.
            if self.accepted > 0
                && len == self.base + 1
                && self.tail_matches(history, self.base, accepted)
            {
                return Some(Misuse::NotExtended);
            }
            // (b) Nothing appended: the previous history again.
            if len == self.base && history.last() == self.base_tail.as_ref() {
                return Some(Misuse::NotExtended);
            }
        }
        None
    }
}

impl Speculative {
    /// Checks `history` against what the previous calls implied (see
    /// [`draft`](Speculative::draft)), then records this call's shape.
    pub(super) fn check_history(&mut self, history: &[Token], last: Token) {
        if let Some(expect) = self.expect {
            let accepted = &self.draft[..expect.accepted.min(self.draft.len())];
            if let Some(misuse) = expect.check(history, last, accepted) {
                let want = expect.len();
                let got = history.len();
                self.report(misuse, want, got, expect.accepted);
            }
        }
        self.expect = Some(Expect {
            base: history.len(),
            base_tail: history.last().copied(),
            last: Some(last),
            accepted: 0,
        });
    }

    /// Logs `misuse` once per sequence and counts the sequence.
    /// `want` / `got`: history lengths, or for [`Misuse::AcceptedMore`] the
    /// draft's length and the count given.
    pub(super) fn report(&mut self, misuse: Misuse, want: usize, got: usize, accepted: usize) {
        if self.misuse_reported {
            return;
        }
        self.misuse_reported = true;
        self.misuses += 1;
        match misuse {
            Misuse::LastIncluded => tracing::warn!(
                target: "selfspec",
                "draft(history, last): the history ({got} tokens) already ends with \
                 `last`; expected {want} tokens: the previous history + [its last] + \
                 the {} accepted draft tokens, without the new `last` (reported once \
                 until the next begin)",
                accepted
            ),
            Misuse::NotExtended => tracing::warn!(
                target: "selfspec",
                "draft(history, last): the history ({got} tokens) did not grow by the \
                 previous `last` and the {} accepted draft tokens; expected {want} \
                 tokens: history + [last] + draft[..n_accepted] (reported once until \
                 the next begin)",
                accepted
            ),
            Misuse::AcceptedMore => tracing::warn!(
                target: "selfspec",
                "accept({got}): the draft had {want} tokens; counted as {want} \
                 (reported once until the next begin)"
            ),
        }
    }

    /// Sequences (spans between [`begin`](Speculative::begin) calls) in which
    /// [`draft`](Speculative::draft) saw a history that breaks its contract
    /// (`last` already included, or the accepted tokens not appended), or
    /// [`accept`](Speculative::accept) got more tokens than the draft had;
    /// each was also logged once through `tracing::warn!`. Cleared by
    /// [`reset_stats`](Speculative::reset_stats).
    #[must_use]
    pub fn misuse_count(&self) -> u64 {
        self.misuses
    }
}
