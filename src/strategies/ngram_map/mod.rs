//! ngram-map-k and ngram-map-k4v: key records with per-value statistics,
//! found through a 2^18-slot LCG hash index of history positions.

use crate::int::ix32;

use crate::drafter::{DraftLimits, Drafter};
use crate::index::hash::{Poly, PreHashedMap, NGRAM_MAP_LCG as LCG_FACTOR};
use crate::index::position_index::PositionIndex;
use crate::index::{key_at, low32, Idx};
use crate::limits::KEY_MAP_SIZE;
use crate::token::Token;

/// Distinct continuations kept per key (`COMMON_NGRAM_MAX_VALUES`).
const MAX_VALUES: usize = 4;
/// Key and value counters saturate here (`COMMON_NGRAM_MAX_VALUE_COUNT`).
const MAX_COUNT: u16 = 16380;

/// The reference's hash of an n-gram is `h = h * 2654435761 + t` in u32: the
/// low half of the same polynomial in u64, which can be rolled (see `index::hash`).
/// The golden traces pin the slots it gives.
#[inline]
fn slot(h: u64) -> usize {
    ix32(low32(h)) % KEY_MAP_SIZE
}

/// Key hashes to key records.
type HashIndex = PreHashedMap<u32>;

#[derive(Clone, Copy, Debug)]
struct Value {
    /// History position of the value m-gram; 0 = unused slot.
    pos: usize,
    count: u16,
    /// Tokens accepted when this value last drafted (caps the next draft).
    n_accepted: usize,
}

#[derive(Clone, Copy, Debug)]
struct KeyRecord {
    /// A history position where the key occurs.
    pos: usize,
    /// Value statistics are counted up to here.
    stat_pos: usize,
    hits: u16,
    values: [Value; MAX_VALUES],
}

#[derive(Clone, Copy, Debug)]
struct LastDraft {
    record: usize,
    value: usize,
}

/// llama.cpp's `common_ngram_map`: `ngram-map-k` (keys only) and
/// `ngram-map-k4v` (up to four values per key).
///
/// The semantics are llama.cpp's, exactly (the golden traces check them
/// draft for draft); in short, a draft call looks the key
/// (last `n` tokens of `history ++ [last]`) up in a hash index of history
/// positions (falling back to a scan of the not-yet-indexed part), keeps a
/// record per distinct key, and drafts the `m` tokens after the match, capped by
/// how many the target accepted the last time this key drafted.
///
/// ```
/// use selfspec::{DraftLimits, Drafter, strategies::NgramMap};
///
/// let mut map = NgramMap::key_only(2, 3);
/// let history: Vec<u32> = [5, 1, 2, 3, 4, 5, 6, 7, 8, 9, 0, 0, 1].to_vec();
/// map.begin(&history);
/// let mut draft = Vec::new();
/// map.draft(&history, 2, DraftLimits::default(), &mut draft);
/// assert_eq!(draft, [3, 4, 5]);
/// ```
#[derive(Clone)]
pub struct NgramMap {
    n: usize,
    m: usize,
    key_only: bool,
    min_hits: usize,
    records: Vec<KeyRecord>,
    /// Key hash -> the first record with that hash: finds a key's record in
    /// O(1) where the reference searches the list.
    record_of: HashIndex,
    /// Every n-gram of the history: the reference's scans, in O(1 + matches).
    index: PositionIndex,
    lcg: Poly,
    /// Occurrences of a key being counted (k4v), reused across calls.
    scratch: Vec<usize>,
    /// Hash of an n-gram -> one history position where it occurs (0 = empty).
    key_map: Box<[u32]>,
    /// The slots of `key_map` in use, so that a cleanup visits those instead
    /// of all 2^18 (an engine slot serving many short requests cleans up often).
    occupied: Vec<u32>,
    key_map_last: usize,
    size_last_begin: usize,
    last_check: usize,
    last_draft: Option<LastDraft>,
}

impl std::fmt::Debug for NgramMap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NgramMap")
            .field("n", &self.n)
            .field("m", &self.m)
            .field("key_only", &self.key_only)
            .field("min_hits", &self.min_hits)
            .field("records", &self.records.len())
            .field("size_last_begin", &self.size_last_begin)
            .finish_non_exhaustive()
    }
}

