//! Counting a follower of an n-gram: in its entry, its part, or the
//! follower index of a large part.

use smallvec::SmallVec;

use super::followers::{follower_key, Part, INDEXED_PART};
use super::table::{LookupCache, More};
use crate::index::Idx;
use crate::token::Token;

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
