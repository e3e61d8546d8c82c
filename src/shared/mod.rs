//! [`Shared`]: the engine-wide state every sequence's drafters learn into
//! and read from.

mod builder;
mod load;
mod memory_file;
mod meter;
mod replicas;
mod scope;
mod usage;

pub use builder::SharedBuilder;
pub use replicas::Cursor;
use scope::{Scope, Scopes};
pub use usage::SharedStats;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::config::Config;
use crate::int::wide;
use crate::limits::{check_range, MAX_BUDGET, MIN_BUDGET};
use crate::limits::{DEFAULT_MEMORY_BUDGET, DEFAULT_SEQUENCE_BUDGET};
use crate::stats::Timings;
use crate::strategies::{NgramPool, Recall, RecallMemory};
use crate::sync::{self, lock_std};
use crate::Error;
use meter::{EngineBytes, Metered};

/// The engine-wide learned state: one per engine, shared by every sequence.
///
/// It holds what strategies learn across sequences:
/// - ngram-mod's [`NgramPool`] (`config.pool_size` cells);
/// - recall's [`RecallMemory`]: the tokens of finished requests, indexed
///   (at most [`Budget::memory`] bytes, oldest requests forgotten first),
///   its stop rule's calibration and its selector's weights.
///
/// The other strategies keep only per-sequence state. Each part is made on
/// first need (a `Shared` for a chain without recall holds no recall memory).
/// `Shared` is a cheap [`Clone`] handle (an `Arc`) and `Send + Sync`: build
/// one [`Speculative`](crate::Speculative) per sequence or per request on top
/// of it, on any thread, with [`Speculative::with_shared`](crate::Speculative::with_shared).
///
/// ```
/// use selfspec::{Config, Shared, Speculative};
///
/// let config = Config::recommended();
/// let shared = Shared::new(&config)?;
/// let prompt: Vec<u32> = (0..200).map(|i| i % 50).collect();
/// let mut first = Speculative::with_shared(&config, &shared)?;
/// first.begin(&prompt);
/// first.end_request(); // its tokens go to the engine-wide memory
/// let mut second = Speculative::with_shared(&config, &shared)?; // a new request
/// second.begin(&prompt[..10]);
/// assert!(!second.draft(&prompt[..10], prompt[10]).is_empty());
/// assert!(shared.heap_bytes() > 0);
/// # Ok::<(), selfspec::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct Shared {
    inner: Arc<Inner>,
    scope: Arc<Scope>,
}

/// How much memory recall may hold: each scope's memory, all scopes
/// together, and each sequence's own index (bytes: 96 per token of a scope's
/// memory, 84 per token of a sequence's index, rounded down to a power of
/// two of tokens). Memory is forgotten oldest first,
/// never wiped: a scope's memory forgets its oldest requests, an engine
/// over [`engine`](Budget::engine) its least recently used scopes, a sequence's index the
/// oldest half of a session longer than its budget (the request in flight
/// keeps its recent history; a prompt larger than the budget is indexed as
/// far as the budget allows, its most recent part).
///
/// ```
/// use selfspec::{Budget, Config, Shared};
///
/// let budget = Budget { memory: 64 << 20, ..Budget::default() };
/// let shared = Shared::builder().budget(budget).build(&Config::recommended())?;
/// assert_eq!(shared.budget().memory, 64 << 20);
/// assert!(Shared::builder().budget(Budget { memory: 0, ..budget }).build(&Config::recommended()).is_err());
/// # Ok::<(), selfspec::Error>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Budget {
    /// recall's memory of earlier requests, in each scope (for an engine
    /// without scopes, the whole memory): default 256 MiB
    /// ([`DEFAULT_MEMORY_BUDGET`](crate::limits::DEFAULT_MEMORY_BUDGET)), 2 Mi tokens.
    pub memory: usize,
    /// recall's per-sequence index of the current session: default 64 MiB
    /// ([`DEFAULT_SEQUENCE_BUDGET`](crate::limits::DEFAULT_SEQUENCE_BUDGET)), 512 Ki tokens.
    pub sequence: usize,
    /// All [scopes](Shared::scope) together (each holds at most `memory`):
    /// default 1 GiB ([`DEFAULT_ENGINE_BUDGET`](crate::limits::DEFAULT_ENGINE_BUDGET)).
    /// Above it, whole scopes are forgotten, least recently used first
    /// (never the default scope): checked whenever a scope is asked for
    /// ([`Shared::scope`]) or a drafter is built on one.
    #[cfg_attr(feature = "serde", serde(default = "default_engine_budget"))]
    pub engine: usize,
}

#[cfg(feature = "serde")]
fn default_engine_budget() -> usize {
    crate::limits::DEFAULT_ENGINE_BUDGET
}

