//! `LookupCache`: the n-gram entries and their per-size hash tables.

use hashbrown::hash_table::{self, HashTable};

use super::followers::{FollowerIndex, Part, PartRef};
use super::{hash_of, key_of, table_of, Key, NGRAM_SIZES, UNUSED};
use crate::index::{Idx, Roomy, NONE};
use crate::token::Token;

/// Where an n-gram's followers are (`Ngram::more`): inline (its only
/// follower), or in a part of `LookupCache::multi`, flagged *big* once the
/// part has more than `INDEXED_PART` followers (whose counts then live in
/// `LookupCache::index`). One `u32`: the part's id, the flag in the top bit,
/// `NONE` for inline.
#[repr(transparent)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct More(u32);

impl More {
    const BIG: u32 = 1 << 31;

    /// The only follower is inline.
    pub(super) const SINGLE: More = More(NONE);

    /// The followers are part `id` (not big).
    ///
    /// # Panics
    ///
    /// From 2^31 parts on (each holds two followers or more: memory runs
    /// out first).
    #[inline]
    pub(super) fn part(id: Idx) -> More {
        assert!(id.get() < More::BIG, "2^31 parts");
        More(id.get())
    }

    /// The part, `None` when the only follower is inline.
    #[inline]
    pub(super) fn id(self) -> Option<Idx> {
        (self != More::SINGLE).then_some(Idx::from_u32(self.0 & !More::BIG))
    }

    /// Whether the part is big (`self` must be a part).
    #[inline]
    pub(super) fn is_big(self) -> bool {
        debug_assert!(self != More::SINGLE);
        self.0 & More::BIG != 0
    }

    /// The same part, flagged big.
    #[inline]
    pub(super) fn big(self) -> More {
        debug_assert!(self != More::SINGLE);
        More(self.0 | More::BIG)
    }
}

/// One n-gram and its followers: most n-grams of a history have exactly one,
/// kept inline (36 bytes an entry); the others live in `LookupCache::multi`.
#[derive(Clone, Copy, Debug)]
pub(super) struct Ngram {
    pub(super) key: Key,
    /// The only follower and its count while `more` is `SINGLE`; after, the
    /// winner by count (ties: the newest) and its count, which only this
    /// field holds (see `Part`): a draft without a static cache reads only
    /// the entry.
    pub(super) first: (Token, i32),
    /// Sum of the counts (saturating: only compared with small thresholds).
    pub(super) sum: u32,
    /// Where the followers are.
    pub(super) more: More,
    /// A guess at the entry of the n-gram that comes next (this one shifted by
    /// a token, plus the follower seen the last time it was learned), or
    /// none. See `LookupCache::find_next`.
    pub(super) next: Idx,
}

// The newtypes cost nothing: an entry stays 36 bytes.
const _: () = assert!(std::mem::size_of::<Ngram>() == 36);

/// An n-gram cache in llama.cpp's format (`common_ngram_cache`): for each
/// n-gram of 1 to 4 tokens, the tokens that followed it and how often.
///
/// Reads and writes llama.cpp's binary cache files byte-compatibly
/// ([`load`](LookupCache::load), [`save`](LookupCache::save)), builds from a
/// corpus as `llama-lookup-create` does ([`from_tokens`](LookupCache::from_tokens))
/// and merges caches as `llama-lookup-merge` does ([`merge`](LookupCache::merge)).
/// Followers keep their insertion order (file order when loaded): among equally
/// scored followers the newest wins, selfspec's portable tie rule.
///
/// ```
/// use selfspec::strategies::LookupCache;
///
/// let corpus = [1, 2, 3, 1, 2, 4, 1, 2, 3];
/// let cache = LookupCache::from_tokens(&corpus, 2..=2);
/// assert_eq!(cache.followers(&[1, 2]).unwrap(), [(3, 2), (4, 1)]);
/// let bytes = cache.to_bytes();
/// assert_eq!(LookupCache::from_bytes(&bytes, "inline")?, cache);
/// # Ok::<(), selfspec::Error>(())
/// ```
#[derive(Clone, Default)]
pub struct LookupCache {
    /// Indices into `entries`, one table per n-gram size (`tables[4 - size]`;
    /// see `table_of`): 4 bytes a bucket, so that probing for a new n-gram
    /// (most of a long prompt's 3- and 4-grams) reads only control bytes, and
    /// the 1-grams, met at every position, stay in a small, cache-resident table.
    pub(super) tables: [HashTable<Idx>; 5],
    /// N-grams in insertion order (file order when loaded).
    pub(super) entries: Roomy<Ngram>,
    pub(super) multi: Roomy<Part>,
    /// `follower_key(part, token)` -> (position, count) of a follower, for
    /// the parts with more than `INDEXED_PART`: one table for all, so that a
    /// growing part neither allocates nor rehashes a map of its own.
    pub(super) index: FollowerIndex,
    /// Per n-gram size, the entry of the n-gram that `update` added last:
    /// its successor guess is where a draft's first lookup of that size starts.
    pub(super) recent: Recent,
}

