//! [`SharedStats`]: what an engine-wide state holds, for an operator to watch.

use super::Shared;

/// What an engine-wide state holds, for an operator to watch
/// ([`Shared::stats`]): a plain copy, read without blocking drafters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[non_exhaustive]
pub struct SharedStats {
    /// Tokens recall's memory holds now.
    pub memory_tokens: u64,
    /// Tokens it can hold ([`Budget::memory`](crate::Budget::memory) / 96, a power of two).
    pub memory_capacity: u64,
    /// Tokens published to it over its lifetime, forgotten ones included.
    pub tokens_published: u64,
    /// Tokens forgotten (oldest first) to stay within the budget.
    pub tokens_forgotten: u64,
    /// ngram-mod's pool: cells in use, and cells in all (0 without a pool).
    pub pool_cells_used: u64,
    /// ngram-mod's pool size in cells (0 without a pool).
    pub pool_cells: u64,
    /// Heap bytes of the scope ([`Shared::heap_bytes`]).
    pub heap_bytes: u64,
    /// Requests whose end was published to recall's memory.
    pub requests_published: u64,
    /// Request ends that found the memory's writer lock taken and waited.
    pub writer_waits: u64,
    /// Their total wait, in nanoseconds.
    pub writer_wait_ns: u64,
    /// The longest of them, in nanoseconds.
    pub writer_wait_longest_ns: u64,
    /// Memory files saved by this engine ([`Shared::save`]; all scopes).
    pub saves: u64,
    /// Their total duration, in nanoseconds.
    pub save_ns: u64,
    /// The last one's duration, in nanoseconds.
    pub last_save_ns: u64,
}

impl Shared {
    /// Every scope's figures, the default scope (`""`) first.
    #[must_use]
    pub fn scope_stats(&self) -> Vec<(String, SharedStats)> {
        self.every_scope()
            .into_iter()
            .map(|s| (s.scope_name().to_string(), s.stats()))
            .collect()
    }

    /// What this handle's scope holds now (see [`SharedStats`]; the save
    /// figures are the engine's). Read from counters the drafters do not
    /// write: reading them costs a few loads and locks no drafter waits
    /// for. Alert on `tokens_forgotten` growing about as fast as
    /// `tokens_published` (the budget is too small for the traffic: older
    /// requests stop helping), on `engine_heap_bytes` against the process's
    /// memory limit, on `writer_wait_longest_ns` in the milliseconds
    /// (request ends queue behind long prompts), and on `last_save_ns`
    /// approaching the save interval.
    ///
    /// ```
    /// use selfspec::{Config, Shared, Speculative};
    ///
    /// let config = Config::recommended();
    /// let shared = Shared::new(&config)?;
    /// let mut spec = Speculative::with_shared(&config, &shared)?;
    /// spec.begin(&[1, 2, 3, 4, 5]);
    /// spec.end_request();
    /// assert_eq!(shared.stats().memory_tokens, 5);
    /// # Ok::<(), selfspec::Error>(())
    /// ```
    #[must_use]
    pub fn stats(&self) -> SharedStats {
        let wide = |x: usize| u64::try_from(x).unwrap_or(u64::MAX);
        let memory = self.existing_recall_memory();
        let pool = self.existing_pool();
        let held = memory.as_ref().map_or(0, |m| wide(m.len()));
        let published = memory.as_ref().map_or(0, |m| m.appended());
        let waits = memory.as_ref().map(|m| m.waits()).unwrap_or_default();
        let saves = self.inner.saves.get();
        SharedStats {
            requests_published: memory.as_ref().map_or(0, |m| m.requests()),
            writer_waits: waits.count,
            writer_wait_ns: waits.total_ns,
            writer_wait_longest_ns: waits.longest_ns,
            saves: saves.count,
            save_ns: saves.total_ns,
            last_save_ns: saves.last_ns,
            memory_tokens: held,
            memory_capacity: memory.as_ref().map_or(0, |m| wide(m.capacity())),
            tokens_published: published,
            tokens_forgotten: published.saturating_sub(held),
            pool_cells_used: pool.as_ref().map_or(0, |p| wide(p.used())),
            pool_cells: pool.as_ref().map_or(0, |p| wide(p.size())),
            heap_bytes: wide(self.heap_bytes()),
        }
    }
}
