//! recall's engine-wide memory: the tokens of finished requests, indexed by
//! context like the per-sequence index, in a ring of bounded capacity that
//! many threads read while one at a time appends ([`ring`]: the ring and
//! its publication protocol; [`runs`]: the runs kept for saves and
//! replicas); plus the learned tables every sequence shares.

mod ring;
mod runs;

use crate::int::{ix, nanos, wide};
use crate::stats::Timings;
use crate::sync::{lock, lock_std, try_lock, AtomicU64, Mutex, Ordering};
use crate::token::Token;

use super::calibrate::{Calibration, CELLS};
use super::chains::{tag_of, Chains, Hasher, SeqIndex, BYTES_PER_TOKEN, K};
use super::score::Weights;
use ring::{Batch, Ring, Tables, MIN_CAPACITY};
use runs::Runs;

pub(super) use ring::{Snapshot, View};
pub(crate) use runs::RunContext;
pub(super) use runs::Span;
pub(crate) use runs::RUN_CONTEXT;

/// The tokens a budget of `budget` bytes holds at `per_token` bytes each:
/// the largest power of two that fits, at least 1024, at most 2^30.
fn tokens_within(budget: usize, per_token: usize) -> usize {
    let tokens = (budget / per_token).max(ix(MIN_CAPACITY));
    (1usize << (usize::BITS - 1 - tokens.leading_zeros())).min(1 << 30)
}

/// The tokens a sequence's own index of `budget` bytes holds (84 bytes
/// each).
pub(super) fn capacity_of(budget: usize) -> usize {
    tokens_within(budget, BYTES_PER_TOKEN)
}

/// Heap bytes per token of an engine-wide memory's capacity: the index's
/// 84 and the bookkeeping of its runs.
pub(super) const MEMORY_BYTES_PER_TOKEN: usize = BYTES_PER_TOKEN + runs::BYTES_PER_TOKEN;

// The figure the budget's documentation gives.
const _: () = assert!(MEMORY_BYTES_PER_TOKEN == 96);

/// The tokens an engine-wide memory of `budget` bytes holds.
fn memory_capacity_of(budget: usize) -> usize {
    tokens_within(budget, MEMORY_BYTES_PER_TOKEN)
}

/// What counts a memory's heap bytes for its engine (the engine's metering
/// lives with the engine-wide state): told the memory's heap size whenever
/// it changes. Not part of the protocol `--cfg loom` checks.
pub(crate) trait HeapMeter: Send + Sync + std::fmt::Debug {
    /// The metered memory now holds `bytes` heap bytes (0: it is no longer
    /// metered here).
    fn set(&self, bytes: u64);
}

/// The writer's side: one at a time, behind a mutex.
#[derive(Debug)]
pub(super) struct Writer {
    hasher: Hasher,
    /// Hashes of the contexts ending at the end.
    rolling: [u64; K],
    /// Tokens appended since the last request boundary: no context spans one.
    run: u64,
    runs: Runs,
}

/// recall's engine-wide memory of earlier requests (part of
/// [`Shared`](crate::Shared)): their tokens in a ring of at most
/// [`capacity`](RecallMemory::capacity) tokens, oldest forgotten first,
/// indexed by contexts of 1 to 16 tokens; plus the stop rule's calibration
/// and the candidate selector's weights, learned from every sequence.
///
/// `Send + Sync`: drafting threads read it without locks; a finished request
/// is appended under a mutex that only writers take.
#[derive(Debug)]
pub struct RecallMemory {
    ring: Ring,
    writer: Mutex<Writer>,
    learned: Mutex<super::Learned>,
    calibration: Calibration,
    /// Appends that found the writer lock taken and waited. Written only by
    /// a waiting writer.
    waits: Timings,
    /// Requests whose end was published.
    requests: AtomicU64,
    /// Heap bytes of the writer's runs and imported ranges (written by the
    /// writer only, read by [`heap_bytes`](RecallMemory::heap_bytes), which
    /// so takes no lock).
    bookkeeping: AtomicU64,
    /// What counts this memory's heap for its engine, if anything does (a
    /// std lock: outside the protocol `--cfg loom` checks).
    meter: std::sync::Mutex<Option<std::sync::Arc<dyn HeapMeter>>>,
    /// This memory's number, unique in the process (see [`id`](Self::id)).
    id: u64,
}

/// The next memory's [`id`](RecallMemory::id) (a std atomic: outside the
/// protocol `--cfg loom` checks).
static NEXT_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

