//! Chained context indexes: for each order, hashed contexts chained newest
//! first, so that the occurrences of a context are one bucket walk away.
//!
//! Two stores implement [`Chains`]: the per-sequence [`SeqIndex`] (plain
//! vectors, one owner) and the engine-wide [`Memory`](super::memory) (atomic
//! cells, many readers, one writer at a time). The walks over them are
//! written once, here.

pub(super) use crate::index::hash::tag_of;
use crate::index::hash::{Poly, FACTOR};
use crate::index::Roomy;
use crate::int::{ix, ix32, small, wide};
use crate::token::Token;

/// Context orders indexed, longest last.
pub(super) const ORDERS: [usize; 8] = [1, 2, 3, 4, 6, 8, 12, 16];
/// Number of orders.
pub(super) const K: usize = ORDERS.len();
/// Contexts per bucket before the buckets grow. Small bucket arrays stay in
/// cache, which matters more than the few extra chain steps (tags filter
/// them): the `draft/recall` benches at 128k were fastest at four (two and
/// one bucket per context slower, eight and sixteen the same within noise;
/// DESIGN.md, "Why each index exists"). Which contexts share a bucket
/// decides what a walk finds, so it moves drafts too: BENCHMARKS.md,
/// "Sensitivity of recall's tuned constants".
pub(super) const MAX_LOAD: usize = 4;
/// Smallest bucket array, of a sequence's own index and of the engine-wide
/// memory alike: 2^8 buckets per order (8 KiB in all), grown with what they
/// hold, so that a drafter made per request, or a scope's new memory, does
/// not start by filling 128 KiB (its cost: DESIGN.md, "Tuned constants").
/// Its sensitivity (replays at half and double, today's drafts):
/// BENCHMARKS.md, "Sensitivity of recall's tuned constants".
pub(super) const MIN_BITS: u32 = if cfg!(loom) { 1 } else { 8 };
/// Heap bytes per indexed token at most: the token (4), one 8-byte link per
/// order (64) and up to one bucket per two contexts of each order (16).
/// Budgets in bytes are turned into token capacities with it.
pub(super) const BYTES_PER_TOKEN: usize = 4 + 8 * K + 2 * K;
/// Longest match length measured backwards from a candidate position: the
/// copy pointer takes over from 24, so longer matches only cost comparisons.
pub(super) const MAX_MATCH: usize = 64;
/// Chain entries examined per probe: four per occurrence wanted.
pub(super) const STEPS: usize = 32;

/// The rolling hashes of every order.
#[derive(Clone, Debug)]
pub(super) struct Hasher {
    polys: [Poly; K],
}

impl Hasher {
    pub(super) fn new() -> Hasher {
        Hasher {
            polys: ORDERS.map(|k| Poly::new(FACTOR, k)),
        }
    }

    /// Updates `rolling` (the hashes of the contexts ending before position
    /// `len - 1`) for the token at `len - 1`; `at(j)` reads position `j`.
    /// Orders longer than `len - floor` keep a stale value that is never used.
    #[inline]
    pub(super) fn roll(
        &self,
        rolling: &mut [u64; K],
        floor: u64,
        len: u64,
        at: impl Fn(u64) -> Token,
    ) {
        // Positions may wrap below 0 (the context of the engine-wide
        // memory's first run stands before it): modular arithmetic, and
        // `at` maps them.
        let have = len.wrapping_sub(floor);
        let t = at(len.wrapping_sub(1));
        for (o, &k) in ORDERS.iter().enumerate() {
            let k = wide(k);
            if have > k {
                rolling[o] = self.polys[o].roll(rolling[o], at(len.wrapping_sub(k + 1)), t);
            } else if have == k {
                let first = len.wrapping_sub(k);
                rolling[o] = self.polys[o].hash((0..k).map(|i| at(first.wrapping_add(i))));
            }
        }
    }
}

/// The tokens one roll of every order reads: the longest order's window
/// and the token before it.
const WINDOW: usize = ORDERS[K - 1] + 1;

impl Hasher {
    /// [`roll`](Hasher::roll) for a token with at least `WINDOW - 1` tokens
    /// before it: `window` ends with the new token.
    #[inline]
    pub(super) fn roll_window(&self, rolling: &mut [u64; K], window: &[Token; WINDOW]) {
        let t = window[WINDOW - 1];
        for (o, &k) in ORDERS.iter().enumerate() {
            rolling[o] = self.polys[o].roll(rolling[o], window[WINDOW - 1 - k], t);
        }
    }
}

/// Read access to a chained context index over logical positions. A context
/// of order `k` "ends at" `e` when it is `tokens[e-k..e]`; its continuation
/// is `tokens[e]`.
pub(super) trait Chains {
    /// One past the newest token.
    fn end(&self) -> u64;
    /// The oldest token still held.
    fn floor(&self) -> u64;
    /// The token at `p` (`floor <= p < end`).
    fn token(&self, p: u64) -> Token;
    /// The newest end position in the bucket of `tag` for order `o`.
    fn first(&self, o: usize, tag: u32) -> Option<u64>;
    /// The tag stored at end position `e` for order `o`, and the previous
    /// end position in its bucket.
    fn link(&self, e: u64, o: usize) -> (u32, Option<u64>);
}