impl Default for Budget {
    fn default() -> Budget {
        Budget {
            memory: DEFAULT_MEMORY_BUDGET,
            sequence: DEFAULT_SEQUENCE_BUDGET,
            engine: crate::limits::DEFAULT_ENGINE_BUDGET,
        }
    }
}

impl Budget {
    /// Checks every part against [`MIN_BUDGET`]`..=`[`MAX_BUDGET`].
    ///
    /// # Errors
    ///
    /// [`Error::OutOfRange`] naming the part and the allowed range.
    pub fn validate(&self) -> Result<(), Error> {
        check_range("budget", "memory", self.memory, MIN_BUDGET, MAX_BUDGET)?;
        check_range("budget", "sequence", self.sequence, MIN_BUDGET, MAX_BUDGET)?;
        check_range("budget", "engine", self.engine, MIN_BUDGET, MAX_BUDGET)
    }
}

#[derive(Debug)]
struct Inner {
    pool_size: usize,
    budget: Budget,
    /// The default scope (`""`).
    root: Arc<Scope>,
    /// Every scope but the default one.
    scopes: Mutex<Scopes>,
    /// Heap bytes of every scope together, kept current by their memories
    /// and pools: the budget check at a request's start reads this.
    bytes: EngineBytes,
    /// Ticks of scope use, for least-recently-used forgetting.
    clock: AtomicU64,
    /// Saves and how long they took.
    saves: Timings,
    /// Held by the save in progress.
    saving: Mutex<()>,
}

impl Shared {
    /// The engine-wide state for `config` (validated), with the default
    /// budget; nothing large is allocated until a sequence needs it.
    /// [`Shared::builder`] sets a budget or starts from a file.
    ///
    /// # Errors
    ///
    /// An invalid `config` ([`Config::validate`]).
    pub fn new(config: &Config) -> Result<Shared, Error> {
        Shared::builder().build(config)
    }

    /// Options for a `Shared`: budget, a file to load or create.
    pub fn builder() -> SharedBuilder {
        SharedBuilder::default()
    }

    /// Loads what [`save`](Shared::save) wrote, for `config`, with the
    /// default budget: drafters built on it draft exactly as they did on
    /// the saved one. A memory larger than the budget keeps its most recent
    /// requests. Short for `Shared::builder().load(path).build(config)`.
    ///
    /// # Errors
    ///
    /// As [`SharedBuilder::build`].
    pub fn load(config: &Config, path: impl AsRef<std::path::Path>) -> Result<Shared, Error> {
        Shared::builder().load(path).build(config)
    }

    /// A `Shared` for a configuration already validated.
    pub(crate) fn unchecked(config: &Config) -> Shared {
        Shared::with_parts(config, Budget::default())
    }

    fn with_parts(config: &Config, budget: Budget) -> Shared {
        let root = Arc::new(Scope::new(""));
        let bytes = EngineBytes::default();
        bytes.fetch_add(wide(Scope::own_bytes("")), Ordering::Relaxed);
        Shared {
            inner: Arc::new(Inner {
                pool_size: config.pool_size,
                budget,
                root: Arc::clone(&root),
                scopes: Mutex::new(Scopes::default()),
                bytes,
                clock: AtomicU64::new(0),
                saves: Timings::default(),
                saving: Mutex::new(()),
            }),
            scope: root,
        }
    }

