//! Learning: llama.cpp's update, and the bulk path for long runs of 1-grams.

use crate::int::ix32;
use std::collections::HashMap;

use super::followers::INDEXED_PART;
use super::table::LookupCache;
use super::{hash_of, key_of, NGRAM_SIZES};
use crate::index::hash::FastHash;
use crate::index::Idx;
use crate::token::Token;

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
        let digit = |h: u64| crate::int::ix((h >> shift) & ((1 << RADIX_BITS) - 1));
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
/// long prompt slower; DESIGN.md, "Why each index exists").
fn count_follower(
    followers: &mut Vec<(Token, i32)>,
    start: usize,
    slot_of: &mut HashMap<Token, Idx, FastHash>,
    token: Token,
) {
    let n = followers.len() - start;
    let found = if n <= INDEXED_PART {
        followers[start..].iter().position(|f| f.0 == token)
    } else {
        slot_of.get(&token).map(|&j| j.as_usize())
    };
    if let Some(j) = found {
        followers[start + j].1 += 1;
        return;
    }
    if n == INDEXED_PART {
        for (f, j) in followers[start..].iter().zip(0..) {
            slot_of.insert(f.0, Idx::from_u32(j));
        }
    }
    if n >= INDEXED_PART {
        slot_of.insert(token, Idx::must(n));
    }
    followers.push((token, 1));
}

impl LookupCache {
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
            // (Bulk positions are u32: 2^32 tokens and more go one by one.)
            if size == 1 && run >= BULK && Idx::new(len).is_some() {
                self.update_bulk(tokens, size, from);
                self.recent.0[0] = Idx::NONE;
                continue;
            }
            // Room for a long run's new n-grams up front, but for an eighth
            // of its positions only: a text repeats most of its n-grams, and
            // a table sized for every position spreads the lookups of the
            // few distinct ones over several times the cache they need.
            if run >= BULK {
                let entries = &self.entries;
                self.tables[4 - size].reserve(run / 8, |&i| hash_of(&entries[i.as_usize()].key));
            }
            let mut prev = Idx::NONE;
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
    ///
    /// # Panics
    ///
    /// With 2^32 - 1 tokens or more (`update` learns those one by one).
    pub(super) fn update_bulk(&mut self, tokens: &[Token], size: usize, from: usize) {
        let key_at = |p: u32| key_of(&tokens[ix32(p) - size..ix32(p)]);
        // (hash, position), stably sorted by the hash's top bits: equal keys
        // become neighbours, in position order.
        let positions = Idx::must(from).get()..Idx::must(tokens.len()).get();
        let mut items: Vec<(u64, u32)> = positions.map(|p| (hash_of(&key_at(p)), p)).collect();
        radix_sort_top_bits(&mut items);
        // Distinct (key, follower) pairs with their counts, in first-occurrence
        // order within each key; keys by first occurrence.
        let mut groups: Vec<(u32, usize, usize)> = Vec::new(); // (first position, followers start, end)
        let mut followers: Vec<(Token, i32)> = Vec::new();
        let mut slot_of: HashMap<Token, Idx, FastHash> = HashMap::default();
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
                    let token = tokens[ix32(run_items[g].1)];
                    count_follower(&mut followers, start, &mut slot_of, token);
                    g += 1;
                }
                groups.push((first, start, followers.len()));
            }
            run = end;
        }
        groups.sort_unstable_by_key(|g| g.0);
        self.entries.reserve(groups.len());
        let entries = &self.entries;
        self.tables[4 - size].reserve(groups.len(), |&i| hash_of(&entries[i.as_usize()].key));
        for &(first, start, end) in &groups {
            let key = key_at(first);
            let hash = hash_of(&key);
            for &(token, count) in &followers[start..end] {
                self.add(&key, hash, token, count);
            }
        }
    }

    /// A cache of `corpus` with n-gram sizes `sizes`: `2..=2` is what
    /// `llama-lookup-create` writes (static caches), `1..=4` a dynamic cache.
    #[must_use]
    pub fn from_tokens(corpus: &[Token], sizes: std::ops::RangeInclusive<usize>) -> LookupCache {
        let mut cache = LookupCache::new();
        cache.update(corpus, sizes, corpus.len());
        cache
    }

    /// llama.cpp's `common_ngram_cache_merge`: adds `other`'s counts (new
    /// n-grams and followers enter after the existing ones).
    pub fn merge(&mut self, other: &LookupCache) {
        for (e, i) in other.entries.iter().zip(0..) {
            let hash = hash_of(&e.key);
            for (t, c) in other.view(Idx::from_u32(i)).iter() {
                self.add(&e.key, hash, t, c);
            }
        }
    }
}