/// Calls `found(p)` for the occurrences of the order-`o` context tagged
/// `tag`, newest first, whose continuation `p` is held, walking at most
/// [`STEPS`] chain entries; stops early when `found` returns false.
#[inline]
pub(super) fn occurrences<C: Chains>(
    c: &C,
    o: usize,
    tag: u32,
    mut found: impl FnMut(u64) -> bool,
) {
    let k = wide(ORDERS[o]);
    let (end, floor) = (c.end(), c.floor());
    let mut next = c.first(o, tag);
    for _ in 0..STEPS {
        let Some(e) = next else { break };
        if e < floor + k {
            // Forgotten, and so is everything older.
            break;
        }
        let (entry_tag, previous) = c.link(e, o);
        if e < end && entry_tag == tag && !found(e) {
            break;
        }
        // Chains run strictly backwards; anything else is a slot the
        // engine-wide memory reused while this walk ran.
        next = previous.filter(|&q| q < e);
    }
}

/// How many tokens before `p` in `c` equal the last tokens of the virtual
/// sequence `v`, which holds positions `vfloor..vlen` (capped at
/// [`MAX_MATCH`]). `itself` says that `v`'s positions are `c`'s own, so that
/// `p == vlen` matches nothing.
#[inline]
pub(super) fn match_len<C: Chains>(
    c: &C,
    p: u64,
    (vlen, vfloor): (u64, u64),
    itself: bool,
    v: impl Fn(u64) -> Token,
) -> usize {
    if itself && p == vlen {
        return 0;
    }
    let room = ix((p - c.floor().min(p)).min(vlen - vfloor.min(vlen)));
    let limit = MAX_MATCH.min(room);
    let mut m = 0;
    while m < limit && c.token(p - 1 - wide(m)) == v(vlen - 1 - wide(m)) {
        m += 1;
    }
    m
}

/// The per-sequence index: the current session's text (the new part of each
/// prompt and what the target generated), at most `capacity` tokens. When it
/// is full, the oldest half is forgotten and the rest re-indexed (amortized
/// O(1) a token), so the request in flight always keeps its recent history.
#[derive(Clone, Debug)]
pub(super) struct SeqIndex {
    /// Logical position of `stream[0]`.
    base: u64,
    stream: Roomy<Token>,
    /// For each end position `e` (indexed `e - base - 1`), per order, the
    /// context's tag and the previous end position in its bucket (relative
    /// to `base`, `u32::MAX`: none), side by side: a chain walk reads both
    /// at once, and adding a token writes one 64-byte entry.
    links: Roomy<[(u32, u32); K]>,
    heads: Vec<Vec<u32>>,
    bits: u32,
    /// The hashes of the contexts ending at the stream's end.
    rolling: [u64; K],
    capacity: usize,
}

const NONE: u32 = u32::MAX;

impl SeqIndex {
    pub(super) fn new(capacity: usize) -> SeqIndex {
        SeqIndex {
            base: 0,
            stream: Roomy::default(),
            links: Roomy::default(),
            heads: vec![vec![NONE; 1 << MIN_BITS]; K],
            bits: MIN_BITS,
            rolling: [0; K],
            capacity: capacity.max(2 * ORDERS[K - 1]),
        }
    }

    /// The hashes of the contexts ending at the end.
    pub(super) fn rolling(&self) -> [u64; K] {
        self.rolling
    }

    /// Heap bytes held.
    pub(super) fn heap_bytes(&self) -> usize {
        4 * self.stream.capacity()
            + 8 * K * self.links.capacity()
            + 4 * self.heads.iter().map(Vec::capacity).sum::<usize>()
    }

    /// The tokens held, oldest first, from logical position `from`.
    pub(super) fn tokens_from(&self, from: u64) -> &[Token] {
        let at = ix(from.saturating_sub(self.base).min(wide(self.stream.len())));
        &self.stream[at..]
    }

    /// The tags of the contexts that the token at logical position `q`
    /// continues, per order (meaningful for the orders whose context is
    /// held whole, `q - floor >= k`); `None` outside `floor + 1..end`.
    pub(super) fn tags_before(&self, q: u64) -> Option<[u32; K]> {
        let entry = self.links.get(ix(q.checked_sub(self.base + 1)?))?;
        Some(entry.map(|(tag, _)| tag))
    }

    /// Forgets everything; logical positions go on from where they were.
    pub(super) fn clear(&mut self) {
        self.base += wide(self.stream.len());
        self.stream.clear();
        self.links.clear();
        for heads in &mut self.heads {
            heads.fill(NONE);
        }
    }

    fn bucket(&self, tag: u32) -> usize {
        ix32(tag >> (32 - self.bits))
    }

