//! The orchestrator: a chain of drafters, the engine's limits, and statistics.

use std::sync::Arc;
use std::time::Instant;

use crate::config::{Config, Strategy};
use crate::drafter::{DraftLimits, Drafter};
use crate::stats::DrafterStats;
use crate::strategies::{NgramCache, NgramMap, NgramMod, NgramPool, NgramSimple, Recall};
use crate::token::Token;
use crate::{Error, Shared};

mod misuse;
mod owned;

use misuse::Expect;

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
    /// What the next `draft` call's history should look like (see [`Expect`]).
    expect: Option<Expect>,
    /// A misuse was reported since the last `begin`.
    misuse_reported: bool,
    /// Sequences (spans between `begin` calls) in which a misuse was reported.
    misuses: u64,
    /// The owned history ([`Speculative::draft_next`]): empty for engines
    /// that pass their own slices.
    history: Vec<Token>,
    /// The pending draft came from `draft_next`: `accept` appends its
    /// accepted tokens to `history`.
    owned_draft: bool,
    /// The last `draft_next` draft in `i32` ids.
    draft_ids: Vec<i32>,
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
                    threshold_permille as f64 / 1000.0,
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
            expect: None,
            misuse_reported: false,
            misuses: 0,
            history: Vec::new(),
            owned_draft: false,
            draft_ids: Vec::new(),
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
            expect: self.expect,
            misuse_reported: false,
            misuses: 0,
            history: self.history.clone(),
            owned_draft: self.owned_draft,
            draft_ids: self.draft_ids.clone(),
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
    ///
    /// Clears the owned history of [`begin_owned`](Speculative::begin_owned).
    pub fn begin(&mut self, prompt: &[Token]) {
        self.history.clear();
        self.begin_drafters(prompt);
    }

    /// [`begin`](Speculative::begin) without touching the owned history.
    fn begin_drafters(&mut self, prompt: &[Token]) {
        self.owned_draft = false;
        tracing::debug!(target: "selfspec", prompt = prompt.len(), "begin");
        self.current = None;
        self.misuse_reported = false;
        self.expect = Some(Expect {
            base: prompt.len(),
            base_tail: prompt.last().copied(),
            last: None,
            accepted: 0,
        });
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
    ///
    /// # The history contract
    ///
    /// After `begin(prompt)` the first history is `prompt`; after a call
    /// `draft(history, last)` and `accept(n)`, the next history is
    /// `history + [last] + draft[..n]` (`n` = 0 without `accept`), and the new
    /// `last` is not in it. Two mistakes break every strategy without an
    /// error, so they are reported: a history that already ends with the new
    /// `last` (drafts collapse to about one token per forward pass and calls
    /// get much slower), and a history that did not grow by `last` and the
    /// accepted tokens. Either is logged once per sequence (until the next
    /// [`begin`](Speculative::begin)) through `tracing::warn!` (target
    /// `selfspec`) and counted in [`misuse_count`](Speculative::misuse_count).
    /// Legitimate rewrites stay quiet: a new `begin`, a history that shrinks
    /// (a rollback) or departs from the expected one (another conversation).
    /// The check reads only the expected tail (at most `1 + n` tokens).
    ///
    /// Right:
    ///
    /// ```
    /// # use selfspec::{Config, Speculative};
    /// let mut spec = Speculative::new(&Config::default())?;
    /// let mut history: Vec<u32> = (0..100).map(|i| i % 20).collect();
    /// spec.begin(&history);
    /// let last = 0;
    /// let draft = spec.draft(&history, last);  // [1, 2, ..., 16]
    /// history.push(last);
    /// history.extend_from_slice(&draft[..5]);  // the target kept 5
    /// spec.accept(5);
    /// spec.draft(&history, 6);                 // history = previous + [last] + accepted
    /// assert_eq!(spec.misuse_count(), 0);
    /// # Ok::<(), selfspec::Error>(())
    /// ```
    ///
    /// Wrong (`last` pushed before drafting):
    ///
    /// ```
    /// # use selfspec::{Config, Speculative};
    /// let mut spec = Speculative::new(&Config::default())?;
    /// let mut history: Vec<u32> = (0..100).map(|i| i % 20).collect();
    /// spec.begin(&history);
    /// history.push(0);
    /// spec.draft(&history, 0);                 // warns: the history already ends with `last`
    /// assert_eq!(spec.misuse_count(), 1);
    /// # Ok::<(), selfspec::Error>(())
    /// ```
    pub fn draft(&mut self, history: &[Token], last: Token) -> &[Token] {
        self.owned_draft = false;
        self.draft_from(history, last);
        &self.draft
    }

    /// The drafting step of [`draft`](Speculative::draft) and
    /// [`draft_next`](Speculative::draft_next).
    fn draft_from(&mut self, history: &[Token], last: Token) {
        self.check_history(history, last);
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
    }

    /// The target kept `n_accepted` tokens of the last draft.
    ///
    /// Nothing happens for 0 (as in llama.cpp) or without a pending draft.
    /// A count above the draft's length is counted as the draft's length and
    /// reported as a misuse (once per sequence: a `tracing` warning and
    /// [`misuse_count`](Speculative::misuse_count)). After
    /// [`draft_next`](Speculative::draft_next), the accepted tokens join the
    /// owned history.
    pub fn accept(&mut self, n_accepted: usize) {
        let Some(i) = self.current.take() else {
            return;
        };
        if n_accepted > self.draft.len() {
            self.report(
                misuse::Misuse::AcceptedMore,
                self.draft.len(),
                n_accepted,
                0,
            );
        }
        let n_accepted = n_accepted.min(self.draft.len());
        if let Some(expect) = &mut self.expect {
            expect.accepted = n_accepted;
        }
        if n_accepted == 0 {
            // Still the current drafter's turn: a later non-zero accept of the
            // same draft is forwarded.
            self.current = Some(i);
            return;
        }
        if self.owned_draft {
            self.history.extend_from_slice(&self.draft[..n_accepted]);
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

    /// The current request has ended: each drafter hands what it learned
    /// from it to the engine-wide state (recall publishes the request's
    /// tokens to the [`Shared`] memory, where later requests on any thread
    /// draft from them). A pending draft is dropped; the next request starts
    /// with [`begin`](Speculative::begin) (which also ends a request not
    /// ended yet).
    ///
    /// It takes the memory's writer lock for as long as indexing the tokens
    /// not yet published takes, about 0.2 µs a token. In flight, recall
    /// publishes every 16 tokens, so that is usually the request's last few
    /// tokens; a long prompt's indexing waits for the request's end, so a
    /// request with a 16k-token prompt holds the lock for a few
    /// milliseconds. Measured with the `engine_loop` tool on sample-agent
    /// (prompts up to 16k tokens), one worker: median 0.5 µs, longest 3.3 ms
    /// over 216 requests; on sample-code-edit: median 45 µs, longest 0.4 ms.
    /// Drafting threads never wait for it (they read without locks); other
    /// requests' `end_request` calls do. Dropping a `Speculative` without
    /// calling it publishes only if no other thread holds the lock at that
    /// moment: a drop never waits.
    ///
    /// ```
    /// use selfspec::{Config, Shared, Speculative};
    ///
    /// let config = Config::recommended();
    /// let shared = Shared::new(&config)?;
    /// let prompt: Vec<u32> = (0..200).map(|i| i % 50).collect();
    /// let mut first = Speculative::with_shared(&config, &shared)?;
    /// first.begin(&prompt);
    /// first.end_request(); // its tokens join the engine-wide memory
    /// let mut second = Speculative::with_shared(&config, &shared)?;
    /// second.begin(&prompt[..10]);
    /// assert!(!second.draft(&prompt[..10], prompt[10]).is_empty());
    /// # Ok::<(), selfspec::Error>(())
    /// ```
    pub fn end_request(&mut self) {
        self.current = None;
        for drafter in &mut self.drafters {
            drafter.end_request();
        }
    }

    /// Tells the drafters what one more verified token costs the engine,
    /// relative to a forward pass, in `[0, 1)`: per call or per sequence (at
    /// batch 1 on a GPU extra tokens are almost free, at batch 256 they are
    /// not). recall stops where the expected gain of the next token (the
    /// probability that the whole draft up to it is accepted) falls below
    /// the cost; its threshold is the default. The reference strategies
    /// ignore it (their rules are llama.cpp's).
    ///
    /// ```
    /// use selfspec::{Config, Speculative};
    ///
    /// let mut spec = Speculative::new(&Config::recommended())?;
    /// let text: Vec<u32> = (0..400).map(|i| i % 40).collect();
    /// spec.begin(&text);
    /// spec.set_token_cost(0.5)?;                 // a busy batch: only safe tokens
    /// let safe = spec.draft(&text, 0).len();
    /// spec.set_token_cost(0.01)?;                // batch 1: draft long
    /// let long = spec.draft(&text, 0).len();
    /// assert!(long >= safe);
    /// // The estimated acceptance of each token of the last draft.
    /// assert_eq!(spec.draft_probabilities().len(), long);
    /// # Ok::<(), selfspec::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::TokenCost`] for a cost outside `[0, 1)` or not finite.
    pub fn set_token_cost(&mut self, cost: f64) -> Result<(), Error> {
        if !(0.0..1.0).contains(&cost) {
            return Err(Error::TokenCost { cost });
        }
        for d in &mut self.drafters {
            d.set_token_cost(cost);
        }
        Ok(())
    }

    /// The estimated probability that each token of the last draft is
    /// accepted given the ones before it, from the drafter that produced it
    /// (empty when it makes no estimate: the reference strategies). An
    /// engine can cut a draft under its own policy with them.
    #[must_use]
    pub fn draft_probabilities(&self) -> &[f64] {
        let Some(i) = self.source else {
            return &[];
        };
        let p = self.drafters[i].probabilities();
        &p[..p.len().min(self.draft.len())]
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

    /// Heap bytes held for this sequence by the strategies, the draft
    /// buffer and the owned history (the shared ngram-mod pool is not
    /// counted: see [`NgramPool::size_bytes`]).
    #[must_use]
    pub fn heap_bytes(&self) -> usize {
        self.drafters.iter().map(|d| d.heap_bytes()).sum::<usize>()
            + (self.draft.capacity() + self.history.capacity() + self.draft_ids.capacity()) * 4
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
        self.misuses = 0;
    }

    /// Logs every statistics line at `info` level through `tracing`.
    pub fn log_stats(&self) {
        for s in &self.stats {
            tracing::info!(target: "selfspec", "{s}");
        }
    }
}
