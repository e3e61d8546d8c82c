//! A drafter's copy of the sequence it last saw, and the one rule that tells
//! whether a new sequence extends it or departs from it.
//!
//! The position index (ngram-simple, both maps), ngram-cache's live variant
//! and recall each keep such a copy: engines usually append to the history,
//! but may also start a new conversation, roll back or edit it without
//! telling the drafter. The rule, shared by all of them: the new sequence
//! *extends* the copy when it is at least as long and equals it on the copy's
//! last [`TAIL_CHECK`] tokens (older tokens are not compared: an engine that
//! edits text that far back and keeps the tail is not detected, and the
//! drafts stay correct because every position an answer uses is verified
//! against the real history); otherwise it *diverges* at the first position
//! where the two differ (found by a full comparison).
//!
//! A sequence is `history ++ [last]` (`last` optional), as a draft call sees it.
//! [`Mirror`] owns its copy; [`change`] and [`common_prefix`] work on any
//! slice, for a drafter that keeps its copy in a buffer of its own (recall's
//! `Roomy` stream mirror: `change(&mirror, history, Some(last))`).

use std::ops::Deref;

use crate::token::Token;

/// How many trailing tokens of the copy are compared to decide that a
/// sequence only grew.
/// Its sensitivity (replays at half and double, today's drafts):
/// BENCHMARKS.md, "Sensitivity of recall's tuned constants".
pub(crate) const TAIL_CHECK: usize = 32;

/// How a sequence relates to the copy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Change {
    /// The sequence is the copy (by its last `TAIL_CHECK` tokens) plus the
    /// tokens from `from` (the copy's length) on, possibly none.
    Extended { from: usize },
    /// The sequence and the copy agree on exactly their first `at` tokens;
    /// `at` is below the copy's length (the sequence may end at `at`).
    Diverged { at: usize },
}

impl Change {
    /// The length of the prefix the sequence shares with the copy (as far as
    /// the rule compares).
    #[inline]
    pub(crate) fn common(self) -> usize {
        match self {
            Change::Extended { from } => from,
            Change::Diverged { at } => at,
        }
    }
}

/// How `seq = history ++ [last]` relates to `copy` (see the module doc).
#[inline]
pub(crate) fn change(copy: &[Token], history: &[Token], last: Option<Token>) -> Change {
    let have = copy.len();
    let len = history.len() + usize::from(last.is_some());
    let from = have.saturating_sub(TAIL_CHECK);
    let tail_equal = len >= have
        && if have <= history.len() {
            history[from..have] == copy[from..]
        } else {
            // have == history.len() + 1: the copy's last token is `last`.
            history[from..] == copy[from..have - 1] && last == copy.last().copied()
        };
    if tail_equal {
        Change::Extended { from: have }
    } else {
        Change::Diverged {
            at: common_prefix(copy, history, last),
        }
    }
}

/// The length of the longest common prefix of `copy` and `history ++ [last]`.
pub(crate) fn common_prefix(copy: &[Token], history: &[Token], last: Option<Token>) -> usize {
    // Compare in chunks: the compiler vectorizes slice equality.
    let mut common = 0;
    let max = copy.len().min(history.len());
    while common < max {
        let end = (common + 256).min(max);
        if copy[common..end] == history[common..end] {
            common = end;
        } else {
            return common
                + copy[common..end]
                    .iter()
                    .zip(&history[common..end])
                    .take_while(|(a, b)| a == b)
                    .count();
        }
    }
    match last {
        Some(t) if common == history.len() && copy.get(common) == Some(&t) => common + 1,
        _ => common,
    }
}

/// A copy of the sequence last seen. Reads as a slice.
#[derive(Clone, Debug, Default)]
pub(crate) struct Mirror {
    tokens: Vec<Token>,
}

impl Mirror {
    /// How `history ++ [last]` relates to the copy.
    #[inline]
    pub(crate) fn change(&self, history: &[Token], last: Option<Token>) -> Change {
        change(&self.tokens, history, last)
    }

    /// The longest common prefix of the copy and `history ++ [last]`.
    pub(crate) fn common_prefix(&self, history: &[Token], last: Option<Token>) -> usize {
        common_prefix(&self.tokens, history, last)
    }

    /// Forgets the copy from position `len` on.
    #[inline]
    pub(crate) fn truncate(&mut self, len: usize) {
        self.tokens.truncate(len);
    }

    #[inline]
    pub(crate) fn push(&mut self, t: Token) {
        self.tokens.push(t);
    }

    #[inline]
    pub(crate) fn extend_from_slice(&mut self, tokens: &[Token]) {
        self.tokens.extend_from_slice(tokens);
    }

    /// Tokens of room held (for `heap_bytes`).
    pub(crate) fn capacity(&self) -> usize {
        self.tokens.capacity()
    }
}

impl Deref for Mirror {
    type Target = [Token];
    #[inline]
    fn deref(&self) -> &[Token] {
        &self.tokens
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::int::wide;

    fn token(x: usize) -> Token {
        Token::try_from(x).unwrap()
    }

    /// The rule written out position by position, as the drafters had it.
    fn naive(copy: &[Token], seq: &[Token]) -> Change {
        let have = copy.len();
        let tail = have.saturating_sub(TAIL_CHECK);
        if seq.len() >= have && (tail..have).all(|j| copy[j] == seq[j]) {
            return Change::Extended { from: have };
        }
        let at = (0..have.min(seq.len()))
            .find(|&j| copy[j] != seq[j])
            .unwrap_or(have.min(seq.len()));
        Change::Diverged { at }
    }

    #[test]
    fn agrees_with_a_position_by_position_comparison() {
        let mut rng = 0x2545_f491_4f6c_dd1du64;
        let mut next = move |n: u64| {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            usize::try_from(rng % n).unwrap()
        };
        for round in 0..4000 {
            let copy: Vec<Token> = (0..next(700)).map(|_| token(next(3))).collect();
            let mut seq = copy.clone();
            match next(5) {
                0 => seq.truncate(next(wide(copy.len()) + 1)),
                1 if !copy.is_empty() => {
                    let at = next(wide(copy.len()));
                    seq[at] = 7;
                }
                _ => {}
            }
            for _ in 0..next(40) {
                seq.push(token(next(3)));
            }
            let want = naive(&copy, &seq);
            assert_eq!(change(&copy, &seq, None), want, "round {round}");
            if let Some((&last, history)) = seq.split_last() {
                assert_eq!(change(&copy, history, Some(last)), want, "round {round}");
            }
        }
    }
}