    /// Appends `tokens` and indexes the contexts ending after each.
    pub(super) fn extend(&mut self, hasher: &Hasher, tokens: &[Token]) {
        let mut tokens = tokens;
        if tokens.len() > self.capacity {
            // A prompt larger than the budget: its most recent part.
            self.clear();
            tokens = &tokens[tokens.len() - self.capacity..];
        }
        if self.stream.len() + tokens.len() > self.capacity {
            self.forget_oldest_half(hasher, tokens.len());
        }
        let n = tokens.len();
        // Size the buckets for a long block (a prompt) before indexing it
        // rather than re-chaining along the way.
        self.grow(self.stream.len() + n);
        // And the stream and its links, with room for what a prompt is
        // followed by: a doubling right after a long prompt would copy the
        // whole index (8 MiB at 128k tokens) in the middle of generation
        // (measured over the first 8k tokens drafted after a fresh 128k
        // prompt: ~10 us a call without the room, ~6.5-7 with it).
        if self.links.capacity() - self.links.len() < n {
            let len = self.links.len();
            let room = (n + (len + n) / 4).min(self.capacity.saturating_sub(len).max(n));
            self.links.reserve(room);
            self.stream.reserve(room);
        }
        let start = self.stream.len();
        self.stream.extend_from_slice(tokens);
        // The buckets were sized for the whole block above: no growth inside.
        self.index_from(hasher, start);
    }

    /// Indexes the contexts ending after each token of the stream from
    /// `start` on (the tokens are in the stream already; the buckets are
    /// sized for them).
    fn index_from(&mut self, hasher: &Hasher, start: usize) {
        let shift = 32 - self.bits;
        let stream = &self.stream[..];
        for len in start + 1..=stream.len() {
            let window = len
                .checked_sub(WINDOW)
                .and_then(|from| <&[Token; WINDOW]>::try_from(&stream[from..len]).ok());
            match window {
                // The steady state: every order rolls, from one fixed window.
                Some(window) => hasher.roll_window(&mut self.rolling, window),
                None => hasher.roll(&mut self.rolling, 0, wide(len), |j| stream[ix(j)]),
            }
            let mut entry = [(0, NONE); K];
            let e = small(len);
            for (o, (&k, heads)) in ORDERS.iter().zip(self.heads.iter_mut()).enumerate() {
                if len < k {
                    continue;
                }
                let tag = tag_of(self.rolling[o]);
                if let Some(head) = heads.get_mut(ix32(tag >> shift)) {
                    entry[o] = (tag, *head);
                    *head = e;
                }
            }
            self.links.push(entry);
        }
    }

    /// Keeps the newest tokens so that `incoming` more fit, re-indexed.
    #[inline(never)]
    fn forget_oldest_half(&mut self, hasher: &Hasher, incoming: usize) {
        let keep = (self.capacity / 2).min(self.capacity - incoming);
        let kept: Vec<Token> = self.stream[self.stream.len() - keep..].to_vec();
        self.clear();
        self.base -= wide(keep);
        self.grow(kept.len());
        self.stream.extend_from_slice(&kept);
        self.index_from(hasher, 0);
    }

    /// Past [`MAX_LOAD`] contexts a bucket, grows the buckets to one per two
    /// contexts of `len` tokens, rounded up, and re-chains every context
    /// from its stored tag.
    #[inline(never)]
    fn grow(&mut self, len: usize) {
        if len <= MAX_LOAD * self.heads[0].len() {
            return;
        }
        self.bits = (len.next_power_of_two() / 2)
            .trailing_zeros()
            .clamp(MIN_BITS, 31);
        let size = 1usize << self.bits;
        for heads in &mut self.heads {
            heads.clear();
            heads.resize(size, NONE);
        }
        let shift = 32 - self.bits;
        for (e, entry) in (1..).zip(self.links.iter_mut()) {
            for (o, &k) in ORDERS.iter().enumerate() {
                if e >= k {
                    let b = ix32(entry[o].0 >> shift);
                    entry[o].1 = self.heads[o][b];
                    self.heads[o][b] = small(e);
                }
            }
        }
    }
}

impl Chains for SeqIndex {
    #[inline]
    fn end(&self) -> u64 {
        self.base + wide(self.stream.len())
    }
    #[inline]
    fn floor(&self) -> u64 {
        self.base
    }
    #[inline]
    fn token(&self, p: u64) -> Token {
        self.stream[ix(p - self.base)]
    }
    #[inline]
    fn first(&self, o: usize, tag: u32) -> Option<u64> {
        let e = self.heads[o][self.bucket(tag)];
        (e != NONE).then(|| self.base + u64::from(e))
    }
    #[inline]
    fn link(&self, e: u64, o: usize) -> (u32, Option<u64>) {
        let (tag, previous) = self.links[ix(e - self.base - 1)][o];
        (
            tag,
            (previous != NONE).then(|| self.base + u64::from(previous)),
        )
    }
}
