//! Polynomial n-gram hashes that can be rolled one token at a time.
//!
//! llama.cpp hashes n-grams as `h = h * F + t` over the n tokens, which is the
//! polynomial `sum t_i * F^(n-1-i)`. Wrapping arithmetic mod 2^64 keeps that a
//! polynomial, so the hash of the next (or previous) window follows from the
//! current one in O(1) instead of O(n): same values, a fraction of the cost.
//! The 32-bit LCG of ngram-map is the low half of the same 64-bit computation.

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