impl RecallMemory {
    /// A memory of at most `budget` bytes: the largest power of two of tokens
    /// whose 96 bytes each fit (at least 1024 tokens, at most 2^30).
    #[must_use]
    pub fn new(budget: usize) -> RecallMemory {
        RecallMemory {
            ring: Ring::new(wide(memory_capacity_of(budget))),
            writer: Mutex::new(Writer {
                hasher: Hasher::new(),
                rolling: [0; K],
                run: 0,
                runs: Runs::default(),
            }),
            learned: Mutex::new(super::Learned {
                weights: Weights::new(),
            }),
            calibration: Calibration::new(),
            waits: Timings::default(),
            requests: AtomicU64::new(0),
            bookkeeping: AtomicU64::new(0),
            meter: std::sync::Mutex::new(None),
            id: NEXT_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
        }
    }

    /// A number no other memory of the process has (each scope of a
    /// `Shared` holds a memory of its own): what recall's estimates are
    /// learned over, for the stepper's draft budget
    /// ([`Drafter::estimates_source`](crate::Drafter::estimates_source)).
    #[must_use]
    pub fn id(&self) -> u64 {
        self.id
    }

    /// Tokens it can hold; older ones are forgotten first.
    pub fn capacity(&self) -> usize {
        ix(self.ring.capacity())
    }

    /// Tokens held now.
    pub fn len(&self) -> usize {
        let end = self.ring.end();
        ix(end - self.ring.floor().min(end))
    }

    /// Whether nothing is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Tokens appended over its lifetime, forgotten ones included.
    pub(crate) fn appended(&self) -> u64 {
        self.ring.end()
    }

    /// Heap bytes held: at most [`capacity`](RecallMemory::capacity) x 96
    /// (84 for the index, 12 for the bookkeeping of its runs), plus the
    /// smallest bucket arrays and the learned tables (a fixed 15 KiB).
    pub fn heap_bytes(&self) -> usize {
        self.ring.heap_bytes()
            + ix(self.bookkeeping.load(Ordering::Relaxed))
            + 8 * CELLS
            + std::mem::size_of::<super::Learned>()
    }

    /// The most runs (and imported ranges) held.
    fn max_runs(&self) -> usize {
        (self.capacity() / runs::RUN_SPAN).max(1)
    }

    /// Records the heap bytes of `w`'s runs and imported ranges.
    fn count_bookkeeping(&self, w: &Writer) {
        let bytes = wide(w.runs.bytes());
        // Only the writer stores it: a store when it changed (a deque grew),
        // no read-modify-write on every append.
        if self.bookkeeping.load(Ordering::Relaxed) != bytes {
            self.bookkeeping.store(bytes, Ordering::Relaxed);
            self.report();
        }
    }

    /// Has `meter` count this memory's heap from now on (what it holds now
    /// at once), instead of the meter it had, which is set to 0; `None`:
    /// no meter (a forgotten scope's memory lives on for the handles that
    /// still hold it, outside its engine's count).
    pub(crate) fn meter_with(&self, meter: Option<std::sync::Arc<dyn HeapMeter>>) {
        let mut slot = lock_std(&self.meter);
        if let Some(old) = slot.take() {
            old.set(0);
        }
        if let Some(new) = &meter {
            new.set(wide(self.heap_bytes()));
        }
        *slot = meter;
    }

    /// Tells the meter the heap changed.
    fn report(&self) {
        let slot = lock_std(&self.meter);
        if let Some(meter) = &*slot {
            meter.set(wide(self.heap_bytes()));
        }
    }

    /// The tokens held, oldest first, and each run of them (a request or a
    /// piece of one) as its length and the context it continues: appending
    /// the runs in order rebuilds the same memory (saving). The memory
    /// keeps at most one run per 8 tokens of its capacity: beyond that the
    /// oldest two runs are joined, and the rebuilt memory indexes the
    /// contexts across the joint too.
    pub(crate) fn runs(&self) -> (Vec<Token>, Vec<(u64, RunContext)>) {
        let w = lock(&self.writer);
        let mut snapshot = self.snapshot();
        let view = self.view(&mut snapshot);
        let tokens = (view.floor()..view.end()).map(|p| view.token(p)).collect();
        (tokens, w.runs.lengths(&view))
    }

    /// What was published from position `from` on and is still held, run
    /// by run (the tail of a run that began before `from`, with the tokens
    /// before it as its context), leaving out imported ranges; and the end
    /// position (the next export's `from`).
    pub(crate) fn runs_since(&self, from: u64) -> (Vec<(RunContext, Vec<Token>)>, u64) {
        let w = lock(&self.writer);
        let mut snapshot = self.snapshot();
        let view = self.view(&mut snapshot);
        (w.runs.since(&view, from), view.end())
    }

