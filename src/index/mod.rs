//! The machinery the strategies share (crate-private): every hash of the
//! crate (`hash`: rolling n-gram hashes, placement hashes, map hashers), the
//! position index of a history (`position_index`), the copy of a history
//! that tells "extended" from "diverged" (`mirror`), typed indices (`Idx`),
//! and the few constants and helpers below. Strategies import from
//! here; nothing here imports a strategy.

pub(crate) mod hash;
pub(crate) mod mirror;
pub(crate) mod position_index;

use crate::token::Token;

/// The one `u32` sentinel: no position / no entry / empty cell / unused key
/// slot, by context. It is llama.cpp's `-1` as a `u32` (ngram-mod's `EMPTY`,
/// the unused slots of an ngram-cache key).
pub(crate) const NONE: u32 = u32::MAX;

/// A vector whose clones keep its spare capacity. Drafters that index every
/// token reserve room ahead (for the generation after a long prompt); a clone
/// of a primed drafter (an engine forking a sequence) must not lose it, or its
/// first token would copy the whole index into a larger buffer.
#[derive(Debug)]
pub(crate) struct Roomy<T>(Vec<T>);

impl<T> Default for Roomy<T> {
    fn default() -> Roomy<T> {
        Roomy(Vec::new())
    }
}

impl<T: Clone> Clone for Roomy<T> {
    fn clone(&self) -> Roomy<T> {
        let mut v = Vec::with_capacity(self.0.capacity());
        v.extend_from_slice(&self.0);
        Roomy(v)
    }
}

impl<T> std::ops::Deref for Roomy<T> {
    type Target = Vec<T>;
    fn deref(&self) -> &Vec<T> {
        &self.0
    }
}

impl<T> std::ops::DerefMut for Roomy<T> {
    fn deref_mut(&mut self) -> &mut Vec<T> {
        &mut self.0
    }
}

/// Whether the n-gram of `tokens` at `p` is the key `head ++ [last]`; false
/// when it would run past the end (a stale position can only fail to match).
#[inline]
pub(crate) fn key_at(tokens: &[Token], p: usize, head: &[Token], last: Token) -> bool {
    let n1 = head.len();
    tokens.get(p + n1) == Some(&last) && tokens.get(p..p + n1) == Some(head)
}

/// Calls `found(i)` for every `i` with `tokens[i] == token`, in order.
///
/// Sixteen tokens at a time into a bit mask (the compiler turns the inner
/// loop into vector compares), then one call per set bit: recall scans a
/// 256-token window around each of its anchors on every draft after a
/// rejection, and a token-at-a-time filter was the largest part of its draft
/// call (DESIGN.md, "The hot path and memory").
#[inline]
pub(crate) fn each_position_of(tokens: &[Token], token: Token, found: impl FnMut(usize)) {
    each_position_in(tokens, |&t| t, token, found);
}

/// [`each_position_of`] over cells read by `read` (recall's memory reads its
/// atomic cells with a relaxed load; a plain slice vectorizes).
#[inline]
pub(crate) fn each_position_in<T>(
    cells: &[T],
    read: impl Fn(&T) -> Token,
    token: Token,
    mut found: impl FnMut(usize),
) {
    const LANES: usize = 16;
    let mut chunks = cells.chunks_exact(LANES);
    let mut base = 0;
    for chunk in &mut chunks {
        let mut mask = 0u32;
        for (i, t) in chunk.iter().enumerate() {
            mask |= u32::from(read(t) == token) << i;
        }
        while mask != 0 {
            found(base + crate::int::ix(u64::from(mask.trailing_zeros())));
            mask &= mask - 1;
        }
        base += LANES;
    }
    for (i, t) in chunks.remainder().iter().enumerate() {
        if read(t) == token {
            found(base + i);
        }
    }
}

/// The length of the longest common suffix of `a` and `b`, at most `max`.
///
/// Eight tokens at a time as arrays (one vector compare each), then token by
/// token: recall measures the match of every occurrence it votes with, most
/// of them at least as long as the order that found them (up to 16), which
/// a token-at-a-time loop made a large part of its draft call (DESIGN.md,
/// "The hot path and memory").
#[inline]
pub(crate) fn common_suffix(a: &[Token], b: &[Token], max: usize) -> usize {
    const BLOCK: usize = 8;
    let limit = max.min(a.len()).min(b.len());
    let (a, b) = (&a[a.len() - limit..], &b[b.len() - limit..]);
    let mut m = 0;
    while m + BLOCK <= limit {
        let at = limit - m - BLOCK;
        let x: &[Token; BLOCK] = a[at..at + BLOCK].try_into().expect("a block");
        let y: &[Token; BLOCK] = b[at..at + BLOCK].try_into().expect("a block");
        if x != y {
            break;
        }
        m += BLOCK;
    }
    let (a, b) = (&a[..limit - m], &b[..limit - m]);
    m + a
        .iter()
        .rev()
        .zip(b.iter().rev())
        .take_while(|(x, y)| x == y)
        .count()
}

