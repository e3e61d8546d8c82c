//! The orchestrator: a chain of drafters, the engine's limits, and statistics.

use std::sync::Arc;
use std::time::Instant;

use crate::config::{Config, Strategy, MAX_DRAFT};
use crate::drafter::{DraftLimits, Drafter, Token};
use crate::stats::DrafterStats;
use crate::strategies::{NgramCache, NgramMap, NgramMod, NgramPool, NgramSimple, Recall};
use crate::{Error, Shared};

/// Drafts for one sequence: llama.cpp's `common_speculative`.
///
/// Holds the strategies in priority order. [`draft`](Speculative::draft) asks
/// them in turn and returns the first draft that is at least `draft_min` long
/// (cut to `draft_max`); [`accept`](Speculative::accept) goes to the strategy
/// that produced it. Every strategy keeps llama.cpp's counters and timings
/// ([`stats`](Speculative::stats)).
///
/// ```
/// use selfspec::{Config, Speculative};
///
/// let mut spec = Speculative::new(&Config::default())?;
/// let prompt: Vec<u32> = (0..100).map(|i| i % 20).collect();
/// spec.begin(&prompt);
/// let draft = spec.draft(&prompt, 0);
/// assert_eq!(draft, (1..17).collect::<Vec<u32>>());
/// spec.accept(16);
/// assert_eq!(spec.stats()[0].acc_tokens, 16);
/// # Ok::<(), selfspec::Error>(())
/// ```
#[derive(Debug)]
pub struct Speculative {
    drafters: Vec<Box<dyn Drafter>>,
    stats: Vec<DrafterStats>,
    limits: DraftLimits,
    pool: Option<Arc<NgramPool>>,
    /// The drafter whose draft the engine holds, until `accept` or the next `draft`.
    current: Option<usize>,
    /// The drafter of the last non-empty draft (kept after `accept`).
    source: Option<usize>,
    draft: Vec<Token>,
}

impl Speculative {
    /// Builds the chain `config` describes, with a new ngram-mod pool of
    /// `config.pool_size` cells if the chain has ngram-mod.
    ///
    /// # Errors
    ///
    /// what [`Config::validate`] finds, or [`Error::CacheFile`] for an ngram-cache file that cannot
    /// be loaded.
    pub fn new(config: &Config) -> Result<Speculative, Error> {
        Speculative::with_shared(config, &Shared::new(config)?)
    }

    /// The chain `config` describes on the engine-wide state `shared`: every
    /// ngram-mod strategy uses its pool and recall its memory, so that what
    /// one sequence learns serves all. Build one per sequence or per request,
    /// on any thread (the pool has the `pool_size` of the config `shared`
    /// was made with).
    ///
    /// ```
    /// use selfspec::{Config, Shared, Speculative};
    ///
    /// let config = Config::recommended();
    /// let shared = Shared::new(&config)?;                  // once per engine
    /// let mut spec = Speculative::with_shared(&config, &shared)?; // per request
    /// # Ok::<(), selfspec::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// An invalid `config` ([`Config::validate`]) or an unreadable cache file of ngram-cache.
    pub fn with_shared(config: &Config, shared: &Shared) -> Result<Speculative, Error> {
        config.validate()?;
        Speculative::build(config, shared)
    }

    /// Like [`new`](Speculative::new), but every ngram-mod strategy uses `pool`,
    /// so that the sequences of an engine share one (`config.pool_size` is ignored).
    ///
    /// ```
    /// use std::sync::Arc;
    /// use selfspec::{Config, NgramPool, Speculative, Strategy};
    ///
    /// let pool = Arc::new(NgramPool::new(1 << 20)?);
    /// let config = Config::new([Strategy::NgramMod { n: 24 }]);
    /// let seq_a = Speculative::with_pool(&config, pool.clone())?;
    /// let seq_b = Speculative::with_pool(&config, pool.clone())?;
    /// assert!(Arc::ptr_eq(seq_a.pool().unwrap(), seq_b.pool().unwrap()));
    /// # Ok::<(), selfspec::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// as [`Speculative::new`].
    pub fn with_pool(config: &Config, pool: Arc<NgramPool>) -> Result<Speculative, Error> {
        Speculative::with_shared(config, &Shared::with_pool(config, pool)?)
    }