    /// Appends another replica's run (see
    /// [`runs_since`](RecallMemory::runs_since)): an export leaves it out.
    pub(crate) fn import_run(&self, context: &[Token], tokens: &[Token]) {
        if tokens.is_empty() {
            return;
        }
        // One lock for the append and its record, so no export sees the
        // run without knowing it was imported.
        let mut w = self.writer();
        let start = self.append_locked(&mut w, context, tokens, None, true);
        let (end, floor) = self.ring.written();
        let max = self.max_runs();
        w.runs.imported(Span { start, end }, floor, max);
        self.count_bookkeeping(&w);
    }

    /// The continuations of the most recent occurrences (newest first, at
    /// most 8) of `context`, whose length must be one of recall's orders (1,
    /// 2, 3, 4, 6, 8, 12, 16; any other gives nothing). Lock-free, like a
    /// draft. Built only for the unit tests, the model check (tests/loom.rs)
    /// and with the benches' `internals`.
    #[cfg(any(test, loom, feature = "internals"))]
    #[doc(hidden)]
    pub fn followers(&self, context: &[Token]) -> Vec<Token> {
        let Some(o) = super::chains::ORDERS
            .iter()
            .position(|&k| k == context.len())
        else {
            return Vec::new();
        };
        let mut rolling = [0; K];
        Hasher::new().roll(&mut rolling, 0, wide(context.len()), |j| context[ix(j)]);
        let mut snapshot = self.snapshot();
        let view = self.view(&mut snapshot);
        let mut out = Vec::new();
        super::chains::occurrences(&view, o, tag_of(rolling[o]), |e| {
            out.push(view.token(e));
            out.len() < 8
        });
        out
    }

    pub(super) fn snapshot(&self) -> Snapshot {
        self.ring.snapshot()
    }

