//! The machinery the strategies share (crate-private): rolling n-gram hashes
//! (`poly`), the position index of a history (`position_index`), the copy of
//! a history that tells "extended" from "diverged" (`mirror`), typed indices
//! (`Idx`), and the few constants and helpers below. Strategies import from
//! here; nothing here imports a strategy.

pub(crate) mod mirror;
pub(crate) mod poly;
pub(crate) mod position_index;

use crate::drafter::Token;

/// The one `u32` sentinel: no position / no entry / empty cell / unused key
/// slot, by context. It is llama.cpp's `-1` as a `u32` (ngram-mod's `EMPTY`,
/// the unused slots of an ngram-cache key).
pub(crate) const NONE: u32 = u32::MAX;

/// The multiplier of the position index's and recall's n-gram hashes (the
/// 64-bit golden ratio): any odd constant works; this one spreads small token
/// ids well. ngram-map's key-record hasher mixes with it too.
pub(crate) const FACTOR: u64 = 0x9E37_79B9_7F4A_7C15;

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
        self.0 as usize
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

/// The low 32 bits of a hash (tags; the reference's 32-bit hashes).
#[inline(always)]
pub(crate) const fn low32(x: u64) -> u32 {
    (x & 0xFFFF_FFFF) as u32
}

/// The top `bits` bits of a hash (1 to 32): a bucket number.
#[inline(always)]
pub(crate) fn top_bits(x: u64, bits: u32) -> usize {
    debug_assert!((1..=32).contains(&bits));
    // Below 2^32: no check is left on 64-bit targets.
    usize::try_from(x >> (64 - bits)).unwrap_or(usize::MAX)
}
