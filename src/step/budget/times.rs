//! [`PassTimes`]: what a pass of `r` rows over `s` sequences costs, learned
//! from the engine's own passes as it runs.

use std::time::Duration;

use super::super::measure::PassCurve;
use crate::int::{float, small};

/// Rows of the grid points: every size up to 16 (the first drafted tokens
/// cost the most, and small passes are the common ones), then steps of at
/// most a quarter of the size.
const GRID: &[u32] = &[
    1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 20, 24, 28, 32, 40, 48, 56, 64, 80, 96,
    112, 128, 160, 192, 224, 256, 320, 384, 448, 512, 640, 768, 896, 1024, 1280, 1536, 1792, 2048,
    2560, 3072, 3584, 4096,
];

/// Passes a grid point averages over before it becomes a moving average:
/// its estimate follows a change in the engine (load, cache length, threads)
/// within about this many passes of its size.
const MEMORY: f64 = 16.0;

/// The weight of a seeded point: a few of the engine's own passes outweigh it.
const SEED_WEIGHT: f64 = 2.0;

/// Passes of its band after which a grid point not measured again is read
/// as unmeasured. Its time was measured under the conditions of then (a
/// cache of another length, another load): read as it was, a size that
/// has become cheaper than it reads is never sent, so never measured
/// again (the budget's drafts held back after a change of traffic, the
/// candle engine's figures of BENCHMARKS.md, "The draft budget after a
/// change of traffic"). Read as unmeasured, it is priced optimistically,
/// sent and measured again: a pass or two every this many.
const STALE: u64 = 512;

/// Extra time per row assumed beyond the largest size measured, relative to
/// that size's time per row: an optimistic guess, so that a longer pass is
/// tried and measured. (Not a line through the two largest sizes measured:
/// on a CPU a pass's second row costs far more than the next few, so such
/// a line would price every longer draft out, and a draft never sent is
/// never measured.)
const PRIOR_ROW_COST: f64 = 0.05;

/// Bands of sequences a pass covers: 1, 2, 3-4, 5-8, ..., up to
/// [`MAX_SEQUENCES`](super::super::MAX_SEQUENCES). At equal rows a pass
/// over more sequences costs more (each reads its own cache): one curve
/// over rows alone, learned while few sequences ran, read passes over many
/// too cheap afterwards (the GPU simulation of BENCHMARKS.md, "Pass times
/// by sequences").
const BANDS: usize = crate::int::ix32(super::super::MAX_SEQUENCES.ilog2()) + 1;

#[derive(Clone, Copy, Debug, Default, PartialEq)]
struct Point {
    /// Mean rows of the passes recorded here (sizes near the grid point's).
    rows: f64,
    /// Mean seconds of the passes recorded here.
    secs: f64,
    /// Passes recorded (capped at [`MEMORY`]).
    weight: f64,
    /// Its band's clock when a pass was last recorded here.
    at: u64,
}

/// A pass-time model learned online: each pass's rows, sequences and
/// duration update the grid point nearest its size in its band of
/// sequences (1, 2, 3-4, 5-8, ...; the point's mean rows and mean time: a
/// running mean, then a moving average over about 16 passes, so it follows
/// changes in load, cache length and threads; a point not measured again
/// within 512 passes of its band counts as unmeasured); the time of any
/// size is read from the measured points of its band (of the nearest band
/// measured while its own has none, fewer sequences first), non-decreasing
/// in rows, linear between them and optimistic beyond them. A measured
/// [`PassCurve`] may seed it; none is needed.
///
/// ```
/// use selfspec::step::PassTimes;
/// use std::time::Duration;
///
/// let mut times = PassTimes::new();
/// assert_eq!(times.time(4, 1), None); // nothing measured yet
/// times.record(1, 1, Duration::from_millis(10));
/// times.record(17, 1, Duration::from_millis(26));
/// assert_eq!(times.time(9, 1), Some(Duration::from_millis(18)));
/// // Eight sequences: nothing measured there yet, read as one sequence.
/// assert_eq!(times.time(9, 8), Some(Duration::from_millis(18)));
/// times.record(8, 8, Duration::from_millis(30));
/// assert_eq!(times.time(8, 8), Some(Duration::from_millis(30)));
/// assert_eq!(times.time(8, 1), Some(Duration::from_millis(17)));
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct PassTimes {
    /// [`GRID`]'s points for each band of sequences, band after band.
    points: Vec<Point>,
    /// Passes recorded in each band: its clock.
    clocks: [u64; BANDS],
    /// Bit `b` set: band `b` has a point measured.
    measured: u16,
}

impl Default for PassTimes {
    fn default() -> Self {
        PassTimes::new()
    }
}

impl PassTimes {
    /// A model with nothing measured.
    #[must_use]
    pub fn new() -> PassTimes {
        PassTimes {
            points: vec![Point::default(); GRID.len() * BANDS],
            clocks: [0; BANDS],
            measured: 0,
        }
    }

