//! The engine's contract on histories ([`Contract`]): what the previous
//! `draft` and `accept` imply for the next history, and the three mistakes
//! reported (two in the history passed to `draft`, one in `accept`).

use crate::token::Token;

/// The shape of the previous `draft` call (or of `begin`'s prompt), from
/// which the next history's length and tail follow.
#[derive(Clone, Copy, Debug)]
struct Expect {
    /// Length of the previous history (or of the prompt).
    base: usize,
    /// Its last token.
    base_tail: Option<Token>,
    /// The previous `last` (`None` right after `begin`: the next history is
    /// the prompt itself).
    last: Option<Token>,
    /// Draft tokens accepted since (the first `accepted` of `draft`).
    accepted: usize,
}

/// The three engine mistakes a [`Contract`] reports, each with what it saw.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Misuse {
    /// `draft`: the history already holds the new `last`.
    LastIncluded {
        /// Tokens in the history given.
        history: usize,
        /// Tokens it should have held: the previous history, its `last`
        /// and the accepted draft tokens.
        expected: usize,
        /// Draft tokens accepted since the previous call.
        accepted: usize,
    },
    /// `draft`: the history did not grow by the previous `last` and the
    /// accepted draft tokens.
    NotExtended {
        /// Tokens in the history given.
        history: usize,
        /// Tokens it should have held.
        expected: usize,
        /// Draft tokens accepted since the previous call.
        accepted: usize,
    },
    /// `accept(n)` with `n` above the draft's length.
    AcceptedMore {
        /// The draft's length.
        draft: usize,
        /// The `n` given.
        given: usize,
    },
}

impl Expect {
    fn len(&self) -> usize {
        self.base + usize::from(self.last.is_some()) + self.accepted
    }

    /// `h[..base]` ends as the previous history did, then `[last] + accepted`
    /// follows from `base` on (only as far as `h` reaches).
    fn tail_matches(&self, h: &[Token], base: usize, accepted: &[Token]) -> bool {
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
    fn check(&self, history: &[Token], last: Token, accepted: &[Token]) -> Option<Misuse> {
        let expected = self.len();
        let len = history.len();
        // Right: exactly the previous history + [last] + accepted.
        if len == expected && self.tail_matches(history, self.base, accepted) {
            return None;
        }
        let last_included = Misuse::LastIncluded {
            history: len,
            expected,
            accepted: self.accepted,
        };
        let not_extended = Misuse::NotExtended {
            history: len,
            expected,
            accepted: self.accepted,
        };
        let ends_with_last = history.last() == Some(&last);
        // (a) The same, with the new `last` already appended.
        if len == expected + 1 && ends_with_last && self.tail_matches(history, self.base, accepted)
        {
            return Some(last_included);
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
                return Some(last_included);
            }
            // (b) `last` appended, the accepted tokens not.
            if self.accepted > 0
                && len == self.base + 1
                && self.tail_matches(history, self.base, accepted)
            {
                return Some(not_extended);
            }
            // (b) Nothing appended: the previous history again.
            if len == self.base && history.last() == self.base_tail.as_ref() {
                return Some(not_extended);
            }
        }
        None
    }
}

/// The history-contract checker of one sequence: what the next `draft`
/// call's history should be, and the sequences in which a mistake was seen
/// (each logged once through `tracing::warn!`, target `selfspec`).
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Contract {
    /// What the next `draft` call's history should look like.
    expect: Option<Expect>,
    /// A misuse was reported since the last `begin`.
    reported: bool,
    /// Sequences (spans between `begin` calls) in which a misuse was reported.
    misuses: u64,
}

impl Contract {
    /// A copy for a forked sequence: the same expectation, no misuse seen.
    pub(super) fn fork(&self) -> Contract {
        Contract {
            expect: self.expect,
            ..Contract::default()
        }
    }

    /// A new sequence starts from `prompt`: the next history is `prompt`.
    pub(super) fn begin(&mut self, prompt: &[Token]) {
        self.reported = false;
        self.expect = Some(Expect {
            base: prompt.len(),
            base_tail: prompt.last().copied(),
            last: None,
            accepted: 0,
        });
    }

