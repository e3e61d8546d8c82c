//! Measurements of a [`Target`]: what a forward pass costs ([`PassCurve`],
//! and from it the token cost selfspec weighs its drafts against), and how
//! far the target's batched passes move logits from its one-token passes
//! ([`LogitNoise`], and from it the near-tie bound under which a
//! speculative reply may differ from the plain one).
//!
//! Both drive the target directly ([`Target::forward`],
//! [`Target::truncate`], [`Target::logits`]): they measure, they do not
//! decode. Run them on sequences no request is using; each leaves the
//! sequences it used empty (call [`Stepper::forget`](super::Stepper::forget)
//! on them when a stepper decoded on them before).
//!
//! ```
//! use selfspec::step::{Batch, Kept, LogitNoise, PassCurve, SeqId, Shape, Target};
//!
//! /// A mock model over 8 tokens whose batched passes round like its
//! /// one-token passes (a real engine's rarely do).
//! #[derive(Default)]
//! struct Mock { caches: Vec<Vec<u32>>, rows: Vec<Vec<f32>> }
//!
//! impl Target for Mock {
//!     type Error = std::convert::Infallible;
//!     fn shape(&self) -> Shape { Shape { sequences: 1, context: 512, vocab: 8, batch: 64 } }
//!     fn forward(&mut self, batch: &Batch) -> Result<(), Self::Error> {
//!         self.caches.resize(1, Vec::new());
//!         self.rows.clear();
//!         for row in batch.rows() {
//!             let cache = &mut self.caches[row.seq.index()];
//!             cache.push(row.token);
//!             let top = (row.token as usize * 3 + cache.len()) % 8;
//!             self.rows.push((0..8).map(|i| if i == top { 2.0 } else { 0.0 }).collect());
//!         }
//!         Ok(())
//!     }
//!     fn logits(&mut self, row: usize) -> Result<&[f32], Self::Error> { Ok(&self.rows[row]) }
//!     fn truncate(&mut self, seq: SeqId, from: usize) -> Result<Kept, Self::Error> {
//!         self.caches.resize(1, Vec::new());
//!         self.caches[seq.index()].truncate(from);
//!         Ok(Kept::Exact)
//!     }
//! }
//!
//! let mut target = Mock::default();
//! // Passes of 1 and 17 rows after a 256-token cache, median of 15.
//! let curve = PassCurve::measure_for_token_cost(&mut target, SeqId::new(0), 1)?;
//! assert_eq!(curve.points().len(), 2);
//! let cost = curve.token_cost(1); // give it to Speculative::set_token_cost
//! assert!((0.0..=0.99).contains(&cost));
//!
//! // Batched passes of 2 and 5 rows against one-token passes over 40 tokens.
//! let text: Vec<u32> = (0..60).map(|i| (i * 5 + 1) % 8).collect();
//! let noise = LogitNoise::measure(&mut target, &text, 20, &[2, 5], 0)?;
//! assert_eq!(noise.rows, 80);
//! assert_eq!(noise.near_tie_bound(), 0.0);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::time::{Duration, Instant};

use super::choice::Choice;
use super::target::{Batch, Kept, Row, SeqId, Shape, Target};
use crate::int::float;
use crate::limits::check_range;
use crate::token::Token;
use crate::Error;

mod noise;

pub use noise::{LogitNoise, RowNoise};

/// An error of a measurement: the target's, or selfspec's (an argument
/// out of range, a row that cannot be compared).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum MeasureError<E: std::error::Error + 'static> {
    /// The target failed (a forward pass, a row, a cache removal); the
    /// sequences the measurement used may hold part of its tokens.
    #[error("the target failed: {0}")]
    Target(#[source] E),
    /// selfspec's: an argument out of range, or a row the measurement
    /// cannot use.
    #[error(transparent)]
    Selfspec(#[from] Error),
}

/// The median wall-clock time of a pass of `rows` rows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PassCost {
    /// Rows in the pass (one sequence's tokens, each row's output read).
    pub rows: usize,
    /// The median time of the pass: [`Target::forward`] and the greedy
    /// choice of every row ([`Target::greedy`]), as verification reads them.
    pub median: Duration,
}

