//! Naive oracles: each reference strategy and the orchestrator written straight
//! from llama.cpp's rules (as the strategies' docs state them), with
//! whole-history scans and no indexes. The property tests
//! check the crate's indexed strategies against them (the memchr habit: every
//! fast path checked against the obvious one).
#![allow(dead_code)]

use selfspec::{Config, Strategy, Token};

const MAP_SLOTS: usize = 1 << 18;
const MAX_COUNT: u16 = 16380;

pub trait Oracle {
    fn begin(&mut self, prompt: &[Token]);
    fn draft(&mut self, hist: &[Token], last: Token, dmin: usize, dmax: usize) -> Vec<Token>;
    fn accept(&mut self, n: usize);
}

fn key_of(hist: &[Token], last: Token, n: usize) -> Vec<Token> {
    let mut key = hist[hist.len() + 1 - n..].to_vec();
    key.push(last);
    key
}

// ---- ngram-simple -------------------------------------------------------

pub struct Simple {
    pub n: usize,
    pub m: usize,
}

impl Oracle for Simple {
    fn begin(&mut self, _: &[Token]) {}
    fn draft(&mut self, hist: &[Token], last: Token, _: usize, _: usize) -> Vec<Token> {
        let (n, m, l) = (self.n, self.m, hist.len());
        if l <= n + m + 1 {
            return vec![];
        }
        let key = key_of(hist, last, n);
        let mut j = l - n - 1;
        while j >= 1 {
            if hist[j..j + n] == key[..] {
                let copy = m.min(l - (j + n));
                if copy < n {
                    return vec![];
                }
                return hist[j + n..j + n + copy].to_vec();
            }
            j -= 1;
        }
        vec![]
    }
    fn accept(&mut self, _: usize) {}
}

// ---- ngram-map ----------------------------------------------------------

#[derive(Clone, Copy)]
struct Val {
    idx: usize,
    num: u16,
    n_acc: usize,
}

struct Key {
    idx: usize,
    stat: usize,
    num: u16,
    vals: [Val; 4],
}

pub struct Map {
    n: usize,
    m: usize,
    key_only: bool,
    min_hits: usize,
    keys: Vec<Key>,
    key_map: Vec<u32>,
    key_map_last: usize,
    size_last_begin: usize,
    last_check: usize,
    last: Option<(usize, usize)>,
}

fn lcg(tokens: &[Token]) -> usize {
    let mut h: u32 = 0;
    for &t in tokens {
        h = h.wrapping_mul(2654435761).wrapping_add(t);
    }
    h as usize % MAP_SLOTS
}

impl Map {
    pub fn new(n: usize, m: usize, key_only: bool, min_hits: usize) -> Map {
        Map {
            n,
            m,
            key_only,
            min_hits,
            keys: vec![],
            key_map: vec![0; MAP_SLOTS],
            key_map_last: 0,
            size_last_begin: 0,
            last_check: 0,
            last: None,
        }
    }
    pub fn record_count(&self) -> usize {
        self.keys.len()
    }
}

impl Oracle for Map {
    fn begin(&mut self, prompt: &[Token]) {
        let (n, m, s) = (self.n, self.m, prompt.len());
        self.last = None;
        let mut cleanup = self.size_last_begin;
        if cleanup > s {
            cleanup = if s > n + m { s - n - m } else { 0 };
        }
        if s < self.last_check {
            for slot in self.key_map.iter_mut() {
                if *slot != 0 && *slot as usize >= cleanup {
                    *slot = 0;
                }
            }
            self.key_map_last = if cleanup > 0 { cleanup - 1 } else { 0 };
            let mut i = self.keys.len();
            while i > 0 {
                i -= 1;
                if self.keys[i].idx >= cleanup {
                    self.keys.remove(i);
                    continue;
                }
                if self.key_only {
                    continue;
                }
                let k = &mut self.keys[i];
                for j in (0..4).rev() {
                    if k.vals[j].idx != 0 && k.vals[j].idx >= cleanup {
                        for x in j..3 {
                            k.vals[x] = k.vals[x + 1];
                        }
                        k.vals[3].idx = 0;
                        k.vals[3].num = 0;
                    }
                }
                if k.vals[0].idx == 0 {
                    self.keys.remove(i);
                }
            }
        }
        self.last_check = s;
        self.size_last_begin = s;
    }

