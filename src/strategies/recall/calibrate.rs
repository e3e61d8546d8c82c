//! The stop rule: each draft token's probability of acceptance, read from a
//! table of cells calibrated online from the engine's verifications.

use super::chains::K;
use crate::int::float64;
use crate::sync::{AtomicU64, Ordering};

/// Vote-share buckets.
/// Its sensitivity (replays at half and double, today's drafts):
/// BENCHMARKS.md, "Sensitivity of recall's tuned constants".
const SHARE_BUCKETS: usize = 6;
/// Copy-pointer match-length buckets (0: the pointer does not agree).
pub(super) const M_BUCKETS: usize = 6;
/// How many occurrences voted: 1, 2-3, 4 or more.
/// Its sensitivity (replays at half and double, today's drafts):
/// BENCHMARKS.md, "Sensitivity of recall's tuned constants".
const SUPPORT_BUCKETS: usize = 3;
/// Calibration cells: longest matching order x vote share x the copy
/// pointer's match length when it agrees with the token x support.
pub(super) const CELLS: usize = K * SHARE_BUCKETS * M_BUCKETS * SUPPORT_BUCKETS;
/// Observations the prior of a calibration cell counts as.
/// Its sensitivity (replays at half and double, today's drafts):
/// BENCHMARKS.md, "Sensitivity of recall's tuned constants".
const PRIOR_WEIGHT: f64 = 4.0;

/// A calibration cell's index.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Cell(u16);

impl Cell {
    /// The cell of a token drafted at order `o` with vote `share`, pointer
    /// state `pointer` (`m_bucket` of its match length when it agrees, else
    /// 0) and `support` voting occurrences.
    pub(super) fn new(o: usize, share: f64, pointer: usize, support: usize) -> Cell {
        let support = match support {
            0 | 1 => 0,
            2 | 3 => 1,
            _ => 2,
        };
        let i = ((o * SHARE_BUCKETS + share_bucket(share)) * M_BUCKETS
            + pointer.min(M_BUCKETS - 1))
            * SUPPORT_BUCKETS
            + support;
        // CELLS < 2^16.
        Cell(u16::try_from(i).unwrap_or(u16::MAX))
    }

    pub(super) fn index(self) -> usize {
        usize::from(self.0)
    }
}

/// The pointer-state bucket of a copy-pointer match of length `m`.
pub(super) fn m_bucket(m: usize) -> usize {
    match m {
        0..=7 => 1,
        8..=15 => 2,
        16..=31 => 3,
        32..=63 => 4,
        _ => 5,
    }
}

fn share_bucket(share: f64) -> usize {
    match share {
        s if s < 0.35 => 0,
        s if s < 0.5 => 1,
        s if s < 0.7 => 2,
        s if s < 0.85 => 3,
        s if s < 0.99 => 4,
        _ => 5,
    }
}

/// How much information (in Fisher units: a verification at probability
/// `p` brings `p (1 - p)`) a session's lean is shrunk toward 0 with. A new
/// session's few first verifications move it little; a session that keeps
/// being accepted more (or less) than the engine-wide cells predict leans
/// its way.
/// Its sensitivity (replays at half and double, today's drafts):
/// BENCHMARKS.md, "Sensitivity of recall's tuned constants".
const LEAN_PRIOR: f64 = 2.0;
/// The largest lean, in logits (an odds factor of about 20 either way).
/// Its sensitivity (replays at half and double, today's drafts):
/// BENCHMARKS.md, "Sensitivity of recall's tuned constants".
const LEAN_MAX: f64 = 3.0;

/// A session's offset on the engine-wide calibration, in logits.
///
/// The cells are engine-wide, so on an engine that serves several kinds
/// of traffic they predict an average of them: code edits, whose copies
/// are accepted nearly always, drafted short after chat, and chat long after
/// code edits. Each session so keeps the sums of its own verifications'
/// residuals against the cells and of their information; their ratio
/// (with [`LEAN_PRIOR`]) is one Newton step of the logit shift that best
/// fits the session, from 0. No tag is needed: the session's own outcomes
/// tell its kind.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(super) struct Lean {
    /// Accepted minus predicted, over the session's verifications.
    residual: f64,
    /// The sum of `p (1 - p)` over them.
    information: f64,
}