/// Pass times by the number of rows, after a cache of a given length: the
/// pass-cost curve. Between measured sizes a pass's time is interpolated
/// linearly ([`time`](PassCurve::time)); the token cost
/// ([`token_cost`](PassCurve::token_cost)) follows from it.
///
/// ```
/// use selfspec::step::{PassCost, PassCurve};
/// use std::time::Duration;
///
/// let ms = Duration::from_millis;
/// let curve = PassCurve::new(256, vec![
///     PassCost { rows: 1, median: ms(10) },
///     PassCost { rows: 17, median: ms(18) },
/// ])?;
/// assert_eq!(curve.time(9), ms(14));
/// // One more token costs (18 - 10) / 16 = 0.5 ms, 0.05 of a one-token pass.
/// assert!((curve.token_cost(1) - 0.05).abs() < 1e-9);
/// # Ok::<(), selfspec::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PassCurve {
    cache: usize,
    points: Vec<PassCost>,
}

/// Arbitrary in-vocabulary tokens (their values do not change a pass's
/// cost); `vocab` is at least 1 and fits 32 bits.
fn filler(n: usize, seed: usize, vocab: usize) -> Vec<Token> {
    (0..n)
        .map(|i| {
            let x = i
                .wrapping_mul(7919)
                .wrapping_add(seed.wrapping_mul(104_729))
                .wrapping_add(1000);
            crate::int::small(x % vocab.max(1))
        })
        .collect()
}

/// Appends `tokens` at positions `pos..` of `seq` to `batch`.
fn push_rows(batch: &mut Batch, seq: SeqId, pos: usize, tokens: &[Token], output: bool) {
    for (i, &token) in tokens.iter().enumerate() {
        batch.push(Row {
            seq,
            token,
            pos: pos + i,
            output,
        });
    }
}

/// Evaluates `history[from..]` into `seq`'s cache, which holds
/// `history[..from]`, in passes of at most a batch, reading no output.
fn feed<T: Target + ?Sized>(
    target: &mut T,
    seq: SeqId,
    history: &[Token],
    from: usize,
) -> Result<(), T::Error> {
    let rows = target.shape().batch.max(1);
    let mut batch = Batch::default();
    let mut pos = from;
    for chunk in history.get(from..).unwrap_or_default().chunks(rows) {
        batch.clear();
        push_rows(&mut batch, seq, pos, chunk, false);
        target.forward(&batch)?;
        pos += chunk.len();
    }
    Ok(())
}

/// Cuts `seq`'s cache back to `history[..to]`, evaluating again what a
/// checkpoint cache ([`Kept::Restored`]) restored short of it.
fn rewind<T: Target + ?Sized>(
    target: &mut T,
    seq: SeqId,
    history: &[Token],
    to: usize,
) -> Result<(), T::Error> {
    match target.truncate(seq, to)? {
        Kept::Exact => Ok(()),
        Kept::Restored { len } => {
            let kept = history.get(..to).unwrap_or(history);
            feed(target, seq, kept, len.min(to))
        }
    }
}

/// Checks that `seq` exists and the vocabulary can hold filler tokens.
fn check_target(shape: Shape, seq: SeqId) -> Result<(), Error> {
    if seq.index() >= shape.sequences {
        return Err(Error::Sequence {
            seq: seq.index(),
            sequences: shape.sequences,
            problem: "does not exist",
        });
    }
    if shape.vocab == 0 || u32::try_from(shape.vocab).is_err() {
        return Err(Error::Shape {
            field: "vocab",
            value: shape.vocab,
            allowed: "1..=2^32 - 1 tokens",
        });
    }
    Ok(())
}