    // A line-by-line port of llama.cpp's function: kept in one piece so it
    // reads against the original.
    #[allow(clippy::too_many_lines)]
    fn draft(&mut self, hist: &[Token], last: Token, _: usize, _: usize) -> Vec<Token> {
        let (n, m, l) = (self.n, self.m, hist.len());
        if l < self.last_check || l < self.size_last_begin {
            self.begin(hist);
        }
        self.last = None;
        if l < 2 * n + m {
            return vec![];
        }
        self.last_check = l;
        let key = key_of(hist, last, n);
        let is_key = |p: usize| hist[p..p + n] == key[..];
        let mut match_pos = 0;
        let p = self.key_map[lcg(&key)] as usize;
        if p != 0 && p < l - n - m - 1 && is_key(p) {
            match_pos = p;
        }
        if match_pos == 0 && self.size_last_begin > n + m + 1 {
            let mut j = self.size_last_begin - n - m - 1;
            while j > self.key_map_last {
                if is_key(j) {
                    match_pos = j;
                    break;
                }
                j -= 1;
            }
        }
        if match_pos == 0 {
            let mut j = l - n - m - 1;
            while j > self.size_last_begin && j > self.key_map_last {
                if is_key(j) {
                    match_pos = j;
                    break;
                }
                j -= 1;
            }
        }
        if self.size_last_begin > n + m + 1 {
            let mut j = self.size_last_begin - n - m - 1;
            while j > self.key_map_last {
                let s = lcg(&hist[j..j + n]);
                if self.key_map[s] == 0 {
                    self.key_map[s] = u32::try_from(j).unwrap();
                }
                j -= 1;
            }
        }
        let mut j = l - n - m - 1;
        while j > self.size_last_begin && j > self.key_map_last {
            let s = lcg(&hist[j..j + n]);
            if self.key_map[s] == 0 {
                self.key_map[s] = u32::try_from(j).unwrap();
            }
            j -= 1;
        }
        self.key_map_last = self.key_map_last.max(l - n - m - 1);
        if match_pos == 0 {
            return vec![];
        }
        let ki = match self
            .keys
            .iter()
            .position(|k| hist[k.idx..k.idx + n] == key[..])
        {
            Some(i) => i,
            None => {
                let v = Val {
                    idx: 0,
                    num: 0,
                    n_acc: m,
                };
                self.keys.push(Key {
                    idx: match_pos,
                    stat: 0,
                    num: 0,
                    vals: [v; 4],
                });
                self.keys.len() - 1
            }
        };
        let k = &mut self.keys[ki];
        k.num = (k.num + 1).min(MAX_COUNT);
        let slot = if self.key_only {
            0
        } else {
            if (k.num as usize) < self.min_hits {
                return vec![];
            }
            for i in k.stat..=match_pos {
                if hist[i..i + n] != key[..] {
                    continue;
                }
                let at = i + n;
                let mut found = None;
                for v in 0..4 {
                    if k.vals[v].idx == 0 {
                        k.vals[v] = Val {
                            idx: at,
                            num: 0,
                            n_acc: m,
                        };
                        found = Some(v);
                        break;
                    }
                    if hist[at..at + m] == hist[k.vals[v].idx..k.vals[v].idx + m] {
                        found = Some(v);
                        break;
                    }
                }
                if let Some(v) = found {
                    k.vals[v].num = (k.vals[v].num + 1).min(MAX_COUNT);
                }
            }
            k.stat = match_pos;
            let mut best = 0;
            for v in 0..4 {
                if k.vals[v].num > k.vals[best].num {
                    best = v;
                }
            }
            let max = k.vals[best].num as u32;
            let sum: u32 = (0..4)
                .filter(|&v| v != best)
                .map(|v| k.vals[v].num as u32)
                .sum();
            if sum > 0 && max < 2 * sum {
                return vec![];
            }
            best
        };
        let cnt = m.min(k.vals[slot].n_acc);
        self.last = Some((ki, slot));
        hist[match_pos + n..match_pos + n + cnt].to_vec()
    }

    fn accept(&mut self, n: usize) {
        if let Some((k, v)) = self.last {
            self.keys[k].vals[v].n_acc = n;
        }
    }
}

// ---- ngram-mod ----------------------------------------------------------

pub struct Pool {
    pub cells: Vec<u32>,
    pub used: usize,
    pub resets: usize,
}

