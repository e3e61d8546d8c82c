//! ngram-cache: llama.cpp's lookup decoding. N-gram -> follower-count caches:
//! a context cache learned from the history, and optional dynamic and static
//! caches read from llama.cpp's own cache files.
//!
//! Layout: `table` holds [`LookupCache`]'s n-gram entries and their hash
//! tables, `followers` the followers of n-grams with more than one, `bulk`
//! learning (llama.cpp's update and the bulk path for long runs), `cache_file`
//! llama.cpp's file format, `drafter` the [`NgramCache`] drafter.

use crate::index::NONE;
use crate::limits::{NGRAM_SIZES, NGRAM_STATIC, N_DRAFT};
use crate::token::Token;

/// An n-gram as llama.cpp stores it: four ids, unused slots `-1` (`u32::MAX`).
type Key = [Token; 4];
const UNUSED: Token = NONE;

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

// The hash of a key (`index::hash`, which says why drafts do not depend
// on it).
use crate::index::hash::key4_hash as hash_of;

/// The table of `key`: the number of unused slots it ends with, 4 - size
/// for an n-gram of the context (files may hold any key).
fn table_of(key: &Key) -> usize {
    key.iter().rev().take_while(|&&t| t == UNUSED).count()
}

mod bulk;
mod cache_file;
mod count;
mod drafter;
mod followers;
mod table;
#[cfg(test)]
mod tests;

pub use drafter::{NgramCache, TokensFrom};
pub use table::LookupCache;
