//! recall's engine-wide memory: the tokens of finished requests, indexed by
//! context like the per-sequence index, in a ring of bounded capacity that
//! many threads read while one at a time appends.
//!
//! # Publication protocol
//!
//! Every cell is an atomic, so no interleaving is undefined behaviour; the
//! orderings make what a reader sees consistent:
//!
//! - the writer stores a batch's tokens and links (relaxed), each bucket head
//!   with `Release` after its link, and finally the end with `Release`;
//! - a reader loads the end with `Acquire` (so every token before it is
//!   visible), then the generation (a new chunk or bucket array is published
//!   before any end that needs it), and each head with `Acquire`.
//! - Before a batch wraps over the oldest positions, the writer raises the
//!   floor (`Release`): a reader that starts after that never uses them. A
//!   reader already walking may read a reused slot; chains only run
//!   backwards and tags are checked, so the worst case is a wrong draft
//!   token, which verification rejects.
//!
//! `tests/loom.rs` model-checks that a reader never sees a published
//! position without its token and links; `loom_tests.rs` beside this file
//! does the same for a publication from a sequence's own index.

use crate::sync::{
    lock, read_arc, try_lock, write_arc, Arc, AtomicU32, AtomicU64, Mutex, Ordering, RwLock,
};
use crate::token::Token;
use std::collections::VecDeque;
// The engine's byte count is a std atomic under `--cfg loom` too.
use std::sync::atomic::Ordering as EngineOrdering;

use super::calibrate::{Calibration, CELLS};
use super::index::{
    ix, tag_of, Chains, Hasher, SeqIndex, BYTES_PER_TOKEN, K, MAX_LOAD, MIN_BITS, ORDERS,
};
use super::score::Weights;
use crate::index::low32;

/// Positions per chunk (chunks are allocated as the memory fills).
const CHUNK_BITS: u32 = if cfg!(loom) { 1 } else { 10 };
const CHUNK: u64 = 1 << CHUNK_BITS;
/// The smallest capacity, in tokens.
pub(super) const MIN_CAPACITY: u64 = if cfg!(loom) { 4 } else { 1 << 10 };

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

/// Tokens a held run spans, on average, at least: the memory keeps at most
/// `capacity / RUN_SPAN` runs (and as many imported ranges). A drafter's
/// in-flight pieces are 16 tokens or more, so only requests shorter than 8
/// tokens, or appends of a few tokens at a time, reach the limit.
const RUN_SPAN: usize = 8;

/// Heap bytes per token of an engine-wide memory's capacity: the index's
/// 84 and the bookkeeping of its runs (one run and one imported range per
/// [`RUN_SPAN`] tokens at most).
pub(super) const MEMORY_BYTES_PER_TOKEN: usize =
    BYTES_PER_TOKEN + (std::mem::size_of::<Run>() + std::mem::size_of::<(u64, u64)>()) / RUN_SPAN;

// The figure the budget's documentation gives.
const _: () = assert!(MEMORY_BYTES_PER_TOKEN == 96);

/// The tokens an engine-wide memory of `budget` bytes holds.
fn memory_capacity_of(budget: usize) -> usize {
    tokens_within(budget, MEMORY_BYTES_PER_TOKEN)
}

/// An engine's count of the heap bytes its scopes hold, which each of their
/// memories keeps current while it is attached (so that the engine's budget
/// check reads one number, not every scope's). Not part of the protocol
/// `--cfg loom` checks.
pub(crate) type EngineBytes = std::sync::Arc<std::sync::atomic::AtomicU64>;

/// The most runs whose deque a draft call's in-flight append may grow
/// (moving 80 bytes a run): beyond it, growth waits for a request's end.
const IN_FLIGHT_RUNS: usize = 4096;

/// Pushes `x` onto `v`, which grows by doubling but never past `max` slots,
/// so that its heap stays within what the budget counts.
fn push_within<T>(v: &mut VecDeque<T>, x: T, max: usize) {
    if v.len() == v.capacity() {
        let room = max.saturating_sub(v.len()).max(1);
        v.reserve_exact(v.len().max(4).min(room));
    }
    v.push_back(x);
}