/// Entry indices per n-gram size 1..4, `Idx::NONE` when unknown.
#[derive(Clone, Copy, Debug)]
pub(super) struct Recent(pub(super) [Idx; 4]);

impl Default for Recent {
    fn default() -> Recent {
        Recent([Idx::NONE; 4])
    }
}

impl std::fmt::Debug for LookupCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LookupCache")
            .field("ngrams", &self.len())
            .finish()
    }
}

impl PartialEq for LookupCache {
    /// Same n-grams with the same followers, counts and follower order.
    fn eq(&self, other: &LookupCache) -> bool {
        self.len() == other.len()
            && self.entries.iter().zip(0..).all(|(e, i)| {
                other
                    .part(&e.key)
                    .is_some_and(|p| p.iter().eq(self.view(Idx::from_u32(i)).iter()))
            })
    }
}

impl LookupCache {
    /// An empty cache.
    #[must_use]
    pub fn new() -> LookupCache {
        LookupCache::default()
    }

    /// Distinct n-grams held.
    #[must_use]
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the cache holds no n-gram.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The followers of `ngram` (1 to 4 tokens) with their counts, in insertion order.
    #[must_use]
    pub fn followers(&self, ngram: &[Token]) -> Option<Vec<(Token, u32)>> {
        if !NGRAM_SIZES.contains(&ngram.len()) {
            return None;
        }
        let part = self.part(&key_of(ngram))?;
        // Counts are positive.
        Some(part.iter().map(|(t, c)| (t, c.unsigned_abs())).collect())
    }

    /// Every n-gram (trailing `u32::MAX` slots trimmed, as llama.cpp pads
    /// keys with -1) with its followers and counts, in insertion order.
    ///
    /// ```
    /// use selfspec::strategies::LookupCache;
    ///
    /// let cache = LookupCache::from_tokens(&[7, 8, 7, 9, 7, 8], 1..=1);
    /// let (ngram, followers) = cache.iter().next().unwrap();
    /// assert_eq!(ngram, [7]);
    /// assert_eq!(followers.collect::<Vec<_>>(), [(8, 2), (9, 1)]);
    /// ```
    pub fn iter(
        &self,
    ) -> impl Iterator<Item = (&[Token], impl ExactSizeIterator<Item = (Token, i32)> + '_)> + '_
    {
        self.entries.iter().zip(0..).map(|(e, i)| {
            let len = e
                .key
                .iter()
                .rposition(|&t| t != UNUSED)
                .map_or(0, |i| i + 1);
            (&e.key[..len], self.view(Idx::from_u32(i)).iter())
        })
    }

    pub(super) fn view(&self, i: Idx) -> PartRef<'_> {
        let e = &self.entries[i.as_usize()];
        let Some(id) = e.more.id() else {
            return PartRef {
                slots: std::slice::from_ref(&e.first),
                index: &self.index,
                id: Idx::NONE,
                sum: e.sum,
                best: Idx::default(),
                top: e.first.1,
            };
        };
        let part = &self.multi[id.as_usize()];
        PartRef {
            slots: &part.followers,
            index: &self.index,
            id,
            sum: e.sum,
            best: part.best,
            top: e.first.1,
        }
    }

    /// The index of `key`'s entry.
    pub(super) fn find(&self, key: &Key) -> Option<Idx> {
        let entries = &self.entries;
        let table = &self.tables[table_of(key)];
        // Most engines load no static cache, yet every draft step asks it.
        if table.is_empty() {
            return None;
        }
        table
            .find(hash_of(key), |&i| entries[i.as_usize()].key == *key)
            .copied()
    }

