//! ngram-mod: one fixed-size hash pool from n-gram to next token, shared by
//! every sequence of an engine, drafting token by token.

use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;

use crate::drafter::{DraftLimits, Drafter};
use crate::index::hash::{Poly, NGRAM_MOD_LCG as LCG_FACTOR};
use crate::index::low32;
use crate::int::{float, high32, wide};
use crate::limits::check_pool_size;
use crate::token::Token;
use crate::Error;

/// The empty-cell marker: llama.cpp's `EMPTY = -1` as a `u32`.
///
/// A token id equal to `EMPTY` (`u32::MAX`, i.e. `-1` as `i32`) can never be
/// stored: adding an n-gram whose next token is `EMPTY` is skipped.
pub(crate) const EMPTY: Token = crate::index::NONE;

/// Occupancy above which `begin` clears the pool (llama.cpp's 0.25).
const OCCUPANCY_LIMIT: f64 = 0.25;
/// New history n-grams enter the pool once more than this many have accumulated.
const CHUNK: usize = 32;
/// Consecutive low-acceptance drafts that clear the pool.
const LOW_STREAK: u32 = 3;

/// The ngram-mod pool: `size` cells mapping the hash of an n-gram to the token
/// that last followed it, shared by every ngram-mod drafter of an engine.
///
/// `Send + Sync`: a [`Shared`](crate::Shared) holds one, which every
/// ngram-mod drafter built on it with
/// [`Speculative::with_shared`](crate::Speculative::with_shared) uses; a
/// custom chain shares one through an [`Arc`] ([`NgramMod::new`]). Cells are relaxed
/// atomics and no lock is taken: a race between two sequences can only lose or
/// swap an entry, which costs draft quality, never correctness of the engine's
/// output (every draft is verified). Used from one thread, it behaves exactly
/// like llama.cpp's pool. A token id `u32::MAX` (llama.cpp's empty-cell
/// marker, `-1` as `i32`) is never stored.
///
/// ```
/// use std::sync::Arc;
/// use selfspec::strategies::{NgramMod, NgramPool};
/// use selfspec::{DraftLimits, Drafter};
///
/// let pool = Arc::new(NgramPool::new(1 << 16)?);
/// let mut a = NgramMod::new(3, Arc::clone(&pool));
/// let mut b = NgramMod::new(3, Arc::clone(&pool));
/// let text: Vec<u32> = (0..200).map(|i| i % 40).collect();
/// a.begin(&text); // learns the n-grams of its history into the pool
/// assert!(pool.used() > 0);
/// // `b` has seen none of it, yet drafts from what `a` learned.
/// b.begin(&text[..10]);
/// let mut draft = Vec::new();
/// b.draft(&text[..10], text[10], DraftLimits::default(), &mut draft);
/// assert_eq!(draft.first(), Some(&text[11]));
/// # Ok::<(), selfspec::Error>(())
/// ```
pub struct NgramPool {
    /// Per cell: the generation that wrote it (high half) and the token (low
    /// half). A cell of an older generation reads as empty, so a reset is a
    /// generation bump, O(1), instead of a 16 MiB fill; nothing is ever cleared
    /// lazily either. The price is 8 bytes a cell instead of 4; the cache
    /// footprint is the same (one line per cell touched).
    cells: Box<[AtomicU64]>,
    generation: AtomicU32,
    /// `size - 1` when the size is a power of two (a mask instead of a division).
    mask: Option<u64>,
    used: AtomicUsize,
    resets_occupancy: AtomicU64,
    resets_low_acceptance: AtomicU64,
}

impl std::fmt::Debug for NgramPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NgramPool")
            .field("size", &self.size())
            .field("used", &self.used())
            .field("resets_occupancy", &self.resets_occupancy())
            .field("resets_low_acceptance", &self.resets_low_acceptance())
            .finish()
    }
}

impl NgramPool {
    /// A pool of `size` empty cells (8 bytes each).
    ///
    /// Errors when `size` is 0 or above [`MAX_POOL_SIZE`](crate::limits::MAX_POOL_SIZE),
    /// and with [`Error::OutOfMemory`] when the cells cannot be allocated.
    ///
    /// # Errors
    ///
    /// [`Error::OutOfRange`] for a `size` of 0 or above the maximum.
    pub fn new(size: usize) -> Result<NgramPool, Error> {
        check_pool_size("ngram-mod pool", size)?;
        let mut cells = Vec::new();
        cells
            .try_reserve_exact(size)
            .map_err(|_| Error::OutOfMemory {
                what: "ngram-mod pool",
                bytes: size.saturating_mul(std::mem::size_of::<AtomicU64>()),
            })?;
        cells.extend((0..size).map(|_| AtomicU64::new(u64::from(EMPTY))));
        Ok(NgramPool {
            cells: cells.into_boxed_slice(),
            generation: AtomicU32::new(0),
            mask: size.is_power_of_two().then_some(wide(size) - 1),
            used: AtomicUsize::new(0),
            resets_occupancy: AtomicU64::new(0),
            resets_low_acceptance: AtomicU64::new(0),
        })
    }