/// One chunk of positions: tokens and, per position `e`, one link per order
/// for the context ending at `e` (`tag << 32 | previous end position`
/// truncated to 32 bits; 0: none).
#[derive(Debug)]
struct Chunk {
    tokens: Box<[AtomicU32]>,
    links: Box<[AtomicU64]>,
}

impl Chunk {
    fn new() -> Chunk {
        Chunk {
            tokens: (0..CHUNK).map(|_| AtomicU32::new(0)).collect(),
            links: (0..CHUNK * K as u64).map(|_| AtomicU64::new(0)).collect(),
        }
    }
}

/// What readers hold between publications: the bucket heads and the chunks.
#[derive(Debug)]
pub(super) struct Tables {
    bits: u32,
    /// `K << bits` heads: the newest end position of each bucket, truncated
    /// to 32 bits (0: none). Shared by every generation of the same size.
    /// (A standard `Arc`: sharing it is ownership only, not part of the
    /// protocol that `--cfg loom` checks.)
    heads: std::sync::Arc<[AtomicU32]>,
    chunks: Vec<Arc<Chunk>>,
}

impl Tables {
    /// The bucket head of contexts tagged `tag` of order `o`.
    fn head(&self, o: usize, tag: u32) -> &AtomicU32 {
        &self.heads[(o << self.bits) | (tag >> (32 - self.bits)) as usize]
    }

    /// Puts the order-`o` context tagged `tag` that ends at `e` at the
    /// front of its bucket's chain: its link `cell` takes the tag and the
    /// bucket's head, then the head takes `e`, stored with `publish`.
    fn chain_front(&self, o: usize, tag: u32, e: u64, cell: &AtomicU64, publish: Ordering) {
        let head = self.head(o, tag);
        let previous = head.load(Ordering::Relaxed);
        cell.store(
            u64::from(tag) << 32 | u64::from(previous),
            Ordering::Relaxed,
        );
        head.store(low32(e), publish);
    }
}

fn atomics32(n: usize) -> std::sync::Arc<[AtomicU32]> {
    (0..n).map(|_| AtomicU32::new(0)).collect()
}

impl Tables {
    fn bytes(&self) -> usize {
        4 * self.heads.len() + self.chunks.len() * ix(CHUNK) * (4 + 8 * K)
    }
}

/// One run of appended tokens: its start and the context it continues.
#[derive(Clone, Copy, Debug)]
struct Run {
    start: u64,
    context: RunContext,
}

/// Up to the longest order's worth of tokens a run continues.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RunContext {
    tokens: [Token; ORDERS[K - 1]],
    len: u8,
}

impl RunContext {
    /// The last (at most 16) of `tokens`.
    #[must_use]
    pub fn new(tokens: &[Token]) -> RunContext {
        let tokens = &tokens[tokens.len().saturating_sub(ORDERS[K - 1])..];
        let mut out = RunContext::default();
        out.tokens[..tokens.len()].copy_from_slice(tokens);
        out.len = u8::try_from(tokens.len()).unwrap_or(0);
        out
    }

    /// The tokens.
    #[must_use]
    pub fn as_slice(&self) -> &[Token] {
        &self.tokens[..usize::from(self.len)]
    }
}

