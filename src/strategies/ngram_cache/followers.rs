//! The followers of an n-gram with more than one: parts and the shared
//! follower index of large parts.

use std::collections::HashMap;

use smallvec::SmallVec;

use crate::index::hash::FastHash;
use crate::index::Idx;
use crate::token::Token;

/// The followers of an n-gram with two or more, in insertion order with
/// their counts, and the current winner by count (ties: the newest), kept
/// incrementally so a draft does not rescan the part.
///
/// The winner's count lives in the n-gram's entry (`Ngram::first`), not in
/// its slot here, which is written back only when another follower takes
/// over: text repeats its most frequent continuation, and counting it again
/// then touches the entry alone, not the part and its followers (two cache
/// misses). Past `INDEXED_PART` followers the other counts live in
/// `LookupCache::index` beside the positions, so that counting one reads
/// that table alone, not the part and its followers. Read counts through
/// `PartRef`.
#[derive(Clone, Debug, Default)]
pub(super) struct Part {
    pub(super) followers: SmallVec<[(Token, i32); 2]>,
    /// The winner's position among `followers`.
    pub(super) best: Idx,
}

/// Parts with more followers than this find a follower through
/// `LookupCache::index` instead of a scan.
pub(super) const INDEXED_PART: usize = 16;

/// The key of `token` among the followers of part `id` in `LookupCache::index`.
#[inline]
pub(super) fn follower_key(id: Idx, token: Token) -> u64 {
    u64::from(id.get()) << 32 | u64::from(token)
}

/// `LookupCache::index`: `follower_key(part, token)` -> (position among the
/// part's followers, count).
pub(super) type FollowerIndex = HashMap<u64, (Idx, i32), FastHash>;

/// A read-only view of one n-gram's followers, inline or not.
#[derive(Clone, Copy, Debug)]
pub(super) struct PartRef<'a> {
    /// The followers. Counts here are stale for the winner, and for all of a
    /// part with more than `INDEXED_PART` (see `Part`).
    pub(super) slots: &'a [(Token, i32)],
    pub(super) index: &'a FollowerIndex,
    /// The part (`Idx::NONE` for an inline follower).
    pub(super) id: Idx,
    pub(super) sum: u32,
    /// The winner's position.
    pub(super) best: Idx,
    /// The winner's count.
    pub(super) top: i32,
}

impl<'a> PartRef<'a> {
    pub(super) fn len(&self) -> usize {
        self.slots.len()
    }

    pub(super) fn big(&self) -> bool {
        self.slots.len() > INDEXED_PART
    }

    /// The position of `token` among the followers.
    pub(super) fn find(&self, token: Token) -> Option<usize> {
        if self.big() {
            let &(i, _) = self.index.get(&follower_key(self.id, token))?;
            Some(i.as_usize())
        } else {
            self.slots.iter().position(|&(t, _)| t == token)
        }
    }

    /// The winner's position.
    pub(super) fn best(&self) -> usize {
        self.best.as_usize()
    }

    pub(super) fn token(&self, i: usize) -> Token {
        self.slots[i].0
    }

    pub(super) fn count(&self, i: usize) -> i32 {
        if i == self.best.as_usize() {
            self.top
        } else if self.big() {
            let key = follower_key(self.id, self.slots[i].0);
            self.index.get(&key).map_or(0, |&(_, c)| c)
        } else {
            self.slots[i].1
        }
    }

    /// The followers and their counts, in insertion order.
    pub(super) fn iter(self) -> impl ExactSizeIterator<Item = (Token, i32)> + Clone + 'a {
        (0..self.len()).map(move |i| (self.token(i), self.count(i)))
    }
}
