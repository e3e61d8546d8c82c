//! [`SplitTimes`]: what a pass costs on a target whose passes split by
//! sequence, learned online as a sum over its computations.
//!
//! Rows alone do not price such a computation. Measured on llama.cpp's CPU
//! backend with a cache per sequence (BENCHMARKS.md, "Passes that split by
//! sequence"): eight sequences of one row each cost about a one-row
//! computation and a half, four sequences of two rows each (the same eight
//! rows) well over twice that: a sequence that sends more than one row
//! costs about as much again as a whole one-row computation. And a row
//! costs more the longer the cache it reads (attention reads every
//! position): after the thousands of positions of a code edit's prompt, a
//! decoding row cost llama.cpp twice one after a few hundred, and a fit
//! blind to the cache priced those passes 27-43% below their times
//! (BENCHMARKS.md, "The split fit and the cache"). Part of that cost comes
//! with each row (every row's scores against every position) and part
//! once a computation (the cache is read once, whatever its rows): a
//! fit with the first alone prices one-row passes after a long cache below
//! their times wherever a batch mixes caches of different lengths
//! (BENCHMARKS.md, "Reading the cache once a computation"). So a
//! computation costs a fixed part, a part per row, a part per sequence
//! that sends several rows, a part per position read and a part per row
//! and position read, and a pass the sum over its computations: linear in
//! five counts of the pass, fitted by least squares over the recent
//! passes with every cost at least zero.
//!
//! The fit weighs each pass by the inverse square of its time: it
//! minimises relative errors. The budget compares rates (tokens per
//! second) of passes of one size and the next, so a price 20% off on a
//! decoding pass misleads it as much as on a prompt chunk ten times its
//! time; fitted to absolute errors, the few long prompt chunks of a
//! conversation with a long prompt set the coefficients, and its decoding
//! passes, most of the passes the budget weighs, were priced far below
//! their times.

/// Counts a pass is priced by.
pub(crate) const N: usize = 5;

/// The counts a pass is priced by: computations, rows, sequences in a
/// computation of several rows a sequence, rows times the positions their
/// computation reads, and the positions each computation reads.
pub(crate) type Counts = [f64; N];

/// Passes the fit remembers: each pass's weight falls by this share at
/// every later pass, so the fit follows cache lengths and load.
const FORGET: f64 = 1.0 / 64.0;

/// Ridge on every cost but the one per computation, relative to the
/// normal matrix's diagonal entry of that cost (so the counts' units do
/// not matter): where the passes cannot tell the costs apart (plain passes
/// of one size only), the time goes to the computation and rows read free.
/// Optimistic:
/// an untried draft reads cheap, is sent and is measured; a fit that read
/// rows dear would never send one to learn otherwise. Too small to move a
/// fit the passes determine.
const RIDGE: f64 = 1e-4;

/// The shortest pass time a weight is taken from: a target that reports
/// passes of no time (a simulation) must not weigh them without bound.
const MIN_SECS: f64 = 1e-6;

/// Least squares with forgetting over passes' [`Counts`] and times.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct SplitTimes {
    /// Weighted sums of `x xᵀ` and `x y`.
    xx: [[f64; N]; N],
    xy: [f64; N],
    /// The coefficients, once a pass is recorded (each at least zero).
    fit: Option<[f64; N]>,
}

impl SplitTimes {
    /// Records a pass with counts `x` that took `secs`.
    pub(crate) fn record(&mut self, x: Counts, secs: f64) {
        let w = secs.max(MIN_SECS).powi(-2);
        for i in 0..N {
            self.xy[i] = self.xy[i] * (1.0 - FORGET) + w * x[i] * secs;
            for j in 0..N {
                self.xx[i][j] = self.xx[i][j] * (1.0 - FORGET) + w * x[i] * x[j];
            }
        }
        self.fit = Some(solve(self.xx, self.xy));
    }

    /// The estimated seconds of a pass with counts `x`; `None` until a
    /// pass is recorded.
    pub(crate) fn secs(&self, x: Counts) -> Option<f64> {
        let c = self.fit?;
        Some(c.iter().zip(x).map(|(c, x)| c * x).sum())
    }
}