impl NgramMap {
    /// `ngram-map-k`: key size `n`, value size `m`.
    ///
    /// Does not validate: `n` = 0 or `m` = 0 silently never drafts. To check
    /// parameters, use [`Config`](crate::Config) / [`Strategy::validate`](crate::Strategy::validate), which reject `n` or `m` outside `1..=MAX_NGRAM`.
    #[must_use]
    pub fn key_only(n: usize, m: usize) -> NgramMap {
        NgramMap::new(n, m, true, 1)
    }

    /// `ngram-map-k4v`: key size `n`, value size `m`, drafting once a key was
    /// seen `min_hits` times and one of its values dominates.
    ///
    /// Does not validate: `n` = 0 or `m` = 0 silently never drafts, and a
    /// `min_hits` above what the key counters reach (16380) never drafts
    /// either. To check parameters, use [`Config`](crate::Config) / [`Strategy::validate`](crate::Strategy::validate), which reject them.
    #[must_use]
    pub fn four_values(n: usize, m: usize, min_hits: usize) -> NgramMap {
        NgramMap::new(n, m, false, min_hits)
    }

    fn new(n: usize, m: usize, key_only: bool, min_hits: usize) -> NgramMap {
        NgramMap {
            n,
            m,
            key_only,
            min_hits,
            records: Vec::new(),
            record_of: HashIndex::default(),
            index: PositionIndex::new(n),
            lcg: Poly::new(LCG_FACTOR, n.max(1)),
            scratch: Vec::new(),
            key_map: vec![0u32; KEY_MAP_SIZE].into_boxed_slice(),
            occupied: Vec::new(),
            key_map_last: 0,
            size_last_begin: 0,
            last_check: 0,
            last_draft: None,
        }
    }

    /// Key records currently held: public only for the tests of eval/ (the
    /// bound on the records).
    #[cfg(feature = "internals")]
    #[doc(hidden)]
    #[must_use]
    pub fn record_count(&self) -> usize {
        self.records.len()
    }

    fn fresh_value(&self) -> Value {
        Value {
            pos: 0,
            count: 0,
            n_accepted: self.m,
        }
    }

    /// Forgets everything indexed at or after `cleanup` (the history was cut back).
    fn cleanup(&mut self, cleanup: usize) {
        let key_map = &mut self.key_map;
        self.occupied.retain(|&s| {
            let pos = &mut key_map[ix32(s)];
            if ix32(*pos) >= cleanup {
                *pos = 0;
                return false;
            }
            true
        });
        self.key_map_last = cleanup.saturating_sub(1);
        let key_only = self.key_only;
        // Walk from last to first as the reference does; `retain_mut` visits in
        // order, but each record's fate depends only on itself, so the result is the same.
        self.records.retain_mut(|rec| {
            if rec.pos >= cleanup {
                return false;
            }
            if key_only {
                return true;
            }
            for j in (0..MAX_VALUES).rev() {
                let v = rec.values[j];
                if v.pos != 0 && v.pos >= cleanup {
                    rec.values.copy_within(j + 1.., j);
                    // The reference clears the freed last slot's position and
                    // count but keeps its `n_accepted` (sic).
                    let last = &mut rec.values[MAX_VALUES - 1];
                    last.pos = 0;
                    last.count = 0;
                }
            }
            rec.values[0].pos != 0
        });
    }

    /// The reference's scans of the not-yet-indexed ranges, newest first:
    /// `size_last_begin-n-m-1` down to `key_map_last+1`, then `len-n-m-1` down
    /// to `max(size_last_begin, key_map_last)+1`; answered by the position index.
    fn scan(&self, len: usize, hash: u64, head: &[Token], last: Token) -> usize {
        let (n, m) = (self.n, self.m);
        let in_range = |upper: usize, lower: usize| {
            if upper <= lower {
                return None;
            }
            self.index
                .latest(hash, head, last, upper)
                .filter(|&j| j > lower)
        };
        if self.size_last_begin > n + m + 1 {
            if let Some(j) = in_range(self.size_last_begin - n - m - 1, self.key_map_last) {
                return j;
            }
        }
        in_range(len - n - m - 1, self.size_last_begin.max(self.key_map_last)).unwrap_or(0)
    }