/// The writer's side: one at a time, behind a mutex.
#[derive(Debug)]
pub(super) struct Writer {
    hasher: Hasher,
    /// Hashes of the contexts ending at the end.
    rolling: [u64; K],
    /// Tokens appended since the last request boundary: no context spans one.
    run: u64,
    /// Each run held (a request, or a piece of one in flight): where it
    /// starts and the tokens before it in its request (the first run may
    /// have lost its head). 80 bytes a run, at most `max_runs` of them.
    runs: VecDeque<Run>,
    /// Ranges appended by [`RecallMemory::import_run`] (another replica's
    /// learning), which an export leaves out; oldest first, at most
    /// `max_runs`.
    imported: VecDeque<(u64, u64)>,
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
    capacity: u64,
    /// Published end (logical position one past the newest token).
    end: AtomicU64,
    /// The oldest logical position still held.
    floor: AtomicU64,
    generation: AtomicU64,
    tables: RwLock<Arc<Tables>>,
    writer: Mutex<Writer>,
    learned: Mutex<super::Learned>,
    calibration: Calibration,
    /// Appends that found the writer lock taken and waited: count, total
    /// and longest wait (ns). Written only by a waiting writer.
    waits: [AtomicU64; 3],
    /// Requests whose end was published.
    requests: AtomicU64,
    /// Heap bytes of the writer's runs and imported ranges (written by the
    /// writer only, read by [`heap_bytes`](RecallMemory::heap_bytes), which
    /// so takes no lock).
    bookkeeping: AtomicU64,
    /// Heap bytes of the current tables (the same: written where the writer
    /// makes new tables).
    table_bytes: AtomicU64,
    /// The engine count this memory's heap is in, and what it added to it.
    meter: std::sync::Mutex<Option<(EngineBytes, u64)>>,
}

/// How often and how long writers waited for the memory's writer lock.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Waits {
    pub(crate) count: u64,
    pub(crate) total_ns: u64,
    pub(crate) longest_ns: u64,
}

/// A reader's cached tables, refreshed when the generation moves.
#[derive(Clone, Debug)]
pub(super) struct Snapshot {
    tables: Arc<Tables>,
    generation: u64,
}

/// A reader's view for one draft call.
#[derive(Clone, Copy)]
pub(super) struct View<'a> {
    tables: &'a Tables,
    end: u64,
    floor: u64,
    mask: u64,
}

