//! [`Shared`]: the engine-wide state every sequence's drafters learn into
//! and read from.

mod file;

use std::sync::{Arc, Mutex};

use crate::config::Config;
use crate::strategies::{NgramPool, RecallMemory};
use crate::sync;
use crate::Error;

/// The engine-wide learned state: one per engine, shared by every sequence.
///
/// It holds what strategies learn across sequences:
/// - ngram-mod's [`NgramPool`] (`config.pool_size` cells);
/// - recall's [`RecallMemory`]: the tokens of finished requests, indexed
///   (at most `config.memory_budget` bytes, oldest requests forgotten
///   first), its stop rule's calibration and its selector's weights.
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

#[derive(Debug)]
struct Inner {
    pool_size: usize,
    memory_budget: usize,
    pool: Mutex<Option<Arc<NgramPool>>>,
    recall: Mutex<Option<sync::Arc<RecallMemory>>>,
}

impl Shared {
    /// The engine-wide state for `config` (validated); nothing large is
    /// allocated until a sequence needs it.
    pub fn new(config: &Config) -> Result<Shared, Error> {
        config.validate()?;
        Ok(Shared::unchecked(config, None))
    }

    /// Like [`new`](Shared::new), with an existing ngram-mod pool.
    pub fn with_pool(config: &Config, pool: Arc<NgramPool>) -> Result<Shared, Error> {
        config.validate()?;
        Ok(Shared::unchecked(config, Some(pool)))
    }

    fn unchecked(config: &Config, pool: Option<Arc<NgramPool>>) -> Shared {
        Shared {
            inner: Arc::new(Inner {
                pool_size: config.pool_size,
                memory_budget: config.memory_budget,
                pool: Mutex::new(pool),
                recall: Mutex::new(None),
            }),
        }
    }

    /// The ngram-mod pool, made on first call.
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
    pub fn existing_pool(&self) -> Option<Arc<NgramPool>> {
        self.inner
            .pool
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// recall's engine-wide memory, made on first call.
    pub fn recall_memory(&self) -> sync::Arc<RecallMemory> {
        let mut recall = self.inner.recall.lock().unwrap_or_else(|e| e.into_inner());
        recall
            .get_or_insert_with(|| sync::Arc::new(RecallMemory::new(self.inner.memory_budget)))
            .clone()
    }

    /// recall's memory if one was made.
    pub fn existing_recall_memory(&self) -> Option<sync::Arc<RecallMemory>> {
        self.inner
            .recall
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Heap bytes of the engine-wide state: the pool's cells and recall's
    /// memory (at most `memory_budget` plus ~14 KiB of learned tables).
    pub fn heap_bytes(&self) -> usize {
        self.existing_pool().map_or(0, |p| p.size_bytes())
            + self.existing_recall_memory().map_or(0, |m| m.heap_bytes())
    }
}
