//! The engine's count of the heap bytes its scopes hold, which each part
//! keeps current while it is counted, so that the engine's budget check
//! reads one number, not every scope's.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::strategies::HeapMeter;

/// An engine's count of heap bytes.
pub(super) type EngineBytes = Arc<AtomicU64>;

/// One part's entry in an engine's count: what it added, kept current.
#[derive(Debug)]
pub(super) struct Metered {
    engine: EngineBytes,
    counted: AtomicU64,
}

impl Metered {
    /// An entry in `engine` (counting nothing yet).
    pub(super) fn new(engine: &EngineBytes) -> Arc<Metered> {
        Arc::new(Metered {
            engine: Arc::clone(engine),
            counted: AtomicU64::new(0),
        })
    }
}

impl HeapMeter for Metered {
    fn set(&self, bytes: u64) {
        // Each update adds the difference to what the last one counted:
        // concurrent updates still add up to the last value stored.
        let before = self.counted.swap(bytes, Ordering::Relaxed);
        self.engine
            .fetch_add(bytes.wrapping_sub(before), Ordering::Relaxed);
    }
}