    /// Adds the new positions to the LCG index, walking the reference's two
    /// ranges downwards (first writer wins, so the order matters), rolling the
    /// hash backwards instead of recomputing it per position.
    fn index_new(&mut self, history: &[Token], len: usize) {
        let (n, m) = (self.n, self.m);
        let (lcg, key_map, occupied) = (self.lcg, &mut self.key_map, &mut self.occupied);
        let mut insert_down = |upper: usize, lower: usize| {
            if upper <= lower {
                return;
            }
            let mut h = lcg.hash(history[upper..upper + n].iter().copied());
            let mut j = upper;
            loop {
                let s = slot(h);
                if key_map[s] == 0 {
                    // Histories of 2^32 tokens get no draft (see `draft`).
                    key_map[s] = Idx::must(j).get();
                    occupied.push(Idx::must(s).get());
                }
                j -= 1;
                if j <= lower {
                    break;
                }
                h = lcg.roll_back(h, history[j], history[j + n]);
            }
        };
        if self.size_last_begin > n + m + 1 {
            insert_down(self.size_last_begin - n - m - 1, self.key_map_last);
        }
        insert_down(len - n - m - 1, self.size_last_begin.max(self.key_map_last));
        self.key_map_last = self.key_map_last.max(len - n - m - 1);
    }

    /// k4v: counts the values that followed the key's occurrences since its
    /// last statistics and returns the dominant one, if any (`None`: no draft).
    #[inline]
    fn dominant_value(
        &mut self,
        history: &[Token],
        record: usize,
        match_pos: usize,
        (head, last): (&[Token], Token),
        fresh: Value,
    ) -> Option<usize> {
        let (n, m) = (self.n, self.m);
        let rec = &mut self.records[record];
        if usize::from(rec.hits) < self.min_hits {
            return None;
        }
        // Count the values that followed each occurrence of the key in
        // stat_pos..=match_pos, oldest first (match_pos itself is counted
        // again next time: the reference does this). The position index
        // walks the occurrences instead of scanning the range.
        let occurrences = &mut self.scratch;
        occurrences.clear();
        let mut at = (match_pos >= rec.stat_pos).then_some(match_pos);
        while let Some(i) = at.filter(|&i| i >= rec.stat_pos) {
            occurrences.push(i);
            at = self.index.older(i, head, last);
        }
        for &i in occurrences.iter().rev() {
            let at = i + n;
            let Some(candidate) = history.get(at..at + m) else {
                continue;
            };
            let slot = rec
                .values
                .iter()
                .position(|v| v.pos == 0 || history.get(v.pos..v.pos + m) == Some(candidate));
            if let Some(s) = slot {
                let v = &mut rec.values[s];
                if v.pos == 0 {
                    *v = Value { pos: at, ..fresh };
                }
                v.count = (v.count + 1).min(MAX_COUNT);
            }
        }
        rec.stat_pos = match_pos;

        let mut best = 0;
        for (s, v) in rec.values.iter().enumerate() {
            if v.count > rec.values[best].count {
                best = s;
            }
        }
        let max = u32::from(rec.values[best].count);
        let others: u32 = rec
            .values
            .iter()
            .enumerate()
            .filter(|&(s, _)| s != best)
            .map(|(_, v)| u32::from(v.count))
            .sum();
        if others > 0 && max < 2 * others {
            return None;
        }
        Some(best)
    }

    /// Re-derives `record_of` from the records and the current history.
    fn rebuild_record_index(&mut self) {
        self.record_of.clear();
        let n = self.n;
        for (i, rec) in self.records.iter().enumerate() {
            if let Some(key) = self.index.tokens().get(rec.pos..rec.pos + n) {
                let hash = self.index.key_hash(&key[..n - 1], key[n - 1]);
                self.record_of.entry(hash).or_insert(Idx::must(i).get());
            }
        }
    }

    /// The first record whose key (read from the current history) is `head ++ [last]`.
    fn find_record(
        &self,
        history: &[Token],
        hash: u64,
        head: &[Token],
        last: Token,
    ) -> Option<usize> {
        let matches = |p: usize| key_at(history, p, head, last);
        match self.record_of.get(&hash) {
            Some(&i) if matches(self.records[ix32(i)].pos) => Some(ix32(i)),
            // A hash collision or a record whose text changed: the reference's search.
            Some(_) => self.records.iter().position(|r| matches(r.pos)),
            None => None,
        }
    }
}

impl Drafter for NgramMap {
    fn name(&self) -> &str {
        if self.key_only {
            "ngram_map_k"
        } else {
            "ngram_map_k4v"
        }
    }