    /// Number of cells.
    pub fn size(&self) -> usize {
        self.cells.len()
    }

    /// Cells written since the last reset (llama.cpp's `used`).
    pub fn used(&self) -> usize {
        self.used.load(Relaxed)
    }

    /// Bytes held by the cells (8 per cell).
    pub fn size_bytes(&self) -> usize {
        self.cells.len() * std::mem::size_of::<AtomicU64>()
    }

    /// Resets because occupancy passed 0.25 in a `begin`.
    pub fn resets_occupancy(&self) -> u64 {
        self.resets_occupancy.load(Relaxed)
    }

    /// Resets because of three low-acceptance drafts in a row.
    pub fn resets_low_acceptance(&self) -> u64 {
        self.resets_low_acceptance.load(Relaxed)
    }

    /// The cell of an n-gram hash: llama.cpp's `h % size`.
    #[inline(always)]
    fn cell_of(&self, h: u64) -> usize {
        match self.mask {
            Some(mask) => h & mask,
            None => h % wide(self.cells.len()),
        }
        // Below the cell count: it fits (no check is left on 64-bit targets).
        .try_into()
        .unwrap_or(usize::MAX)
    }

    #[inline(always)]
    fn load(&self, cell: usize, generation: u32) -> Token {
        let word = self.cells[cell].load(Relaxed);
        if high32(word) == generation {
            low32(word)
        } else {
            EMPTY
        }
    }

    /// Stores `next`; whether the cell was empty.
    #[inline(always)]
    fn store(&self, cell: usize, next: Token, generation: u32) -> bool {
        let c = &self.cells[cell];
        // A plain load and store, not a swap: racing writers may both count a
        // cell as new, which only makes the occupancy reset come earlier.
        let word = c.load(Relaxed);
        let was_empty = high32(word) != generation || low32(word) == EMPTY;
        c.store((u64::from(generation) << 32) | u64::from(next), Relaxed);
        was_empty
    }

    /// Adds every n-gram of `tokens` whose next token is in `tokens`, rolling
    /// the hash from one window to the next.
    fn add_all(&self, poly: &Poly, tokens: &[Token], n: usize) {
        if tokens.len() <= n {
            return;
        }
        let generation = self.generation.load(Relaxed);
        let mut fresh = 0;
        let mut h = poly.hash(tokens[..n].iter().copied());
        for i in 0..tokens.len() - n {
            if i > 0 {
                h = poly.roll(h, tokens[i - 1], tokens[i + n - 1]);
            }
            let next = tokens[i + n];
            if next != EMPTY {
                fresh += usize::from(self.store(self.cell_of(h), next, generation));
            }
        }
        self.used.fetch_add(fresh, Relaxed);
    }

    /// Empties every cell, in O(1) (a generation bump): public only for the
    /// benches (ngram-mod resets its pool itself, as llama.cpp does).
    #[cfg(feature = "internals")]
    #[doc(hidden)]
    pub fn reset(&self) {
        self.clear();
    }

    /// Empties every cell, in O(1) (a generation bump).
    #[cfg(not(feature = "internals"))]
    pub(crate) fn reset(&self) {
        self.clear();
    }

    fn clear(&self) {
        let old = self.generation.fetch_add(1, Relaxed);
        if old == u32::MAX {
            // The generation wrapped to 0, which old cells may still carry:
            // clear eagerly, once every 2^32 resets.
            for c in self.cells.iter() {
                c.store(u64::from(EMPTY), Relaxed);
            }
        }
        self.used.store(0, Relaxed);
    }

    fn occupancy(&self) -> f64 {
        float(self.used()) / float(self.size())
    }
}