    /// Checks the history of a `draft(history, last)` call against what the
    /// previous calls implied (`draft` is the previous draft, whose first
    /// accepted tokens the history should hold), then records this call's
    /// shape.
    pub(super) fn draft(&mut self, history: &[Token], last: Token, draft: &[Token]) {
        if let Some(expect) = self.expect {
            let accepted = &draft[..expect.accepted.min(draft.len())];
            if let Some(misuse) = expect.check(history, last, accepted) {
                self.report(misuse);
            }
        }
        self.expect = Some(Expect {
            base: history.len(),
            base_tail: history.last().copied(),
            last: Some(last),
            accepted: 0,
        });
    }

    /// `accept(given)` of a draft of `draft` tokens: the next history holds
    /// the accepted ones; a count above the draft's length is reported.
    /// Returns the count kept (at most `draft`).
    pub(super) fn accept(&mut self, draft: usize, given: usize) -> usize {
        if given > draft {
            self.report(Misuse::AcceptedMore { draft, given });
        }
        let accepted = given.min(draft);
        if let Some(expect) = &mut self.expect {
            expect.accepted = accepted;
        }
        accepted
    }

    /// Sequences in which a mistake was seen.
    pub(super) fn misuses(&self) -> u64 {
        self.misuses
    }

    /// Forgets the count (not the expectation).
    pub(super) fn reset_count(&mut self) {
        self.misuses = 0;
    }

    /// Logs `misuse` once per sequence and counts the sequence.
    fn report(&mut self, misuse: Misuse) {
        if self.reported {
            return;
        }
        self.reported = true;
        self.misuses += 1;
        match misuse {
            Misuse::LastIncluded {
                history,
                expected,
                accepted,
            } => tracing::warn!(
                target: "selfspec",
                "draft(history, last): the history ({history} tokens) already ends with \
                 `last`; expected {expected} tokens: the previous history + [its last] + \
                 the {accepted} accepted draft tokens, without the new `last` (reported once \
                 until the next begin)"
            ),
            Misuse::NotExtended {
                history,
                expected,
                accepted,
            } => tracing::warn!(
                target: "selfspec",
                "draft(history, last): the history ({history} tokens) did not grow by the \
                 previous `last` and the {accepted} accepted draft tokens; expected {expected} \
                 tokens: history + [last] + draft[..n_accepted] (reported once until \
                 the next begin)"
            ),
            Misuse::AcceptedMore { draft, given } => tracing::warn!(
                target: "selfspec",
                "accept({given}): the draft had {draft} tokens; counted as {draft} \
                 (reported once until the next begin)"
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each variant carries its own figures: history lengths for the two
    /// history mistakes, the draft's length and the count given for `accept`.
    #[test]
    fn each_mistake_says_what_it_saw() {
        let prompt: Vec<Token> = (0..10).collect();
        let draft = [10, 11, 12];
        let mut c = Contract::default();
        c.begin(&prompt);
        c.draft(&prompt, 10, &[]);
        assert_eq!(c.accept(draft.len(), 2), 2);
        let expect = c.expect.unwrap();
        // Right: prompt + [10] + [10, 11] (the draft's first two).
        let mut right = prompt.clone();
        right.extend([10, 10, 11]);
        assert_eq!(expect.check(&right, 5, &draft[..2]), None);
        // The new `last` already appended.
        let mut with_last = right.clone();
        with_last.push(5);
        assert_eq!(
            expect.check(&with_last, 5, &draft[..2]),
            Some(Misuse::LastIncluded {
                history: 14,
                expected: 13,
                accepted: 2
            })
        );
        // `last` appended, the accepted tokens not.
        let mut no_accepted = prompt.clone();
        no_accepted.push(10);
        assert_eq!(
            expect.check(&no_accepted, 5, &draft[..2]),
            Some(Misuse::NotExtended {
                history: 11,
                expected: 13,
                accepted: 2
            })
        );
        // Over-accepting is counted once per sequence, as the draft's length.
        assert_eq!(c.accept(draft.len(), 7), 3);
        assert_eq!(c.misuses(), 1);
        assert_eq!(c.accept(draft.len(), 9), 3);
        assert_eq!(c.misuses(), 1);
        assert_eq!(c.fork().misuses(), 0);
    }
}
