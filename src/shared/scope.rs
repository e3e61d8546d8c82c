//! The scopes of an engine: one tenant's learned state each, found by name
//! and forgotten least recently used first.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::int::wide;
use crate::strategies::{NgramPool, RecallMemory};
use crate::sync::{self, lock_std};

/// The named scopes of an engine, by name and by last use (so that the
/// least recently used one is found without a walk over all of them).
#[derive(Debug, Default)]
pub(super) struct Scopes {
    /// (std's randomly keyed hasher, not the crate's fixed-key `FastHash`:
    /// the names come from clients.)
    pub(super) by_name: HashMap<Box<str>, Arc<Scope>>,
    /// Each scope's last use (a tick of the engine's clock) to its name.
    pub(super) by_use: BTreeMap<u64, Box<str>>,
}

impl Scopes {
    /// The scope `name`, made if new (then also `true`), marked as used at
    /// `tick`. Every named scope's use is written here, under the lock.
    pub(super) fn use_scope(&mut self, name: &str, tick: u64) -> (Arc<Scope>, bool) {
        let (scope, made) = match self.by_name.get(name) {
            Some(s) => {
                self.by_use.remove(&s.used.load(Ordering::Relaxed));
                (Arc::clone(s), false)
            }
            None => {
                let s = Arc::new(Scope::new(name));
                self.by_name.insert(name.into(), Arc::clone(&s));
                (s, true)
            }
        };
        scope.used.store(tick, Ordering::Relaxed);
        self.by_use.insert(tick, name.into());
        (scope, made)
    }

    pub(super) fn remove(&mut self, name: &str) -> Option<Arc<Scope>> {
        let scope = self.by_name.remove(name)?;
        self.by_use.remove(&scope.used.load(Ordering::Relaxed));
        Some(scope)
    }

    /// The least recently used scope but `keep`.
    pub(super) fn oldest_but(&self, keep: &Arc<Scope>) -> Option<Box<str>> {
        self.by_use
            .values()
            .find(|name| {
                self.by_name
                    .get(&**name)
                    .is_some_and(|s| !Arc::ptr_eq(s, keep))
            })
            .cloned()
    }

    pub(super) fn values(&self) -> impl Iterator<Item = &Arc<Scope>> {
        self.by_name.values()
    }
}

/// One tenant's learned state: what its drafters read and feed, and
/// nothing of any other scope's.
#[derive(Debug)]
pub(super) struct Scope {
    pub(super) name: Box<str>,
    /// The pool, and whether its cells are in the engine's count.
    pub(super) pool: Mutex<(Option<Arc<NgramPool>>, bool)>,
    pub(super) recall: Mutex<Option<sync::Arc<RecallMemory>>>,
    /// The engine's clock when this scope was last asked for.
    pub(super) used: AtomicU64,
    /// Still part of its engine (not forgotten, not dropped): what it makes
    /// from now on is counted in the engine's bytes.
    pub(super) attached: AtomicBool,
}

impl Scope {
    pub(super) fn new(name: &str) -> Scope {
        Scope {
            name: name.into(),
            pool: Mutex::new((None, false)),
            recall: Mutex::new(None),
            used: AtomicU64::new(0),
            attached: AtomicBool::new(true),
        }
    }

    pub(super) fn heap_bytes(&self) -> usize {
        let pool = lock_std(&self.pool);
        let recall = lock_std(&self.recall);
        Scope::own_bytes(&self.name)
            + pool.0.as_ref().map_or(0, |p| p.size_bytes())
            + recall.as_ref().map_or(0, |m| m.heap_bytes())
    }

    /// What a scope costs before it holds anything: itself, its entry in
    /// the engine's map and its name twice. Counted, so that scopes asked
    /// for and never drafted on (a name per user, with a configuration
    /// that keeps no engine-wide state) are forgotten like the others.
    pub(super) fn own_bytes(name: &str) -> usize {
        std::mem::size_of::<Scope>()
            + std::mem::size_of::<(Box<str>, Arc<Scope>)>()
            + 2 * std::mem::size_of::<usize>()
            + 2 * name.len()
    }

    /// Takes the scope out of the engine's count (`bytes`): it is no longer
    /// part of the engine. The flag goes first, so that a pool or memory
    /// made meanwhile (under its lock, which this takes next) is not
    /// counted either.
    pub(super) fn detach(&self, bytes: &AtomicU64) {
        self.attached.store(false, Ordering::SeqCst);
        bytes.fetch_sub(wide(Scope::own_bytes(&self.name)), Ordering::Relaxed);
        let mut pool = lock_std(&self.pool);
        if let (Some(p), true) = (&pool.0, pool.1) {
            bytes.fetch_sub(wide(p.size_bytes()), Ordering::Relaxed);
            pool.1 = false;
        }
        drop(pool);
        let recall = lock_std(&self.recall);
        if let Some(m) = &*recall {
            m.meter_with(None);
        }
    }
}
