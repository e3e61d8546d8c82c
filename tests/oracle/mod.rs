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

mod cache;
mod chain;
mod map;
mod ngram_mod;
mod simple;

pub use cache::Cache;
pub use chain::Chain;
pub use map::Map;
pub use ngram_mod::{Mod, Pool};
pub use simple::Simple;

/// llama.cpp's `(int64_t) token` for an id read as `u32`: sign extension
/// (the bits reinterpreted, no casts).
fn widen(t: Token) -> u64 {
    u64::from_ne_bytes(i64::from(i32::from_ne_bytes(t.to_ne_bytes())).to_ne_bytes())
}