    fn begin(&mut self, prompt: &[Token]) {
        let size = prompt.len();
        let (n, m) = (self.n, self.m);
        self.last_draft = None;
        let before = self.index.tokens().len();
        let common = self.index.resync(prompt);
        let mut cleanup = self.size_last_begin;
        if cleanup > size {
            cleanup = if size > n + m { size - n - m } else { 0 };
        }
        let shrank = size < self.last_check;
        if shrank {
            self.cleanup(cleanup);
        }
        // Records are looked up by the text at their position: when that text
        // may have changed (or records moved), re-derive the lookup table.
        if shrank || common < before {
            self.rebuild_record_index();
        }
        self.last_check = size;
        self.size_last_begin = size;
    }

    fn draft(
        &mut self,
        history: &[Token],
        last: Token,
        _limits: DraftLimits,
        draft: &mut Vec<Token>,
    ) {
        let len = history.len();
        let (n, m) = (self.n, self.m);
        // The reference aborts when the history shrank without `begin`; we act as
        // if `begin(history)` had been called.
        if len < self.last_check || len < self.size_last_begin {
            self.begin(history);
        }
        self.last_draft = None;
        // Positions are stored as u32 (0 = empty), as in the reference.
        if n == 0 || m == 0 || len < 2 * n + m || Idx::new(len).is_none() {
            return;
        }
        self.last_check = len;
        if self.index.sync(history) {
            // The history changed without `begin`: records may point at new text.
            self.rebuild_record_index();
        }

        let head = &history[len - n + 1..];
        let matches = |p: usize| key_at(history, p, head, last);
        let key_lcg = self
            .lcg
            .hash(head.iter().copied().chain(std::iter::once(last)));
        let hashed = ix32(self.key_map[slot(key_lcg)]);
        let hash = self.index.key_hash(head, last);
        let mut match_pos = 0;
        if hashed != 0 && hashed < len - n - m - 1 && matches(hashed) {
            match_pos = hashed;
        }
        if match_pos == 0 {
            match_pos = self.scan(len, hash, head, last);
            if match_pos != 0 && !matches(match_pos) {
                // The history changed without `begin` where `sync` did not look.
                self.index.resync(history);
                self.rebuild_record_index();
                match_pos = self.scan(len, hash, head, last);
            }
        }
        self.index_new(history, len);
        if match_pos == 0 {
            return;
        }

        let record = match self.find_record(history, hash, head, last) {
            Some(i) => i,
            None => {
                let fresh = self.fresh_value();
                self.records.push(KeyRecord {
                    pos: match_pos,
                    stat_pos: 0,
                    hits: 0,
                    values: [fresh; MAX_VALUES],
                });
                let i = self.records.len() - 1;
                self.record_of.entry(hash).or_insert(Idx::must(i).get());
                i
            }
        };
        let fresh = self.fresh_value();
        let rec = &mut self.records[record];
        rec.hits = (rec.hits + 1).min(MAX_COUNT);

        let value = if self.key_only {
            0
        } else {
            match self.dominant_value(history, record, match_pos, (head, last), fresh) {
                Some(value) => value,
                None => return,
            }
        };

        // The draft continues the current match, not the winning value (the reference does this).
        let count = m.min(self.records[record].values[value].n_accepted);
        let start = match_pos + n;
        let end = (start + count).min(len);
        draft.extend_from_slice(&history[start..end]);
        self.last_draft = Some(LastDraft { record, value });
    }

    fn accept(&mut self, n_accepted: usize) {
        if let Some(LastDraft { record, value }) = self.last_draft {
            if let Some(rec) = self.records.get_mut(record) {
                // The reference stores it as i16; drafts never exceed m anyway.
                rec.values[value].n_accepted = n_accepted.min(self.m);
            }
        }
    }

    /// The 1 MiB position table, the history index (16 to 20 bytes per
    /// history token), and the key records (about 110 bytes per distinct key
    /// that drafted, with their lookup table).
    fn heap_bytes(&self) -> usize {
        self.key_map.len() * 4
            + self.occupied.capacity() * 4
            + self.records.capacity() * std::mem::size_of::<KeyRecord>()
            + self.record_of.capacity() * (8 + 4 + 1)
            + self.scratch.capacity() * std::mem::size_of::<usize>()
            + self.index.heap_bytes()
    }

    fn as_any(&self) -> Option<&dyn std::any::Any> {
        Some(self)
    }

    fn fork(&self) -> Option<Box<dyn Drafter>> {
        Some(Box::new(self.clone()))
    }
}

#[cfg(test)]
mod tests;
