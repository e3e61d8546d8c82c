//! The budget's correction of drafters' own acceptance estimates (recall's
//! `draft_probabilities`), learned from the drafts the stepper verified.
//!
//! A drafter estimates how likely its tokens are to match what the target
//! chooses. Those estimates are its own: learned under greedy decoding,
//! over whatever the engine-wide memory holds. Under sampled decoding a
//! drafted token is kept only as often as the target's probability of it,
//! and a memory trained on one kind of traffic can be confident about
//! another's. The budget trusts an estimate only as far as the stepper has
//! seen it come true: each estimate falls into a bucket, and a bucket's
//! acceptance, measured over the drafted tokens verified there, replaces
//! it once there are enough of them. A bucket is kept again by band of the
//! target's margin on the token the draft follows: the estimate corrected
//! by its bucket is corrected again by its band's.

use std::collections::HashMap;

use smallvec::SmallVec;

use crate::index::hash::FastHash;
use crate::int::float;

/// Buckets of estimated probability, equally wide.
const BUCKETS: usize = 10;

/// Bands of the target's confidence in the token a draft follows (its
/// top-1 / top-2 logit margin): `[0, 1)`, `[1, 2)`, `[2, 4)`, `[4, 8)`,
/// `[8, 16)`, 16 and up, and one for no margin (sampled decoding, a
/// resumed request). Where the target is sure of a token, the text is
/// often one it copies, and drafts from the history hold longer there.
/// Edges on a doubling scale, as logit gaps differ by model; halving or
/// doubling every edge moved the simulated speed-up on the real model's
/// outputs by under 1% (BENCHMARKS.md, "The target's margin in the
/// budget's correction").
const BANDS: usize = 7;

/// How many verified tokens the drafter's own estimate counts as, in its
/// bucket: the correction takes over after a few dozen tokens. Varying it
/// from 4 to 32 moved the simulated speed-up on the real model's outputs
/// by under 1.2% (BENCHMARKS.md, "The target's margin in the budget's
/// correction").
const PRIOR: f64 = 8.0;

/// Tokens a bucket remembers: past it, its counts are halved, so that the
/// correction follows a change of traffic within a few hundred tokens.
const MEMORY: f64 = 256.0;

/// Corrections kept apart by source (a drafter's memory: a scope), at most:
/// past them, a source shares its drafter's correction for sources not
/// kept apart. Each is 80 buckets and a name (about 1.4 KB).
const SOURCES: usize = 1024;

/// Per drafter name, source of its estimates (see
/// [`Drafter::estimates_source`](crate::Drafter::estimates_source)) and
/// kind of decoding (greedy, sampled): each bucket's verified and accepted
/// tokens.
#[derive(Clone, Debug, Default)]
pub(crate) struct Calibration {
    drafters: Vec<Entry>,
    /// The entries of each source and kind of decoding, by index: a step
    /// finds its drafter's without a scan over every scope's.
    by_source: HashMap<(Option<u64>, bool), SmallVec<[usize; 2]>, FastHash>,
}

#[derive(Clone, Debug)]
struct Entry {
    name: String,
    buckets: [Bucket; BUCKETS],
    /// The same, apart by band of the target's margin: an estimate
    /// corrected by its band's bucket, which starts from `buckets`'.
    banded: [[Bucket; BUCKETS]; BANDS],
}

#[derive(Clone, Copy, Debug, Default)]
struct Bucket {
    tried: f64,
    accepted: f64,
}

impl Bucket {
    /// Estimate `p` corrected by this bucket's counts, `p` counting as
    /// [`PRIOR`] tokens.
    fn correct(self, p: f64) -> f64 {
        (self.accepted + PRIOR * p.clamp(0.0, 1.0)) / (self.tried + PRIOR)
    }

    /// Counts a verified token, halving the counts past [`MEMORY`].
    fn add(&mut self, kept: bool) {
        if self.tried >= MEMORY {
            self.tried /= 2.0;
            self.accepted /= 2.0;
        }
        self.tried += 1.0;
        if kept {
            self.accepted += 1.0;
        }
    }
}

