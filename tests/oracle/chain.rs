//! The orchestrator's oracle: the chain of strategies, accept routing.

use super::*;

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
