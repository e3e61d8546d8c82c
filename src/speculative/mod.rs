//! The orchestrator: a chain of drafters, the engine's limits, and statistics.

use std::sync::Arc;
use std::time::Instant;

use crate::drafter::{DraftLimits, Drafter};
use crate::int::wide;
use crate::stats::DrafterStats;
use crate::strategies::NgramPool;
use crate::token::Token;
use crate::Error;

mod build;
mod contract;
mod owned;

use contract::Contract;
use owned::OwnedHistory;

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
    /// The history contract: what the next `draft` call's history should
    /// be, and the mistakes seen.
    contract: Contract,
    /// The owned history ([`Speculative::draft_next`]): empty for engines
    /// that pass their own slices.
    owned: OwnedHistory,
}

impl Speculative {
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
        self.owned.clear();
        self.begin_drafters(prompt);
    }

    /// [`begin`](Speculative::begin) without touching the owned history.
    fn begin_drafters(&mut self, prompt: &[Token]) {
        self.owned.external_draft();
        tracing::debug!(target: "selfspec", prompt = prompt.len(), "begin");
        self.current = None;
        self.contract.begin(prompt);
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
    /// `last` is not in it. Two mistakes in the history break every strategy
    /// without an error, so they are reported: a history that already ends
    /// with the new `last` (drafts collapse to about one token per forward
    /// pass and calls get much slower), and a history that did not grow by
    /// `last` and the accepted tokens. (The third mistake reported is
    /// [`accept`](Speculative::accept)'s: more tokens than the draft had.)
    /// Each is logged once per sequence (until the next
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
        self.owned.external_draft();
        self.draft_from(history, last);
        &self.draft
    }

    /// The drafting step of [`draft`](Speculative::draft) and
    /// [`draft_next`](Speculative::draft_next).
    fn draft_from(&mut self, history: &[Token], last: Token) {
        self.contract.draft(history, last, &self.draft);
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
            stats.gen_tokens += wide(self.draft.len());
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
        let n_accepted = self.contract.accept(self.draft.len(), n_accepted);
        if n_accepted == 0 {
            // Still the current drafter's turn: a later non-zero accept of the
            // same draft is forwarded.
            self.current = Some(i);
            return;
        }
        self.owned.accepted(&self.draft, n_accepted);
        let stats = &mut self.stats[i];
        tracing::trace!(target: "selfspec", drafter = %stats.name, n_accepted, "accept");
        let t = Instant::now();
        self.drafters[i].accept(n_accepted);
        stats.t_accept += t.elapsed();
        stats.calls_accept += 1;
        stats.acc_drafts += 1;
        stats.acc_tokens += wide(n_accepted);
    }

    /// The engine verifies only the first `len` tokens of the last draft
    /// (it cut the rest to fit its batch): the drafter that produced it is
    /// told, so that the tokens never tried are not learned as rejected, and
    /// the statistics count the tokens sent to verification. `len` 0 drops
    /// the draft (no `accept` follows). Nothing happens without a pending
    /// draft or for a `len` at least the draft's.
    ///
    /// ```
    /// use selfspec::{Config, Speculative};
    ///
    /// let mut spec = Speculative::new(&Config::default())?;
    /// let prompt: Vec<u32> = (0..100).map(|i| i % 20).collect();
    /// spec.begin(&prompt);
    /// assert_eq!(spec.draft(&prompt, 0).len(), 16);
    /// spec.truncate_draft(4);
    /// assert_eq!(spec.last_draft(), [1, 2, 3, 4]);
    /// spec.accept(4);
    /// assert_eq!(spec.stats()[0].gen_tokens, 4);
    /// # Ok::<(), selfspec::Error>(())
    /// ```
    pub fn truncate_draft(&mut self, len: usize) {
        let Some(i) = self.current else {
            return;
        };
        if len >= self.draft.len() {
            return;
        }
        let stats = &mut self.stats[i];
        stats.gen_tokens -= wide(self.draft.len() - len);
        self.draft.truncate(len);
        self.drafters[i].truncate_draft(len);
        if len == 0 {
            stats.gen_drafts -= 1;
            self.current = None;
            self.source = None;
        }
    }

    /// The current request has ended: each drafter hands what it learned
    /// from it to the engine-wide state (recall publishes the request's
    /// tokens to the [`Shared`](crate::Shared) memory, where later requests on any thread
    /// draft from them). A pending draft is dropped; the next request starts
    /// with [`begin`](Speculative::begin) (which also ends a request not
    /// ended yet).
    ///
    /// It takes the memory's writer lock for as long as indexing the tokens
    /// not yet published takes, in proportion to their number. In flight,
    /// recall publishes every 16 tokens, so that is usually the request's
    /// last few tokens; a long prompt's indexing waits for the request's
    /// end, so a request with a long prompt holds the lock longest
    /// (BENCHMARKS.md, "Request ends: how long `end_request` takes").
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
            + self.draft.capacity() * 4
            + self.owned.heap_bytes()
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
        self.contract.reset_count();
    }

    /// Sequences (spans between [`begin`](Speculative::begin) calls) in which
    /// [`draft`](Speculative::draft) saw a history that breaks its contract
    /// (`last` already included, or the accepted tokens not appended), or
    /// [`accept`](Speculative::accept) got more tokens than the draft had;
    /// each was also logged once through `tracing::warn!`. Cleared by
    /// [`reset_stats`](Speculative::reset_stats).
    #[must_use]
    pub fn misuse_count(&self) -> u64 {
        self.contract.misuses()
    }

    /// Logs every statistics line at `info` level through `tracing`.
    pub fn log_stats(&self) {
        for s in &self.stats {
            tracing::info!(target: "selfspec", "{s}");
        }
    }
}