/// The ridge solution of `xx c = xy` with every coefficient at least zero
/// (a negative one would price a larger pass below a smaller): the least
/// squares solution under that constraint, not the unconstrained one with
/// its negative coefficients set to zero. Set to zero after the solve, a
/// coefficient the passes wanted below zero leaves the others fitted
/// around it, and the prices were off by as much as the passes' spread:
/// on llama.cpp with eight sequences, plain passes after a run of prompt
/// chunks read 30-55% above their times, and drafts weighed against them
/// read cheap (BENCHMARKS.md, "Non-negative costs in the split fit").
///
/// Exact by enumeration: the constrained minimum is the unconstrained one
/// over its own support, so it is the best of the `2^N` supports whose
/// solution has no negative coefficient: 31 systems of at most five
/// unknowns a pass, in fixed arrays (the llama.cpp engine's own work a
/// step, outside its passes of tens of milliseconds, did not move).
fn solve(mut xx: [[f64; N]; N], xy: [f64; N]) -> [f64; N] {
    xx[0][0] += f64::MIN_POSITIVE;
    for (i, row) in xx.iter_mut().enumerate().skip(1) {
        row[i] += RIDGE * row[i] + f64::MIN_POSITIVE;
    }
    nonnegative(&xx, &xy)
}

/// The `c >= 0` that minimises `cᵀ a c - 2 bᵀ c` (0 at c = 0, which is
/// feasible): the best of the supports whose solution is.
fn nonnegative(a: &[[f64; N]; N], b: &[f64; N]) -> [f64; N] {
    let mut best = ([0.0; N], 0.0);
    for support in 1..1u32 << N {
        let Some(c) = solve_on(a, b, support).filter(|c| c.iter().all(|&v| v >= 0.0)) else {
            continue;
        };
        let objective = quadratic(a, &c) - 2.0 * dot(b, &c);
        if objective < best.1 {
            best = (c, objective);
        }
    }
    best.0
}

/// The solution of `xx c = xy` over the coefficients in `support` (a bit
/// each), the others zero; `None` where that system is singular or its
/// solution not finite.
fn solve_on(xx: &[[f64; N]; N], xy: &[f64; N], support: u32) -> Option<[f64; N]> {
    let mut index = [0; N];
    let mut k = 0;
    for (i, slot) in (0..N).filter(|i| support >> i & 1 == 1).zip(&mut index) {
        *slot = i;
        k += 1;
    }
    let (mut a, mut b) = ([[0.0; N]; N], [0.0; N]);
    for r in 0..k {
        b[r] = xy[index[r]];
        for c in 0..k {
            a[r][c] = xx[index[r]][index[c]];
        }
    }
    let sub = eliminate(a, b, k)?;
    let mut c = [0.0; N];
    for r in 0..k {
        c[index[r]] = sub[r];
    }
    c.iter().all(|v| v.is_finite()).then_some(c)
}

/// Gaussian elimination with partial pivoting of the first `k` rows and
/// columns of `a c = b`.
fn eliminate(mut a: [[f64; N]; N], mut b: [f64; N], k: usize) -> Option<[f64; N]> {
    for col in 0..k {
        let pivot = (col..k).max_by(|&x, &y| a[x][col].abs().total_cmp(&a[y][col].abs()))?;
        a.swap(col, pivot);
        b.swap(col, pivot);
        if a[col][col].abs() < f64::MIN_POSITIVE {
            return None;
        }
        for row in col + 1..k {
            let f = a[row][col] / a[col][col];
            let pivot_row = a[col];
            for (x, p) in a[row][..k].iter_mut().zip(pivot_row).skip(col) {
                *x -= f * p;
            }
            b[row] -= f * b[col];
        }
    }
    let mut c = [0.0; N];
    for row in (0..k).rev() {
        let known: f64 = (row + 1..k).map(|j| a[row][j] * c[j]).sum();
        c[row] = (b[row] - known) / a[row][row];
    }
    Some(c)
}

/// `cᵀ a c`.
fn quadratic(a: &[[f64; N]; N], c: &[f64; N]) -> f64 {
    a.iter().zip(c).map(|(row, ci)| ci * dot(row, c)).sum()
}