impl Pool {
    pub fn new(size: usize) -> Pool {
        Pool {
            cells: vec![u32::MAX; size],
            used: 0,
            resets: 0,
        }
    }
    fn idx(&self, k: &[Token]) -> usize {
        let mut h: u64 = 0;
        for &t in k {
            h = h.wrapping_mul(6364136223846793005).wrapping_add(widen(t));
        }
        usize::try_from(h % self.cells.len() as u64).unwrap()
    }
    fn add(&mut self, k: &[Token]) {
        let (key, next) = k.split_at(k.len() - 1);
        if next[0] == u32::MAX {
            return; // the crate documents: the empty marker is never stored
        }
        let i = self.idx(key);
        if self.cells[i] == u32::MAX {
            self.used += 1;
        }
        self.cells[i] = next[0];
    }
    fn reset(&mut self) {
        self.cells.iter_mut().for_each(|c| *c = u32::MAX);
        self.used = 0;
        self.resets += 1;
    }
}

pub struct Mod {
    pub n: usize,
    pub pool: std::rc::Rc<std::cell::RefCell<Pool>>,
    i_last: usize,
    n_draft_last: usize,
    n_low: u32,
}

impl Mod {
    pub fn new(n: usize, pool: std::rc::Rc<std::cell::RefCell<Pool>>) -> Mod {
        Mod {
            n,
            pool,
            i_last: 0,
            n_draft_last: 0,
            n_low: 0,
        }
    }
}

impl Oracle for Mod {
    fn begin(&mut self, prompt: &[Token]) {
        let n = self.n;
        self.i_last = 0;
        self.n_draft_last = 0;
        if prompt.len() < n {
            return;
        }
        let mut pool = self.pool.borrow_mut();
        for i in 0..prompt.len() - n {
            pool.add(&prompt[i..=i + n]);
        }
        self.i_last = prompt.len() - n;
        if pool.used as f64 / pool.cells.len() as f64 > 0.25 {
            pool.reset();
        }
    }
    fn draft(&mut self, hist: &[Token], last: Token, dmin: usize, dmax: usize) -> Vec<Token> {
        let (n, l) = (self.n, hist.len());
        self.n_draft_last = 0;
        if l < n {
            return vec![];
        }
        if self.i_last + n > l {
            self.i_last = l - n; // the crate's documented recovery
        }
        let mut pool = self.pool.borrow_mut();
        if self.i_last + 32 < l {
            for i in self.i_last..l - n {
                pool.add(&hist[i..=i + n]);
            }
            self.i_last = l - n;
        }
        let mut window = key_of(hist, last, n);
        for i in 0..dmax {
            let t = pool.cells[pool.idx(&window[i..i + n])];
            if t == u32::MAX {
                if i < dmin {
                    return vec![];
                }
                break;
            }
            window.push(t);
        }
        let d = window[n..].to_vec();
        self.n_draft_last = d.len();
        d
    }
    fn accept(&mut self, n: usize) {
        if self.n_draft_last > 0 {
            if (n as f64) / (self.n_draft_last as f64) < 0.5 {
                self.n_low += 1;
                if self.n_low >= 3 {
                    self.pool.borrow_mut().reset();
                    self.n_low = 0;
                }
            } else {
                self.n_low = 0;
            }
        }
    }
}

// ---- orchestrator -------------------------------------------------------

// ---- ngram-cache (context cache only: no cache files) --------------------

/// Lookup decoding as llama.cpp does it: parts as follower lists in insertion
/// order, winners by scanning them, no entries, indexes or successor guesses.
#[derive(Default)]
pub struct Cache {
    parts: std::collections::HashMap<[Token; 4], Vec<(Token, i64)>>,
    cache_size: usize,
}

/// The reference's key: four slots, unused ones -1 (so a token -1 as i32,
/// `u32::MAX`, reads as an unused slot there too).
fn cache_key(ngram: &[Token]) -> [Token; 4] {
    let mut key = [u32::MAX; 4];
    key[..ngram.len()].copy_from_slice(ngram);
    key
}

