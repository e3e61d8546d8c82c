//! The drafting strategies, one module each.
//!
//! Each is a [`Drafter`](crate::Drafter). Most engines build them through a
//! [`Config`](crate::Config) and [`Speculative`](crate::Speculative); they are
//! public so an engine can also chain them with its own drafters.

mod ngram_cache;
mod ngram_map;
mod ngram_mod;
mod ngram_simple;
mod recall;

pub use ngram_cache::{LookupCache, NgramCache, NGRAM_SIZES, NGRAM_STATIC, N_DRAFT};
pub use ngram_map::{NgramMap, KEY_MAP_SIZE};
pub use ngram_mod::{NgramMod, NgramPool, EMPTY};
pub use ngram_simple::NgramSimple;
pub use recall::{Recall, MAX_STREAM};
