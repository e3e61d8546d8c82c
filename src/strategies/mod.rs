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

/// A vector whose clones keep its spare capacity. Drafters that index every
/// token reserve room ahead (for the generation after a long prompt); a clone
/// of a primed drafter (an engine forking a sequence) must not lose it, or its
/// first token would copy the whole index into a larger buffer.
#[derive(Debug)]
pub(crate) struct Roomy<T>(Vec<T>);

impl<T> Default for Roomy<T> {
    fn default() -> Roomy<T> {
        Roomy(Vec::new())
    }
}

impl<T: Clone> Clone for Roomy<T> {
    fn clone(&self) -> Roomy<T> {
        let mut v = Vec::with_capacity(self.0.capacity());
        v.extend_from_slice(&self.0);
        Roomy(v)
    }
}

impl<T> std::ops::Deref for Roomy<T> {
    type Target = Vec<T>;
    fn deref(&self) -> &Vec<T> {
        &self.0
    }
}

impl<T> std::ops::DerefMut for Roomy<T> {
    fn deref_mut(&mut self) -> &mut Vec<T> {
        &mut self.0
    }
}

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
pub use recall::{
    Recall, RecallMemory, RunContext, DEFAULT_MEMORY_BUDGET, DEFAULT_SEQUENCE_BUDGET,
    DEFAULT_THRESHOLD_PERMILLE,
};
pub(crate) use recall::{LEARNED_NUMBERS, SAVED_ORDERS};