impl Oracle for Cache {
    fn begin(&mut self, _: &[Token]) {}
    fn draft(&mut self, hist: &[Token], last: Token, _: usize, _: usize) -> Vec<Token> {
        let l = hist.len();
        if self.cache_size < l + 1 {
            let mut seg = hist[self.cache_size..].to_vec();
            seg.push(last);
            for s in 1..=4 {
                for i in s..seg.len() {
                    let part = self.parts.entry(cache_key(&seg[i - s..i])).or_default();
                    match part.iter_mut().find(|f| f.0 == seg[i]) {
                        Some(f) => f.1 += 1,
                        None => part.push((seg[i], 1)),
                    }
                }
            }
            self.cache_size = l + 1;
        }
        let mut seq = hist.to_vec();
        seq.push(last);
        if seq.len() < 2 {
            return vec![];
        }
        const SAMPLE: [i64; 4] = [2, 2, 1, 1];
        const PCT: [i64; 4] = [66, 50, 50, 50];
        let mut draft = vec![];
        'step: while draft.len() < 8 {
            for s in (1..=4).rev() {
                if s > seq.len() {
                    continue;
                }
                let Some(part) = self.parts.get(&cache_key(&seq[seq.len() - s..])) else {
                    continue;
                };
                // Highest count; ties to the follower inserted last.
                let (mut best, mut sum) = (0, 0);
                for (i, f) in part.iter().enumerate() {
                    if f.1 >= part[best].1 {
                        best = i;
                    }
                    sum += f.1;
                }
                if sum < SAMPLE[s - 1] || 100 * part[best].1 < PCT[s - 1] * sum {
                    continue;
                }
                draft.push(part[best].0);
                seq.push(part[best].0);
                continue 'step;
            }
            break;
        }
        draft
    }
    fn accept(&mut self, _: usize) {}
}

pub struct Chain {
    pub parts: Vec<Box<dyn Oracle>>,
    pub dmin: usize,
    pub dmax: usize,
    current: Option<usize>,
    pending: usize,
    pub pool: Option<std::rc::Rc<std::cell::RefCell<Pool>>>,
}

impl Chain {
    pub fn new(config: &Config) -> Chain {
        let pool = std::rc::Rc::new(std::cell::RefCell::new(Pool::new(config.pool_size)));
        let mut has_mod = false;
        let parts = config
            .strategies
            .iter()
            .map(|s| -> Box<dyn Oracle> {
                match *s {
                    Strategy::NgramSimple { n, m } => Box::new(Simple { n, m }),
                    Strategy::NgramMapK { n, m } => Box::new(Map::new(n, m, true, 1)),
                    Strategy::NgramMapK4v { n, m, min_hits } => {
                        Box::new(Map::new(n, m, false, min_hits))
                    }
                    Strategy::NgramMod { n } => {
                        has_mod = true;
                        Box::new(Mod::new(n, pool.clone()))
                    }
                    Strategy::NgramCache {
                        static_cache: None,
                        dynamic_cache: None,
                    } => Box::<Cache>::default(),
                    _ => unreachable!("no oracle for {s}"),
                }
            })
            .collect();
        Chain {
            parts,
            dmin: config.draft_min,
            dmax: config.draft_max,
            current: None,
            pending: 0,
            pool: has_mod.then_some(pool),
        }
    }

    pub fn begin(&mut self, prompt: &[Token]) {
        self.current = None;
        for p in &mut self.parts {
            p.begin(prompt);
        }
    }

    /// The draft the engine receives and the index of the strategy that made it.
    pub fn draft(&mut self, hist: &[Token], last: Token) -> (Vec<Token>, Option<usize>) {
        self.current = None;
        for (i, p) in self.parts.iter_mut().enumerate() {
            let mut d = p.draft(hist, last, self.dmin, self.dmax);
            if d.is_empty() {
                continue;
            }
            d.truncate(self.dmax);
            if d.len() < self.dmin {
                continue;
            }
            self.current = Some(i);
            self.pending = d.len();
            return (d, Some(i));
        }
        (vec![], None)
    }

    pub fn accept(&mut self, n: usize) {
        let n = n.min(self.pending);
        if n == 0 {
            return;
        }
        if let Some(i) = self.current.take() {
            self.parts[i].accept(n);
        }
    }
}

/// llama.cpp's `(int64_t) token` for an id read as `u32`: sign extension
/// (the bits reinterpreted, no casts).
fn widen(t: Token) -> u64 {
    u64::from_ne_bytes(i64::from(i32::from_ne_bytes(t.to_ne_bytes())).to_ne_bytes())
}
