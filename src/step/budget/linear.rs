//! [`SplitTimes`]: what a pass costs on a target whose passes split by
//! sequence, learned online as a sum over its computations.
//!
//! Rows alone do not price such a computation. Measured on llama.cpp's CPU
//! backend with a cache per sequence (BENCHMARKS.md, "Passes that split by
//! sequence"): eight sequences of one row each cost about a one-row
//! computation and a half, four sequences of two rows each (the same eight
//! rows) well over twice that: a sequence that sends more than one row
//! costs about as much again as a whole one-row computation. So a
//! computation costs a fixed part, a part per row and a part per sequence
//! that sends several rows, and a pass the sum over its computations:
//! linear in three counts of the pass, fitted by least squares over the
//! recent passes.

/// The counts a pass is priced by: computations, rows, and sequences in a
/// computation of several rows a sequence.
pub(crate) type Counts = [f64; 3];

/// Passes the fit remembers: each pass's weight falls by this share at
/// every later pass, so the fit follows cache lengths and load.
const FORGET: f64 = 1.0 / 64.0;

/// Ridge on the costs per row and per wide sequence, relative to the mean
/// of the normal matrix's diagonal (none on the cost per computation):
/// where the passes cannot tell the costs apart (plain passes of one size
/// only), the time goes to the computation and rows read free. Optimistic:
/// an untried draft reads cheap, is sent and is measured; a fit that read
/// rows dear would never send one to learn otherwise. Too small to move a
/// fit the passes determine.
const RIDGE: f64 = 1e-4;

/// Least squares with forgetting over passes' [`Counts`] and times.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct SplitTimes {
    /// Weighted sums of `x xᵀ` and `x y`.
    xx: [[f64; 3]; 3],
    xy: [f64; 3],
    /// The coefficients, once a pass is recorded (each at least zero).
    fit: Option<[f64; 3]>,
}

impl SplitTimes {
    /// Records a pass with counts `x` that took `secs`.
    pub(crate) fn record(&mut self, x: Counts, secs: f64) {
        for i in 0..3 {
            self.xy[i] = self.xy[i] * (1.0 - FORGET) + x[i] * secs;
            for j in 0..3 {
                self.xx[i][j] = self.xx[i][j] * (1.0 - FORGET) + x[i] * x[j];
            }
        }
        self.fit = solve(self.xx, self.xy).or(self.fit);
    }

    /// The estimated seconds of a pass with counts `x`; `None` until a
    /// pass is recorded.
    pub(crate) fn secs(&self, x: Counts) -> Option<f64> {
        let c = self.fit?;
        Some(c[0] * x[0] + c[1] * x[1] + c[2] * x[2])
    }
}

/// The ridge solution of `xx c = xy`, each coefficient at least zero (a
/// negative one would price a larger pass below a smaller).
fn solve(mut xx: [[f64; 3]; 3], mut xy: [f64; 3]) -> Option<[f64; 3]> {
    let ridge = RIDGE * (xx[0][0] + xx[1][1] + xx[2][2]) / 3.0 + f64::MIN_POSITIVE;
    xx[0][0] += f64::MIN_POSITIVE;
    xx[1][1] += ridge;
    xx[2][2] += ridge;
    // Gaussian elimination with partial pivoting.
    for col in 0..3 {
        let pivot = (col..3).max_by(|&a, &b| xx[a][col].abs().total_cmp(&xx[b][col].abs()))?;
        xx.swap(col, pivot);
        xy.swap(col, pivot);
        if xx[col][col].abs() < f64::MIN_POSITIVE {
            return None;
        }
        for row in col + 1..3 {
            let f = xx[row][col] / xx[col][col];
            let pivot_row = xx[col];
            for (x, p) in xx[row].iter_mut().zip(pivot_row).skip(col) {
                *x -= f * p;
            }
            xy[row] -= f * xy[col];
        }
    }
    let mut c = [0.0; 3];
    for row in (0..3).rev() {
        let known: f64 = (row + 1..3).map(|k| xx[row][k] * c[k]).sum();
        c[row] = (xy[row] - known) / xx[row][row];
    }
    c.iter()
        .all(|v| v.is_finite())
        .then(|| c.map(|v| v.max(0.0)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn learns_a_cost_per_wide_sequence() {
        // 20 ms a computation, 4 ms a row, 24 ms a sequence of several rows.
        let truth = |x: Counts| 0.020 * x[0] + 0.004 * x[1] + 0.024 * x[2];
        let mut t = SplitTimes::default();
        assert_eq!(t.secs([1.0, 1.0, 0.0]), None);
        // Plain passes as sequences finish, then drafts in one or two.
        let passes: &[Counts] = &[
            [1.0, 8.0, 0.0],
            [1.0, 6.0, 0.0],
            [2.0, 7.0, 0.0],
            [2.0, 12.0, 1.0],
            [2.0, 15.0, 2.0],
            [1.0, 16.0, 8.0],
        ];
        for _ in 0..20 {
            for &x in passes {
                t.record(x, truth(x));
            }
        }
        // (counts, what they cost): seen and unseen.
        for x in [[1.0, 8.0, 0.0], [2.0, 13.0, 1.0], [3.0, 20.0, 4.0]] {
            let got = t.secs(x).unwrap();
            assert!(
                (got - truth(x)).abs() < 1e-3,
                "{x:?}: {got} vs {}",
                truth(x)
            );
        }
    }

    #[test]
    fn what_the_passes_cannot_tell_reads_cheap() {
        // Only plain passes of 8 rows: more rows in the same computation
        // read (nearly) free, so a draft is tried and measured.
        let mut t = SplitTimes::default();
        for _ in 0..50 {
            t.record([1.0, 8.0, 0.0], 0.052);
        }
        let plain = t.secs([1.0, 8.0, 0.0]).unwrap();
        assert!((plain - 0.052).abs() < 1e-4, "{plain}");
        let wider = t.secs([1.0, 16.0, 8.0]).unwrap();
        assert!(wider < 0.052 * 1.01, "{wider}");
    }
}