/// A position or entry number kept in 32 bits, below [`NONE`] (llama.cpp's
/// positions are 32-bit too; 2^32 entries of any table here would take
/// tens of GiB). Zero-cost: a `u32` in memory, a `usize` where it indexes.
#[repr(transparent)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct Idx(u32);

impl Idx {
    /// No position (the sentinel).
    pub(crate) const NONE: Idx = Idx(NONE);

    /// `i` as an index, or `None` from `NONE` on.
    #[inline]
    pub(crate) fn new(i: usize) -> Option<Idx> {
        match u32::try_from(i) {
            Ok(v) if v != NONE => Some(Idx(v)),
            _ => None,
        }
    }

    /// `i` as an index, for tables that cannot reach 2^32 - 1 entries
    /// (memory runs out long before).
    ///
    /// # Panics
    ///
    /// From `NONE` on.
    #[inline]
    #[track_caller]
    pub(crate) fn must(i: usize) -> Idx {
        Idx::new(i).expect("index past the 32-bit range")
    }

    /// An index stored as a `u32` (`NONE` reads as [`Idx::NONE`]).
    #[inline(always)]
    pub(crate) const fn from_u32(v: u32) -> Idx {
        Idx(v)
    }

    #[inline(always)]
    pub(crate) const fn get(self) -> u32 {
        self.0
    }

    #[inline(always)]
    pub(crate) const fn as_usize(self) -> usize {
        ix32(self.0)
    }

    #[inline(always)]
    pub(crate) const fn is_none(self) -> bool {
        self.0 == NONE
    }
}

impl Default for Idx {
    /// Index 0.
    fn default() -> Idx {
        Idx(0)
    }
}

use crate::int::ix32;
pub(crate) use crate::int::low32;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::int::wide;

    /// A small deterministic stream over `alphabet` ids (few ids: many hits
    /// and long common runs).
    fn stream(len: usize, alphabet: u32, seed: u64) -> Vec<Token> {
        let mut x = seed | 1;
        (0..len)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                u32::try_from(x % u64::from(alphabet)).expect("below alphabet")
            })
            .collect()
    }

    #[test]
    fn each_position_of_finds_what_a_filter_finds() {
        // Lengths around the 16-token blocks, ids at both ends of the range.
        for len in [0, 1, 15, 16, 17, 31, 32, 33, 100, 257] {
            for alphabet in [1, 2, 5] {
                let mut tokens = stream(len, alphabet, wide(len) + 7);
                if let Some(t) = tokens.last_mut() {
                    *t = u32::MAX;
                }
                for token in [0, 1, 4, u32::MAX] {
                    let naive: Vec<usize> = (0..len).filter(|&i| tokens[i] == token).collect();
                    let mut found = Vec::new();
                    each_position_of(&tokens, token, |i| found.push(i));
                    assert_eq!(found, naive, "len {len} alphabet {alphabet} token {token}");
                }
            }
        }
    }

    #[test]
    fn common_suffix_counts_what_a_backward_walk_counts() {
        let naive = |a: &[Token], b: &[Token], max: usize| {
            let mut m = 0;
            while m < max && m < a.len() && m < b.len() && a[a.len() - 1 - m] == b[b.len() - 1 - m]
            {
                m += 1;
            }
            m
        };
        let base = stream(300, 3, 11);
        for (cut_a, cut_b) in [
            (0, 0),
            (1, 0),
            (0, 9),
            (5, 5),
            (40, 3),
            (299, 0),
            (300, 300),
        ] {
            for max in [0, 1, 7, 8, 9, 16, 64, usize::MAX] {
                // Equal tails of every length up to the shorter one, then a
                // difference (or none).
                let a = &base[cut_a..];
                let mut b = base[cut_b..].to_vec();
                for flip in [None, Some(0usize), Some(3), Some(8), Some(17)] {
                    if let Some(f) = flip.filter(|&f| f < b.len()) {
                        let i = b.len() - 1 - f;
                        b[i] ^= 1;
                    }
                    let want = naive(a, &b, max);
                    assert_eq!(
                        common_suffix(a, &b, max),
                        want,
                        "{cut_a} {cut_b} {max} {flip:?}"
                    );
                }
                assert_eq!(common_suffix(a, a, max), max.min(a.len()));
            }
        }
    }
}