impl PassCurve {
    /// The cache [`measure_for_token_cost`](PassCurve::measure_for_token_cost)
    /// times its passes after.
    pub const TOKEN_COST_CACHE: usize = 256;
    /// Timed passes of each size in
    /// [`measure_for_token_cost`](PassCurve::measure_for_token_cost).
    pub const TOKEN_COST_REPS: usize = 15;
    /// The most timed passes of one size.
    pub const MAX_REPS: usize = 10_000;
    /// The most sizes in one curve.
    pub const MAX_SIZES: usize = 4096;

    /// A curve from measured points after a `cache`-token cache, ordered
    /// by rows (of points with the same rows, the first is kept).
    ///
    /// # Errors
    ///
    /// [`Error::OutOfRange`] for no point or more than
    /// [`MAX_SIZES`](PassCurve::MAX_SIZES), or a point of 0 rows.
    pub fn new(cache: usize, mut points: Vec<PassCost>) -> Result<PassCurve, Error> {
        check_range("pass cost", "sizes", points.len(), 1, Self::MAX_SIZES)?;
        if let Some(p) = points.iter().find(|p| p.rows == 0) {
            check_range("pass cost", "rows", p.rows, 1, usize::MAX)?;
        }
        points.sort_by_key(|p| p.rows);
        points.dedup_by_key(|p| p.rows);
        Ok(PassCurve { cache, points })
    }

    /// Times passes of each of `sizes` rows in sequence `seq` after a
    /// `cache`-token cache there: one warm-up pass, then the median of
    /// `reps` timed ones, each rolled back with [`Target::truncate`] before
    /// the next (a checkpoint cache's restored positions are evaluated
    /// again, untimed). The tokens are arbitrary, in the vocabulary. The
    /// sequence's cache is left empty.
    ///
    /// # Errors
    ///
    /// [`Error::Sequence`] for a sequence the target does not have,
    /// [`Error::Shape`] for an empty vocabulary, [`Error::OutOfRange`] for
    /// no size, a size of 0 or over the batch or the context, `reps` of 0
    /// or over [`MAX_REPS`](PassCurve::MAX_REPS), a cache that leaves no
    /// room in the context for the largest pass; the target's errors.
    pub fn measure<T: Target + ?Sized>(
        target: &mut T,
        seq: SeqId,
        cache: usize,
        sizes: &[usize],
        reps: usize,
    ) -> Result<PassCurve, MeasureError<T::Error>> {
        let shape = target.shape();
        check_target(shape, seq)?;
        check_range("pass cost", "sizes", sizes.len(), 1, Self::MAX_SIZES)?;
        let widest = shape.batch.min(shape.context);
        for &n in sizes {
            check_range("pass cost", "rows", n, 1, widest)?;
        }
        check_range("pass cost", "reps", reps, 1, Self::MAX_REPS)?;
        let largest = sizes.iter().copied().max().unwrap_or(1);
        check_range("pass cost", "cache", cache, 0, shape.context - largest)?;
        let history = filler(cache, 0, shape.vocab);
        target.truncate(seq, 0).map_err(MeasureError::Target)?;
        feed(target, seq, &history, 0).map_err(MeasureError::Target)?;
        let mut points = Vec::with_capacity(sizes.len());
        for &rows in sizes {
            let pass = filler(rows, 1, shape.vocab);
            let median = median_pass(target, seq, &history, &pass, reps)?;
            points.push(PassCost { rows, median });
        }
        target.truncate(seq, 0).map_err(MeasureError::Target)?;
        Ok(PassCurve::new(cache, points)?)
    }

    /// The curve [`token_cost`](PassCurve::token_cost) reads for
    /// `sequences` sequences a pass: passes of `S` and `S + 16` rows in
    /// `seq` after a [`TOKEN_COST_CACHE`](PassCurve::TOKEN_COST_CACHE)-token
    /// cache, median of [`TOKEN_COST_REPS`](PassCurve::TOKEN_COST_REPS).
    ///
    /// # Errors
    ///
    /// As [`measure`](PassCurve::measure).
    pub fn measure_for_token_cost<T: Target + ?Sized>(
        target: &mut T,
        seq: SeqId,
        sequences: usize,
    ) -> Result<PassCurve, MeasureError<T::Error>> {
        let s = sequences.max(1);
        let sizes = [s, s.saturating_add(16)];
        Self::measure(
            target,
            seq,
            Self::TOKEN_COST_CACHE,
            &sizes,
            Self::TOKEN_COST_REPS,
        )
    }

