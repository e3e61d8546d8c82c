//! ngram-map-k's and ngram-map-k4v's oracle (the key map and its LCG slot).

use super::*;

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
