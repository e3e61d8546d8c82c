//! ngram-cache: llama.cpp's lookup decoding. N-gram -> follower-count caches:
//! a context cache learned from the history, and optional dynamic and static
//! caches read from llama.cpp's own cache files.

use std::collections::HashMap;
use std::hash::BuildHasherDefault;
use std::path::{Path, PathBuf};

use hashbrown::hash_table::{self, HashTable};
use smallvec::SmallVec;

use crate::drafter::{DraftLimits, Drafter, Token};
use crate::index::mirror::Mirror;
use crate::index::{Roomy, NONE};
use crate::Error;

/// Smallest and largest n-gram sizes of the context and dynamic caches
/// (llama.cpp's `LLAMA_NGRAM_MIN` / `LLAMA_NGRAM_MAX`).
pub const NGRAM_SIZES: std::ops::RangeInclusive<usize> = 1..=4;
/// The n-gram size of static caches (`LLAMA_NGRAM_STATIC`).
pub const NGRAM_STATIC: usize = 2;
/// Tokens per draft, hard-coded in llama.cpp (`draft_max` is not read).
pub const N_DRAFT: usize = 8;

/// An n-gram as llama.cpp stores it: four ids, unused slots `-1` (`u32::MAX`).
type Key = [Token; 4];
const UNUSED: Token = u32::MAX;

fn key_of(tokens: &[Token]) -> Key {
    // A match, not a copy of variable length: no memcpy call on the path
    // that learns every history token.
    match *tokens {
        [a] => [a, UNUSED, UNUSED, UNUSED],
        [a, b] => [a, b, UNUSED, UNUSED],
        [a, b, c] => [a, b, c, UNUSED],
        [a, b, c, d, ..] => [a, b, c, d],
        [] => [UNUSED; 4],
    }
}

type Fast = BuildHasherDefault<ahash::AHasher>;

/// The hash of a key: a folded multiply of its two halves.
fn hash_of(key: &Key) -> u64 {
    let lo = u64::from(key[0]) | u64::from(key[1]) << 32;
    let hi = u64::from(key[2]) | u64::from(key[3]) << 32;
    let m = u128::from(lo ^ 0x243f_6a88_85a3_08d3) * u128::from(hi ^ 0x1319_8a2e_0370_7344);
    (m as u64) ^ ((m >> 64) as u64)
}

/// The table of `key`: the number of unused slots it ends with, 4 - size
/// for an n-gram of the context (files may hold any key).
fn table_of(key: &Key) -> usize {
    key.iter().rev().take_while(|&&t| t == UNUSED).count()
}

/// Runs of at least this many positions are learned in bulk
/// (`LookupCache::update_bulk`).
const BULK: usize = 256;

/// Bits of the hash that `update_bulk`'s radix sort orders by: two passes of
/// 11 bits.
const RADIX_BITS: u32 = 11;
const RADIX_SHIFT: u32 = 64 - 2 * RADIX_BITS;

/// Sorts `items` stably by the top `2 * RADIX_BITS` bits of their hash.
fn radix_sort_top_bits(items: &mut Vec<(u64, u32)>) {
    let mut out = vec![(0u64, 0u32); items.len()];
    for pass in 0..2 {
        let shift = RADIX_SHIFT + pass * RADIX_BITS;
        let digit = |h: u64| ((h >> shift) & ((1 << RADIX_BITS) - 1)) as usize;
        let mut at = vec![0usize; 1 << RADIX_BITS];
        for &(h, _) in items.iter() {
            at[digit(h)] += 1;
        }
        let mut sum = 0;
        for a in at.iter_mut() {
            (*a, sum) = (sum, sum + *a);
        }
        for &item in items.iter() {
            let d = digit(item.0);
            out[at[d]] = item;
            at[d] += 1;
        }
        std::mem::swap(items, &mut out);
    }
}

/// Counts one more `token` among the followers that start at `start` in
/// `followers` (a new one enters last): a scan while they are few, as in a
/// part, then `slot_of` (token -> position), which holds them all once there
/// are more than `INDEXED_PART` (a map for every follower made learning a
/// 128k prompt ~15% slower).
fn count_follower(
    followers: &mut Vec<(Token, i32)>,
    start: usize,
    slot_of: &mut HashMap<Token, u32, Fast>,
    token: Token,
) {
    let n = followers.len() - start;
    let found = if n <= INDEXED_PART {
        followers[start..].iter().position(|f| f.0 == token)
    } else {
        slot_of.get(&token).map(|&j| j as usize)
    };
    if let Some(j) = found {
        followers[start + j].1 += 1;
        return;
    }
    if n == INDEXED_PART {
        for (j, f) in followers[start..].iter().enumerate() {
            slot_of.insert(f.0, j as u32);
        }
    }
    if n >= INDEXED_PART {
        slot_of.insert(token, n as u32);
    }
    followers.push((token, 1));
}

/// Marks an entry whose only follower is inline.
const SINGLE: u32 = u32::MAX;
/// Flags (in `Ngram::more`) a part with more than `INDEXED_PART` followers,
/// whose counts live in `LookupCache::index`.
const BIG: u32 = 1 << 31;

