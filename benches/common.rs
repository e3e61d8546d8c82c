//! Workloads shared by the bench binaries: synthetic token streams and the
//! samples' parser. Each binary uses a part of them.
#![allow(dead_code)]

use selfspec::Token;
use selfspec_eval::Session;

/// The integration tests' xorshift generator: benches must not depend on a
/// seed crate, and the tests and benches draw their streams alike.
#[path = "../tests/common/mod.rs"]
mod tests_common;
pub use tests_common::Rng;

/// Text-like: Zipf-ish words from a 5000-token vocabulary, with phrases and
/// whole sentences reused now and then (as chat histories repeat themselves).
pub fn text_stream(len: usize, seed: u64) -> Vec<Token> {
    let mut out: Vec<Token> = Vec::with_capacity(len + 64);
    grow_text(&mut out, len, &mut Rng(seed | 1));
    out
}

/// Appends text-like tokens to `out` up to `len` (its quotes may come from
/// anything before).
pub fn grow_text(out: &mut Vec<Token>, len: usize, rng: &mut Rng) {
    while out.len() < len {
        if out.len() > 256 && rng.below(10) == 0 {
            // Quote an earlier passage of 8..72 tokens.
            let n = 8 + rng.pick(64);
            let start = rng.pick(out.len() - n);
            out.extend_from_within(start..start + n);
        } else {
            // Zipf-like: small ids are much more frequent.
            let r = rng.below(1 << 20) as f64 / (1u64 << 20) as f64;
            // In 1..=5000: the float's integer part is the token.
            #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
            let t = 5000f64.powf(r) as Token;
            out.push(t.min(4999));
        }
    }
    out.truncate(len);
}

/// Code-edit-like: a file, then copies of it with sparse edits.
pub fn code_edit_stream(len: usize, seed: u64) -> Vec<Token> {
    let file: Vec<Token> = text_stream(2048, seed ^ 0x9e37);
    let mut out = file.clone();
    grow_edits(&mut out, file, len, &mut Rng(seed | 1));
    out
}

/// Appends copies of `file` to `out` up to `len`, each an edit of the one
/// before (a token in 200 replaced, dropped or followed by a new one).
pub fn grow_edits(out: &mut Vec<Token>, mut file: Vec<Token>, len: usize, rng: &mut Rng) {
    while out.len() < len {
        let mut next = Vec::with_capacity(file.len() + 16);
        for &t in &file {
            match rng.below(200) {
                0 => next.push(rng.token(5000)),
                1 => {}
                2 => next.extend([t, rng.token(5000)]),
                _ => next.push(t),
            }
        }
        out.extend_from_slice(&next);
        file = next;
    }
    out.truncate(len);
}

/// A text-like stream of `len` tokens from `seed` (copies of earlier spans).
pub fn stream(len: usize, seed: u64) -> Vec<Token> {
    let mut rng = Rng(seed | 1);
    let mut next = move || rng.next();
    let mut out: Vec<Token> = Vec::with_capacity(len);
    while out.len() < len {
        if out.len() > 1000 && next() % 4 == 0 {
            let from = usize::try_from(next()).unwrap_or(0) % (out.len() - 100);
            let n = 8 + usize::try_from(next()).unwrap_or(0) % 40;
            for i in 0..n {
                out.push(out[from + i]);
            }
        } else {
            out.push(Token::try_from(next() % 5000).unwrap_or(0));
        }
    }
    out.truncate(len);
    out
}

/// The sessions of a sample workload (JSON Lines).
pub fn load(text: &str) -> Vec<Session> {
    selfspec_eval::parse_workload("sample", text).unwrap()
}
