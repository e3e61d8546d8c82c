//! The drafting strategies, one module each.
//!
//! Each is a [`Drafter`](crate::Drafter). Most engines build them through a
//! [`Config`](crate::Config) and [`Speculative`](crate::Speculative); they are
//! public so an engine can also chain them with its own drafters.

pub mod ngram_cache;
pub mod ngram_map;
pub mod ngram_mod;
pub mod ngram_simple;
mod recall;

pub use ngram_cache::{LookupCache, NgramCache};
pub use ngram_map::NgramMap;
pub use ngram_mod::{NgramMod, NgramPool};
pub use ngram_simple::NgramSimple;
pub(crate) use recall::{HeapMeter, LEARNED_NUMBERS, RUN_CONTEXT, SAVED_ORDERS};
pub use recall::{Recall, RecallMemory, RunContext, DEFAULT_THRESHOLD_PERMILLE};