    /// Builds the chain on `shared`.
    fn build(config: &Config, shared: &Shared) -> Result<Speculative, Error> {
        let mut pool = None;
        let mut drafters: Vec<Box<dyn Drafter>> = Vec::with_capacity(config.strategies.len());
        for strategy in &config.strategies {
            drafters.push(match *strategy {
                Strategy::NgramSimple { n, m } => Box::new(NgramSimple::new(n, m)),
                Strategy::NgramMapK { n, m } => Box::new(NgramMap::key_only(n, m)),
                Strategy::NgramMapK4v { n, m, min_hits } => {
                    Box::new(NgramMap::four_values(n, m, min_hits))
                }
                Strategy::NgramCache {
                    ref static_cache,
                    ref dynamic_cache,
                } => Box::new(NgramCache::from_files(
                    static_cache.as_deref(),
                    dynamic_cache.as_deref(),
                )?),
                Strategy::NgramCacheLive {
                    ref static_cache,
                    ref dynamic_cache,
                } => Box::new(
                    NgramCache::from_files(static_cache.as_deref(), dynamic_cache.as_deref())?
                        .live(),
                ),
                Strategy::Recall { threshold_permille } => Box::new(Recall::with_memory(
                    threshold_permille as f64 / 1000.0,
                    shared.recall_memory(),
                    shared.budget().sequence,
                )),
                Strategy::NgramMod { n } => {
                    let p = shared.pool()?;
                    pool = Some(p.clone());
                    Box::new(NgramMod::new(n, p))
                }
            });
        }
        let limits = DraftLimits {
            min: config.draft_min,
            max: config.draft_max,
        };
        let mut spec = Speculative::from_drafters(drafters, limits)?;
        spec.pool = pool;
        Ok(spec)
    }

    /// A chain of arbitrary drafters (this crate's, an engine's own, a draft
    /// model) in priority order, with the engine's limits.
    ///
    /// Errors on an empty chain or limits outside `1 <= max <= MAX_DRAFT`, `min <= max`.
    ///
    /// # Errors
    ///
    /// [`Error::EmptyChain`], or [`Error::OutOfRange`] / [`Error::DraftMinAboveMax`] for the
    /// limits.
    pub fn from_drafters(
        drafters: Vec<Box<dyn Drafter>>,
        limits: DraftLimits,
    ) -> Result<Speculative, Error> {
        if drafters.is_empty() {
            return Err(Error::EmptyChain);
        }
        if limits.max == 0 || limits.max > MAX_DRAFT {
            return Err(Error::OutOfRange {
                context: "config",
                field: "draft_max",
                value: limits.max,
                min: 1,
                max: MAX_DRAFT,
            });
        }
        if limits.min > limits.max {
            return Err(Error::DraftMinAboveMax {
                draft_min: limits.min,
                draft_max: limits.max,
            });
        }
        let stats = drafters
            .iter()
            .map(|d| DrafterStats::new(d.name()))
            .collect();
        Ok(Speculative {
            drafters,
            stats,
            limits,
            pool: None,
            current: None,
            source: None,
            draft: Vec::with_capacity(limits.max),
        })
    }

    /// The engine limits this instance enforces.
    #[must_use]
    pub fn limits(&self) -> DraftLimits {
        self.limits
    }

    /// The ngram-mod pool, if the chain has ngram-mod.
    #[must_use]
    pub fn pool(&self) -> Option<&Arc<NgramPool>> {
        self.pool.as_ref()
    }

    /// A new request starts: `prompt` is the whole history the target holds.
    pub fn begin(&mut self, prompt: &[Token]) {
        tracing::debug!(target: "selfspec", prompt = prompt.len(), "begin");
        self.current = None;
        for (drafter, stats) in self.drafters.iter_mut().zip(&mut self.stats) {
            let t = Instant::now();
            drafter.begin(prompt);
            stats.t_begin += t.elapsed();
            stats.calls_begin += 1;
        }
    }

