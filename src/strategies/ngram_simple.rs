//! ngram-simple: copy what followed the most recent earlier occurrence of the key.

use crate::drafter::{DraftLimits, Drafter};
use crate::index::key_at;
use crate::index::position_index::PositionIndex;
use crate::token::Token;

/// llama.cpp's `ngram-simple` drafter.
///
/// The key is the last `n` tokens of `history ++ [last]`. The draft is the
/// `m` tokens that followed the most recent earlier occurrence of the key
/// (fewer near the end of the history, none when fewer than `n` follow).
/// `accept` does nothing; the drafter keeps an index of the history so a call
/// costs O(1) instead of the reference's scan.
///
/// ```
/// use selfspec::{DraftLimits, Drafter, strategies::NgramSimple};
///
/// let mut simple = NgramSimple::new(2, 3);
/// let history = [9, 1, 2, 3, 4, 5, 6, 7, 1];
/// let mut draft = Vec::new();
/// simple.draft(&history, 2, DraftLimits::default(), &mut draft);
/// assert_eq!(draft, [3, 4, 5]);
/// ```
#[derive(Clone, Debug)]
pub struct NgramSimple {
    n: usize,
    m: usize,
    /// Finds "the most recent earlier occurrence" without scanning: the
    /// reference's answer at O(1) per call instead of O(history).
    index: PositionIndex,
}

impl NgramSimple {
    /// A drafter with key size `n` and draft size `m`.
    ///
    /// Does not validate: sizes of 0 (and keys longer than any history) make
    /// it silently never draft. To check parameters, use [`Config`](crate::Config) / [`Strategy::validate`](crate::Strategy::validate), which reject
    /// `n` or `m` outside `1..=MAX_NGRAM`.
    #[must_use]
    pub fn new(n: usize, m: usize) -> NgramSimple {
        NgramSimple {
            n,
            m,
            index: PositionIndex::new(n),
        }
    }
}

impl Drafter for NgramSimple {
    fn name(&self) -> &str {
        "ngram_simple"
    }

    fn begin(&mut self, prompt: &[Token]) {
        self.index.resync(prompt);
    }

    fn draft(
        &mut self,
        history: &[Token],
        last: Token,
        _limits: DraftLimits,
        draft: &mut Vec<Token>,
    ) {
        let (n, m, len) = (self.n, self.m, history.len());
        if n == 0 || m == 0 || len <= n + m + 1 {
            return;
        }
        self.index.sync(history);
        let head = &history[len - n + 1..];
        let hash = self.index.key_hash(head, last);
        // The reference scans len-n-1 down to 1: position 0 is never reported.
        let mut found = self.index.latest(hash, head, last, len - n - 1);
        if found.is_some_and(|pos| !key_at(history, pos, head, last)) {
            // The history changed without `begin` where the index did not look:
            // re-index it before trusting an answer.
            self.index.resync(history);
            found = self.index.latest(hash, head, last, len - n - 1);
        }
        let pos = match found {
            Some(pos) if pos > 0 => pos,
            _ => return,
        };
        let copy = m.min(len - (pos + n));
        // The reference compares the copy length with n, not with 1 (sic).
        if copy < n {
            return;
        }
        draft.extend_from_slice(&history[pos + n..pos + n + copy]);
    }

    fn accept(&mut self, _n_accepted: usize) {}

    /// The history copy and its index: about 16 to 20 bytes per history token.
    fn heap_bytes(&self) -> usize {
        self.index.heap_bytes()
    }

    fn as_any(&self) -> Option<&dyn std::any::Any> {
        Some(self)
    }

    fn fork(&self) -> Option<Box<dyn Drafter>> {
        Some(Box::new(self.clone()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(n: usize, m: usize, history: &[Token], last: Token) -> Vec<Token> {
        let mut out = Vec::new();
        NgramSimple::new(n, m).draft(history, last, DraftLimits::default(), &mut out);
        out
    }

    #[test]
    fn corner_cases() {
        // (n, m, history, last, expected draft)
        type Case<'a> = (usize, usize, &'a [Token], Token, &'a [Token]);
        let cases: &[Case] = &[
            // too short: len <= n + m + 1
            (2, 2, &[1, 2, 3, 4, 5], 2, &[]),
            // most recent match wins
            (1, 2, &[7, 5, 1, 8, 8, 5, 2, 3, 9], 5, &[2, 3]),
            // a match at position 0 is never reported
            (2, 2, &[1, 2, 3, 4, 0, 0, 0, 1], 2, &[]),
            // position 1 is
            (2, 2, &[0, 1, 2, 3, 4, 0, 0, 1], 2, &[3, 4]),
            // copy shorter than n: dropped (sic)
            (3, 8, &[0, 9, 9, 9, 9, 9, 9, 9, 9, 9, 1, 2, 3, 1, 2], 3, &[]),
            // the same key further back copies fine
            (
                3,
                8,
                &[0, 9, 9, 9, 9, 9, 9, 9, 1, 2, 3, 4, 5, 1, 2],
                3,
                &[4, 5, 1, 2],
            ),
            // copy clipped to what follows, but >= n
            (2, 8, &[0, 5, 5, 5, 5, 5, 5, 1, 2, 3, 4, 1], 2, &[3, 4, 1]),
            // last token must match too
            (2, 2, &[0, 1, 2, 3, 4, 0, 0, 1], 9, &[]),
            // ids at the top of the u32 range
            (1, 2, &[0, u32::MAX, 7, 8, 0, 0, 0], u32::MAX, &[7, 8]),
        ];
        for (i, &(n, m, h, last, want)) in cases.iter().enumerate() {
            assert_eq!(run(n, m, h, last), want, "case {i}");
        }
    }

    #[test]
    fn zero_sizes_never_draft() {
        assert!(run(0, 4, &[1; 20], 1).is_empty());
        assert!(run(2, 0, &[1; 20], 1).is_empty());
    }
}
