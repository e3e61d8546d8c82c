//! The drafting strategies (one private module each; every type is here,
//! at `selfspec::strategies::Name`).
//!
//! Each is a [`Drafter`](crate::Drafter). Most engines build them through a
//! [`Config`](crate::Config) and [`Speculative`](crate::Speculative); they are
//! public so an engine can also chain them with its own drafters.

mod ngram_cache;
mod ngram_map;
mod ngram_mod;
mod ngram_simple;
mod recall;

pub use ngram_cache::{LookupCache, NgramCache, TokensFrom};
pub use ngram_map::NgramMap;
pub use ngram_mod::{NgramMod, NgramPool};
pub use ngram_simple::NgramSimple;
pub(crate) use recall::{HeapMeter, RunContext, LEARNED_NUMBERS, RUN_CONTEXT, SAVED_ORDERS};
pub use recall::{Recall, RecallMemory};