/// The bucket of estimate `p` (clamped to `[0, 1]`).
fn bucket(p: f64) -> usize {
    let b = p.clamp(0.0, 1.0) * float(BUCKETS);
    // In 0..=BUCKETS (the cast floors it); a sure estimate joins the top
    // bucket.
    crate::int::ix(crate::int::whole(b)).min(BUCKETS - 1)
}

/// The band of margin `m` (see [`BANDS`]).
pub(crate) fn band(m: f32) -> usize {
    if m.is_nan() {
        return BANDS - 1;
    }
    let mut band = 0;
    let mut top = 1.0;
    while band < BANDS - 2 && m >= top {
        band += 1;
        top *= 2.0;
    }
    band
}

impl Calibration {
    fn find(&self, name: &str, source: Option<u64>, sampled: bool) -> Option<usize> {
        let entries = self.by_source.get(&(source, sampled))?;
        entries
            .iter()
            .copied()
            .find(|&i| self.drafters[i].name == name)
    }

    /// The buckets of `name` on `source`, or of `name` on no source when
    /// `source`'s are not kept (past [`SOURCES`]).
    fn entry(&mut self, name: &str, source: Option<u64>, sampled: bool) -> &mut Entry {
        let i = match self.find(name, source, sampled) {
            Some(i) => i,
            None => self.add(name, source, sampled),
        };
        &mut self.drafters[i]
    }

    fn add(&mut self, name: &str, source: Option<u64>, sampled: bool) -> usize {
        // Past SOURCES sources (a key each for greedy and sampled), a new
        // one shares the correction of sources not kept apart.
        let source = source.filter(|_| self.by_source.len() < 2 * SOURCES);
        if let Some(i) = self.find(name, source, sampled) {
            return i;
        }
        let i = self.drafters.len();
        self.drafters.push(Entry {
            name: name.to_string(),
            buckets: [Bucket::default(); BUCKETS],
            banded: [[Bucket::default(); BUCKETS]; BANDS],
        });
        self.by_source.entry((source, sampled)).or_default().push(i);
        i
    }

    /// Makes the tables of `name` on `source`, greedy and sampled (when a
    /// request starts: a step then finds them).
    pub(crate) fn register(&mut self, name: &str, source: Option<u64>) {
        self.entry(name, source, false);
        self.entry(name, source, true);
    }

    /// Appends to `out` each of `estimates` of a draft after a token
    /// chosen in margin band `band`, corrected by what was measured in its
    /// bucket, then in its band's.
    pub(crate) fn correct(
        &mut self,
        name: &str,
        source: Option<u64>,
        sampled: bool,
        band: usize,
        estimates: &[f64],
        out: &mut Vec<f64>,
    ) {
        let e = self.entry(name, source, sampled);
        let banded = &e.banded[band.min(BANDS - 1)];
        out.extend(estimates.iter().map(|&p| {
            let b = bucket(p);
            banded[b].correct(e.buckets[b].correct(p))
        }));
    }

