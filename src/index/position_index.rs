//! An incremental index of the n-grams of one sequence's history: for any
//! n-gram, its most recent occurrence and, from there, each older one.
//!
//! The reference strategies scan the history; this index gives the same
//! answers in O(1 + occurrences walked) per query and O(1) per history token
//! added. It keeps its own copy of the history so that `begin` can keep the
//! part a new prompt shares with the old history (a chat's next turn) and
//! re-index only the rest.

use super::hash::{mix, top_bits, Poly, FACTOR};
use super::mirror::{Change, Mirror};
use super::{low32, Idx};
use crate::int::index32;
use crate::token::Token;

const MIN_BITS: u32 = 10;

/// Positions of the n-grams of a history, chained per hash bucket, newest first.
#[derive(Clone, Debug)]
pub(crate) struct PositionIndex {
    n: usize,
    poly: Poly,
    /// The indexed history.
    tokens: Mirror,
    /// Per n-gram start: 32 bits of its hash, to skip most bucket neighbours
    /// without touching the history.
    tags: Vec<u32>,
    /// Per n-gram start: the previous start in the same bucket (or none).
    prev: Vec<Idx>,
    /// Per bucket: the latest start (or none). Between 1 and 2 buckets per n-gram.
    heads: Vec<Idx>,
    bits: u32,
    /// Hash of the last indexed n-gram.
    rolling: u64,
}

impl PositionIndex {
    pub(crate) fn new(n: usize) -> PositionIndex {
        PositionIndex {
            n: n.max(1),
            poly: Poly::new(FACTOR, n.max(1)),
            tokens: Mirror::default(),
            tags: Vec::new(),
            prev: Vec::new(),
            heads: vec![Idx::NONE; 1 << MIN_BITS],
            bits: MIN_BITS,
            rolling: 0,
        }
    }

    /// The indexed history.
    #[inline]
    pub(crate) fn tokens(&self) -> &[Token] {
        &self.tokens
    }

    /// Bytes held (capacity, not length: what the process pays for).
    pub(crate) fn heap_bytes(&self) -> usize {
        4 * (self.tokens.capacity()
            + self.tags.capacity()
            + self.prev.capacity()
            + self.heads.capacity())
    }

    /// The hash of the key `head ++ [last]` (n tokens in all).
    #[inline]
    pub(crate) fn key_hash(&self, head: &[Token], last: Token) -> u64 {
        self.poly
            .hash(head.iter().copied().chain(std::iter::once(last)))
    }

    #[inline]
    fn bucket(&self, mixed: u64) -> usize {
        top_bits(mixed, self.bits)
    }

    fn count_for(&self, len: usize) -> usize {
        (len + 1).saturating_sub(self.n)
    }

    /// Makes the index describe `history`, assuming it usually extends what was
    /// indexed: only the last few indexed tokens are compared (see `Mirror`); a
    /// history that is shorter or differs there is re-synchronized from the
    /// common prefix. Returns whether indexed text was dropped (the history was
    /// not an extension).
    #[inline]
    pub(crate) fn sync(&mut self, history: &[Token]) -> bool {
        match self.tokens.change(history, None) {
            Change::Extended { from } => {
                if history.len() > from {
                    self.extend(&history[from..]);
                }
                false
            }
            Change::Diverged { at } => {
                self.rebase(history, at);
                true
            }
        }
    }

    /// Makes the index describe `history`, keeping the whole common prefix
    /// (whose length it returns).
    pub(crate) fn resync(&mut self, history: &[Token]) -> usize {
        let common = self.tokens.common_prefix(history, None);
        self.rebase(history, common);
        common
    }

    /// Makes the index describe `history`, which shares its first `common`
    /// tokens with the indexed history.
    fn rebase(&mut self, history: &[Token], common: usize) {
        self.truncate(common);
        self.reserve_buckets(self.count_for(history.len()));
        self.extend(&history[common..]);
    }

    fn reserve_buckets(&mut self, count: usize) {
        let mut bits = self.bits;
        while (1usize << bits) < count {
            bits += 1;
        }
        if bits != self.bits {
            self.bits = bits;
            self.rebuild();
        }
    }

    /// Re-chains every n-gram after the bucket count changed.
    fn rebuild(&mut self) {
        self.heads.clear();
        self.heads.resize(1 << self.bits, Idx::NONE);
        let count = self.tags.len();
        let mut h = 0;
        for j in 0..count {
            h = if j == 0 {
                self.poly.hash(self.tokens[..self.n].iter().copied())
            } else {
                self.poly
                    .roll(h, self.tokens[j - 1], self.tokens[j + self.n - 1])
            };
            let b = self.bucket(mix(h));
            self.prev[j] = self.heads[b];
            // Below `NONE`: `extend` indexes no start from there on, so the
            // unchecked conversion keeps every bit (a checked one here cost 3
            // instructions a position, 6% of a 128k re-chain, callgrind).
            let start = Idx::from_u32(index32(j));
            self.heads[b] = start;
        }
    }

