//! The followers of an n-gram with more than one: parts, the shared
//! follower index of large parts, and counting a follower.

use std::collections::HashMap;

use smallvec::SmallVec;

use super::table::{LookupCache, More, INDEXED_PART};
use super::Fast;
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

/// The key of `token` among the followers of part `id` in `LookupCache::index`.
#[inline]
pub(super) fn follower_key(id: Idx, token: Token) -> u64 {
    u64::from(id.get()) << 32 | u64::from(token)
}

/// `LookupCache::index`: `follower_key(part, token)` -> (position among the
/// part's followers, count).
pub(super) type FollowerIndex = HashMap<u64, (Idx, i32), Fast>;

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

impl LookupCache {
    /// Adds `count` (positive) to `token`'s count among the followers of entry `i`.
    #[inline]
    pub(super) fn count(&mut self, i: Idx, token: Token, count: i32) {
        let entry = i.as_usize();
        let e = &mut self.entries[entry];
        e.sum = e.sum.saturating_add(count.unsigned_abs());
        if e.first.0 == token {
            // The only follower, or the winner: its count lives in the entry,
            // and counting it up keeps it the winner.
            e.first.1 = e.first.1.saturating_add(count);
            return;
        }
        let id = if let Some(id) = e.more.id() {
            id
        } else {
            let mut followers = SmallVec::new();
            followers.push(e.first);
            let id = Idx::must(self.multi.len());
            e.more = More::part(id);
            self.multi.push(Part {
                followers,
                best: Idx::default(),
            });
            id
        };
        let (top, big) = (e.first.1, e.more.is_big());
        let (i, c) = if big {
            let key = follower_key(id, token);
            match self.index.get_mut(&key) {
                Some((i, c)) => {
                    *c = c.saturating_add(count);
                    (i.as_usize(), *c)
                }
                None => {
                    let followers = &mut self.multi[id.as_usize()].followers;
                    let i = followers.len();
                    followers.push((token, count));
                    self.index.insert(key, (Idx::must(i), count));
                    (i, count)
                }
            }
        } else {
            let part = &mut self.multi[id.as_usize()];
            match part.followers.iter().position(|&(t, _)| t == token) {
                Some(i) => {
                    let c = &mut part.followers[i].1;
                    *c = c.saturating_add(count);
                    (i, *c)
                }
                None => {
                    let i = part.followers.len();
                    part.followers.push((token, count));
                    if i == INDEXED_PART {
                        // Past INDEXED_PART: positions and counts move to
                        // the index (the winner's count stays in the entry).
                        for (&(t, c), j) in part.followers.iter().zip(0..) {
                            self.index
                                .insert(follower_key(id, t), (Idx::from_u32(j), c));
                        }
                        let e = &mut self.entries[entry];
                        e.more = e.more.big();
                    }
                    (i, count)
                }
            }
        };
        if c < top {
            return;
        }
        // A new winner (ties: the newest): the old one's count goes back to
        // its slot, the new one's into the entry.
        let part = &mut self.multi[id.as_usize()];
        let best = part.best.as_usize();
        if c > top || i > best {
            // (The flag is read again: this count may have made the part big.)
            if self.entries[entry].more.is_big() {
                let old = follower_key(id, self.entries[entry].first.0);
                if let Some(slot) = self.index.get_mut(&old) {
                    slot.1 = top;
                }
            } else {
                part.followers[best].1 = top;
            }
            part.best = Idx::must(i);
            self.entries[entry].first = (token, c);
        }
    }
}
