//! Building a [`Speculative`]: from a configuration (on a private or an
//! engine-wide [`Shared`]), from an engine's own drafters, or as a fork of
//! another.

use crate::config::{Config, Strategy};
use crate::drafter::{DraftLimits, Drafter};
use crate::int::float;
use crate::stats::DrafterStats;
use crate::strategies::{NgramCache, NgramMap, NgramMod, NgramSimple, Recall};
use crate::{Error, Shared};

use super::{Contract, OwnedHistory, Speculative};

impl Speculative {
    /// Builds the chain `config` describes, with a new ngram-mod pool of
    /// `config.pool_size` cells if the chain has ngram-mod.
    ///
    /// # Errors
    ///
    /// what [`Config::validate`] finds, or [`Error::CacheFile`] for an ngram-cache file that cannot
    /// be loaded.
    pub fn new(config: &Config) -> Result<Speculative, Error> {
        config.validate()?;
        Speculative::build(config, &Shared::unchecked(config), false)
    }

    /// The chain `config` describes on the engine-wide state `shared`: every
    /// ngram-mod strategy uses its pool and recall its memory, so that what
    /// one sequence learns serves all. Build one per sequence or per request,
    /// on any thread; end each request with
    /// [`end_request`](Speculative::end_request).
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
    /// An invalid `config` ([`Config::validate`]), an unreadable cache file
    /// of ngram-cache, or [`Error::PoolSizeMismatch`] when the chain has
    /// ngram-mod and `config.pool_size` is not the size of `shared`'s pool.
    pub fn with_shared(config: &Config, shared: &Shared) -> Result<Speculative, Error> {
        config.validate()?;
        if config.uses_pool() && config.pool_size != shared.pool_size() {
            return Err(Error::PoolSizeMismatch {
                config: config.pool_size,
                shared: shared.pool_size(),
            });
        }
        shared.enforce_engine_budget();
        Speculative::build(config, shared, true)
    }

    /// Builds the chain on `shared`; `engine_wide` when other sequences
    /// read it.
    fn build(config: &Config, shared: &Shared, engine_wide: bool) -> Result<Speculative, Error> {
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
                    float(threshold_permille) / 1000.0,
                    shared.recall_memory(),
                    shared.budget().sequence,
                    engine_wide,
                )),
                Strategy::NgramMod { n } => {
                    let p = shared.pool()?;
                    pool = Some(p.clone());
                    Box::new(NgramMod::new(n, p))
                }
            });
        }
        let mut spec = Speculative::from_drafters(drafters, config.limits())?;
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
    /// [`Error::EmptyChain`], or what [`DraftLimits::validate`] finds.
    pub fn from_drafters(
        drafters: Vec<Box<dyn Drafter>>,
        limits: DraftLimits,
    ) -> Result<Speculative, Error> {
        if drafters.is_empty() {
            return Err(Error::EmptyChain);
        }
        limits.validate()?;
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
            contract: Contract::default(),
            owned: OwnedHistory::default(),
        })
    }

    /// A copy that continues from this one's state, for a sequence that
    /// branches from this one: parallel sampling (`n > 1`), beam search, an
    /// agent's fan-out. On the same calls the fork drafts as this instance
    /// would; nothing is re-indexed (each strategy copies its state: the cost
    /// of a memory copy of its indexes, not of indexing the history again).
    /// Shared state stays shared (ngram-mod's pool, recall's engine-wide
    /// memory; a recall fork publishes only the tokens its branch adds, and
    /// leaves the selector steps its parent has not merged yet to the
    /// parent: forked mid-request, it drafts as the parent until its first
    /// merge of learned steps; forked right after `begin`, exactly). The
    /// pending draft and the owned history ([`draft_next`](Speculative::draft_next))
    /// are copied; the fork's counters start at zero (so that the statistics
    /// of all branches add up), as does its [`misuse_count`](Speculative::misuse_count).
    ///
    /// `None` when a drafter of the chain cannot fork ([`Drafter::fork`]: an
    /// engine's own drafter that does not implement it); every strategy of
    /// this crate can.
    ///
    /// ```
    /// use selfspec::{Config, Shared, Speculative};
    ///
    /// let config = Config::recommended();
    /// let shared = Shared::new(&config)?;
    /// let prompt: Vec<u32> = (0..400).map(|i| i % 50).collect();
    /// let mut parent = Speculative::with_shared(&config, &shared)?;
    /// parent.begin(&prompt);
    /// // Two samples of the same prompt: the second branch forks the first.
    /// let mut child = parent.fork().expect("selfspec's strategies fork");
    /// assert_eq!(child.draft(&prompt, 0), parent.draft(&prompt, 0));
    /// # Ok::<(), selfspec::Error>(())
    /// ```
    #[must_use]
    pub fn fork(&self) -> Option<Speculative> {
        let drafters = self
            .drafters
            .iter()
            .map(|d| d.fork())
            .collect::<Option<Vec<_>>>()?;
        let stats = self
            .stats
            .iter()
            .map(|s| DrafterStats::new(s.name.clone()))
            .collect();
        let mut draft = Vec::with_capacity(self.limits.max);
        draft.extend_from_slice(&self.draft);
        Some(Speculative {
            drafters,
            stats,
            limits: self.limits,
            pool: self.pool.clone(),
            current: self.current,
            source: self.source,
            draft,
            contract: self.contract.fork(),
            owned: self.owned.clone(),
        })
    }
}
