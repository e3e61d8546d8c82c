//! Helpers shared by the integration tests.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

use selfspec::{Speculative, Strategy, Token};

pub fn manifest_path(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(rel)
}

/// A deterministic xorshift generator for synthetic token streams.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    /// Below `n`, as an index.
    pub fn pick(&mut self, n: usize) -> usize {
        usize::try_from(self.below(n as u64)).expect("below n")
    }
    /// Uniform in [0, 1).
    pub fn uniform(&mut self) -> f64 {
        // 53 bits: exact in an f64.
        #[allow(clippy::cast_precision_loss)]
        let x = (self.next() >> 11) as f64;
        x / (1u64 << 53) as f64
    }
    /// A token below `n`.
    pub fn token(&mut self, n: u32) -> Token {
        Token::try_from(self.below(u64::from(n))).expect("below n")
    }

    /// Tokens from a small alphabet with copies of earlier stretches.
    pub fn text(&mut self, len: usize, alphabet: u64) -> Vec<Token> {
        self.with_copies(len, (20, 4, 16), |r| {
            Token::try_from(r.below(alphabet)).expect("a small alphabet")
        })
    }

    /// `len` items, each `item(self)` or, from `after` items on and one time
    /// in `one_in`, a copy of an earlier stretch of 4 to `3 + longest`
    /// items (as engine outputs repeat themselves).
    pub fn with_copies<T: Copy>(
        &mut self,
        len: usize,
        (after, one_in, longest): (usize, u64, usize),
        mut item: impl FnMut(&mut Rng) -> T,
    ) -> Vec<T> {
        let mut out = Vec::with_capacity(len + 64);
        while out.len() < len {
            if out.len() > after && self.below(one_in) == 0 {
                let n = 4 + self.pick(longest);
                let start = self.pick(out.len() - n.min(out.len() - 1));
                let end = (start + n).min(out.len());
                out.extend_from_within(start..end);
            } else {
                out.push(item(self));
            }
        }
        out.truncate(len);
        out
    }
}

/// One of every strategy of the crate, with small sizes (the fork and
/// owned-history tests run each alone and all in a chain).
pub fn every_strategy() -> Vec<Strategy> {
    vec![
        Strategy::NgramSimple { n: 3, m: 8 },
        Strategy::NgramMapK { n: 3, m: 8 },
        Strategy::NgramMapK4v {
            n: 2,
            m: 8,
            min_hits: 1,
        },
        Strategy::NgramMod { n: 4 },
        Strategy::NgramCache {
            static_cache: None,
            dynamic_cache: None,
        },
        Strategy::NgramCacheLive {
            static_cache: None,
            dynamic_cache: None,
        },
        Strategy::Recall {
            threshold_permille: 130,
        },
    ]
}

/// One request under greedy verification against its recorded `output`
/// (`begin`, draft / accept until it is generated, `end_request`): the
/// draft tokens accepted and the forward passes taken.
pub fn greedy_request(spec: &mut Speculative, prompt: &[Token], output: &[Token]) -> (usize, u64) {
    let mut history = prompt.to_vec();
    spec.begin(&history);
    let (mut i, mut accepted, mut passes) = (0, 0, 0);
    while i < output.len() {
        let last = output[i];
        let n = selfspec::verify::greedy(spec.draft(&history, last), &output[i + 1..]);
        spec.accept(n);
        history.extend_from_slice(&output[i..=i + n]);
        accepted += n;
        i += n + 1;
        passes += 1;
    }
    spec.end_request();
    (accepted, passes)
}
