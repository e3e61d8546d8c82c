//! [`Shared`]: the engine-wide state every sequence's drafters learn into
//! and read from.

mod file;

use std::sync::{Arc, Mutex};

use crate::config::{check_range, Config, MAX_BUDGET, MIN_BUDGET};
use crate::strategies::{NgramPool, RecallMemory};
use crate::strategies::{DEFAULT_MEMORY_BUDGET, DEFAULT_SEQUENCE_BUDGET};
use crate::sync;
use crate::Error;

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
/// {
///     let mut first = Speculative::with_shared(&config, &shared)?;
///     first.begin(&prompt);
/// } // the request ends: its tokens go to the engine-wide memory
/// let mut second = Speculative::with_shared(&config, &shared)?; // a new request
/// second.begin(&prompt[..10]);
/// assert!(!second.draft(&prompt[..10], prompt[10]).is_empty());
/// assert!(shared.heap_bytes() > 0);
/// # Ok::<(), selfspec::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct Shared {
    inner: Arc<Inner>,
}

/// How much memory recall may hold: the engine-wide memory and each
/// sequence's own index (bytes; 84 per token, rounded down to a power of
/// two of tokens). Memory is forgotten oldest first, never wiped: the
/// engine-wide memory forgets the oldest requests, a sequence's index the
/// oldest half of a session longer than its budget (the request in flight
/// keeps its recent history; a prompt larger than the budget is indexed as
/// far as the budget allows, its most recent part).
///
/// ```
/// use selfspec::{Budget, Config, Shared};
///
/// let budget = Budget { memory: 64 << 20, ..Budget::default() };
/// let shared = Shared::with_budget(&Config::recommended(), budget)?;
/// assert_eq!(shared.budget().memory, 64 << 20);
/// assert!(Shared::with_budget(&Config::recommended(), Budget { memory: 0, ..budget }).is_err());
/// # Ok::<(), selfspec::Error>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Budget {
    /// recall's engine-wide memory of earlier requests: default 256 MiB
    /// ([`DEFAULT_MEMORY_BUDGET`]), 2 Mi tokens.
    pub memory: usize,
    /// recall's per-sequence index of the current session: default 64 MiB
    /// ([`DEFAULT_SEQUENCE_BUDGET`]), 512 Ki tokens.
    pub sequence: usize,
}

impl Default for Budget {
    fn default() -> Budget {
        Budget {
            memory: DEFAULT_MEMORY_BUDGET,
            sequence: DEFAULT_SEQUENCE_BUDGET,
        }
    }
}

impl Budget {
    /// Checks both parts against [`MIN_BUDGET`]`..=`[`MAX_BUDGET`].
    ///
    /// # Errors
    ///
    /// [`Error::OutOfRange`] naming the part and the allowed range.
    pub fn validate(&self) -> Result<(), Error> {
        check_range("budget", "memory", self.memory, MIN_BUDGET, MAX_BUDGET)?;
        check_range("budget", "sequence", self.sequence, MIN_BUDGET, MAX_BUDGET)
    }
}

#[derive(Debug)]
struct Inner {
    pool_size: usize,
    budget: Budget,
    pool: Mutex<Option<Arc<NgramPool>>>,
    recall: Mutex<Option<sync::Arc<RecallMemory>>>,
}

impl Shared {
    /// The engine-wide state for `config` (validated); nothing large is
    /// allocated until a sequence needs it.
    ///
    /// # Errors
    ///
    /// An invalid `config` ([`Config::validate`]).
    pub fn new(config: &Config) -> Result<Shared, Error> {
        Shared::with_budget(config, Budget::default())
    }

    /// Like [`new`](Shared::new), with recall's memory held to `budget`.
    ///
    /// # Errors
    ///
    /// An invalid `config` or `budget`.
    pub fn with_budget(config: &Config, budget: Budget) -> Result<Shared, Error> {
        config.validate()?;
        budget.validate()?;
        Ok(Shared::unchecked(config, budget, None))
    }

    /// Like [`new`](Shared::new), with an existing ngram-mod pool.
    ///
    /// # Errors
    ///
    /// An invalid `config`.
    pub fn with_pool(config: &Config, pool: Arc<NgramPool>) -> Result<Shared, Error> {
        config.validate()?;
        Ok(Shared::unchecked(config, Budget::default(), Some(pool)))
    }

    fn unchecked(config: &Config, budget: Budget, pool: Option<Arc<NgramPool>>) -> Shared {
        Shared {
            inner: Arc::new(Inner {
                pool_size: config.pool_size,
                budget,
                pool: Mutex::new(pool),
                recall: Mutex::new(None),
            }),
        }
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
    pub fn pool(&self) -> Result<Arc<NgramPool>, Error> {
        let mut pool = self.inner.pool.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(p) = &*pool {
            return Ok(Arc::clone(p));
        }
        let p = Arc::new(NgramPool::new(self.inner.pool_size)?);
        *pool = Some(Arc::clone(&p));
        Ok(p)
    }

    /// The ngram-mod pool if one was made.
    #[must_use]
    pub fn existing_pool(&self) -> Option<Arc<NgramPool>> {
        self.inner
            .pool
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// recall's engine-wide memory, made on first call.
    #[must_use]
    pub fn recall_memory(&self) -> sync::Arc<RecallMemory> {
        let mut recall = self.inner.recall.lock().unwrap_or_else(|e| e.into_inner());
        recall
            .get_or_insert_with(|| sync::Arc::new(RecallMemory::new(self.inner.budget.memory)))
            .clone()
    }

    /// recall's memory if one was made.
    #[must_use]
    pub fn existing_recall_memory(&self) -> Option<sync::Arc<RecallMemory>> {
        self.inner
            .recall
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Heap bytes of the engine-wide state: the pool's cells and recall's
    /// memory (at most [`Budget::memory`] plus ~7 KiB of learned tables).
    #[must_use]
    pub fn heap_bytes(&self) -> usize {
        self.existing_pool().map_or(0, |p| p.size_bytes())
            + self.existing_recall_memory().map_or(0, |m| m.heap_bytes())
    }
}