    /// Draft tokens to verify after `last`, the token the target just sampled
    /// (`history` holds the tokens the target has evaluated, without `last`).
    ///
    /// Empty when no strategy has a draft of at least `draft_min` tokens; never
    /// longer than `draft_max`. The slice borrows an internal buffer that the
    /// next call reuses.
    pub fn draft(&mut self, history: &[Token], last: Token) -> &[Token] {
        self.current = None;
        self.source = None;
        self.draft.clear();
        for (i, (drafter, stats)) in self.drafters.iter_mut().zip(&mut self.stats).enumerate() {
            let t = Instant::now();
            drafter.draft(history, last, self.limits, &mut self.draft);
            stats.t_draft += t.elapsed();
            stats.calls_draft += 1;
            if self.draft.is_empty() {
                continue;
            }
            self.draft.truncate(self.limits.max);
            if self.draft.len() < self.limits.min {
                // Not worth verifying: the next strategy may do better.
                self.draft.clear();
                continue;
            }
            stats.gen_drafts += 1;
            stats.gen_tokens += self.draft.len() as u64;
            tracing::trace!(target: "selfspec", drafter = %stats.name, len = self.draft.len(), history = history.len(), "draft");
            self.current = Some(i);
            self.source = Some(i);
            break;
        }
        &self.draft
    }

    /// The target kept `n_accepted` tokens of the last draft.
    ///
    /// Nothing happens for 0 (as in llama.cpp) or without a pending draft;
    /// counts above the draft's length are clamped to it.
    pub fn accept(&mut self, n_accepted: usize) {
        let Some(i) = self.current.take() else {
            return;
        };
        let n_accepted = n_accepted.min(self.draft.len());
        if n_accepted == 0 {
            // Still the current drafter's turn: a later non-zero accept of the
            // same draft is forwarded.
            self.current = Some(i);
            return;
        }
        let stats = &mut self.stats[i];
        tracing::trace!(target: "selfspec", drafter = %stats.name, n_accepted, "accept");
        let t = Instant::now();
        self.drafters[i].accept(n_accepted);
        stats.t_accept += t.elapsed();
        stats.calls_accept += 1;
        stats.acc_drafts += 1;
        stats.acc_tokens += n_accepted as u64;
    }

    /// The draft returned by the last [`draft`](Speculative::draft) call.
    #[must_use]
    pub fn last_draft(&self) -> &[Token] {
        &self.draft
    }

    /// Index in the chain of the strategy that produced the last draft
    /// (`None` when the last `draft` call returned nothing).
    #[must_use]
    pub fn drafted_by(&self) -> Option<usize> {
        self.source
    }

    /// Heap bytes held for this sequence by the strategies and the draft
    /// buffer (the shared ngram-mod pool is not counted: see [`NgramPool::size_bytes`]).
    #[must_use]
    pub fn heap_bytes(&self) -> usize {
        self.drafters.iter().map(|d| d.heap_bytes()).sum::<usize>() + self.draft.capacity() * 4
    }

    /// The `i`-th drafter of the chain (see [`Drafter::as_any`] to reach the
    /// concrete type).
    #[must_use]
    pub fn drafter(&self, i: usize) -> Option<&dyn Drafter> {
        self.drafters.get(i).map(|d| &**d)
    }

    /// Per-strategy counters and timings, in chain order.
    #[must_use]
    pub fn stats(&self) -> &[DrafterStats] {
        &self.stats
    }

    /// Clears counters and timings (the strategies keep their state).
    pub fn reset_stats(&mut self) {
        for s in &mut self.stats {
            *s = DrafterStats::new(std::mem::take(&mut s.name));
        }
    }

    /// Logs every statistics line at `info` level through `tracing`.
    pub fn log_stats(&self) {
        for s in &self.stats {
            tracing::info!(target: "selfspec", "{s}");
        }
    }
}
