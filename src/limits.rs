//! Every limit and default of the crate: the largest and smallest sizes it
//! accepts, the defaults they bound, and the fixed sizes of llama.cpp's
//! strategies. (The one range check behind every validation lives here too.)

use crate::Error;

/// recall's default engine-wide memory budget: 256 MiB, that is 2 Mi tokens at
/// 96 bytes each (84 for the index, 12 for the bookkeeping of its runs;
/// budgets are rounded down to a power of two of tokens).
pub const DEFAULT_MEMORY_BUDGET: usize = 256 << 20;
/// The default budget of all scopes of an engine together: 1 GiB (four
/// default scopes).
pub const DEFAULT_ENGINE_BUDGET: usize = 1 << 30;
/// recall's default per-sequence budget: 64 MiB, 512 Ki tokens of the current
/// session (a longer one keeps its most recent part).
pub const DEFAULT_SEQUENCE_BUDGET: usize = 64 << 20;
/// recall's default stop threshold in thousandths (0.13): the one default
/// used by `"recall"` ([`Strategy::from_name`](crate::Strategy::from_name)),
/// by serde when `threshold_permille` is left out, and by
/// [`Config::recommended`](crate::Config::recommended).
pub const DEFAULT_THRESHOLD_PERMILLE: usize = 130;

/// llama.cpp's default key size `n` (ngram-simple, both maps, ngram-mod).
pub(crate) const DEFAULT_N: usize = 12;
/// llama.cpp's default value size `m` (ngram-simple, both maps).
pub(crate) const DEFAULT_M: usize = 48;
/// llama.cpp's default `min_hits` (ngram-map-k4v).
pub(crate) const DEFAULT_MIN_HITS: usize = 1;

/// Largest key or value size (`n`, `m`) a strategy accepts.
///
/// llama.cpp stores them as `u16`; beyond a few dozen tokens no match is ever
/// found, so the bound only keeps a typo from allocating or scanning absurdly.
pub const MAX_NGRAM: usize = 1024;

/// Largest `draft_max` accepted (llama.cpp passes accepted counts as `u16`).
pub const MAX_DRAFT: usize = 4096;

/// Largest ngram-mod pool, in cells (8 bytes each: 16 GiB).
pub const MAX_POOL_SIZE: usize = 1 << 31;

/// Checks a pool size against `1..=MAX_POOL_SIZE` (the one check of it, used
/// by [`Config::validate`](crate::Config::validate) and [`NgramPool::new`](crate::strategies::NgramPool::new));
/// `context` names where the size came from.
pub(crate) fn check_pool_size(context: &'static str, size: usize) -> Result<(), Error> {
    check_range(context, "pool_size", size, 1, MAX_POOL_SIZE)
}

/// Largest useful `min_hits` (llama.cpp's key counters saturate at 16380).
pub const MAX_MIN_HITS: usize = 16380;

/// llama.cpp's ngram-mod pool size: 4 Mi cells (32 MiB here: 8 bytes a cell).
pub const DEFAULT_POOL_SIZE: usize = 4 * 1024 * 1024;

/// Slots of ngram-map's position index (llama.cpp's
/// `COMMON_NGRAM_HASH_MAP_SIZE`): 1 MiB of `u32` per drafter.
pub const KEY_MAP_SIZE: usize = 1 << 18;

/// Smallest and largest n-gram sizes of ngram-cache's context and dynamic
/// caches (llama.cpp's `LLAMA_NGRAM_MIN` / `LLAMA_NGRAM_MAX`).
pub const NGRAM_SIZES: std::ops::RangeInclusive<usize> = 1..=4;
/// The n-gram size of ngram-cache's static caches (`LLAMA_NGRAM_STATIC`).
pub const NGRAM_STATIC: usize = 2;
/// Tokens per ngram-cache draft, hard-coded in llama.cpp (`draft_max` is not
/// read).
pub const N_DRAFT: usize = 8;

/// Tokens learned that `ngram-cache-live`'s context cache holds at most by
/// default (see [`NgramCache::with_budget`](crate::strategies::NgramCache::with_budget)).
/// What it holds per token learned: BENCHMARKS.md, "Memory" (text-like
/// histories repeat their n-grams; unrelated random sessions, where every
/// n-gram is new, cost several times more per token). The reference
/// `ngram-cache`'s context cache has no budget: it grows with every token, as
/// llama.cpp's.
pub const LIVE_BUDGET: usize = 1 << 20;

/// Smallest [`Budget`](crate::Budget) part: 64 KiB (below it recall holds
/// its minimum of 1024 tokens anyway).
pub const MIN_BUDGET: usize = 64 << 10;

/// Largest [`Budget`](crate::Budget) part: 64 GiB (recall holds at most
/// 2^30 tokens).
pub const MAX_BUDGET: usize = 64 << 30;

/// Checks `value` against `min..=max`: the one range check of the crate,
/// whose error names the field and what is allowed.
pub(crate) fn check_range(
    context: &'static str,
    field: &'static str,
    value: usize,
    min: usize,
    max: usize,
) -> Result<(), Error> {
    if (min..=max).contains(&value) {
        Ok(())
    } else {
        Err(Error::OutOfRange {
            context,
            field,
            value,
            min,
            max,
        })
    }
}