    /// A handle on the scope `name` of this engine: drafters built on it
    /// (`Speculative::with_shared(&config, &shared.scope("tenant-a"))`)
    /// draft only from tokens seen in that scope, recall's memory and
    /// ngram-mod's pool alike, never from another scope's. The scope is
    /// made on first use; `""` is the default scope, the one
    /// [`Shared::new`] returns.
    ///
    /// # Security
    ///
    /// Whatever a memory holds is a side channel between the requests that
    /// share it: a draft is only a guess that the target verifies, but how
    /// many tokens are accepted shows in each step's latency and in
    /// streaming chunk sizes, so a client can tell whether text it guesses
    /// was seen before ("When Speculation Spills Secrets", Wei et al. 2024,
    /// arXiv 2411.01076, fingerprints queries and leaks a retrieval
    /// drafter's datastore that way). A scope isolates recall's memory,
    /// its stop rule's calibration and selector weights, and ngram-mod's
    /// pool: nothing learned in one scope changes another's drafts. It does
    /// not isolate the target model's own KV or prefix caches (the
    /// engine's business) or the timing of the shared CPU. On a
    /// multi-tenant server, use one scope per tenant, or per user where
    /// users must not learn from each other.
    ///
    /// Each scope holds at most [`Budget::memory`]; all together at most
    /// [`Budget::engine`], above which whole scopes are forgotten, least
    /// recently used first (checked here and whenever a drafter is built
    /// on a scope; the default scope is never forgotten). A forgotten or
    /// [dropped](Shared::drop_scope) scope's handles keep working on a
    /// memory no longer part of the engine (not saved, not counted): ask
    /// for the scope per request.
    ///
    /// ```
    /// use selfspec::{Config, Shared, Speculative};
    ///
    /// let config = Config::recommended();
    /// let shared = Shared::new(&config)?;
    /// let secret: Vec<u32> = (0..300).map(|i| i * 7919 % 1000).collect();
    /// let mut a = Speculative::with_shared(&config, &shared.scope("tenant-a"))?;
    /// a.begin(&secret);
    /// a.end_request();
    /// // Another tenant's drafter has never seen it.
    /// let mut b = Speculative::with_shared(&config, &shared.scope("tenant-b"))?;
    /// b.begin(&secret[..20]);
    /// assert!(b.draft(&secret[..20], secret[20]).is_empty());
    /// // The same tenant's next request drafts from it.
    /// let mut a2 = Speculative::with_shared(&config, &shared.scope("tenant-a"))?;
    /// a2.begin(&secret[..20]);
    /// assert_eq!(a2.draft(&secret[..20], secret[20]).first(), Some(&secret[21]));
    /// # Ok::<(), selfspec::Error>(())
    /// ```
    #[must_use]
    pub fn scope(&self, name: &str) -> Shared {
        let handle = self.scope_named(name);
        handle.enforce_engine_budget();
        handle
    }

    fn scope_named(&self, name: &str) -> Shared {
        let tick = self.inner.clock.fetch_add(1, Ordering::Relaxed) + 1;
        if name.is_empty() {
            let root = self.root();
            root.scope.used.store(tick, Ordering::Relaxed);
            return root;
        }
        let mut scopes = lock_std(&self.inner.scopes);
        let (scope, made) = scopes.use_scope(name, tick);
        if made {
            self.inner
                .bytes
                .fetch_add(wide(Scope::own_bytes(name)), Ordering::Relaxed);
        }
        drop(scopes);
        Shared {
            inner: Arc::clone(&self.inner),
            scope,
        }
    }

    /// The default scope of this engine.
    pub(crate) fn root(&self) -> Shared {
        Shared {
            inner: Arc::clone(&self.inner),
            scope: Arc::clone(&self.inner.root),
        }
    }

    /// The name of this handle's scope (`""`: the default scope).
    #[must_use]
    pub fn scope_name(&self) -> &str {
        &self.scope.name
    }

    /// Forgets the scope `name` and frees its memory once no drafter holds
    /// it (drafters built on it keep drafting from what it held). Returns
    /// whether there was such a scope; the default scope cannot be dropped
    /// (`false`).
    #[allow(clippy::must_use_candidate)] // called for its effect
    pub fn drop_scope(&self, name: &str) -> bool {
        let mut scopes = lock_std(&self.inner.scopes);
        let Some(scope) = scopes.remove(name) else {
            return false;
        };
        drop(scopes);
        scope.detach(&self.inner.bytes);
        true
    }

    /// The names of the scopes made so far: the default one, `""`, first,
    /// then the others in order.
    #[must_use]
    pub fn scope_names(&self) -> Vec<String> {
        let scopes = lock_std(&self.inner.scopes);
        let mut names: Vec<String> = scopes.by_name.keys().map(|name| name.to_string()).collect();
        names.sort_unstable();
        std::iter::once(String::new()).chain(names).collect()
    }

    /// Forgets least recently used scopes (never this handle's or the
    /// default one) while all of them hold more than [`Budget::engine`]:
    /// one load of the engine's count when they do not (the usual case).
    pub(crate) fn enforce_engine_budget(&self) {
        let limit = wide(self.inner.budget.engine);
        if self.inner.bytes.load(Ordering::Relaxed) <= limit {
            return;
        }
        let mut scopes = lock_std(&self.inner.scopes);
        while self.inner.bytes.load(Ordering::Relaxed) > limit {
            let Some(name) = scopes.oldest_but(&self.scope) else {
                break;
            };
            if let Some(scope) = scopes.remove(&name) {
                scope.detach(&self.inner.bytes);
            }
        }
    }

    /// The size of ngram-mod's pool (cells) this state was built with:
    /// the `pool_size` of its configuration.
    #[must_use]
    pub fn pool_size(&self) -> usize {
        self.inner.pool_size
    }

    /// recall's budgets.
    #[must_use]
    pub fn budget(&self) -> Budget {
        self.inner.budget
    }

