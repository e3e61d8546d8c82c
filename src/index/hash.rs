//! Every hash of the crate, in one place, and which one serves what.
//!
//! Each hash below is either llama.cpp's own (a reference-exact port must
//! place entries where llama.cpp does, so it cannot change), part of a file
//! format, or a placement hash. Placement hashes either leave drafts alone
//! (every candidate is checked against the tokens) or, for recall, decide
//! them, and then the published figures were measured with their values.
//!
//! - [`Poly`]: polynomial n-gram hashes `h = h * F + t`, rolled one token at
//!   a time. With [`NGRAM_MAP_LCG`] (the low 32 bits: the slot of
//!   ngram-map's 2^18-entry key map) and [`NGRAM_MOD_LCG`] (ngram-mod's pool
//!   slot) they are llama.cpp's hashes: the slots, their collisions and
//!   first-writer-wins decide drafts, and the golden traces pin them.
//!   ngram-mod's pool is saved in memory files in slot order, so its hash is
//!   part of that format too. With [`FACTOR`] they hash the n-grams of the
//!   position index and recall's contexts.
//! - [`mix`] and [`top_bits`]: bucket and tag of the position index
//!   (ngram-simple, ngram-map). Placement only: every candidate is compared
//!   token by token before it counts, so drafts do not depend on them; they
//!   stay because they are five instructions and spread polynomial hashes
//!   well, and any other choice would have to be timed again.
//! - [`tag_of`]: recall's 32-bit context tags, whose top bits pick the
//!   bucket. These decide recall's drafts: a context whose tag matches
//!   counts as an occurrence (no token-by-token check) and a walk looks at
//!   a fixed number of chain entries at most, so which contexts share a
//!   bucket changes what is found. Changing it changes every
//!   published figure of recall. It is not part of the memory file format
//!   (a file holds tokens; the chains are rebuilt on load).
//! - [`key4_hash`]: ngram-cache's n-gram keys in its hash tables. Placement
//!   only: lookups compare keys, bulk learning puts n-grams back in
//!   first-occurrence order and saved files list them in insertion order,
//!   so neither drafts nor files depend on it (llama.cpp's own
//!   hash decides only its `unordered_map` iteration order, which the
//!   portable tie-break replaces).
//! - [`fnv1a`]: the checksum of memory files and replica messages: part of
//!   those formats.
//! - [`FastHash`]: ahash with fixed keys, for maps keyed by values that are
//!   not hashes (a follower by part and token, a token).
//! - [`PreHashed`]: maps keyed by a hash already (ngram-map's records by key
//!   hash): the key is the hash, with nothing hashed twice.
//!
//! Scope names, which engines choose, are keyed with std's randomly keyed
//! hasher instead (`shared::scope`), against crafted collisions.

use crate::token::Token;

/// Widens a token as llama.cpp widens its `i32` ids (sign extension); the low
/// 32 bits are the id itself, so 32-bit hashes are unaffected.
#[inline(always)]
pub(crate) fn widen(t: Token) -> u64 {
    // Reinterpretations, no casts: the id's bits as an i32, sign-extended,
    // and the result's bits as a u64.
    let id = i64::from(i32::from_ne_bytes(t.to_ne_bytes()));
    u64::from_ne_bytes(id.to_ne_bytes())
}

/// The multiplier of the position index's and recall's n-gram hashes (the
/// 64-bit golden ratio): any odd constant works; this one spreads small token
/// ids well.
pub(crate) const FACTOR: u64 = 0x9E37_79B9_7F4A_7C15;

/// llama.cpp's ngram-map hash factor (`h = h * 2654435761 + t` in 32 bits:
/// the low half of the same polynomial in 64 bits).
pub(crate) const NGRAM_MAP_LCG: u64 = 2_654_435_761;

/// llama.cpp's ngram-mod hash factor (64 bits).
pub(crate) const NGRAM_MOD_LCG: u64 = 6_364_136_223_846_793_005;