    /// A model seeded with `curve`'s points (passes of one sequence, each
    /// worth two of the engine's own passes).
    #[must_use]
    pub fn seeded(curve: &PassCurve) -> PassTimes {
        let mut times = PassTimes::new();
        for p in curve.points() {
            let point = &mut times.band_mut(1)[nearest(p.rows)];
            point.rows = float(p.rows);
            point.secs = p.median.as_secs_f64();
            point.weight = SEED_WEIGHT;
        }
        times
    }

    /// Records a pass of `rows` rows over `sequences` sequences that took
    /// `took`.
    pub fn record(&mut self, rows: usize, sequences: usize, took: Duration) {
        if rows == 0 {
            return;
        }
        let clock = self.tick(sequences);
        let p = &mut self.band_mut(sequences)[nearest(rows)];
        if clock - p.at > STALE {
            p.weight = 0.0;
        }
        p.at = clock;
        p.weight = (p.weight + 1.0).min(MEMORY);
        p.rows += (float(rows) - p.rows) / p.weight;
        p.secs += (took.as_secs_f64() - p.secs) / p.weight;
    }

    /// The estimated time of a pass of `rows` rows over `sequences`
    /// sequences; `None` until a pass has been recorded.
    #[must_use]
    pub fn time(&self, rows: usize, sequences: usize) -> Option<Duration> {
        self.secs(rows, sequences)
            .and_then(|s| Duration::try_from_secs_f64(s).ok())
    }

    /// [`time`](PassTimes::time) in seconds, optimistic wherever the
    /// engine has not measured: a size is read as no dearer than any larger
    /// size measured (noise only ever adds time, and a pass the budget
    /// avoids for a time read too high is never measured again); between
    /// two measured sizes, the line through them; below the smallest, its
    /// time in proportion; above the largest, [`PRIOR_ROW_COST`] of its
    /// time per row of its size. Optimism is what corrects itself: a size
    /// read too cheap is sent, measured and read as it is.
    pub(crate) fn secs(&self, rows: usize, sequences: usize) -> Option<f64> {
        let rows = float(rows.max(1));
        // From the largest size down, each read through the minimum of the
        // sizes above it.
        let mut running = f64::INFINITY;
        let mut above: Option<(f64, f64)> = None;
        let (points, clock) = self.measured_band(sequences)?;
        for p in points
            .iter()
            .rev()
            .filter(|p| p.weight > 0.0 && clock - p.at <= STALE)
        {
            running = running.min(p.secs);
            let at = (p.rows, running);
            if p.rows > rows {
                above = Some(at);
                continue;
            }
            return Some(match above {
                Some(b) => at.1 + (b.1 - at.1) * (rows - at.0) / (b.0 - at.0),
                None => at.1 * (1.0 + PRIOR_ROW_COST * (rows - at.0) / at.0),
            });
        }
        above.map(|b| b.1 * rows / b.0)
    }

    /// Advances the clock of `sequences`' band by one pass; its new time.
    fn tick(&mut self, sequences: usize) -> u64 {
        let clock = &mut self.clocks[band(sequences)];
        *clock += 1;
        *clock
    }

    /// The points of `sequences`' band, marked measured.
    fn band_mut(&mut self, sequences: usize) -> &mut [Point] {
        let b = band(sequences);
        self.measured |= 1 << b;
        &mut self.points[b * GRID.len()..(b + 1) * GRID.len()]
    }

    /// The points of `sequences`' band, or of the nearest band measured
    /// (fewer sequences first: the cheaper guess, which a pass then
    /// corrects), and that band's clock; `None` when nothing is measured.
    fn measured_band(&self, sequences: usize) -> Option<(&[Point], u64)> {
        let own = band(sequences);
        let of = |b: usize| {
            let points = &self.points[b * GRID.len()..(b + 1) * GRID.len()];
            (points, self.clocks[b])
        };
        let measured = |b: &usize| self.measured & (1 << b) != 0;
        (0..BANDS)
            .flat_map(|d| {
                [
                    own.checked_sub(d),
                    Some(own + d).filter(|&b| d > 0 && b < BANDS),
                ]
            })
            .flatten()
            .find(measured)
            .map(of)
    }
}

/// The band of a pass over `sequences` sequences: 0 for one, then one
/// band per doubling.
fn band(sequences: usize) -> usize {
    let s = sequences.max(1);
    let ceil_log2 = usize::BITS - (s - 1).leading_zeros();
    crate::int::ix32(ceil_log2).min(BANDS - 1)
}

