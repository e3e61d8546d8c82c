//! ngram-mod's oracle and its pool.

use super::*;

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
