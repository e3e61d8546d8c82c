//! The ring of recall's engine-wide memory and its publication protocol:
//! tokens and context links in chunks of atomic cells, bucket heads, and the
//! published `end` and `floor` that many threads read while one writer at a
//! time appends.
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
//! position without its token and links; `loom_tests.rs` in recall's folder
//! does the same for a publication from a sequence's own index.

use crate::index::{each_position_in, low32};
use crate::sync::{read_arc, write_arc, Arc, AtomicU32, AtomicU64, Ordering, RwLock};
use crate::token::Token;

use crate::int::{ix, wide};

use super::super::chains::{Chains, K, MAX_LOAD, MIN_BITS, ORDERS};

/// Positions per chunk (chunks are allocated as the memory fills).
const CHUNK_BITS: u32 = if cfg!(loom) { 1 } else { 10 };
const CHUNK: u64 = 1 << CHUNK_BITS;
/// The smallest capacity, in tokens.
pub(in super::super) const MIN_CAPACITY: u64 = if cfg!(loom) { 4 } else { 1 << 10 };

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
            links: (0..CHUNK * wide(K)).map(|_| AtomicU64::new(0)).collect(),
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

fn atomics32(n: usize) -> std::sync::Arc<[AtomicU32]> {
    (0..n).map(|_| AtomicU32::new(0)).collect()
}

impl Tables {
    /// The bucket head of contexts tagged `tag` of order `o`.
    fn head(&self, o: usize, tag: u32) -> &AtomicU32 {
        &self.heads[(o << self.bits) | ix(u64::from(tag >> (32 - self.bits)))]
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

    fn bytes(&self) -> usize {
        4 * self.heads.len() + self.chunks.len() * ix(CHUNK) * (4 + 8 * K)
    }
}

/// The ring: logical positions `floor..end` held in `capacity` slots
/// (a power of two), and the tables that index them.
#[derive(Debug)]
pub(super) struct Ring {
    capacity: u64,
    /// Published end (logical position one past the newest token).
    end: AtomicU64,
    /// The oldest logical position still held.
    floor: AtomicU64,
    generation: AtomicU64,
    tables: RwLock<Arc<Tables>>,
    /// Heap bytes of the current tables (written where the writer makes
    /// new tables, read without a lock).
    table_bytes: AtomicU64,
}

/// A reader's cached tables, refreshed when the generation moves.
#[derive(Clone, Debug)]
pub(in super::super) struct Snapshot {
    tables: Arc<Tables>,
    generation: u64,
}

/// A reader's view for one draft call.
#[derive(Clone, Copy)]
pub(in super::super) struct View<'a> {
    tables: &'a Tables,
    end: u64,
    floor: u64,
    mask: u64,
}

/// A batch the writer is about to publish: its first position, the end it
/// publishes, and the tables its positions are written into.
pub(super) struct Batch {
    pub(super) start: u64,
    pub(super) end: u64,
    pub(super) tables: Arc<Tables>,
    /// Whether new tables were made for it (the heap grew).
    pub(super) grew: bool,
}

impl Ring {
    /// An empty ring of `capacity` slots (a power of two).
    pub(super) fn new(capacity: u64) -> Ring {
        let tables = Tables {
            bits: MIN_BITS,
            heads: atomics32(K << MIN_BITS),
            chunks: Vec::new(),
        };
        let table_bytes = AtomicU64::new(wide(tables.bytes()));
        Ring {
            capacity,
            end: AtomicU64::new(0),
            floor: AtomicU64::new(0),
            generation: AtomicU64::new(0),
            tables: RwLock::new(Arc::new(tables)),
            table_bytes,
        }
    }

    pub(super) fn capacity(&self) -> u64 {
        self.capacity
    }

    /// The published end.
    pub(super) fn end(&self) -> u64 {
        self.end.load(Ordering::Acquire)
    }

    /// The published floor.
    pub(super) fn floor(&self) -> u64 {
        self.floor.load(Ordering::Acquire)
    }