impl RecallMemory {
    /// A memory of at most `budget` bytes: the largest power of two of tokens
    /// whose 96 bytes each fit (at least 1024 tokens, at most 2^30).
    #[must_use]
    pub fn new(budget: usize) -> RecallMemory {
        let capacity = memory_capacity_of(budget) as u64;
        let tables = Tables {
            bits: MIN_BITS,
            heads: atomics32(K << MIN_BITS),
            chunks: Vec::new(),
        };
        let table_bytes = AtomicU64::new(tables.bytes() as u64);
        RecallMemory {
            capacity,
            end: AtomicU64::new(0),
            floor: AtomicU64::new(0),
            generation: AtomicU64::new(0),
            tables: RwLock::new(Arc::new(tables)),
            writer: Mutex::new(Writer {
                hasher: Hasher::new(),
                rolling: [0; K],
                run: 0,
                runs: VecDeque::new(),
                imported: VecDeque::new(),
            }),
            learned: Mutex::new(super::Learned {
                weights: Weights::new(),
            }),
            calibration: Calibration::new(),
            waits: [AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0)],
            requests: AtomicU64::new(0),
            bookkeeping: AtomicU64::new(0),
            table_bytes,
            meter: std::sync::Mutex::new(None),
        }
    }

    /// Tokens it can hold; older ones are forgotten first.
    pub fn capacity(&self) -> usize {
        ix(self.capacity)
    }

    /// Tokens held now.
    pub fn len(&self) -> usize {
        let end = self.end.load(Ordering::Acquire);
        ix(end - self.floor.load(Ordering::Acquire).min(end))
    }

    /// Whether nothing is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Tokens appended over its lifetime, forgotten ones included.
    pub fn appended(&self) -> u64 {
        self.end.load(Ordering::Acquire)
    }

    /// Heap bytes held: at most [`capacity`](RecallMemory::capacity) x 96
    /// (84 for the index, 12 for the bookkeeping of its runs), plus the
    /// smallest bucket arrays and the learned tables (a fixed 15 KiB).
    pub fn heap_bytes(&self) -> usize {
        ix(self.table_bytes.load(Ordering::Relaxed))
            + ix(self.bookkeeping.load(Ordering::Relaxed))
            + 8 * CELLS
            + std::mem::size_of::<super::Learned>()
    }

    /// The most runs (and imported ranges) held.
    fn max_runs(&self) -> usize {
        (ix(self.capacity) / RUN_SPAN).max(1)
    }

    /// Records the heap bytes of `w`'s runs and imported ranges.
    fn count_bookkeeping(&self, w: &Writer) {
        let bytes = (w.runs.capacity() * std::mem::size_of::<Run>()
            + w.imported.capacity() * std::mem::size_of::<(u64, u64)>()) as u64;
        // Only the writer stores it: a store when it changed (a deque grew),
        // no read-modify-write on every append.
        if self.bookkeeping.load(Ordering::Relaxed) != bytes {
            self.bookkeeping.store(bytes, Ordering::Relaxed);
            self.report();
        }
    }

    /// The engine count this memory is in (a std lock: the engine's count
    /// is outside the protocol `--cfg loom` checks).
    fn meter(&self) -> std::sync::MutexGuard<'_, Option<(EngineBytes, u64)>> {
        self.meter.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Counts this memory's heap in `engine` from now on (what it holds
    /// now at once), instead of any count it was in.
    pub(crate) fn attach(&self, engine: EngineBytes) {
        let mut meter = self.meter();
        if let Some((old, counted)) = meter.take() {
            old.fetch_sub(counted, EngineOrdering::Relaxed);
        }
        let now = self.heap_bytes() as u64;
        engine.fetch_add(now, EngineOrdering::Relaxed);
        *meter = Some((engine, now));
    }

    /// Takes this memory's heap out of its engine's count (a forgotten
    /// scope's memory lives on for the handles that still hold it).
    pub(crate) fn detach(&self) {
        let mut meter = self.meter();
        if let Some((engine, counted)) = meter.take() {
            engine.fetch_sub(counted, EngineOrdering::Relaxed);
        }
    }

    /// Brings the engine's count up to date after the heap changed.
    fn report(&self) {
        let mut meter = self.meter();
        if let Some((engine, counted)) = &mut *meter {
            let now = self.heap_bytes() as u64;
            engine.fetch_add(now.wrapping_sub(*counted), EngineOrdering::Relaxed);
            *counted = now;
        }
    }

    /// The tokens held, oldest first, and each run of them (a request or a
    /// piece of one) as its length and the context it continues: appending
    /// the runs in order ([`append_after`](RecallMemory::append_after))
    /// rebuilds the same memory (saving). The memory keeps at most one run
    /// per 8 tokens of its capacity: beyond that the oldest two runs are
    /// joined, and the rebuilt memory indexes the contexts across the joint
    /// too.
    pub fn runs(&self) -> (Vec<Token>, Vec<(u64, RunContext)>) {
        let w = lock(&self.writer);
        let mut snapshot = self.snapshot();
        let view = self.view(&mut snapshot);
        let tokens = (view.floor..view.end).map(|p| view.token(p)).collect();
        let mut runs = Vec::with_capacity(w.runs.len());
        for (i, run) in w.runs.iter().enumerate() {
            let next = w.runs.get(i + 1).map_or(view.end, |r| r.start);
            // A run that lost its head lost its context too.
            let context = if run.start < view.floor {
                RunContext::default()
            } else {
                run.context
            };
            runs.push((next - run.start.max(view.floor), context));
        }
        (tokens, runs)
    }

    /// What was published from position `from` on and is still held, run
    /// by run (the tail of a run that began before `from`, with the tokens
    /// before it as its context), leaving out imported ranges; and the end
    /// position (the next export's `from`).
    pub(crate) fn runs_since(&self, from: u64) -> (Vec<(RunContext, Vec<Token>)>, u64) {
        let w = lock(&self.writer);
        let mut snapshot = self.snapshot();
        let view = self.view(&mut snapshot);
        let mut out = Vec::new();
        // Runs and imported ranges are in order: start at the run that holds
        // `from` (an export after every request reads only what is new, not
        // every run held).
        let first = w
            .runs
            .partition_point(|r| r.start <= from)
            .saturating_sub(1);
        for (i, run) in w.runs.iter().enumerate().skip(first) {
            let next = w.runs.get(i + 1).map_or(view.end, |r| r.start);
            let start = run.start.max(view.floor).max(from);
            if start >= next {
                continue;
            }
            // The parts of start..next that were not imported.
            let mut at = start;
            let overlapping = w.imported.partition_point(|&(_, b)| b <= start);
            for &(a, b) in w
                .imported
                .range(overlapping..)
                .take_while(|&&(a, _)| a < next)
            {
                if a > at {
                    out.push(self.piece(&view, run, at, a));
                }
                at = at.max(b);
            }
            if at < next {
                out.push(self.piece(&view, run, at, next));
            }
        }
        (out, view.end)
    }

    /// Tokens `from..to` of `run`, with their context.
    fn piece(&self, view: &View<'_>, run: &Run, from: u64, to: u64) -> (RunContext, Vec<Token>) {
        let context = if from == run.start {
            run.context
        } else {
            let k = (from - view.floor.max(run.start)).min(ORDERS[K - 1] as u64);
            let before: Vec<Token> = (from - k..from).map(|p| view.token(p)).collect();
            RunContext::new(&before)
        };
        (context, (from..to).map(|p| view.token(p)).collect())
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
        let end = self.end.load(Ordering::Relaxed);
        let floor = self.floor.load(Ordering::Relaxed);
        while w.imported.front().is_some_and(|&(_, b)| b <= floor) {
            w.imported.pop_front();
        }
        match w.imported.back_mut() {
            Some(last) if last.1 == start => last.1 = end,
            _ => {
                let max = self.max_runs();
                push_within(&mut w.imported, (start, end), max + 1);
                // Beyond the bound the oldest range is forgotten: an export
                // would then send its tokens back as this replica's own.
                while w.imported.len() > max {
                    w.imported.pop_front();
                }
            }
        }
        self.count_bookkeeping(&w);
    }

    /// The continuations of the most recent occurrences (newest first, at
    /// most 8) of `context`, whose length must be one of recall's orders (1,
    /// 2, 3, 4, 6, 8, 12, 16; any other gives nothing). Lock-free, like a
    /// draft: for introspection and tests.
    pub fn followers(&self, context: &[Token]) -> Vec<Token> {
        let Some(o) = ORDERS.iter().position(|&k| k == context.len()) else {
            return Vec::new();
        };
        let mut rolling = [0; K];
        let n = context.len() as u64;
        Hasher::new().roll(&mut rolling, 0, n, |j| context[ix(j)]);
        let mut snapshot = self.snapshot();
        let view = self.view(&mut snapshot);
        let mut out = Vec::new();
        super::index::occurrences(&view, o, tag_of(rolling[o]), |e| {
            out.push(view.token(e));
            out.len() < 8
        });
        out
    }

    pub(super) fn snapshot(&self) -> Snapshot {
        Snapshot {
            generation: self.generation.load(Ordering::Acquire),
            tables: read_arc(&self.tables),
        }
    }

    /// The view for one draft call, refreshing `snapshot` if the tables moved.
    pub(super) fn view<'a>(&self, snapshot: &'a mut Snapshot) -> View<'a> {
        // The end first: the tables it needs were published before it.
        let end = self.end.load(Ordering::Acquire);
        let floor = self.floor.load(Ordering::Acquire);
        let generation = self.generation.load(Ordering::Acquire);
        if generation != snapshot.generation {
            *snapshot = self.snapshot();
        }
        View {
            tables: &snapshot.tables,
            end,
            floor: floor.min(end),
            mask: self.capacity - 1,
        }
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
    /// Returns the logical position of the first token appended.
    pub fn append(&self, tokens: &[Token]) -> u64 {
        self.append_after(&[], tokens)
    }

    /// Appends `tokens` that continue `context` (the tokens before them in
    /// their request, at most the longest order counts): the contexts that
    /// reach back into `context` are indexed too. This is how a request in
    /// flight publishes its tokens piece by piece.
    pub fn append_after(&self, context: &[Token], tokens: &[Token]) -> u64 {
        if tokens.is_empty() {
            return self.end.load(Ordering::Acquire);
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
    ) -> Option<std::ops::Range<u64>> {
        let to = to.min(own.end());
        let from = from.max(own.floor()).max(to.saturating_sub(self.capacity));
        if from >= to {
            let end = self.end.load(Ordering::Acquire);
            return Some(end..end);
        }
        let before = from - (from - own.floor()).min(ORDERS[K - 1] as u64);
        let held = own.tokens_from(before);
        let held = &held[..held.len().min(ix(to - before))];
        let (context, tokens) = held.split_at(ix(from - before));
        let mut w = if wait {
            self.writer()
        } else {
            try_lock(&self.writer)?
        };
        if !wait && self.runs_must_grow_far(&w) {
            return None;
        }
        let start = self.append_locked(&mut w, context, tokens, Some((own, from)), wait);
        Some(start..start + tokens.len() as u64)
    }

    /// Whether one more run needs the runs' deque to grow past
    /// [`IN_FLIGHT_RUNS`]: a copy of more than 320 KiB, which an append that
    /// may wait (a request's end) makes rather than a draft call.
    fn runs_must_grow_far(&self, w: &Writer) -> bool {
        w.runs.len() == w.runs.capacity()
            && w.runs.len() >= IN_FLIGHT_RUNS
            && w.runs.len() <= self.max_runs()
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
        let waited = u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.waits[0].fetch_add(1, Ordering::Relaxed);
        self.waits[1].fetch_add(waited, Ordering::Relaxed);
        self.waits[2].fetch_max(waited, Ordering::Relaxed);
        w
    }

    /// How often and how long appends waited for another writer.
    pub(crate) fn waits(&self) -> Waits {
        Waits {
            count: self.waits[0].load(Ordering::Relaxed),
            total_ns: self.waits[1].load(Ordering::Relaxed),
            longest_ns: self.waits[2].load(Ordering::Relaxed),
        }
    }

    /// Counts a request whose end was published.
    pub(crate) fn count_request(&self) {
        self.requests.fetch_add(1, Ordering::Relaxed);
    }

    /// Requests whose end was published.
    pub(crate) fn requests(&self) -> u64 {
        self.requests.load(Ordering::Relaxed)
    }

    /// Holds the learned tables' lock, as another drafter's sync would.
    #[cfg(all(test, not(loom)))]
    pub(super) fn hold_learned(&self) -> crate::sync::MutexGuard<'_, super::Learned> {
        lock(&self.learned)
    }

    /// Runs held and the room their deque has for them.
    #[cfg(all(test, not(loom)))]
    pub(super) fn runs_room(&self) -> (usize, usize) {
        let w = lock(&self.writer);
        (w.runs.len(), w.runs.capacity())
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
        let tokens = &tokens[tokens.len().saturating_sub(ix(self.capacity))..];
        let start = self.end.load(Ordering::Relaxed);
        let context = &context[context.len().saturating_sub(ORDERS[K - 1])..];
        let new_end = start + tokens.len() as u64;
        // Raise the floor before any slot below it is reused.
        if new_end > self.capacity {
            self.floor.store(new_end - self.capacity, Ordering::Release);
        }
        let tables = self.ensure(new_end, may_grow);
        let max = self.max_runs();
        let run = Run {
            start,
            context: RunContext::new(context),
        };
        push_within(&mut w.runs, run, max + 1);
        let floor = new_end.saturating_sub(self.capacity);
        while w.runs.len() > 1 && w.runs[1].start <= floor {
            w.runs.pop_front();
        }
        // Beyond the bound the oldest run absorbs the next: the index is
        // unchanged; a save or an export then gives the second's first
        // tokens the first's last ones as their context.
        while w.runs.len() > max {
            w.runs.remove(1);
        }
        self.count_bookkeeping(w);
        // The context's hashes, as if it stood before `start`.
        w.run = 0;
        let virtual_start = start.wrapping_sub(context.len() as u64);
        for i in 1..=context.len() {
            w.run += 1;
            let Writer {
                hasher, rolling, ..
            } = &mut *w;
            hasher.roll(rolling, 0, i as u64, |j| context[ix(j)]);
        }
        match own {
            // A copy of the own index: its tags (`tokens` is its tail from
            // `first`, so nothing was cut above).
            Some((own, first)) => {
                for ((p, q), &t) in (start..).zip(first..).zip(tokens) {
                    self.write_tagged(&tables, p, t, own, q);
                }
            }
            None => {
                for (p, &t) in (start..).zip(tokens) {
                    self.write(&tables, w, p, t, (virtual_start, context));
                }
            }
        }
        self.end.store(new_end, Ordering::Release);
        start
    }

    /// Chunks for every position below `new_end` and buckets for its load,
    /// published before any end that needs them.
    fn ensure(&self, new_end: u64, may_grow: bool) -> Arc<Tables> {
        let tables = read_arc(&self.tables);
        let held = new_end.min(self.capacity);
        let chunks = ix(held.div_ceil(CHUNK));
        let max_bits = (self.capacity / 2).trailing_zeros().max(MIN_BITS);
        let bits = if may_grow && held > (MAX_LOAD as u64) << tables.bits {
            (held.next_power_of_two() / 2)
                .trailing_zeros()
                .clamp(MIN_BITS, max_bits)
        } else {
            tables.bits
        };
        if chunks <= tables.chunks.len() && bits == tables.bits {
            return tables;
        }
        let mut next = Tables {
            bits,
            heads: std::sync::Arc::clone(&tables.heads),
            chunks: tables.chunks.clone(),
        };
        while next.chunks.len() < chunks {
            next.chunks.push(Arc::new(Chunk::new()));
        }
        if bits != tables.bits {
            next.heads = atomics32(K << bits);
            self.rechain(&next);
        }
        let next = Arc::new(next);
        write_arc(&self.tables, Arc::clone(&next));
        self.generation.fetch_add(1, Ordering::Release);
        self.table_bytes
            .store(next.bytes() as u64, Ordering::Relaxed);
        self.report();
        next
    }

    /// Re-chains every held context into `next`'s buckets from its stored
    /// tag. Readers on the old tables may miss entries meanwhile (each new
    /// chain is a subset of an old one): never more.
    fn rechain(&self, next: &Tables) {
        let view = View {
            tables: next,
            end: self.end.load(Ordering::Relaxed),
            floor: self.floor.load(Ordering::Relaxed),
            mask: self.capacity - 1,
        };
        for e in view.floor..view.end {
            let Some((chunk, at)) = view.cell(e) else {
                continue;
            };
            for o in 0..K {
                let cell = &chunk.links[at * K + o];
                let link = cell.load(Ordering::Relaxed);
                if link == 0 {
                    continue;
                }
                next.chain_front(o, low32(link >> 32), e, cell, Ordering::Relaxed);
            }
        }
    }

    /// Writes the token at logical position `p` and indexes the contexts of
    /// each order `o` (of `k` tokens) ending at `p`, whose continuation is
    /// this token, under `tag(o, k)`; `None`: not indexed (a context across
    /// a run's boundary). A context is indexed once its continuation is
    /// held, so no occurrence ever continues into another request's run.
    fn put(&self, tables: &Tables, p: u64, t: Token, tag: impl Fn(usize, u64) -> Option<u32>) {
        let view = self.writing(tables, p);
        let Some((chunk, at)) = view.cell(p) else {
            return;
        };
        chunk.tokens[at].store(t, Ordering::Relaxed);
        for (o, &k) in ORDERS.iter().enumerate() {
            let cell = &chunk.links[at * K + o];
            match tag(o, k as u64) {
                // The link is visible to whoever sees the head.
                Some(tag) => tables.chain_front(o, tag, p, cell, Ordering::Release),
                None => cell.store(0, Ordering::Relaxed),
            }
        }
    }

    /// The writer's view of `tables` while it writes position `p`.
    fn writing<'t>(&self, tables: &'t Tables, p: u64) -> View<'t> {
        View {
            tables,
            end: p + 1,
            floor: 0,
            mask: self.capacity - 1,
        }
    }

    /// [`put`](RecallMemory::put) for a copy of the own index's token at
    /// `q`, with the tags the own index stored: for the contexts it holds
    /// whole (`q - floor >= k`; the context a publication passes reaches
    /// back as far, so the hashed path indexes the same).
    fn write_tagged(&self, tables: &Tables, p: u64, t: Token, own: &SeqIndex, q: u64) {
        let held = q - own.floor();
        let tags = own.tags_before(q);
        self.put(tables, p, t, |o, k| {
            tags.filter(|_| held >= k).map(|tags| tags[o])
        });
    }

    /// [`put`](RecallMemory::put) with the tags hashed from the tokens, then
    /// rolls the hashes over the token for the contexts ending after it.
    fn write(&self, tables: &Tables, w: &mut Writer, p: u64, t: Token, context: (u64, &[Token])) {
        self.put(tables, p, t, |o, k| {
            (w.run >= k).then(|| tag_of(w.rolling[o]))
        });
        let view = self.writing(tables, p);
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
                None => view.token(j),
            }
        });
    }
}

