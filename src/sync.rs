//! The synchronization primitives the engine-wide state is built from: the
//! standard library's, or `loom`'s under `--cfg loom`, so that the publication
//! protocol of recall's memory can be model-checked (`tests/loom.rs`).

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{AtomicU32, AtomicU64, Ordering};
#[cfg(loom)]
pub(crate) use loom::sync::{Arc, Mutex, MutexGuard, RwLock};

#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
#[cfg(not(loom))]
pub(crate) use std::sync::{Arc, Mutex, MutexGuard, RwLock};

/// Locks `m`, ignoring poisoning: every critical section of this crate leaves
/// its data consistent at each step (counters, appended tokens), so a panic
/// elsewhere while it was held does not make it unusable.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// [`lock`] for a standard mutex: the engine-wide state's bookkeeping
/// (scopes, saves, byte metering), outside the protocol `--cfg loom` checks.
pub(crate) fn lock_std<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Locks `m` if no one holds it, ignoring poisoning as [`lock`] does:
/// `None` when another thread holds it.
pub(crate) fn try_lock<T>(m: &Mutex<T>) -> Option<MutexGuard<'_, T>> {
    match m.try_lock() {
        Ok(g) => Some(g),
        Err(std::sync::TryLockError::Poisoned(e)) => Some(e.into_inner()),
        Err(std::sync::TryLockError::WouldBlock) => None,
    }
}

/// A clone of the `Arc` behind `l` (a read lock held for the clone only).
pub(crate) fn read_arc<T>(l: &RwLock<Arc<T>>) -> Arc<T> {
    match l.read() {
        Ok(g) => Arc::clone(&g),
        Err(e) => Arc::clone(&e.into_inner()),
    }
}

/// Replaces the `Arc` behind `l` (a write lock held for the swap only).
pub(crate) fn write_arc<T>(l: &RwLock<Arc<T>>, value: Arc<T>) {
    match l.write() {
        Ok(mut g) => *g = value,
        Err(e) => *e.into_inner() = value,
    }
}