    fn extend(&mut self, new: &[Token]) {
        let n = self.n;
        for &t in new {
            self.tokens.push(t);
            let len = self.tokens.len();
            if len < n {
                continue;
            }
            let j = len - n;
            let Some(start) = Idx::new(j) else {
                // Positions are u32; a history this long stops being indexed.
                continue;
            };
            let h = if j == 0 {
                self.poly.hash(self.tokens[..n].iter().copied())
            } else {
                self.poly.roll(self.rolling, self.tokens[j - 1], t)
            };
            self.rolling = h;
            let mixed = mix(h);
            let b = self.bucket(mixed);
            self.tags.push(low32(mixed));
            self.prev.push(self.heads[b]);
            self.heads[b] = start;
            if self.tags.len() > self.heads.len() {
                self.bits += 1;
                self.rebuild();
            }
        }
    }

    /// Forgets everything from history position `len` on.
    fn truncate(&mut self, len: usize) {
        if len >= self.tokens.len() {
            return;
        }
        let count = self.tags.len();
        let keep = self.count_for(len).min(count);
        let mut h = self.rolling;
        // Newest first: each removed start is the head of its bucket then.
        for j in (keep..count).rev() {
            let b = self.bucket(mix(h));
            self.heads[b] = self.prev[j];
            if j > 0 {
                h = self
                    .poly
                    .roll_back(h, self.tokens[j - 1], self.tokens[j + self.n - 1]);
            }
        }
        self.rolling = h;
        self.tags.truncate(keep);
        self.prev.truncate(keep);
        self.tokens.truncate(len);
    }

    /// Whether the n-gram at `j` is `head ++ [last]`.
    #[inline]
    pub(crate) fn matches(&self, j: usize, head: &[Token], last: Token) -> bool {
        super::key_at(&self.tokens, j, head, last)
    }

    /// The latest start `j <= max_start` of the key `head ++ [last]` (whose hash is `hash`).
    #[inline]
    pub(crate) fn latest(
        &self,
        hash: u64,
        head: &[Token],
        last: Token,
        max_start: usize,
    ) -> Option<usize> {
        let mixed = mix(hash);
        let tag = low32(mixed);
        let mut j = self.heads[self.bucket(mixed)];
        while !j.is_none() {
            let p = j.as_usize();
            if p <= max_start && self.tags[p] == tag && self.matches(p, head, last) {
                return Some(p);
            }
            j = self.prev[p];
        }
        None
    }

    /// The occurrence before `j` of the n-gram at `j` (which must be indexed).
    #[inline]
    pub(crate) fn older(&self, j: usize, head: &[Token], last: Token) -> Option<usize> {
        let tag = *self.tags.get(j)?;
        let mut i = self.prev[j];
        while !i.is_none() {
            let p = i.as_usize();
            if self.tags[p] == tag && self.matches(p, head, last) {
                return Some(p);
            }
            i = self.prev[p];
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The reference answer: scan backwards.
    fn naive_latest(h: &[Token], key: &[Token], max_start: usize) -> Option<usize> {
        let n = key.len();
        (0..=max_start.min(h.len().saturating_sub(n)))
            .rev()
            .find(|&j| j + n <= h.len() && &h[j..j + n] == key)
    }

    #[test]
    fn agrees_with_a_scan_through_growth_truncation_and_divergence() {
        let mut rng = 12345u64;
        // xorshift, as a usize (64-bit targets keep every bit, others the low 32).
        let mut next = move || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            usize::try_from(rng & 0xFFFF_FFFF).unwrap()
        };
        let token = |x: usize| Token::try_from(x % 4).unwrap();
        for n in [1usize, 2, 3, 5] {
            let mut idx = PositionIndex::new(n);
            let mut history: Vec<Token> = Vec::new();
            for round in 0..400 {
                match next() % 10 {
                    0 => {
                        let cut = next() % (history.len() + 1);
                        history.truncate(cut);
                    }
                    1 if !history.is_empty() => {
                        let at = next() % history.len();
                        history[at] = token(next());
                        idx.resync(&history);
                    }
                    _ => {
                        for _ in 0..(next() % 40) {
                            history.push(token(next()));
                        }
                    }
                }
                idx.sync(&history);
                assert_eq!(idx.tokens(), &history[..], "n={n} round={round}");
                if history.len() < n {
                    continue;
                }
                let key: Vec<Token> = (0..n).map(|_| token(next())).collect();
                let max_start = next() % history.len();
                let hash = idx.key_hash(&key[..n - 1], key[n - 1]);
                let got = idx.latest(hash, &key[..n - 1], key[n - 1], max_start);
                assert_eq!(
                    got,
                    naive_latest(&history, &key, max_start),
                    "n={n} round={round}"
                );
                if let Some(j) = got {
                    let older = idx.older(j, &key[..n - 1], key[n - 1]);
                    let want = if j == 0 {
                        None
                    } else {
                        naive_latest(&history, &key, j - 1)
                    };
                    assert_eq!(older, want, "older n={n} round={round}");
                }
            }
        }
    }
}