    /// The view for one draft call, refreshing `snapshot` if the tables moved.
    pub(super) fn view<'a>(&self, snapshot: &'a mut Snapshot) -> View<'a> {
        self.ring.view(snapshot)
    }

    pub(super) fn learned(&self) -> &Mutex<super::Learned> {
        &self.learned
    }

    pub(super) fn calibration(&self) -> &Calibration {
        &self.calibration
    }

    /// Appends one request's tokens, after a boundary (no context spans two
    /// requests); of more than [`capacity`](RecallMemory::capacity) tokens,
    /// the most recent part. Readers go on meanwhile; other writers wait.
    /// Returns the logical position of the first token appended. Built only
    /// for the unit tests, the model check and the benches (`internals`):
    /// engines publish through drafters.
    #[cfg(any(test, loom, feature = "internals"))]
    #[doc(hidden)]
    pub fn append(&self, tokens: &[Token]) -> u64 {
        self.append_after(&[], tokens)
    }

    /// Appends `tokens` that continue `context` (the tokens before them in
    /// their request, at most the longest order counts): the contexts that
    /// reach back into `context` are indexed too. This is how a saved
    /// memory is loaded, run by run.
    pub(crate) fn append_after(&self, context: &[Token], tokens: &[Token]) -> u64 {
        if tokens.is_empty() {
            return self.ring.end();
        }
        let mut w = self.writer();
        self.append_locked(&mut w, context, tokens, None, true)
    }

    /// Appends the tokens `from..to` of a sequence's own index (at most
    /// [`capacity`](RecallMemory::capacity) of them, the newest), after the
    /// tokens before them as context: what a request publishes. The
    /// contexts' tags are the ones the own index stored, not hashed again
    /// (the same hash, so the same memory as
    /// [`append_after`](RecallMemory::append_after) builds). In flight
    /// (`wait` false, from a draft call), `None` (nothing appended) when
    /// another writer holds the lock, so that a draft never waits for the
    /// indexing of a long request; and the buckets do not grow (re-chaining
    /// the whole memory would stall the draft), only at the next waiting
    /// append. Returns the memory positions appended.
    pub(super) fn append_own(
        &self,
        own: &SeqIndex,
        from: u64,
        to: u64,
        wait: bool,
    ) -> Option<Span> {
        let to = to.min(own.end());
        let from = from
            .max(own.floor())
            .max(to.saturating_sub(self.ring.capacity()));
        if from >= to {
            let end = self.ring.end();
            return Some(Span { start: end, end });
        }
        let before = from - (from - own.floor()).min(wide(RUN_CONTEXT));
        let held = own.tokens_from(before);
        let held = &held[..held.len().min(ix(to - before))];
        let (context, tokens) = held.split_at(ix(from - before));
        let mut w = if wait {
            self.writer()
        } else {
            try_lock(&self.writer)?
        };
        if !wait && w.runs.must_grow_far(self.max_runs()) {
            return None;
        }
        let start = self.append_locked(&mut w, context, tokens, Some((own, from)), wait);
        Some(Span {
            start,
            end: start + wide(tokens.len()),
        })
    }

    /// The writer lock, for an append that may wait: a wait is counted
    /// (by the waiting writer only, so readers and the holder gain no
    /// shared writes).
    fn writer(&self) -> crate::sync::MutexGuard<'_, Writer> {
        if let Some(w) = try_lock(&self.writer) {
            return w;
        }
        let started = std::time::Instant::now();
        let w = lock(&self.writer);
        self.waits.record(nanos(started.elapsed()));
        w
    }

    /// How often and how long appends waited for another writer.
    pub(crate) fn waits(&self) -> crate::stats::Timed {
        self.waits.get()
    }

    /// Counts a request whose end was published.
    pub(crate) fn count_request(&self) {
        self.requests.fetch_add(1, Ordering::Relaxed);
    }

    /// Requests whose end was published.
    pub(crate) fn requests(&self) -> u64 {
        self.requests.load(Ordering::Relaxed)
    }

    /// Runs held and the room their deque has for them.
    #[cfg(all(test, not(loom)))]
    pub(super) fn runs_room(&self) -> (usize, usize) {
        lock(&self.writer).runs.room()
    }

    /// Holds the writer lock, as another thread's append would.
    #[cfg(all(test, not(loom)))]
    pub(super) fn hold_writer(&self) -> crate::sync::MutexGuard<'_, Writer> {
        lock(&self.writer)
    }

    /// Appends `tokens` after `context`, their contexts' tags hashed or,
    /// with `own` (the index and the own position of `tokens[0]`), taken
    /// from the sequence's own index.
    fn append_locked(
        &self,
        w: &mut Writer,
        context: &[Token],
        tokens: &[Token],
        own: Option<(&SeqIndex, u64)>,
        may_grow: bool,
    ) -> u64 {
        let capacity = self.ring.capacity();
        let tokens = &tokens[tokens.len().saturating_sub(ix(capacity))..];
        let context = &context[context.len().saturating_sub(RUN_CONTEXT)..];
        let mut batch = self.ring.begin(wide(tokens.len()));
        self.ring.ensure(&mut batch, may_grow);
        if batch.grew {
            self.report();
        }
        let max = self.max_runs();
        w.runs.push(
            batch.start,
            context,
            batch.end.saturating_sub(capacity),
            max,
        );
        self.count_bookkeeping(w);
        // The context's hashes, as if it stood before `start`.
        w.run = 0;
        for i in 1..=context.len() {
            w.run += 1;
            let Writer {
                hasher, rolling, ..
            } = &mut *w;
            hasher.roll(rolling, 0, wide(i), |j| context[ix(j)]);
        }
        match own {
            // A copy of the own index: its tags (`tokens` is its tail from
            // `first`, so nothing was cut above).
            Some((own, first)) => {
                for ((p, q), &t) in (batch.start..).zip(first..).zip(tokens) {
                    self.write_tagged(&batch.tables, p, t, own, q);
                }
            }
            None => {
                let virtual_start = batch.start.wrapping_sub(wide(context.len()));
                for (p, &t) in (batch.start..).zip(tokens) {
                    self.write(&batch, w, p, t, (virtual_start, context));
                }
            }
        }
        self.ring.publish(&batch);
        batch.start
    }

    /// [`Ring::put`] for a copy of the own index's token at `q`, with the
    /// tags the own index stored: for the contexts it holds whole
    /// (`q - floor >= k`; the context a publication passes reaches back as
    /// far, so the hashed path indexes the same).
    fn write_tagged(&self, tables: &Tables, p: u64, t: Token, own: &SeqIndex, q: u64) {
        let held = q - own.floor();
        let tags = own.tags_before(q);
        self.ring.put(tables, p, t, |o, k| {
            tags.filter(|_| held >= k).map(|tags| tags[o])
        });
    }

    /// [`Ring::put`] with the tags hashed from the tokens, then rolls the
    /// hashes over the token for the contexts ending after it.
    fn write(&self, batch: &Batch, w: &mut Writer, p: u64, t: Token, context: (u64, &[Token])) {
        let tables = &batch.tables;
        self.ring.put(tables, p, t, |o, k| {
            (w.run >= k).then(|| tag_of(w.rolling[o]))
        });
        let view = self.ring.writing(tables, p);
        // Then roll the hashes over it, for the contexts ending after it.
        w.run += 1;
        let len = p + 1;
        let Writer {
            hasher,
            rolling,
            run,
            ..
        } = w;
        let (virtual_start, context) = context;
        hasher.roll(rolling, len.wrapping_sub(*run), len, |j| {
            // Positions from `virtual_start` (modulo 2^64) are the context's.
            match context.get(ix(j.wrapping_sub(virtual_start))) {
                Some(&t) => t,
                None => super::chains::Chains::token(&view, j),
            }
        });
    }
}

#[cfg(all(test, not(loom)))]
mod tests;