/// llama.cpp's `ngram-mod` drafter: the per-sequence half, over a shared [`NgramPool`].
///
/// `begin` adds every n-gram of the prompt to the pool (and clears the pool
/// when it is more than a quarter full); `draft` adds the history's new n-grams
/// in chunks of 32 and then follows the pool from the key, one token per
/// lookup, for at most `draft_max` tokens; three drafts in a row with less than
/// half accepted clear the pool.
///
/// ```
/// use std::sync::Arc;
/// use selfspec::strategies::{NgramMod, NgramPool};
/// use selfspec::{DraftLimits, Drafter};
///
/// let pool = Arc::new(NgramPool::new(1 << 16)?);
/// let mut ngram_mod = NgramMod::new(2, pool);
/// let prompt = [1, 2, 3, 4, 5, 1, 2];
/// ngram_mod.begin(&prompt);
/// let mut draft = Vec::new();
/// ngram_mod.draft(&prompt, 3, DraftLimits { min: 0, max: 3 }, &mut draft);
/// assert_eq!(draft, [4, 5, 1]);
/// # Ok::<(), selfspec::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct NgramMod {
    n: usize,
    poly: Poly,
    pool: Arc<NgramPool>,
    i_last: usize,
    n_draft_last: usize,
    n_low: u32,
}

impl NgramMod {
    /// A drafter with key size `n` over `pool`.
    ///
    /// Does not validate: `n` = 0 silently never drafts. To check parameters,
    /// use [`Config`](crate::Config) / [`Strategy::validate`](crate::Strategy::validate), which reject `n` outside `1..=MAX_NGRAM`.
    pub fn new(n: usize, pool: Arc<NgramPool>) -> NgramMod {
        NgramMod {
            n,
            poly: Poly::new(LCG_FACTOR, n.max(1)),
            pool,
            i_last: 0,
            n_draft_last: 0,
            n_low: 0,
        }
    }

    /// The shared pool.
    #[must_use]
    pub fn pool(&self) -> &Arc<NgramPool> {
        &self.pool
    }
}

impl Drafter for NgramMod {
    fn name(&self) -> &str {
        "ngram_mod"
    }

    fn begin(&mut self, prompt: &[Token]) {
        self.i_last = 0;
        self.n_draft_last = 0;
        let n = self.n;
        if n == 0 || prompt.len() < n {
            return;
        }
        self.pool.add_all(&self.poly, prompt, n);
        self.i_last = prompt.len() - n;
        if self.pool.occupancy() > OCCUPANCY_LIMIT {
            self.pool.reset();
            self.pool.resets_occupancy.fetch_add(1, Relaxed);
        }
    }

    fn draft(
        &mut self,
        history: &[Token],
        last: Token,
        limits: DraftLimits,
        draft: &mut Vec<Token>,
    ) {
        self.n_draft_last = 0;
        let (n, len) = (self.n, history.len());
        if n == 0 || len < n {
            return;
        }
        // A history cut back without `begin`: resume adding from its end rather
        // than wait for it to regrow past the old mark.
        if self.i_last + n > len {
            self.i_last = len - n;
        }
        if self.i_last + CHUNK < len {
            self.pool.add_all(&self.poly, &history[self.i_last..], n);
            self.i_last = len - n;
        }

        // The key is the last n-1 history tokens and `last`; each drafted token
        // extends the window by one, so the hash rolls instead of being recomputed.
        let head = &history[len - n + 1..];
        let pool = &*self.pool;
        let generation = pool.generation.load(Relaxed);
        let mut h = self
            .poly
            .hash(head.iter().copied().chain(std::iter::once(last)));
        // Window token i: the key's while i < n, then the draft's.
        let base = draft.len();
        let at = |draft: &Vec<Token>, i: usize| match i {
            i if i + 1 < n => head[i],
            i if i + 1 == n => last,
            i => draft[base + i - n],
        };
        for i in 0..limits.max {
            let token = pool.load(pool.cell_of(h), generation);
            if token == EMPTY {
                if i < limits.min {
                    draft.truncate(base);
                    return;
                }
                break;
            }
            draft.push(token);
            h = self.poly.roll(h, at(draft, i), token);
        }
        self.n_draft_last = draft.len() - base;
    }

    fn accept(&mut self, n_accepted: usize) {
        if self.n_draft_last == 0 {
            return;
        }
        // f_acc = n_accepted / n_draft_last < 0.5, in integers.
        if n_accepted.saturating_mul(2) < self.n_draft_last {
            self.n_low += 1;
            if self.n_low >= LOW_STREAK {
                self.pool.reset();
                self.pool.resets_low_acceptance.fetch_add(1, Relaxed);
                self.n_low = 0;
            }
        } else {
            self.n_low = 0;
        }
    }