/// `x · y`.
fn dot(x: &[f64; N], y: &[f64; N]) -> f64 {
    x.iter().zip(y).map(|(x, y)| x * y).sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The counts of a pass of `computations` computations of `rows` rows
    /// in all, `wide` sequences of several rows, each computation reading
    /// `span` positions.
    fn pass(computations: f64, rows: f64, wide: f64, span: f64) -> Counts {
        [computations, rows, wide, rows * span, computations * span]
    }

    /// 20 ms a computation, 4 ms a row, 24 ms a sequence of several rows,
    /// 2 ms a row per thousand positions read, 3 ms a computation per
    /// thousand positions read.
    fn truth(x: Counts) -> f64 {
        0.020 * x[0] + 0.004 * x[1] + 0.024 * x[2] + (0.002 * x[3] + 0.003 * x[4]) / 1000.0
    }

    #[test]
    fn learns_each_cost() {
        let mut t = SplitTimes::default();
        assert_eq!(t.secs(pass(1.0, 1.0, 0.0, 500.0)), None);
        // Plain passes as sequences finish and caches grow, then drafts in
        // one or two.
        let passes = [
            pass(1.0, 8.0, 0.0, 300.0),
            pass(1.0, 6.0, 0.0, 900.0),
            pass(1.0, 1.0, 0.0, 1500.0),
            pass(2.0, 7.0, 0.0, 400.0),
            pass(2.0, 12.0, 1.0, 700.0),
            pass(2.0, 15.0, 2.0, 2000.0),
            pass(1.0, 16.0, 8.0, 500.0),
        ];
        for _ in 0..20 {
            for x in passes {
                t.record(x, truth(x));
            }
        }
        // Seen and unseen.
        let cases = [
            pass(1.0, 8.0, 0.0, 300.0),
            pass(2.0, 13.0, 1.0, 3000.0),
            pass(3.0, 20.0, 4.0, 100.0),
            pass(1.0, 1.0, 0.0, 4000.0),
        ];
        for x in cases {
            let got = t.secs(x).unwrap();
            let want = truth(x);
            assert!((got - want).abs() < 1e-3, "{x:?}: {got} vs {want}");
        }
    }

    #[test]
    fn a_long_cache_is_read_once_a_computation() {
        // Plain passes of one to four sequences whose longest cache is a
        // short conversation's (500 positions) or a long one's (4,000), as
        // sequences start and end. Reading a cache costs 6 ms a thousand
        // positions once a computation and 0.5 ms a thousand a row: priced
        // by rows times positions alone, one-row passes after the long
        // cache read 29% below their times.
        let secs = |x: Counts| 0.010 + 0.003 * x[1] + (0.0005 * x[3] + 0.006 * x[4]) / 1000.0;
        let mut t = SplitTimes::default();
        for i in 0..300 {
            let span = if i / 4 % 2 == 0 { 500.0 } else { 4000.0 };
            let x = pass(1.0, f64::from(i % 4 + 1), 0.0, span);
            t.record(x, secs(x));
        }
        for x in [
            pass(1.0, 1.0, 0.0, 4000.0),
            pass(1.0, 4.0, 0.0, 500.0),
            pass(1.0, 2.0, 0.0, 2000.0),
        ] {
            let error = (t.secs(x).unwrap() - secs(x)) / secs(x);
            assert!(error.abs() < 0.01, "{x:?}: {error}");
        }
    }

    #[test]
    fn long_passes_do_not_set_the_price_of_short_ones() {
        // A target on which a row costs 4 ms up to eight rows a
        // computation and 3 ms each past them, which the counts cannot
        // tell apart: a long draft of 128 or 256 rows every 17 passes,
        // decoding passes of 1 and 4 rows between. Fitted to absolute
        // errors, the long passes (their times 10 times larger, their
        // squares 100) set the price of a row, and decoding passes read
        // about 6% off.
        let secs = |x: Counts| 0.020 + 0.004 * x[1].min(8.0) + 0.003 * (x[1] - 8.0).max(0.0);
        let mut t = SplitTimes::default();
        for i in 0..400 {
            let x = match (i % 17, i % 34, i % 2) {
                (0, 0, _) => pass(1.0, 256.0, 1.0, 500.0),
                (0, _, _) => pass(1.0, 128.0, 1.0, 500.0),
                (_, _, 0) => pass(1.0, 1.0, 0.0, 500.0),
                _ => pass(1.0, 4.0, 0.0, 500.0),
            };
            t.record(x, secs(x));
        }
        for decode in [pass(1.0, 1.0, 0.0, 500.0), pass(1.0, 4.0, 0.0, 500.0)] {
            let got = t.secs(decode).unwrap();
            let error = (got - secs(decode)) / secs(decode);
            assert!(error.abs() < 0.05, "{decode:?}: {got}, {error}");
        }
    }

    #[test]
    fn costs_wanted_below_zero_are_fitted_at_zero() {
        // Measured on llama.cpp with eight sequences: plain passes whose
        // times fall a little as their caches grow (45 to 43 ms over 120
        // positions: the machine, not the cache), after prompt chunks.
        // Unconstrained, the fit takes a cost below zero; set to zero after
        // the solve, the costs fitted around it priced these plain passes
        // up to 27% above their times (the real ones 10-55%).
        let mut t = SplitTimes::default();
        let mut worst: f64 = 0.0;
        for round in 0..3 {
            for i in 0..8 {
                let prompt = f64::from(20 + i % 3 * 10);
                let x = pass(1.0, 8.0 + prompt, 1.0, 120.0);
                t.record(x, 0.05 + 0.0035 * prompt + 0.02 * f64::from(i % 2));
            }
            for i in 0..130 {
                let span = 120.0 + f64::from(i);
                let x = pass(1.0, 8.0, 0.0, span);
                let secs = 0.045 - 0.00002 * (span - 120.0);
                if let (1.., 64..) = (round, i) {
                    let error = (t.secs(x).unwrap() - secs) / secs;
                    worst = worst.max(error.abs());
                }
                t.record(x, secs);
            }
        }
        assert!(worst < 0.03, "{worst}");
    }

    #[test]
    fn what_the_passes_cannot_tell_reads_cheap() {
        // Only plain passes of 8 rows after one cache length: more rows in
        // the same computation read (nearly) free, so a draft is tried and
        // measured.
        let mut t = SplitTimes::default();
        for _ in 0..50 {
            t.record(pass(1.0, 8.0, 0.0, 256.0), 0.052);
        }
        let plain = t.secs(pass(1.0, 8.0, 0.0, 256.0)).unwrap();
        assert!((plain - 0.052).abs() < 1e-4, "{plain}");
        let wider = t.secs(pass(1.0, 16.0, 8.0, 256.0)).unwrap();
        assert!(wider < 0.052 * 1.01, "{wider}");
    }

    #[test]
    fn passes_of_no_time_do_not_break_the_fit() {
        let mut t = SplitTimes::default();
        for _ in 0..10 {
            t.record(pass(1.0, 4.0, 0.0, 100.0), 0.0);
            t.record(pass(1.0, 8.0, 1.0, 100.0), 0.0);
        }
        let got = t.secs(pass(1.0, 6.0, 1.0, 100.0)).unwrap();
        assert!(got.is_finite() && got >= 0.0, "{got}");
    }

    #[test]
    fn the_constrained_minimum_meets_its_conditions() {
        // Random passes (counts and times at least zero, some counts
        // always zero, some columns equal) against the conditions that
        // define the minimum of `cᵀ a c - 2 bᵀ c` over `c >= 0`: where a
        // coefficient is above zero the gradient is zero, where it is
        // zero the gradient is not below zero.
        let mut rng = fastrand::Rng::with_seed(7);
        let mut next = move || rng.f64();
        for case in 0..500 {
            let mut t = SplitTimes::default();
            for _ in 0..3 + case % 12 {
                let mut x = [0.0; N];
                for (i, v) in x.iter_mut().enumerate() {
                    *v = match (case + i) % 7 {
                        0 => 0.0,
                        1 => 1.0,
                        _ => (next() * 10.0).floor(),
                    };
                }
                t.record(x, next() * 0.1);
            }
            let (mut a, b) = (t.xx, t.xy);
            a[0][0] += f64::MIN_POSITIVE;
            for (i, row) in a.iter_mut().enumerate().skip(1) {
                row[i] += RIDGE * row[i] + f64::MIN_POSITIVE;
            }
            let c = nonnegative(&a, &b);
            let scale = b.iter().map(|v| v.abs()).fold(1e-12, f64::max);
            for i in 0..N {
                let gradient = (dot(&a[i], &c) - b[i]) / scale;
                assert!(c[i] >= 0.0, "case {case}: {c:?}");
                if c[i] > 0.0 {
                    assert!(gradient.abs() < 1e-6, "case {case} {i}: {gradient}");
                } else {
                    assert!(gradient > -1e-6, "case {case} {i}: {gradient} {c:?}");
                }
            }
        }
    }
}