/// The grid point nearest `rows` (ties to the smaller).
fn nearest(rows: usize) -> usize {
    let r = small(rows);
    let i = GRID.partition_point(|&g| g < r);
    match (i.checked_sub(1), GRID.get(i)) {
        (_, Some(&g)) if g == r => i,
        (Some(lo), Some(&hi)) => {
            if r - GRID[lo] <= hi - r {
                lo
            } else {
                i
            }
        }
        (Some(lo), None) => lo,
        (None, _) => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(x: u64) -> Duration {
        Duration::from_millis(x)
    }

    #[test]
    fn reads_as_a_table() {
        let mut t = PassTimes::new();
        t.record(1, 1, ms(10));
        t.record(2, 1, ms(16));
        t.record(16, 1, ms(40));
        // (rows, expected ms): measured, between, above the largest.
        let cases = [
            (1, 10.0),
            (2, 16.0),
            (9, 28.0),
            (16, 40.0),
            (32, 40.0 * (1.0 + PRIOR_ROW_COST)),
        ];
        for (rows, want) in cases {
            let got = t.secs(rows, 1).unwrap() * 1000.0;
            assert!(
                (got - want).abs() < 1e-6,
                "{rows} rows: {got} ms, want {want}"
            );
        }
        // A size measured slower than a larger one reads as the larger.
        t.record(4, 1, ms(90));
        assert!((t.secs(4, 1).unwrap() - 0.040).abs() < 1e-9);
        assert!((t.secs(2, 1).unwrap() - 0.016).abs() < 1e-9);
    }

    #[test]
    fn follows_a_change_and_extrapolates_with_one_point() {
        let mut t = PassTimes::new();
        assert_eq!(t.secs(3, 1), None);
        t.record(4, 1, ms(20));
        let one = t.secs(8, 1).unwrap();
        assert!((one - 0.020 * (1.0 + PRIOR_ROW_COST)).abs() < 1e-9, "{one}");
        let below = t.secs(1, 1).unwrap();
        assert!((below - 0.005).abs() < 1e-9, "{below}");
        for _ in 0..200 {
            t.record(4, 1, ms(40));
        }
        assert!(
            (t.secs(4, 1).unwrap() - 0.040).abs() < 1e-4,
            "moved to the new time"
        );
    }

    #[test]
    fn a_size_not_measured_again_is_read_optimistically() {
        let mut t = PassTimes::new();
        t.record(1, 1, ms(10));
        t.record(2, 1, ms(30));
        // One-row passes get cheaper (a shorter cache); two rows are not
        // sent again.
        for _ in 0..STALE {
            t.record(1, 1, ms(5));
        }
        assert!((t.secs(2, 1).unwrap() - 0.030).abs() < 1e-9, "still read");
        t.record(1, 1, ms(5));
        let two = t.secs(2, 1).unwrap();
        let want = 0.005 * (1.0 + PRIOR_ROW_COST);
        assert!((two - want).abs() < 1e-9, "stale: {two}");
        // Measured again: the new time alone, not averaged with the old.
        t.record(2, 1, ms(8));
        assert!((t.secs(2, 1).unwrap() - 0.008).abs() < 1e-9);
        // Another band's clock does not age this one's points.
        let mut u = PassTimes::new();
        u.record(2, 1, ms(30));
        for _ in 0..2 * STALE {
            u.record(1, 8, ms(5));
        }
        assert!((u.secs(2, 1).unwrap() - 0.030).abs() < 1e-9);
    }

    #[test]
    fn bands_of_sequences_are_learned_apart() {
        let mut t = PassTimes::new();
        t.record(8, 1, ms(20));
        // (sequences, band): one band per doubling, the last one capped.
        for (sequences, want) in [
            (0, 0),
            (1, 0),
            (2, 1),
            (3, 2),
            (4, 2),
            (5, 3),
            (32, 5),
            (33, 6),
        ] {
            assert_eq!(band(sequences), want, "{sequences}");
        }
        assert_eq!(band(usize::MAX), BANDS - 1);
        // Nothing measured over 32 sequences: read from one sequence's.
        assert!((t.secs(8, 32).unwrap() - 0.020).abs() < 1e-9);
        t.record(8, 32, ms(50));
        assert!((t.secs(8, 32).unwrap() - 0.050).abs() < 1e-9);
        assert!((t.secs(8, 1).unwrap() - 0.020).abs() < 1e-9, "untouched");
        // 16 sequences: nearest measured band, fewer sequences first
        // (bands 0 and 5 are four and one bands away).
        assert!((t.secs(8, 16).unwrap() - 0.050).abs() < 1e-9);
        assert!((t.secs(8, 2).unwrap() - 0.020).abs() < 1e-9);
        t.record(8, 8, ms(30));
        assert!(
            (t.secs(8, 16).unwrap() - 0.030).abs() < 1e-9,
            "band 3 is nearer"
        );
    }

    #[test]
    fn nearest_grid_points() {
        for (rows, want) in [
            (0, 1),
            (1, 1),
            (16, 16),
            (17, 16),
            (18, 16),
            (19, 20),
            (5000, 4096),
        ] {
            assert_eq!(GRID[nearest(rows)], want, "{rows}");
        }
    }
}