/// One n-gram and its followers: most n-grams of a history have exactly one,
/// kept inline (36 bytes an entry); the others live in `LookupCache::multi`.
#[derive(Clone, Copy, Debug)]
struct Ngram {
    key: Key,
    /// The only follower and its count while `more == SINGLE`; after, the
    /// winner by count (ties: the newest) and its count, which only this
    /// field holds (see `Part`): a draft without a static cache reads only
    /// the entry.
    first: (Token, i32),
    /// Sum of the counts (saturating: only compared with small thresholds).
    sum: u32,
    /// `SINGLE`, or the index of the followers in `LookupCache::multi`,
    /// with `BIG` set once they are more than `INDEXED_PART`.
    more: u32,
    /// A guess at the entry of the n-gram that comes next (this one shifted by
    /// a token, plus the follower seen the last time it was learned), or
    /// `NONE`. See `LookupCache::find_next`.
    next: u32,
}

/// Parts with more followers than this find a follower through
/// `LookupCache::index` instead of a scan.
const INDEXED_PART: usize = 16;

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
struct Part {
    followers: SmallVec<[(Token, i32); 2]>,
    best: u32,
}

/// The key of `token` among the followers of part `id` in `LookupCache::index`.
fn follower_key(id: u32, token: Token) -> u64 {
    u64::from(id) << 32 | u64::from(token)
}

/// `LookupCache::index`: `follower_key(part, token)` -> (position among the
/// part's followers, count).
type FollowerIndex = HashMap<u64, (u32, i32), Fast>;

/// A read-only view of one n-gram's followers, inline or not.
#[derive(Clone, Copy, Debug)]
struct PartRef<'a> {
    /// The followers. Counts here are stale for the winner, and for all of a
    /// part with more than `INDEXED_PART` (see `Part`).
    slots: &'a [(Token, i32)],
    index: &'a FollowerIndex,
    id: u32,
    sum: u32,
    best: u32,
    /// The winner's count.
    top: i32,
}

impl<'a> PartRef<'a> {
    fn len(&self) -> usize {
        self.slots.len()
    }

    fn big(&self) -> bool {
        self.slots.len() > INDEXED_PART
    }

    fn find(&self, token: Token) -> Option<usize> {
        if self.big() {
            let &(i, _) = self.index.get(&follower_key(self.id, token))?;
            Some(i as usize)
        } else {
            self.slots.iter().position(|&(t, _)| t == token)
        }
    }

    fn token(&self, i: usize) -> Token {
        self.slots[i].0
    }

    fn count(&self, i: usize) -> i32 {
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
    fn iter(self) -> impl ExactSizeIterator<Item = (Token, i32)> + Clone + 'a {
        (0..self.len()).map(move |i| (self.token(i), self.count(i)))
    }
}

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
    tables: [HashTable<u32>; 5],
    /// N-grams in insertion order (file order when loaded).
    entries: Roomy<Ngram>,
    multi: Roomy<Part>,
    /// `follower_key(part, token)` -> (position, count) of a follower, for
    /// the parts with more than `INDEXED_PART`: one table for all, so that a
    /// growing part neither allocates nor rehashes a map of its own.
    index: FollowerIndex,
    /// Per n-gram size, the entry of the n-gram that `update` added last:
    /// its successor guess is where a draft's first lookup of that size starts.
    recent: Recent,
}

/// Entry indices per n-gram size 1..4, `NONE` when unknown.
#[derive(Clone, Copy, Debug)]
struct Recent([u32; 4]);

impl Default for Recent {
    fn default() -> Recent {
        Recent([NONE; 4])
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
            && self.entries.iter().enumerate().all(|(i, e)| {
                other
                    .part(&e.key)
                    .is_some_and(|p| p.iter().eq(self.view(i).iter()))
            })
    }
}

impl LookupCache {
    /// An empty cache.
    pub fn new() -> LookupCache {
        LookupCache::default()
    }

    /// Distinct n-grams held.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the cache holds no n-gram.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The followers of `ngram` (1 to 4 tokens) with their counts, in insertion order.
    pub fn followers(&self, ngram: &[Token]) -> Option<Vec<(Token, u32)>> {
        if !NGRAM_SIZES.contains(&ngram.len()) {
            return None;
        }
        let part = self.part(&key_of(ngram))?;
        Some(part.iter().map(|(t, c)| (t, c as u32)).collect())
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
        self.entries.iter().enumerate().map(|(i, e)| {
            let len = e
                .key
                .iter()
                .rposition(|&t| t != UNUSED)
                .map_or(0, |i| i + 1);
            (&e.key[..len], self.view(i).iter())
        })
    }

    fn view(&self, i: usize) -> PartRef<'_> {
        let e = &self.entries[i];
        if e.more == SINGLE {
            return PartRef {
                slots: std::slice::from_ref(&e.first),
                index: &self.index,
                id: SINGLE,
                sum: e.sum,
                best: 0,
                top: e.first.1,
            };
        }
        let id = e.more & !BIG;
        let part = &self.multi[id as usize];
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
    fn find(&self, key: &Key) -> Option<usize> {
        let entries = &self.entries;
        let table = &self.tables[table_of(key)];
        // Most engines load no static cache, yet every draft step asks it.
        if table.is_empty() {
            return None;
        }
        let &i = table.find(hash_of(key), |&i| entries[i as usize].key == *key)?;
        Some(i as usize)
    }

