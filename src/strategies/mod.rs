//! The drafting strategies, one module each.
//!
//! Each is a [`Drafter`](crate::Drafter). Most engines build them through a
//! [`Config`](crate::Config) and [`Speculative`](crate::Speculative); they are
//! public so an engine can also chain them with its own drafters.

mod ngram_cache;
mod ngram_map;
mod ngram_mod;
mod ngram_simple;
mod poly;
mod position_index;
mod recall;

use crate::drafter::Token;

/// Whether the n-gram of `tokens` at `p` is the key `head ++ [last]`; false
/// when it would run past the end (a stale position can only fail to match).
#[inline]
pub(crate) fn key_at(tokens: &[Token], p: usize, head: &[Token], last: Token) -> bool {
    let n1 = head.len();
    tokens.get(p + n1) == Some(&last) && tokens.get(p..p + n1) == Some(head)
}

pub use ngram_cache::{LookupCache, NgramCache, NGRAM_SIZES, NGRAM_STATIC, N_DRAFT};
pub use ngram_map::{NgramMap, KEY_MAP_SIZE};
pub use ngram_mod::{NgramMod, NgramPool, EMPTY};
pub use ngram_simple::NgramSimple;
pub use recall::{Recall, MAX_STREAM};