impl View<'_> {
    /// The chunk and offset of logical position `p`.
    #[inline]
    fn cell(&self, p: u64) -> Option<(&Chunk, usize)> {
        let slot = p & self.mask;
        let chunk = self.tables.chunks.get((slot >> CHUNK_BITS) as usize)?;
        Some((chunk, (slot & (CHUNK - 1)) as usize))
    }

    /// Whether nothing is held.
    #[inline]
    pub(super) fn is_empty(&self) -> bool {
        self.end == self.floor
    }

    /// Calls `found(p)` for every position `p` in `from..to` that holds
    /// `token`, in order: a chunk's run of tokens at a time, not a ring
    /// lookup per position (recall's locality scan of a memory anchor's
    /// window was a tenth of a chat replay with a drafter per request).
    pub(super) fn each_position_of(
        &self,
        from: u64,
        to: u64,
        token: Token,
        mut found: impl FnMut(u64),
    ) {
        let mut p = from;
        while p < to {
            let Some((chunk, at)) = self.cell(p) else {
                return;
            };
            let n = (ix(CHUNK) - at).min(ix(to - p));
            for (i, t) in chunk.tokens[at..at + n].iter().enumerate() {
                if t.load(Ordering::Relaxed) == token {
                    found(p + i as u64);
                }
            }
            p += n as u64;
        }
    }

    /// A 32-bit end position as a logical one, if it can still be held.
    #[inline]
    fn widen(&self, e: u32) -> Option<u64> {
        if e == 0 {
            return None;
        }
        // Ahead of the end: written by a batch not yet published (its links
        // are, its tokens are not used). Capacities stay below 2^30, so
        // ahead and behind cannot be confused.
        let ahead = u64::from(e.wrapping_sub(low32(self.end)));
        if ahead <= self.mask + 1 {
            return Some(self.end + ahead);
        }
        let back = u64::from(low32(self.end).wrapping_sub(e));
        (back <= self.mask + 1 && back <= self.end).then(|| self.end - back)
    }
}

impl Chains for View<'_> {
    #[inline]
    fn end(&self) -> u64 {
        self.end
    }
    #[inline]
    fn floor(&self) -> u64 {
        self.floor
    }
    #[inline]
    fn token(&self, p: u64) -> Token {
        self.cell(p)
            .map_or(Token::MAX, |(c, at)| c.tokens[at].load(Ordering::Relaxed))
    }
    #[inline]
    fn first(&self, o: usize, tag: u32) -> Option<u64> {
        self.widen(self.tables.head(o, tag).load(Ordering::Acquire))
    }
    #[inline]
    fn link(&self, e: u64, o: usize) -> (u32, Option<u64>) {
        // The links of the contexts ending at `e` sit beside their
        // continuation, the token at `e`.
        let Some((chunk, at)) = self.cell(e) else {
            return (0, None);
        };
        let link = chunk.links[at * K + o].load(Ordering::Relaxed);
        (low32(link >> 32), self.widen(low32(link)))
    }
}