impl Lean {
    /// Counts one verification of a token the cells gave probability `p`.
    pub(super) fn record(&mut self, p: f64, accepted: bool) {
        let p = p.clamp(0.0, 1.0);
        self.residual += f64::from(u8::from(accepted)) - p;
        self.information += p * (1.0 - p);
    }

    /// The odds factor this lean applies (`exp` of the logit shift).
    pub(super) fn odds(&self) -> f64 {
        (self.residual / (self.information + LEAN_PRIOR))
            .clamp(-LEAN_MAX, LEAN_MAX)
            .exp()
    }

    /// `p` with its odds multiplied by `odds` (from [`Lean::odds`]).
    pub(super) fn apply(p: f64, odds: f64) -> f64 {
        if odds == 1.0 {
            // Exactly `p` (`1 - p + p` need not round to 1).
            return p;
        }
        let leaned = p * odds;
        // 1 - p + p * odds >= min(1, odds) > 0 for p in 0..=1.
        leaned / (1.0 - p + leaned)
    }
}

/// Verifications at which a cell's counts are halved, so that they keep
/// adapting (and fit their 32 bits).
const HALVE_AT: u64 = 1 << 30;

/// Accepted / tried per cell, engine-wide: every sequence reads and counts
/// into the same cells, so that a new drafter starts calibrated and 32
/// sequences in flight calibrate each other as they go (merging per-sequence
/// counts every 64 draft calls instead drafted worse in 32 slots; DESIGN.md,
/// "Engine-wide state and concurrency").
#[derive(Debug)]
pub(super) struct Calibration {
    /// Per cell: accepted (high 32 bits) and tried (low 32 bits).
    cells: Box<[AtomicU64]>,
}

/// One cell's counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Counts(u64);

impl Counts {
    fn new(accepted: u64, tried: u64) -> Counts {
        Counts(accepted.min(tried) << 32 | tried)
    }
    fn accepted(self) -> u64 {
        self.0 >> 32
    }
    fn tried(self) -> u64 {
        self.0 & 0xFFFF_FFFF
    }
}

impl Calibration {
    pub(super) fn new() -> Calibration {
        Calibration {
            cells: (0..CELLS).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    fn counts(&self, cell: Cell) -> Counts {
        Counts(self.cells[cell.index()].load(Ordering::Relaxed))
    }

    /// The calibrated acceptance probability of a token in `cell` whose
    /// raw estimate is `prior`.
    pub(super) fn probability(&self, cell: Cell, prior: f64) -> f64 {
        let c = self.counts(cell);
        (float64(c.accepted()) + PRIOR_WEIGHT * prior) / (float64(c.tried()) + PRIOR_WEIGHT)
    }

    /// Counts one verification of a token in `cell`.
    pub(super) fn record(&self, cell: Cell, accepted: bool) {
        let add = u64::from(accepted) << 32 | 1;
        let c = &self.cells[cell.index()];
        let before = Counts(c.fetch_add(add, Ordering::Relaxed));
        if before.tried() + 1 >= HALVE_AT {
            // Halve; a count racing in meanwhile is lost, which is harmless.
            let now = Counts(c.load(Ordering::Relaxed));
            let half = Counts::new(now.accepted() / 2, now.tried() / 2);
            let _ = c.compare_exchange(now.0, half.0, Ordering::Relaxed, Ordering::Relaxed);
        }
    }

    /// (accepted, tried) of every cell, for saving.
    pub(super) fn numbers(&self) -> impl Iterator<Item = [f64; 2]> + '_ {
        self.cells.iter().map(|c| {
            let c = Counts(c.load(Ordering::Relaxed));
            [float64(c.accepted()), float64(c.tried())]
        })
    }

    /// Sets the cells from pairs of whole, non-negative counts; false (and
    /// nothing set) when a pair is not one.
    pub(super) fn set(&self, pairs: &[f64]) -> bool {
        let whole = |x: f64| x >= 0.0 && x < float64(HALVE_AT) && x.fract() == 0.0;
        if pairs.len() != 2 * CELLS || !pairs.iter().all(|&x| whole(x)) {
            return false;
        }
        // Whole numbers in 0..2^30 (checked above): exact as integers.
        let count = crate::int::whole;
        for (c, p) in self.cells.iter().zip(pairs.chunks_exact(2)) {
            c.store(Counts::new(count(p[0]), count(p[1])).0, Ordering::Relaxed);
        }
        true
    }
}
