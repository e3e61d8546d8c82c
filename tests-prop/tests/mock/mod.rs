//! A mock target for the stepper's tests: a deterministic model over a small
//! vocabulary whose logits depend on the whole context, with per-sequence
//! caches that check every row's position, an optional checkpoint cache
//! (no removal: restores the state before the last pass) and failures on
//! demand.

#![allow(dead_code)] // each test file uses part of it

use selfspec::step::{Batch, Kept, SeqId, Shape, Split, Target};
use selfspec::Token;

/// The mock's errors.
#[derive(Debug, thiserror::Error)]
pub enum MockError {
    /// A row not at the end of its sequence's cache.
    #[error("sequence {seq}: row at position {pos}, cache holds {held}")]
    Position { seq: usize, pos: usize, held: usize },
    /// A failure asked for.
    #[error("pass {0} fails on purpose")]
    Planned(usize),
}

/// The model: logits of the next token after `context` (vocabulary `vocab`).
pub fn logits(context: &[Token], vocab: usize) -> Vec<f32> {
    let mut h: u64 = 0x9e37_79b9;
    for &t in context.iter().rev().take(3) {
        h = (h ^ u64::from(t)).wrapping_mul(0x100_0000_01b3);
    }
    h ^= (context.len() as u64 / 5).wrapping_mul(0x2545_f491);
    (0..vocab)
        .map(|i| {
            let x = h.wrapping_add(i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 40;
            (x % 1000) as f32 / 250.0
        })
        .collect()
}

/// Plain greedy decoding of `n` tokens after `prompt`.
pub fn plain_greedy(prompt: &[Token], n: usize, vocab: usize) -> Vec<Token> {
    let mut ctx = prompt.to_vec();
    let mut out = Vec::new();
    for _ in 0..n {
        let t = selfspec::step::Choice::of(&logits(&ctx, vocab))
            .unwrap()
            .token;
        out.push(t);
        ctx.push(t);
    }
    out
}

pub struct Mock {
    pub shape: Shape,
    pub caches: Vec<Vec<Token>>,
    rows: Vec<Vec<f32>>,
    /// Checkpoint mode: each sequence's cache length before the last pass.
    pub checkpoints: Option<Vec<usize>>,
    pub passes: usize,
    pub fail_at: Option<usize>,
    /// Rows evaluated, in all passes.
    pub rows_evaluated: usize,
    /// Simulated pass times: `fixed + per_row * rows` microseconds a
    /// computation.
    pub cost: Option<(f64, f64)>,
    /// How passes split into computations (each charged `fixed`).
    pub split: Split,
    last_rows: usize,
    /// Computations of the last pass.
    last_parts: usize,
    /// Rows a sequence of the last pass (scratch).
    per_seq: Vec<usize>,
}

impl Mock {
    pub fn new(sequences: usize, context: usize, vocab: usize, batch: usize) -> Mock {
        Mock {
            shape: Shape {
                sequences,
                context,
                vocab,
                batch,
            },
            caches: vec![Vec::new(); sequences],
            rows: Vec::new(),
            checkpoints: None,
            passes: 0,
            fail_at: None,
            rows_evaluated: 0,
            cost: None,
            split: Split::Whole { ubatch: usize::MAX },
            last_rows: 0,
            last_parts: 0,
            per_seq: vec![0; sequences],
        }
    }

    /// A cache that cannot remove positions: it restores a checkpoint.
    pub fn with_checkpoints(mut self) -> Mock {
        self.checkpoints = Some(vec![0; self.shape.sequences]);
        self
    }
}

impl Target for Mock {
    type Error = MockError;

    fn shape(&self) -> Shape {
        self.shape
    }

    fn forward(&mut self, batch: &Batch) -> Result<(), MockError> {
        self.passes += 1;
        if self.fail_at == Some(self.passes) {
            return Err(MockError::Planned(self.passes));
        }
        assert!(
            batch.len() <= self.shape.batch,
            "a batch over the target's size"
        );
        if let Some(cp) = &mut self.checkpoints {
            for (s, c) in self.caches.iter().enumerate() {
                cp[s] = c.len();
            }
        }
        self.rows.clear();
        for row in batch.rows() {
            let cache = &mut self.caches[row.seq.index()];
            if cache.len() != row.pos || row.pos >= self.shape.context {
                return Err(MockError::Position {
                    seq: row.seq.index(),
                    pos: row.pos,
                    held: cache.len(),
                });
            }
            cache.push(row.token);
            self.rows.push(if row.output {
                logits(cache, self.shape.vocab)
            } else {
                Vec::new()
            });
        }
        self.rows_evaluated += batch.len();
        self.last_rows = batch.len();
        self.per_seq.fill(0);
        for row in batch.rows() {
            self.per_seq[row.seq.index()] += 1;
        }
        self.last_parts = computations(self.split, &self.per_seq);
        Ok(())
    }

    fn logits(&mut self, row: usize) -> Result<&[f32], MockError> {
        Ok(&self.rows[row])
    }

    fn pass_time(&self) -> Option<std::time::Duration> {
        let (fixed, per_row) = self.cost?;
        Some(std::time::Duration::from_secs_f64(
            (fixed * self.last_parts as f64 + per_row * self.last_rows as f64) * 1e-6,
        ))
    }

    fn split(&self) -> Split {
        self.split
    }

    fn truncate(&mut self, seq: SeqId, from: usize) -> Result<Kept, MockError> {
        let cache = &mut self.caches[seq.index()];
        match &self.checkpoints {
            Some(cp) if from < cache.len() && from >= cp[seq.index()] => {
                cache.truncate(cp[seq.index()]);
                Ok(Kept::Restored { len: cache.len() })
            }
            _ => {
                cache.truncate(from);
                Ok(Kept::Exact)
            }
        }
    }
}

/// Computations of a pass with `rows[s]` rows in sequence `s` (no cap on
/// their size): one, one a sequence, or equal rows over runs of
/// consecutive sequences, level by level.
fn computations(split: Split, rows: &[usize]) -> usize {
    match split {
        Split::Whole { .. } => usize::from(rows.iter().any(|&r| r > 0)),
        Split::PerSequence => rows.iter().filter(|&&r| r > 0).count(),
        Split::EqualRuns { .. } => {
            let mut left = rows.to_vec();
            let mut parts = 0;
            while let Some(first) = left.iter().position(|&r| r > 0) {
                let end = left[first..]
                    .iter()
                    .position(|&r| r == 0)
                    .map_or(left.len(), |e| first + e);
                let each = *left[first..end].iter().min().unwrap();
                left[first..end].iter_mut().for_each(|r| *r -= each);
                parts += 1;
            }
            parts
        }
    }
}