/// splitmix64's finalizer: turns a polynomial hash into bits that are
/// independent at both ends (hash-table buckets from the top, tags from the bottom).
#[inline]
pub(crate) fn mix(mut x: u64) -> u64 {
    x ^= x >> 30;
    x = x.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x ^= x >> 27;
    x = x.wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// The top `bits` bits of a hash (1 to 32): a bucket number.
#[inline(always)]
pub(crate) fn top_bits(x: u64, bits: u32) -> usize {
    debug_assert!((1..=32).contains(&bits));
    // Below 2^32: no check is left on 64-bit targets.
    usize::try_from(x >> (64 - bits)).unwrap_or(usize::MAX)
}

/// recall's tag of a context: 32 bits of its polynomial hash, well spread,
/// the high half of one multiply (each order has its own buckets, so the
/// order need not enter). The tag's top bits pick the bucket.
#[inline]
pub(crate) fn tag_of(hash: u64) -> u32 {
    crate::int::high32(hash.wrapping_mul(0xD6E8_FEB8_6659_FD93))
}

/// ngram-cache's hash of a key (four ids, unused slots `u32::MAX`): a
/// folded multiply of its two halves.
#[inline]
pub(crate) fn key4_hash(key: &[Token; 4]) -> u64 {
    let lo = u64::from(key[0]) | u64::from(key[1]) << 32;
    let hi = u64::from(key[2]) | u64::from(key[3]) << 32;
    let m = u128::from(lo ^ 0x243f_6a88_85a3_08d3) * u128::from(hi ^ 0x1319_8a2e_0370_7344);
    crate::int::fold128(m)
}

/// FNV-1a over `bytes`: the checksum of memory files and replica messages.
pub(crate) fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// The hasher of maps keyed by values that are not hashes: ahash with its
/// fixed keys (the same on every run and machine).
pub(crate) type FastHash = std::hash::BuildHasherDefault<ahash::AHasher>;

/// The hasher of maps whose keys are hashes already: the key passes through
/// unchanged (hashing it again
/// showed in ngram-map's draft call).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct PreHashed(u64);

impl std::hash::Hasher for PreHashed {
    #[inline(always)]
    fn finish(&self) -> u64 {
        self.0
    }

    /// Keys other than `u64` do not occur; they fold in byte by byte.
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }

    #[inline(always)]
    fn write_u64(&mut self, x: u64) {
        self.0 = x;
    }
}

/// A map keyed by hashes (see [`PreHashed`]).
pub(crate) type PreHashedMap<V> =
    std::collections::HashMap<u64, V, std::hash::BuildHasherDefault<PreHashed>>;

/// The multiplicative inverse of an odd `f` mod 2^64 (Newton's iteration).
const fn inverse(f: u64) -> u64 {
    let mut x = f; // correct to 3 bits for odd f
    let mut i = 0;
    while i < 6 {
        x = x.wrapping_mul(2u64.wrapping_sub(f.wrapping_mul(x)));
        i += 1;
    }
    x
}

/// `h = h * factor + t` over windows of `n` tokens, rolled in either direction.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Poly {
    factor: u64,
    inverse: u64,
    /// `factor^(n-1)`: the weight of a window's first token.
    top: u64,
}

impl Poly {
    /// `factor` must be odd (every factor used here is).
    pub(crate) fn new(factor: u64, n: usize) -> Poly {
        debug_assert!(factor % 2 == 1);
        let mut top = 1u64;
        for _ in 1..n {
            top = top.wrapping_mul(factor);
        }
        Poly {
            factor,
            inverse: inverse(factor),
            top,
        }
    }

    /// The hash of a whole window.
    #[inline]
    pub(crate) fn hash(&self, tokens: impl IntoIterator<Item = Token>) -> u64 {
        tokens.into_iter().fold(0u64, |h, t| {
            h.wrapping_mul(self.factor).wrapping_add(widen(t))
        })
    }

    /// From the window `[first, ..rest]` to `[..rest, next]`.
    #[inline(always)]
    pub(crate) fn roll(&self, h: u64, first: Token, next: Token) -> u64 {
        h.wrapping_sub(widen(first).wrapping_mul(self.top))
            .wrapping_mul(self.factor)
            .wrapping_add(widen(next))
    }

    /// From the window `[..rest, last]` to `[before, ..rest]`.
    #[inline(always)]
    pub(crate) fn roll_back(&self, h: u64, before: Token, last: Token) -> u64 {
        widen(before)
            .wrapping_mul(self.top)
            .wrapping_add(h.wrapping_sub(widen(last)).wrapping_mul(self.inverse))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rolling_equals_direct_both_ways() {
        let tokens: Vec<Token> = (0..200u32)
            .map(|i| i.wrapping_mul(2_654_435_761) ^ (i << 7))
            .collect();
        for (factor, n) in [
            (2_654_435_761u64, 12),
            (6_364_136_223_846_793_005, 24),
            (3, 1),
        ] {
            let p = Poly::new(factor, n);
            let direct = |j: usize| p.hash(tokens[j..j + n].iter().copied());
            let mut h = direct(0);
            for j in 1..=tokens.len() - n {
                h = p.roll(h, tokens[j - 1], tokens[j + n - 1]);
                assert_eq!(h, direct(j), "forward {factor} n={n} j={j}");
            }
            for j in (0..tokens.len() - n).rev() {
                h = p.roll_back(h, tokens[j], tokens[j + n]);
                assert_eq!(h, direct(j), "backward {factor} n={n} j={j}");
            }
        }
    }
}