    fn as_any(&self) -> Option<&dyn std::any::Any> {
        Some(self)
    }

    fn fork(&self) -> Option<Box<dyn Drafter>> {
        Some(Box::new(self.clone()))
    }
}

/// The raw state, for [`Shared::save`](crate::Shared::save) and `load`.
impl NgramPool {
    /// The generation, `used` and every cell's word.
    pub(crate) fn raw(&self) -> (u32, usize, impl Iterator<Item = u64> + '_) {
        let cells = self.cells.iter().map(|c| c.load(Relaxed));
        (self.generation.load(Relaxed), self.used(), cells)
    }

    /// Restores what [`raw`](NgramPool::raw) gave (the same size).
    pub(crate) fn restore(&self, generation: u32, used: usize, cells: impl Iterator<Item = u64>) {
        self.generation.store(generation, Relaxed);
        self.used.store(used, Relaxed);
        for (c, word) in self.cells.iter().zip(cells) {
            c.store(word, Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pool(size: usize) -> Arc<NgramPool> {
        Arc::new(NgramPool::new(size).unwrap())
    }

    #[test]
    fn zero_pool_is_an_error() {
        let err = NgramPool::new(0).unwrap_err();
        assert!(err.to_string().contains("pool_size"), "{err}");
    }

    #[test]
    fn hash_widens_ids_as_i32() {
        // 2^32 - 2 is -2 as i32; llama.cpp adds it sign-extended to 64 bits.
        let p = NgramPool::new(65521).unwrap();
        let h = 0u64.wrapping_mul(LCG_FACTOR).wrapping_sub(2);
        let poly = Poly::new(LCG_FACTOR, 1);
        assert_eq!(
            p.cell_of(poly.hash([u32::MAX - 1])),
            usize::try_from(h % 65521).unwrap()
        );
    }

    /// The token last stored after `key` (or after an n-gram that shares
    /// its cell).
    fn get(p: &NgramPool, key: &[Token]) -> Option<Token> {
        let h = Poly::new(LCG_FACTOR, key.len()).hash(key.iter().copied());
        let t = p.load(p.cell_of(h), p.generation.load(Relaxed));
        (t != EMPTY).then_some(t)
    }

    #[test]
    fn empty_sentinel_is_never_stored() {
        let p = NgramPool::new(1 << 16).unwrap();
        p.add_all(&Poly::new(LCG_FACTOR, 2), &[1, 2, EMPTY, 3, 4, 5], 2);
        // [3, 4] -> 5 only: [1, 2] was followed by the sentinel, [2, EMPTY]
        // and [EMPTY, 3] by real tokens.
        assert_eq!(get(&p, &[1, 2]), None);
        assert_eq!(get(&p, &[3, 4]), Some(5));
        assert_eq!(p.used(), 3);
    }

    #[test]
    fn draft_min_drops_short_drafts() {
        let mut d = NgramMod::new(2, pool(1 << 10));
        d.begin(&[1, 2, 3, 4]);
        let mut out = Vec::new();
        d.draft(
            &[1, 2, 3, 4, 7, 1],
            2,
            DraftLimits { min: 3, max: 8 },
            &mut out,
        );
        assert!(out.is_empty(), "{out:?}");
        d.draft(
            &[1, 2, 3, 4, 7, 1],
            2,
            DraftLimits { min: 2, max: 8 },
            &mut out,
        );
        assert_eq!(out, [3, 4]);
    }

    #[test]
    fn three_low_acceptances_reset_the_pool() {
        let p = pool(1 << 10);
        let mut d = NgramMod::new(1, p.clone());
        let h: Vec<Token> = (0..40).map(|i| i % 4).collect();
        d.begin(&h);
        assert!(p.used() > 0);
        let mut out = Vec::new();
        for round in 0..3 {
            out.clear();
            d.draft(&h, 0, DraftLimits { min: 0, max: 8 }, &mut out);
            assert_eq!(out.len(), 8, "round {round}");
            d.accept(3);
        }
        assert_eq!(p.used(), 0);
        assert_eq!(p.resets_low_acceptance(), 1);
    }

    #[test]
    fn shrinking_history_does_not_panic() {
        let mut d = NgramMod::new(3, pool(256));
        let h: Vec<Token> = (0..100).collect();
        d.begin(&h);
        let mut out = Vec::new();
        for len in [100, 3, 2, 0, 50, 1] {
            out.clear();
            d.draft(&h[..len], 7, DraftLimits { min: 0, max: 16 }, &mut out);
            d.accept(usize::MAX);
        }
    }
}