    /// A draft whose tokens had `estimates` was verified: its first
    /// `accepted` tokens kept, the one after them (if any) refused; the
    /// tokens after a refused one were not tried.
    pub(crate) fn record(
        &mut self,
        name: &str,
        source: Option<u64>,
        sampled: bool,
        band: usize,
        estimates: &[f64],
        accepted: usize,
    ) {
        let e = self.entry(name, source, sampled);
        for (i, &p) in estimates.iter().enumerate().take(accepted + 1) {
            let kept = i < accepted;
            e.buckets[bucket(p)].add(kept);
            e.banded[band.min(BANDS - 1)][bucket(p)].add(kept);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn corrected(c: &mut Calibration, name: &str, sampled: bool, p: f64) -> f64 {
        let mut out = Vec::new();
        c.correct(name, None, sampled, 0, &[p], &mut out);
        out[0]
    }

    #[test]
    fn learns_by_bucket_apart_by_drafter_and_mode() {
        let mut c = Calibration::default();
        // Nothing measured: the drafter's own estimates.
        assert!((corrected(&mut c, "recall", false, 0.9) - 0.9).abs() < 1e-12);
        // Estimates of 0.9 that came true one time in five.
        for _ in 0..200 {
            c.record("recall", None, true, 0, &[0.95, 0.9], 0);
        }
        let p = corrected(&mut c, "recall", true, 0.9);
        assert!((0.0..0.1).contains(&p), "{p}");
        // (case, drafter, sampled, estimate, expected): the other mode, the
        // other drafter and other buckets keep their own.
        let cases = [
            ("greedy decoding", "recall", false, 0.9, 0.9),
            ("another drafter", "other", true, 0.9, 0.9),
            ("another bucket", "recall", true, 0.5, 0.5),
        ];
        for (case, name, sampled, est, want) in cases {
            let got = corrected(&mut c, name, sampled, est);
            assert!((got - want).abs() < 1e-12, "{case}: {got}");
        }
        // Only the tokens up to the first refused one are counted.
        let mut d = Calibration::default();
        d.record("r", None, false, 0, &[0.15, 0.15, 0.15, 0.15], 1);
        let b = d.drafters[0].buckets[1];
        assert_eq!((b.tried, b.accepted), (2.0, 1.0));
    }

    #[test]
    fn bands_of_the_margin() {
        let cases = [
            (0.0, 0),
            (-1.0, 0),
            (0.99, 0),
            (1.0, 1),
            (3.9, 2),
            (4.0, 3),
            (8.0, 4),
            (15.9, 4),
            (16.0, 5),
            (f32::INFINITY, 5),
            (f32::NAN, BANDS - 1),
        ];
        for (margin, want) in cases {
            assert_eq!(band(margin), want, "margin {margin}");
        }
    }

    #[test]
    fn learns_apart_by_band() {
        let mut c = Calibration::default();
        // Estimates of 0.6: true nine times in ten after a sure token
        // (band 5), one time in four after a near tie (band 0).
        for i in 0..400 {
            c.record("r", None, false, 5, &[0.6], usize::from(i % 10 != 0));
            c.record("r", None, false, 0, &[0.6], usize::from(i % 4 == 0));
        }
        let at = |c: &mut Calibration, band| {
            let mut out = Vec::new();
            c.correct("r", None, false, band, &[0.6], &mut out);
            out[0]
        };
        let (sure, tie) = (at(&mut c, 5), at(&mut c, 0));
        assert!((sure - 0.9).abs() < 0.05, "{sure}");
        assert!((tie - 0.25).abs() < 0.05, "{tie}");
        // A band with nothing measured: the bucket's correction over all.
        let other = at(&mut c, 3);
        assert!((other - 0.575).abs() < 0.05, "{other}");
    }

    #[test]
    fn follows_a_change_of_traffic() {
        let mut c = Calibration::default();
        for _ in 0..1000 {
            c.record("r", None, false, 0, &[0.85], 0);
        }
        for _ in 0..600 {
            c.record("r", None, false, 0, &[0.85], 1);
        }
        let p = corrected(&mut c, "r", false, 0.85);
        assert!(p > 0.8, "{p}");
    }

    #[test]
    fn keeps_sources_apart_up_to_its_bound() {
        let at = |c: &mut Calibration, source| {
            let mut out = Vec::new();
            c.correct("recall", source, false, 0, &[0.9], &mut out);
            out[0]
        };
        let mut c = Calibration::default();
        // One scope's estimates of 0.9 come true one time in ten.
        for _ in 0..200 {
            c.record("recall", Some(1), false, 0, &[0.9], 0);
        }
        assert!(at(&mut c, Some(1)) < 0.2);
        // (case, source, expected): another scope and no scope keep their own.
        for (case, source) in [("another scope", Some(2)), ("no scope", None)] {
            let got = at(&mut c, source);
            assert!((got - 0.9).abs() < 1e-12, "{case}: {got}");
        }
        // Past the bound, a new source shares the correction of no source.
        for id in 10..10 + 2 * SOURCES as u64 {
            c.register("recall", Some(id));
        }
        let kept = c.drafters.len();
        assert!(kept <= 2 * SOURCES + 2, "{kept} entries");
        for _ in 0..200 {
            c.record("recall", Some(999_999), false, 0, &[0.9], 0);
        }
        assert_eq!(c.drafters.len(), kept, "an entry past the bound");
        assert!(at(&mut c, None) < 0.2);
    }
}