    /// The end and floor as the writer (the only one storing them) knows
    /// them.
    pub(super) fn written(&self) -> (u64, u64) {
        (
            self.end.load(Ordering::Relaxed),
            self.floor.load(Ordering::Relaxed),
        )
    }

    /// Heap bytes of the tables.
    pub(super) fn heap_bytes(&self) -> usize {
        ix(self.table_bytes.load(Ordering::Relaxed))
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

    /// Starts a batch of `len` tokens (writer only): raises the floor before
    /// any slot below it is reused, and makes the tables the batch needs
    /// (buckets grow only if `may_grow`).
    pub(super) fn begin(&self, len: u64) -> Batch {
        let start = self.end.load(Ordering::Relaxed);
        let end = start + len;
        if end > self.capacity {
            self.floor.store(end - self.capacity, Ordering::Release);
        }
        Batch {
            start,
            end,
            tables: read_arc(&self.tables),
            grew: false,
        }
    }

    /// Makes `batch`'s tables: chunks for every position below its end and
    /// buckets for its load, published before any end that needs them.
    pub(super) fn ensure(&self, batch: &mut Batch, may_grow: bool) {
        let tables = &batch.tables;
        let held = batch.end.min(self.capacity);
        let chunks = ix(held.div_ceil(CHUNK));
        let max_bits = (self.capacity / 2).trailing_zeros().max(MIN_BITS);
        let bits = if may_grow && held > wide(MAX_LOAD) << tables.bits {
            (held.next_power_of_two() / 2)
                .trailing_zeros()
                .clamp(MIN_BITS, max_bits)
        } else {
            tables.bits
        };
        if chunks <= tables.chunks.len() && bits == tables.bits {
            return;
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
            .store(wide(next.bytes()), Ordering::Relaxed);
        batch.tables = next;
        batch.grew = true;
    }

    /// Publishes `batch`: readers see its tokens from now on.
    pub(super) fn publish(&self, batch: &Batch) {
        self.end.store(batch.end, Ordering::Release);
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
    pub(super) fn put(
        &self,
        tables: &Tables,
        p: u64,
        t: Token,
        tag: impl Fn(usize, u64) -> Option<u32>,
    ) {
        let view = self.writing(tables, p);
        let Some((chunk, at)) = view.cell(p) else {
            return;
        };
        chunk.tokens[at].store(t, Ordering::Relaxed);
        for (o, &k) in ORDERS.iter().enumerate() {
            let cell = &chunk.links[at * K + o];
            match tag(o, wide(k)) {
                // The link is visible to whoever sees the head.
                Some(tag) => tables.chain_front(o, tag, p, cell, Ordering::Release),
                None => cell.store(0, Ordering::Relaxed),
            }
        }
    }

    /// The writer's view of `tables` while it writes position `p`.
    pub(super) fn writing<'t>(&self, tables: &'t Tables, p: u64) -> View<'t> {
        View {
            tables,
            end: p + 1,
            floor: 0,
            mask: self.capacity - 1,
        }
    }
}

impl View<'_> {
    /// The chunk and offset of logical position `p`.
    #[inline]
    fn cell(&self, p: u64) -> Option<(&Chunk, usize)> {
        let slot = p & self.mask;
        let chunk = self.tables.chunks.get(ix(slot >> CHUNK_BITS))?;
        Some((chunk, ix(slot & (CHUNK - 1))))
    }

    /// Whether nothing is held.
    #[inline]
    pub(in super::super) fn is_empty(&self) -> bool {
        self.end == self.floor
    }

    /// Calls `found(p)` for every position `p` in `from..to` that holds
    /// `token`, in order: a chunk's run of tokens at a time, not a ring
    /// lookup per position (recall's locality scan of a memory anchor's
    /// window).
    pub(in super::super) fn each_position_of(
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
            let cells = &chunk.tokens[at..at + n];
            each_position_in(
                cells,
                |t| t.load(Ordering::Relaxed),
                token,
                |i| {
                    found(p + wide(i));
                },
            );
            p += wide(n);
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