    /// The cache the passes were timed after, in tokens.
    #[must_use]
    pub fn cache(&self) -> usize {
        self.cache
    }

    /// The measured points, by rows.
    #[must_use]
    pub fn points(&self) -> &[PassCost] {
        &self.points
    }

    /// The time of a pass of `rows` rows: a measured point's median, else
    /// the line through the two measured sizes around `rows` (beyond the
    /// measured range, through the two nearest), at least zero. A curve of
    /// one point is flat; a pass of 0 rows takes no time.
    #[must_use]
    pub fn time(&self, rows: usize) -> Duration {
        let p = &self.points;
        let i = p.partition_point(|c| c.rows < rows);
        if let Some(c) = p.get(i).filter(|c| c.rows == rows) {
            return c.median;
        }
        let (a, b) = match (p.len(), i) {
            _ if rows == 0 => return Duration::ZERO,
            (0, _) => return Duration::ZERO,
            (1, _) => return p[0].median,
            (n, i) if i >= n => (p[n - 2], p[n - 1]),
            (_, 0) => (p[0], p[1]),
            (_, i) => (p[i - 1], p[i]),
        };
        let (ta, tb) = (a.median.as_secs_f64(), b.median.as_secs_f64());
        let slope = (tb - ta) / (float(b.rows) - float(a.rows));
        let t = ta + slope * (float(rows) - float(a.rows));
        Duration::try_from_secs_f64(t.max(0.0)).unwrap_or(Duration::MAX)
    }

    /// The token cost for selfspec
    /// ([`Speculative::set_token_cost`](crate::Speculative::set_token_cost))
    /// when `sequences` sequences (`S`, at least 1) share each pass: one
    /// more row in a pass costs `m = (t(S + 16) - t(S)) / 16`, a
    /// sequence's share of a pass is `t(S) / S`, and the cost is
    /// `m / (t(S) / S)`, clamped to `[0, 0.99]` (0 when `t(S)` is 0). With
    /// one sequence: `(t(17) - t(1)) / 16 / t(1)`. Times come from
    /// [`time`](PassCurve::time).
    #[must_use]
    pub fn token_cost(&self, sequences: usize) -> f64 {
        let s = sequences.max(1);
        let a = self.time(s).as_secs_f64();
        let b = self.time(s.saturating_add(16)).as_secs_f64();
        if a <= 0.0 || !b.is_finite() {
            return 0.0;
        }
        ((b - a) / 16.0 * float(s) / a).clamp(0.0, 0.99)
    }
}

/// The median time of `reps` passes of `pass` after `history` in `seq`,
/// after one warm-up pass; each pass rolled back to `history`.
fn median_pass<T: Target + ?Sized>(
    target: &mut T,
    seq: SeqId,
    history: &[Token],
    pass: &[Token],
    reps: usize,
) -> Result<Duration, MeasureError<T::Error>> {
    let mut batch = Batch::default();
    push_rows(&mut batch, seq, history.len(), pass, true);
    let mut times = Vec::with_capacity(reps);
    for rep in 0..=reps {
        let started = Instant::now();
        target.forward(&batch).map_err(MeasureError::Target)?;
        for row in 0..batch.len() {
            let choice = target.greedy(row).map_err(MeasureError::Target)?;
            std::hint::black_box(choice.map(|c: Choice| c.token));
        }
        let took = started.elapsed();
        rewind(target, seq, history, history.len()).map_err(MeasureError::Target)?;
        if rep > 0 {
            times.push(took);
        }
    }
    times.sort_unstable();
    Ok(times.get(times.len() / 2).copied().unwrap_or_default())
}

#[cfg(test)]
mod tests;