    pub(super) fn part(&self, key: &Key) -> Option<PartRef<'_>> {
        Some(self.view(self.find(key)?))
    }

    /// The entry of `key` when it is the successor that entry `prev` last
    /// saw: one read of an entry instead of a table probe. Text repeats
    /// itself, and the n-grams of a repeated passage were added one after
    /// the other, so the guess is right, and its entry next to the last one
    /// read, most of the time. A wrong guess costs nothing but its read: the
    /// key decides.
    #[inline]
    pub(super) fn find_next(&self, prev: Idx, key: &Key) -> Option<Idx> {
        let next = self.entries.get(prev.as_usize())?.next;
        self.entries
            .get(next.as_usize())
            .is_some_and(|e| e.key == *key)
            .then_some(next)
    }

    /// The entry of `key` (`find_next(prev)` first), as `find`.
    #[inline]
    pub(super) fn find_after(&self, prev: Idx, key: &Key) -> Option<Idx> {
        self.find_next(prev, key).or_else(|| self.find(key))
    }

    /// Adds `count` (positive) to `token`'s count among `key`'s followers (a
    /// new n-gram or follower enters last); `hash` is `hash_of(key)`.
    #[inline]
    pub(super) fn add(&mut self, key: &Key, hash: u64, token: Token, count: i32) {
        let (i, new) = self.locate(key, hash, token, count);
        if !new {
            self.count(i, token, count);
        }
    }

    /// [`add`](LookupCache::add), where `prev` is the entry of the n-gram
    /// that came before `key` (or `Idx::NONE`): its successor guess is tried
    /// before the table (and the hash), and set to `key`'s entry. Returns
    /// that entry.
    #[inline]
    pub(super) fn add_after(&mut self, prev: Idx, key: &Key, token: Token, count: i32) -> Idx {
        let i = match self.find_next(prev, key) {
            Some(i) => i,
            None => {
                let (i, new) = self.locate(key, hash_of(key), token, count);
                if let Some(p) = self.entries.get_mut(prev.as_usize()) {
                    p.next = i;
                }
                if new {
                    return i;
                }
                i
            }
        };
        self.count(i, token, count);
        i
    }

    /// The entry of `key`, found in its table; or a new one (`true`), with
    /// `token`'s `count` as its only follower.
    #[inline]
    pub(super) fn locate(&mut self, key: &Key, hash: u64, token: Token, count: i32) -> (Idx, bool) {
        let entries = &self.entries;
        match self.tables[table_of(key)].entry(
            hash,
            |&i| entries[i.as_usize()].key == *key,
            |&i| hash_of(&entries[i.as_usize()].key),
        ) {
            hash_table::Entry::Occupied(found) => (*found.get(), false),
            hash_table::Entry::Vacant(slot) => {
                // Indices are u32: 2^32 n-grams would take 144 GiB.
                let i = Idx::must(self.entries.len());
                slot.insert(i);
                self.entries.push(Ngram {
                    key: *key,
                    first: (token, count),
                    // Counts are positive.
                    sum: count.unsigned_abs(),
                    more: More::SINGLE,
                    next: Idx::NONE,
                });
                (i, true)
            }
        }
    }

    /// Forgets every n-gram, keeping the room held.
    pub(super) fn clear(&mut self) {
        for table in &mut self.tables {
            table.clear();
        }
        self.entries.clear();
        self.multi.clear();
        self.index.clear();
        self.recent = Recent::default();
    }

    /// The winning follower of entry `i` by count (ties: the newest), its
    /// count and the sum of the counts, read from the entry alone.
    pub(super) fn top(&self, i: Idx) -> (Token, i32, u32) {
        let e = &self.entries[i.as_usize()];
        (e.first.0, e.first.1, e.sum)
    }

    pub(super) fn heap_bytes(&self) -> usize {
        self.tables.iter().map(HashTable::capacity).sum::<usize>() * 5
            + self.entries.capacity() * std::mem::size_of::<Ngram>()
            + self.multi.capacity() * std::mem::size_of::<Part>()
            + self.index.capacity() * (16 + 1)
            + self
                .multi
                .iter()
                .filter(|p| p.followers.spilled())
                .map(|p| p.followers.capacity() * 8)
                .sum::<usize>()
    }
}
