//! The followers of an n-gram with more than one: parts, the shared
//! follower index of large parts, and counting a follower.

use std::collections::HashMap;

use smallvec::SmallVec;

use super::table::{LookupCache, BIG, INDEXED_PART, SINGLE};
use super::Fast;
use crate::drafter::Token;

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
    pub(super) best: u32,
}

/// The key of `token` among the followers of part `id` in `LookupCache::index`.
pub(super) fn follower_key(id: u32, token: Token) -> u64 {
    u64::from(id) << 32 | u64::from(token)
}

/// `LookupCache::index`: `follower_key(part, token)` -> (position among the
/// part's followers, count).
pub(super) type FollowerIndex = HashMap<u64, (u32, i32), Fast>;

/// A read-only view of one n-gram's followers, inline or not.
#[derive(Clone, Copy, Debug)]
pub(super) struct PartRef<'a> {
    /// The followers. Counts here are stale for the winner, and for all of a
    /// part with more than `INDEXED_PART` (see `Part`).
    pub(super) slots: &'a [(Token, i32)],
    pub(super) index: &'a FollowerIndex,
    pub(super) id: u32,
    pub(super) sum: u32,
    pub(super) best: u32,
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

    pub(super) fn find(&self, token: Token) -> Option<usize> {
        if self.big() {
            let &(i, _) = self.index.get(&follower_key(self.id, token))?;
            Some(i as usize)
        } else {
            self.slots.iter().position(|&(t, _)| t == token)
        }
    }

    pub(super) fn token(&self, i: usize) -> Token {
        self.slots[i].0
    }

    pub(super) fn count(&self, i: usize) -> i32 {
        if i == self.best as usize {
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
    /// Adds `count` to `token`'s count among the followers of entry `i`.
    #[inline]
    pub(super) fn count(&mut self, i: usize, token: Token, count: i32) {
        let e = &mut self.entries[i];
        e.sum = e.sum.saturating_add(count as u32);
        if e.first.0 == token {
            // The only follower, or the winner: its count lives in the entry,
            // and counting it up keeps it the winner.
            e.first.1 = e.first.1.saturating_add(count);
            return;
        }
        if e.more == SINGLE {
            let mut followers = SmallVec::new();
            followers.push(e.first);
            e.more = self.multi.len() as u32;
            self.multi.push(Part { followers, best: 0 });
        }
        let (entry, id, top, big) = (i, e.more & !BIG, e.first.1, e.more & BIG != 0);
        let (i, c) = if big {
            let key = follower_key(id, token);
            match self.index.get_mut(&key) {
                Some((i, c)) => {
                    *c = c.saturating_add(count);
                    (*i as usize, *c)
                }
                None => {
                    let followers = &mut self.multi[id as usize].followers;
                    let i = followers.len();
                    followers.push((token, count));
                    self.index.insert(key, (i as u32, count));
                    (i, count)
                }
            }
        } else {
            let part = &mut self.multi[id as usize];
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
                        for (j, &(t, c)) in part.followers.iter().enumerate() {
                            self.index.insert(follower_key(id, t), (j as u32, c));
                        }
                        self.entries[entry].more = id | BIG;
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
        let part = &mut self.multi[id as usize];
        let best = part.best as usize;
        if c > top || i > best {
            // (The flag is read again: this count may have made the part big.)
            if self.entries[entry].more & BIG != 0 {
                let old = follower_key(id, self.entries[entry].first.0);
                if let Some(slot) = self.index.get_mut(&old) {
                    slot.1 = top;
                }
            } else {
                part.followers[best].1 = top;
            }
            part.best = i as u32;
            self.entries[entry].first = (token, c);
        }
    }
}