    fn part(&self, key: &Key) -> Option<PartRef<'_>> {
        Some(self.view(self.find(key)?))
    }

    /// The entry of `key` when it is the successor that entry `prev` last
    /// saw: one read of an entry instead of a table probe. Text repeats
    /// itself, and the n-grams of a repeated passage were added one after
    /// the other, so the guess is right, and its entry next to the last one
    /// read, most of the time. A wrong guess costs nothing but its read: the
    /// key decides.
    #[inline]
    fn find_next(&self, prev: u32, key: &Key) -> Option<usize> {
        let next = self.entries.get(prev as usize)?.next as usize;
        self.entries
            .get(next)
            .is_some_and(|e| e.key == *key)
            .then_some(next)
    }

    /// The entry of `key` (`find_next(prev)` first), as `find`.
    #[inline]
    fn find_after(&self, prev: u32, key: &Key) -> Option<usize> {
        self.find_next(prev, key).or_else(|| self.find(key))
    }

    /// Adds `count` (positive) to `token`'s count among `key`'s followers (a
    /// new n-gram or follower enters last); `hash` is `hash_of(key)`.
    #[inline]
    fn add(&mut self, key: &Key, hash: u64, token: Token, count: i32) {
        let (i, new) = self.locate(key, hash, token, count);
        if !new {
            self.count(i, token, count);
        }
    }

    /// [`add`](LookupCache::add), where `prev` is the entry of the n-gram
    /// that came before `key` (or `NONE`): its successor guess is tried
    /// before the table (and the hash), and set to `key`'s entry. Returns
    /// that entry.
    #[inline]
    fn add_after(&mut self, prev: u32, key: &Key, token: Token, count: i32) -> u32 {
        let i = match self.find_next(prev, key) {
            Some(i) => i,
            None => {
                let (i, new) = self.locate(key, hash_of(key), token, count);
                if let Some(p) = self.entries.get_mut(prev as usize) {
                    p.next = i as u32;
                }
                if new {
                    return i as u32;
                }
                i
            }
        };
        self.count(i, token, count);
        i as u32
    }

    /// The entry of `key`, found in its table; or a new one (`true`), with
    /// `token`'s `count` as its only follower.
    #[inline]
    fn locate(&mut self, key: &Key, hash: u64, token: Token, count: i32) -> (usize, bool) {
        let entries = &self.entries;
        match self.tables[table_of(key)].entry(
            hash,
            |&i| entries[i as usize].key == *key,
            |&i| hash_of(&entries[i as usize].key),
        ) {
            hash_table::Entry::Occupied(found) => (*found.get() as usize, false),
            hash_table::Entry::Vacant(slot) => {
                // Indices are u32: 2^32 n-grams would take 144 GiB.
                let i = self.entries.len();
                slot.insert(i as u32);
                self.entries.push(Ngram {
                    key: *key,
                    first: (token, count),
                    sum: count as u32,
                    more: SINGLE,
                    next: NONE,
                });
                (i, true)
            }
        }
    }

    /// Adds `count` to `token`'s count among the followers of entry `i`.
    #[inline]
    fn count(&mut self, i: usize, token: Token, count: i32) {
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

    /// The winning follower of entry `i` by count (ties: the newest), its
    /// count and the sum of the counts, read from the entry alone.
    fn top(&self, i: usize) -> (Token, i32, u32) {
        let e = &self.entries[i];
        (e.first.0, e.first.1, e.sum)
    }

    /// llama.cpp's `common_ngram_cache_update`: for each size in `sizes`, counts
    /// the token after every n-gram that ends within the last `new` tokens of
    /// `tokens` (n-grams never start before `tokens`).
    pub fn update(&mut self, tokens: &[Token], sizes: std::ops::RangeInclusive<usize>, new: usize) {
        let len = tokens.len();
        let new = new.min(len);
        let sizes = sizes.filter(|s| NGRAM_SIZES.contains(s));
        for size in sizes {
            let from = len.saturating_sub(new).max(size);
            // 1-grams are few (at most the vocabulary) and each has many
            // followers: a long run repeats them at every position, and
            // grouping it first pays (learning a 128k prompt: ~20% less).
            // Longer n-grams repeat less; for them it did not.
            // (`from` passes `len` when the tokens are fewer than the size.)
            let run = len.saturating_sub(from);
            if size == 1 && run >= BULK {
                self.update_bulk(tokens, size, from);
                self.recent.0[0] = NONE;
                continue;
            }
            // Room for a long run's new n-grams up front, but for an eighth
            // of its positions only: a text repeats most of its n-grams, and
            // a table sized for every position spreads the lookups of the
            // few distinct ones over several times the cache they need.
            if run >= BULK {
                let entries = &self.entries;
                self.tables[4 - size].reserve(run / 8, |&i| hash_of(&entries[i as usize].key));
            }
            let mut prev = NONE;
            for i in from..len {
                let key = key_of(&tokens[i - size..i]);
                prev = self.add_after(prev, &key, tokens[i], 1);
            }
            self.recent.0[size - 1] = prev;
        }
    }

    /// [`update`](LookupCache::update) for one size and a long run (the
    /// n-grams ending at `from..tokens.len()`), with the same result: the
    /// run's n-grams are grouped by key first (a radix sort of their hashes)
    /// and their followers counted, so that each distinct (n-gram, follower)
    /// is added once, with its count, in the order of first occurrence.
    /// Counts, follower orders and winners come out as position-by-position
    /// adds leave them (see the test `bulk_learning_equals_token_by_token`).
    fn update_bulk(&mut self, tokens: &[Token], size: usize, from: usize) {
        let key_at = |p: u32| key_of(&tokens[p as usize - size..p as usize]);
        // (hash, position), stably sorted by the hash's top bits: equal keys
        // become neighbours, in position order.
        let mut items: Vec<(u64, u32)> = (from..tokens.len())
            .map(|i| (hash_of(&key_of(&tokens[i - size..i])), i as u32))
            .collect();
        radix_sort_top_bits(&mut items);
        // Distinct (key, follower) pairs with their counts, in first-occurrence
        // order within each key; keys by first occurrence.
        let mut groups: Vec<(u32, u32, u32)> = Vec::new(); // (first position, followers start, end)
        let mut followers: Vec<(Token, i32)> = Vec::new();
        let mut slot_of: HashMap<Token, u32, Fast> = HashMap::default();
        let mut run = 0;
        while run < items.len() {
            let top = items[run].0 >> RADIX_SHIFT;
            let mut end = run + 1;
            while end < items.len() && items[end].0 >> RADIX_SHIFT == top {
                end += 1;
            }
            let run_items = &mut items[run..end];
            // Several keys in one run: order by key, then position.
            if run_items.iter().any(|&(h, _)| h != run_items[0].0)
                || run_items
                    .iter()
                    .any(|&(_, p)| key_at(p) != key_at(run_items[0].1))
            {
                run_items.sort_unstable_by_key(|&(_, p)| (key_at(p), p));
            }
            // Each key's followers in first-occurrence order, counted.
            let mut g = 0;
            while g < run_items.len() {
                let first = run_items[g].1;
                let key = key_at(first);
                let start = followers.len();
                slot_of.clear();
                while g < run_items.len() && key_at(run_items[g].1) == key {
                    let token = tokens[run_items[g].1 as usize];
                    count_follower(&mut followers, start, &mut slot_of, token);
                    g += 1;
                }
                groups.push((first, start as u32, followers.len() as u32));
            }
            run = end;
        }
        groups.sort_unstable_by_key(|g| g.0);
        self.entries.reserve(groups.len());
        let entries = &self.entries;
        self.tables[4 - size].reserve(groups.len(), |&i| hash_of(&entries[i as usize].key));
        for &(first, start, end) in &groups {
            let key = key_at(first);
            let hash = hash_of(&key);
            for &(token, count) in &followers[start as usize..end as usize] {
                self.add(&key, hash, token, count);
            }
        }
    }

    /// A cache of `corpus` with n-gram sizes `sizes`: `2..=2` is what
    /// `llama-lookup-create` writes (static caches), `1..=4` a dynamic cache.
    pub fn from_tokens(corpus: &[Token], sizes: std::ops::RangeInclusive<usize>) -> LookupCache {
        let mut cache = LookupCache::new();
        cache.update(corpus, sizes, corpus.len());
        cache
    }

    /// llama.cpp's `common_ngram_cache_merge`: adds `other`'s counts (new
    /// n-grams and followers enter after the existing ones).
    pub fn merge(&mut self, other: &LookupCache) {
        for (i, e) in other.entries.iter().enumerate() {
            let hash = hash_of(&e.key);
            for (t, c) in other.view(i).iter() {
                self.add(&e.key, hash, t, c);
            }
        }
    }

    /// Parses llama.cpp's cache file format (`name` labels errors): records of
    /// `i32[4]` key, `i32` follower count n > 0, n x (`i32` token, `i32` count > 0),
    /// little-endian. A repeated key or follower keeps the first; a trailing
    /// fragment shorter than a key is ignored (as llama.cpp does).
    pub fn from_bytes(bytes: &[u8], name: &str) -> Result<LookupCache, Error> {
        let bad = |offset: usize, reason: String| Error::CacheFile {
            path: PathBuf::from(name),
            offset: offset as u64,
            reason,
        };
        let word = |at: usize| -> Option<i32> {
            bytes
                .get(at..at + 4)
                .map(|b| i32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        };
        let mut cache = LookupCache::new();
        let mut at = 0;
        while at + 16 <= bytes.len() {
            let record = at;
            let mut key = [0u32; 4];
            for (j, slot) in key.iter_mut().enumerate() {
                *slot = word(at + 4 * j).unwrap_or(-1) as u32;
            }
            at += 16;
            let n = word(at)
                .ok_or_else(|| bad(at, "truncated record: missing follower count".into()))?;
            if n <= 0 {
                return Err(bad(at, format!("follower count {n}; must be positive")));
            }
            at += 4;
            let need = n as usize * 8;
            if bytes.len() - at < need {
                return Err(bad(
                    at,
                    format!(
                        "truncated record at {record}: {n} followers need {need} bytes, {} left",
                        bytes.len() - at
                    ),
                ));
            }
            let hash = hash_of(&key);
            let is_new = cache.part(&key).is_none();
            for _ in 0..n {
                let (token, count) = (word(at).unwrap_or(0) as u32, word(at + 4).unwrap_or(0));
                if count <= 0 {
                    return Err(bad(
                        at + 4,
                        format!("count {count} of token {token}; must be positive"),
                    ));
                }
                if is_new && cache.part(&key).map_or(true, |p| p.find(token).is_none()) {
                    cache.add(&key, hash, token, count);
                }
                at += 8;
            }
        }
        Ok(cache)
    }

    /// Reads a llama.cpp cache file (see [`from_bytes`](LookupCache::from_bytes)).
    pub fn load(path: impl AsRef<Path>) -> Result<LookupCache, Error> {
        let path = path.as_ref();
        let bytes = std::fs::read(path).map_err(|e| Error::CacheFile {
            path: path.to_path_buf(),
            offset: 0,
            reason: e.to_string(),
        })?;
        LookupCache::from_bytes(&bytes, &path.display().to_string())
    }

    /// The cache in llama.cpp's file format: n-grams and followers in insertion
    /// order, so that loading the bytes gives back an equal cache.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::new();
        for (key, followers) in self.iter() {
            for j in 0..4 {
                out.extend_from_slice(&key.get(j).copied().unwrap_or(UNUSED).to_le_bytes());
            }
            out.extend_from_slice(&(followers.len() as i32).to_le_bytes());
            for (t, c) in followers {
                out.extend_from_slice(&t.to_le_bytes());
                out.extend_from_slice(&c.to_le_bytes());
            }
        }
        out
    }

    /// Writes the cache to `path` in llama.cpp's file format.
    pub fn save(&self, path: impl AsRef<Path>) -> Result<(), Error> {
        let path = path.as_ref();
        std::fs::write(path, self.to_bytes()).map_err(|e| Error::CacheFile {
            path: path.to_path_buf(),
            offset: 0,
            reason: e.to_string(),
        })
    }

    fn heap_bytes(&self) -> usize {
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

/// Minimum sample sizes and winner percentages per n-gram size 1..4.
struct Thresholds {
    sample: [i64; 4],
    pct: [i64; 4],
}

const LAX: Thresholds = Thresholds {
    sample: [2, 2, 1, 1],
    pct: [66, 50, 50, 50],
};
const STRICT: Thresholds = Thresholds {
    sample: [4, 3, 2, 2],
    pct: [75, 66, 66, 66],
};

/// The follower of `part` with the highest `count * weight` (weight `100 *
/// static count` for followers of the static part `ps`, else 1); ties go to
/// the newest.
fn winner(part: PartRef<'_>, ps: Option<PartRef<'_>>) -> usize {
    let Some(ps) = ps.filter(|p| p.len() > 0) else {
        return part.best as usize;
    };
    let weight = |t: Token| ps.find(t).map_or(1, |j| 100 * ps.count(j) as i64);
    let better = |(s, i): (i64, usize), (bs, bi): (i64, usize)| s > bs || (s == bs && i > bi);
    let scan = || {
        let mut best = (i64::MIN, 0);
        for (i, (t, c)) in part.iter().enumerate() {
            let cand = (c as i64 * weight(t), i);
            if better(cand, best) {
                best = cand;
            }
        }
        best.1
    };
    if part.len() <= INDEXED_PART || ps.len() > part.len() {
        return scan();
    }
    // Large part, smaller static part: the winner is either a follower the
    // static part weights, or the best-counted follower if it is unweighted.
    let top = part.best as usize;
    if ps.find(part.token(top)).is_some() {
        return scan();
    }
    let mut best = (part.count(top) as i64, top);
    for (t, sc) in ps.iter() {
        if let Some(i) = part.find(t) {
            let cand = (part.count(i) as i64 * 100 * sc as i64, i);
            if better(cand, best) {
                best = cand;
            }
        }
    }
    best.1
}

/// llama.cpp's `ngram-cache` drafter (lookup decoding).
///
/// Each draft call first teaches the context cache the tokens added since the
/// last call, then drafts up to 8 tokens, each from the longest n-gram (4 down
/// to 1) of the context cache whose winner passes the lax thresholds, else of
/// the dynamic cache under the strict ones, else from the static cache's
/// 2-gram; static counts weight the followers' scores.
///
/// Reference quirks kept by default (see [`NgramCache::live`] for the fix): the
/// context cache learns n-grams only inside each newly added segment (the
/// accepted tokens plus the new `last`), and after a long history it ignores a
/// new, shorter prompt until the history passes the old length.
///
/// ```
/// use selfspec::{DraftLimits, Drafter, strategies::NgramCache};
///
/// let mut cache = NgramCache::new();
/// let prompt = [1, 2, 3, 4, 1, 2, 3, 4, 1, 2];
/// let mut draft = Vec::new();
/// cache.draft(&prompt, 3, DraftLimits::default(), &mut draft);
/// assert_eq!(draft, [4, 1, 2, 3, 4, 1, 2, 3]);
/// ```
#[derive(Clone, Debug, Default)]
pub struct NgramCache {
    context: LookupCache,
    dynamic: LookupCache,
    statics: LookupCache,
    /// History tokens (plus `last`) already fed to the context cache.
    cache_size: usize,
    /// `Some(copy of history ++ [last] as last seen)`: new prompts are
    /// learned from where they depart from it (fixes the second quirk).
    live: Option<Mirror>,
    /// Learn n-grams across the boundaries of what each call adds (fixes the first quirk).
    across_segments: bool,
    segment: Vec<Token>,
    tokens_from: [u64; 3],
}

impl NgramCache {
    /// A drafter with no static or dynamic cache.
    pub fn new() -> NgramCache {
        NgramCache::default()
    }

    /// A drafter with the given static and dynamic caches (already loaded).
    pub fn with_caches(static_cache: LookupCache, dynamic_cache: LookupCache) -> NgramCache {
        NgramCache {
            statics: static_cache,
            dynamic: dynamic_cache,
            ..NgramCache::default()
        }
    }

    /// A drafter reading llama.cpp's `--lookup-cache-static` and
    /// `--lookup-cache-dynamic` files; errors name the file and byte offset.
    pub fn from_files(
        static_cache: Option<&Path>,
        dynamic_cache: Option<&Path>,
    ) -> Result<NgramCache, Error> {
        let load = |p: Option<&Path>| p.map_or_else(|| Ok(LookupCache::new()), LookupCache::load);
        Ok(NgramCache::with_caches(
            load(static_cache)?,
            load(dynamic_cache)?,
        ))
    }

    /// Fixes the second quirk: a prompt that departs from the history seen so
    /// far (a new conversation, a shorter prompt) is learned from where it
    /// departs, instead of being ignored until the history passes the old
    /// length. N-grams are still learned inside each added segment.
    pub fn relearn_prompts(mut self) -> NgramCache {
        self.live.get_or_insert_with(Mirror::default);
        self
    }

    /// Fixes both quirks (the `ngram-cache-live` strategy): the context cache
    /// learns every n-gram of the history, across the boundaries of what each
    /// call adds, and learns new prompts from where they depart (earlier
    /// histories stay in the cache).
    pub fn live(self) -> NgramCache {
        let mut cache = self.relearn_prompts();
        cache.across_segments = true;
        cache
    }

    /// The context cache learned from the history.
    pub fn context(&self) -> &LookupCache {
        &self.context
    }

    /// History tokens fed to the context cache so far (its high-water mark).
    pub fn cache_size(&self) -> usize {
        self.cache_size
    }

    /// Drafted tokens taken from the context, dynamic and static cache.
    pub fn tokens_from(&self) -> [u64; 3] {
        self.tokens_from
    }

    fn learn(&mut self, history: &[Token], last: Token) {
        let len = history.len();
        if let Some(fed) = &mut self.live {
            // Keep `fed` equal to history ++ [last], noting where it departs
            // from what was fed before (a new prompt).
            let common = fed.change(history, Some(last)).common();
            fed.truncate(common);
            fed.extend_from_slice(history.get(common..).unwrap_or(&[]));
            fed.push(last);
            if self.across_segments {
                let new = fed.len() - common;
                if new > 0 {
                    self.context.update(fed, NGRAM_SIZES, new);
                }
                self.cache_size = fed.len();
                return;
            }
            // Re-learn a new prompt from where it departs.
            self.cache_size = self.cache_size.min(common);
        }
        // The reference: n-grams inside the new segment only.
        if self.cache_size < len + 1 {
            self.segment.clear();
            self.segment.extend_from_slice(&history[self.cache_size..]);
            self.segment.push(last);
            self.context
                .update(&self.segment, NGRAM_SIZES, self.segment.len());
            self.cache_size = len + 1;
        }
    }

    /// The first follower, from n-gram size 4 down to 1, whose winner in
    /// `cache` passes the thresholds `t`. `hints` holds the entries found per
    /// size at the previous draft step, and is left holding this step's: the
    /// next step's n-grams are most likely their successors.
    fn primary(
        &self,
        cache: &LookupCache,
        keys: &[Option<Key>; 4],
        ps: Option<PartRef<'_>>,
        t: &Thresholds,
        hints: &mut Recent,
    ) -> Option<Token> {
        let prev = std::mem::take(hints);
        // Most engines load no cache file: no lookups in an empty cache.
        if cache.is_empty() {
            return None;
        }
        for s in (1..=4).rev() {
            let Some(i) = keys[s - 1]
                .as_ref()
                .and_then(|k| cache.find_after(prev.0[s - 1], k))
            else {
                continue;
            };
            hints.0[s - 1] = i as u32;
            let (token, count, sum) = match ps {
                // No static weights: the winner is the one the entry keeps.
                None => cache.top(i),
                Some(_) => {
                    let part = cache.view(i);
                    let w = winner(part, ps);
                    (part.token(w), part.count(w), part.sum)
                }
            };
            let (count, sum) = (count as i64, sum as i64);
            if sum < t.sample[s - 1] || 100 * count < t.pct[s - 1] * sum {
                continue;
            }
            return Some(token);
        }
        None
    }
}

impl Drafter for NgramCache {
    fn name(&self) -> &str {
        match (&self.live, self.across_segments) {
            (Some(_), true) => "ngram_cache_live",
            (Some(_), false) => "ngram_cache_relearn",
            (None, _) => "ngram_cache",
        }
    }

    fn begin(&mut self, _prompt: &[Token]) {}

    fn draft(
        &mut self,
        history: &[Token],
        last: Token,
        _limits: DraftLimits,
        draft: &mut Vec<Token>,
    ) {
        self.learn(history, last);
        let len = history.len() + 1;
        if len < NGRAM_STATIC {
            return;
        }
        // The last four tokens of history ++ [last] ++ draft, oldest first.
        let mut tail = [UNUSED; 4];
        let known = len.min(4);
        for (j, slot) in tail[4 - known..].iter_mut().enumerate() {
            let at = len - known + j;
            *slot = if at < history.len() {
                history[at]
            } else {
                last
            };
        }
        let mut seq_len = len;
        let base = draft.len();
        let mut hints = self.context.recent;
        while draft.len() - base < N_DRAFT {
            let mut keys = [None; 4];
            for s in 1..=4 {
                if s <= seq_len {
                    keys[s - 1] = Some(key_of(&tail[4 - s..]));
                }
            }
            let ps = keys[NGRAM_STATIC - 1]
                .as_ref()
                .and_then(|k| self.statics.part(k));
            let (token, source) =
                if let Some(t) = self.primary(&self.context, &keys, ps, &LAX, &mut hints) {
                    (t, 0)
                } else if let Some(t) =
                    self.primary(&self.dynamic, &keys, ps, &STRICT, &mut Recent::default())
                {
                    (t, 1)
                } else {
                    match ps {
                        Some(p)
                            if p.sum >= 2
                                && 100 * p.count(p.best as usize) as i64 >= 50 * p.sum as i64 =>
                        {
                            (p.token(p.best as usize), 2)
                        }
                        _ => break,
                    }
                };
            self.tokens_from[source] += 1;
            draft.push(token);
            tail.copy_within(1.., 0);
            tail[3] = token;
            seq_len += 1;
        }
    }

    fn accept(&mut self, _n_accepted: usize) {}

    /// The three caches (the static and dynamic ones as loaded) and buffers.
    fn heap_bytes(&self) -> usize {
        self.context.heap_bytes()
            + self.dynamic.heap_bytes()
            + self.statics.heap_bytes()
            + self.segment.capacity() * 4
            + self.live.as_ref().map_or(0, |f| f.capacity() * 4)
    }

    fn as_any(&self) -> Option<&dyn std::any::Any> {
        Some(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A one-key cache with `followers` added in order, and that key.
    fn cache_of(followers: &[(Token, i32)]) -> (LookupCache, Key) {
        let key = key_of(&[1, 2]);
        let mut cache = LookupCache::new();
        for &(t, c) in followers {
            cache.add(&key, hash_of(&key), t, c);
        }
        (cache, key)
    }

    #[test]
    fn ties_go_to_the_newest_follower() {
        let cases: &[(&[(Token, i32)], Token)] = &[
            (&[(5, 1)], 5),
            (&[(5, 1), (7, 1)], 7),
            (&[(5, 1), (7, 1), (5, 1)], 5),
            (&[(5, 1), (7, 1), (5, 1), (7, 1)], 7),
            (&[(5, 3), (7, 1), (9, 3)], 9),
        ];
        for &(followers, want) in cases {
            let (cache, key) = cache_of(followers);
            let part = cache.part(&key).unwrap();
            assert_eq!(part.token(winner(part, None)), want, "{followers:?}");
        }
    }

    #[test]
    fn counts_survive_a_part_growing_past_the_indexed_size() {
        // Sixteen followers, the last counted up while it wins (its count in
        // the entry, its slot stale), then a seventeenth moves the part's
        // counts into the index, winning or not, and later winners change.
        let base: Vec<(Token, i32)> = (0..16).map(|t| (t, 1)).chain([(15, 3)]).collect();
        let cases: &[(&[(Token, i32)], Token)] = &[
            (&[(16, 10)], 16),
            (&[(16, 2)], 15),
            (&[(16, 10), (0, 20)], 0),
            (&[(16, 2), (16, 2), (3, 1)], 16),
        ];
        for &(more, want) in cases {
            let adds: Vec<(Token, i32)> = base.iter().chain(more).copied().collect();
            let (cache, key) = cache_of(&adds);
            let mut naive: Vec<(Token, i32)> = Vec::new();
            for &(t, c) in &adds {
                match naive.iter_mut().find(|f| f.0 == t) {
                    Some(f) => f.1 += c,
                    None => naive.push((t, c)),
                }
            }
            let part = cache.part(&key).unwrap();
            assert!(part.len() > INDEXED_PART);
            assert_eq!(part.iter().collect::<Vec<_>>(), naive, "{more:?}");
            assert_eq!(part.token(winner(part, None)), want, "{more:?}");
        }
    }

    #[test]
    fn static_weights_decide_and_match_a_scan() {
        // Large parts take the indexed path; compare it with a plain scan.
        let many: Vec<(Token, i32)> = (0..40u32).map(|t| (t, 1 + (t % 7) as i32)).collect();
        let (cache, key) = cache_of(&many);
        let part = cache.part(&key).unwrap();
        assert!(part.len() > INDEXED_PART);
        for weighted in [
            vec![(3u32, 1i32)],
            vec![(6, 1), (13, 1)],
            vec![(99, 4)],
            vec![(20, 1), (27, 2)],
        ] {
            let (statics, skey) = cache_of(&weighted);
            let ps = statics.part(&skey).unwrap();
            let scan = part
                .iter()
                .enumerate()
                .map(|(i, (t, c))| {
                    (
                        c as i64 * ps.find(t).map_or(1, |j| 100 * ps.count(j) as i64),
                        i,
                    )
                })
                .max()
                .unwrap()
                .1;
            assert_eq!(winner(part, Some(ps)), scan);
        }
    }

    #[test]
    fn bulk_learning_equals_token_by_token() {
        // Small alphabets (many ties, parts past INDEXED_PART) and a large one
        // (top-bit collisions between keys in the radix sort), every size.
        for (alphabet, len) in [(3u64, 3000), (40, 5000), (100_000, 4000)] {
            let mut rng = 0x2545_f491_4f6c_dd1du64;
            let corpus: Vec<Token> = (0..len)
                .map(|_| {
                    rng ^= rng << 13;
                    rng ^= rng >> 7;
                    rng ^= rng << 17;
                    (rng % alphabet) as Token
                })
                .collect();
            for size in NGRAM_SIZES {
                let mut bulk = LookupCache::new();
                bulk.update_bulk(&corpus, size, size);
                let mut single = LookupCache::new();
                for end in 1..=corpus.len() {
                    single.update(&corpus[..end], size..=size, 1);
                }
                // Same n-grams, followers, counts and orders.
                assert!(
                    bulk.to_bytes() == single.to_bytes(),
                    "alphabet {alphabet}, size {size}"
                );
                for (key, _) in single.iter() {
                    let (a, b) = (
                        bulk.part(&key_of(key)).unwrap(),
                        single.part(&key_of(key)).unwrap(),
                    );
                    assert_eq!(
                        (a.best, a.sum),
                        (b.best, b.sum),
                        "alphabet {alphabet}, key {key:?}"
                    );
                    // The winner is the newest of the highest counts.
                    let counts: Vec<i32> = b.iter().map(|(_, c)| c).collect();
                    let max = counts.iter().max().copied();
                    let newest = counts.iter().rposition(|&c| Some(c) == max);
                    assert_eq!(Some(b.best as usize), newest, "key {key:?}");
                    // The entry keeps the winner in step with the part.
                    let (t, c) = (a.token(a.best as usize), a.count(a.best as usize));
                    let want = Some((t, c, a.sum));
                    for cache in [&bulk, &single] {
                        let top = cache.find(&key_of(key)).map(|i| cache.top(i));
                        assert_eq!(top, want, "key {key:?}");
                    }
                }
            }
        }
    }

    /// A text whose second half repeats passages of its first.
    fn repetitive(len: usize) -> Vec<Token> {
        let mut rng = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = |n: u64| {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng % n
        };
        let mut text: Vec<Token> = (0..len / 2).map(|_| next(50) as Token).collect();
        while text.len() < len {
            let start = next(len as u64 / 2 - 40) as usize;
            text.extend_from_within(start..start + 5 + next(30) as usize);
        }
        text
    }

    #[test]
    fn successor_guesses_find_repeated_passages() {
        let text = repetitive(4000);
        let mut cache = LookupCache::new();
        // Learned in call-sized steps, as a drafter does.
        for end in (8..=text.len()).step_by(8) {
            cache.update(&text[..end], NGRAM_SIZES, 8);
        }
        // Walking the text again, each n-gram's entry is mostly the guess of
        // the one before it, and a guess is never taken for a wrong key.
        for size in [2, 3, 4] {
            let (mut guessed, mut prev) = (0, NONE);
            for i in size..text.len() {
                let key = key_of(&text[i - size..i]);
                let i = cache.find(&key).expect("every n-gram is learned");
                match cache.find_next(prev, &key) {
                    Some(j) => {
                        assert_eq!(j, i, "size {size}");
                        guessed += 1;
                    }
                    None => assert_ne!(
                        cache.entries.get(prev as usize).map(|e| e.next),
                        Some(i as u32)
                    ),
                }
                prev = i as u32;
            }
            let share = guessed as f64 / (text.len() - size) as f64;
            assert!(share > 0.5, "size {size}: {share:.2} guessed");
        }
    }

    #[test]
    fn wrong_guesses_change_no_draft() {
        let text = repetitive(3000);
        let learn = |cache: &mut NgramCache| {
            let mut draft = Vec::new();
            cache.draft(
                &text[..2000],
                text[2000],
                DraftLimits::default(),
                &mut draft,
            );
        };
        let (mut right, mut wrong) = (NgramCache::new(), NgramCache::new());
        learn(&mut right);
        learn(&mut wrong);
        // Every guess points at some other entry.
        let n = wrong.context.entries.len() as u32;
        for (i, e) in wrong.context.entries.iter_mut().enumerate() {
            e.next = (i as u32 * 7919 + 13) % n;
        }
        wrong.context.recent = Recent([0, 1, 2, 3]);
        let (mut a, mut b) = (Vec::new(), Vec::new());
        for pos in 2001..text.len() {
            a.clear();
            b.clear();
            right.draft(&text[..pos], text[pos], DraftLimits::default(), &mut a);
            wrong.draft(&text[..pos], text[pos], DraftLimits::default(), &mut b);
            assert_eq!(a, b, "at {pos}");
        }
    }

    #[test]
    fn table_grows_and_finds_every_key() {
        // Keys that share their home slot's low bits, past several growths.
        let mut cache = LookupCache::new();
        let keys: Vec<Key> = (0..5000u32).map(|i| key_of(&[i % 7, i / 7, 3])).collect();
        for (n, key) in keys.iter().enumerate() {
            cache.add(key, hash_of(key), n as Token, 1);
            cache.add(key, hash_of(key), n as Token + 1, 2);
        }
        assert_eq!(cache.len(), keys.len());
        for (n, key) in keys.iter().enumerate() {
            let part = cache.part(key).unwrap();
            let followers: Vec<_> = part.iter().collect();
            assert_eq!(followers, [(n as Token, 1), (n as Token + 1, 2)]);
            assert_eq!(part.sum, 3);
        }
        assert!(cache.part(&key_of(&[9, 9, 9, 9])).is_none());
        assert!(LookupCache::new().part(&key_of(&[1])).is_none());
    }

    #[test]
    fn bad_files_are_typed_errors() {
        let mut good = Vec::new();
        for w in [1i32, 2, -1, -1, 1, 9, 3] {
            good.extend_from_slice(&w.to_le_bytes());
        }
        assert_eq!(
            LookupCache::from_bytes(&good, "f")
                .unwrap()
                .followers(&[1, 2])
                .unwrap(),
            [(9, 3)]
        );
        // A trailing fragment shorter than a key is ignored.
        let mut tail = good.clone();
        tail.extend_from_slice(&[1, 2, 3]);
        assert!(LookupCache::from_bytes(&tail, "f").is_ok());
        let cases: &[(usize, &[u8], u64)] = &[
            (16, &0i32.to_le_bytes(), 16), // n = 0
            (24, &0i32.to_le_bytes(), 24), // count = 0
            (24, &(-3i32).to_le_bytes(), 24),
        ];
        for &(at, bytes, offset) in cases {
            let mut bad = good.clone();
            bad[at..at + 4].copy_from_slice(bytes);
            match LookupCache::from_bytes(&bad, "f") {
                Err(Error::CacheFile {
                    offset: o, path, ..
                }) => {
                    assert_eq!((o, path), (offset, PathBuf::from("f")));
                }
                other => panic!("{other:?}"),
            }
        }
        // Truncated: the key and count are there, a follower is cut short.
        match LookupCache::from_bytes(&good[..good.len() - 2], "f") {
            Err(Error::CacheFile { offset, reason, .. }) => {
                assert_eq!(offset, 20);
                assert!(reason.contains("truncated"), "{reason}");
            }
            other => panic!("{other:?}"),
        }
    }
}