    /// The ngram-mod pool, made on first call.
    ///
    /// # Errors
    ///
    /// When the pool's cells cannot be allocated (see [`NgramPool::new`]).
    pub(crate) fn pool(&self) -> Result<Arc<NgramPool>, Error> {
        let mut pool = lock_std(&self.scope.pool);
        if let Some(p) = &pool.0 {
            return Ok(Arc::clone(p));
        }
        let p = Arc::new(NgramPool::new(self.inner.pool_size)?);
        // Read under the pool's lock, which a detach takes after clearing it.
        let counted = self.scope.attached.load(Ordering::SeqCst);
        if counted {
            self.inner
                .bytes
                .fetch_add(wide(p.size_bytes()), Ordering::Relaxed);
        }
        *pool = (Some(Arc::clone(&p)), counted);
        Ok(p)
    }

    /// The ngram-mod pool if one was made.
    #[must_use]
    pub(crate) fn existing_pool(&self) -> Option<Arc<NgramPool>> {
        lock_std(&self.scope.pool).0.clone()
    }

    /// recall's engine-wide memory, made on first call.
    #[must_use]
    pub(crate) fn recall_memory(&self) -> sync::Arc<RecallMemory> {
        let mut recall = lock_std(&self.scope.recall);
        recall
            .get_or_insert_with(|| {
                let memory = sync::Arc::new(RecallMemory::new(self.inner.budget.memory));
                // Read under the memory's slot lock, as in `pool`.
                if self.scope.attached.load(Ordering::SeqCst) {
                    memory.meter_with(Some(Metered::new(&self.inner.bytes)));
                }
                memory
            })
            .clone()
    }

    /// A recall drafter on this scope's engine-wide memory (made on first
    /// need), with an own index of [`Budget::sequence`] bytes, that stops
    /// where the estimated probability that the whole draft is accepted
    /// falls below `threshold` (as [`Recall::new`]): what
    /// [`Speculative::with_shared`](crate::Speculative::with_shared) builds,
    /// for a chain of [`Speculative::from_drafters`](crate::Speculative::from_drafters).
    ///
    /// ```
    /// use selfspec::{Config, DraftLimits, Shared, Speculative};
    ///
    /// let shared = Shared::new(&Config::recommended())?;
    /// let chain: Vec<Box<dyn selfspec::Drafter>> = vec![Box::new(shared.recall(0.13))];
    /// let mut spec = Speculative::from_drafters(chain, DraftLimits::default())?;
    /// spec.begin(&[1, 2, 3]);
    /// spec.end_request();
    /// # Ok::<(), selfspec::Error>(())
    /// ```
    #[must_use]
    pub fn recall(&self, threshold: f64) -> Recall {
        Recall::with_memory(
            threshold,
            self.recall_memory(),
            self.budget().sequence,
            true,
        )
    }

    /// recall's memory if one was made.
    #[must_use]
    pub(crate) fn existing_recall_memory(&self) -> Option<sync::Arc<RecallMemory>> {
        lock_std(&self.scope.recall).clone()
    }

    /// Heap bytes of this handle's scope: the pool's cells and recall's
    /// memory (at most [`Budget::memory`] plus ~7 KiB of learned tables).
    /// [`engine_heap_bytes`](Shared::engine_heap_bytes) counts every scope.
    #[must_use]
    pub fn heap_bytes(&self) -> usize {
        self.scope.heap_bytes()
    }

    /// Heap bytes of every scope of the engine together.
    #[must_use]
    pub fn engine_heap_bytes(&self) -> usize {
        // The count the scopes keep current (what the budget check reads).
        usize::try_from(self.inner.bytes.load(Ordering::Relaxed)).unwrap_or(usize::MAX)
    }

    /// One save at a time.
    pub(crate) fn lock_saves(&self) -> std::sync::MutexGuard<'_, ()> {
        lock_std(&self.inner.saving)
    }

    /// Counts a save that took `took`.
    pub(crate) fn count_save(&self, took: std::time::Duration) {
        self.inner.saves.record(crate::int::nanos(took));
    }

    /// Every scope's handle, the default one first (what a save writes).
    pub(crate) fn every_scope(&self) -> Vec<Shared> {
        let scopes = lock_std(&self.inner.scopes);
        let mut named: Vec<&Arc<Scope>> = scopes.values().collect();
        named.sort_unstable_by(|a, b| a.name.cmp(&b.name));
        std::iter::once(Arc::clone(&self.inner.root))
            .chain(named.into_iter().cloned())
            .map(|scope| Shared {
                inner: Arc::clone(&self.inner),
                scope,
            })
            .collect()
    }
}

#[cfg(test)]
mod tests;
