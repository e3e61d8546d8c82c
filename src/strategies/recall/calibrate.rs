//! The stop rule: each draft token's probability of acceptance, read from a
//! table of cells calibrated online from the engine's verifications.

use super::index::K;

/// Vote-share buckets.
const SHARE_BUCKETS: usize = 6;
/// Copy-pointer match-length buckets (0: the pointer does not agree).
pub(super) const M_BUCKETS: usize = 6;
/// How many occurrences voted: 1, 2-3, 4 or more.
const SUPPORT_BUCKETS: usize = 3;
/// Calibration cells: longest matching order x vote share x the copy
/// pointer's match length when it agrees with the token x support.
pub(super) const CELLS: usize = K * SHARE_BUCKETS * M_BUCKETS * SUPPORT_BUCKETS;
/// Observations the prior of a calibration cell counts as.
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
        Cell(i as u16)
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

/// Accepted / tried per cell.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Calibration {
    pub(super) cells: Box<[(f64, f64); CELLS]>,
}

impl Calibration {
    pub(super) fn new() -> Calibration {
        Calibration {
            cells: Box::new([(0.0, 0.0); CELLS]),
        }
    }

    /// The calibrated acceptance probability of a token in `cell` whose
    /// raw estimate is `prior`, with `delta` (this sequence's observations
    /// not yet merged) added.
    pub(super) fn probability(&self, delta: &Calibration, cell: Cell, prior: f64) -> f64 {
        let (a, t) = self.cells[cell.index()];
        let (da, dt) = delta.cells[cell.index()];
        (a + da + PRIOR_WEIGHT * prior) / (t + dt + PRIOR_WEIGHT)
    }

    /// Counts one verification of a token in `cell`.
    pub(super) fn record(&mut self, cell: Cell, accepted: bool) {
        let c = &mut self.cells[cell.index()];
        c.0 += f64::from(u8::from(accepted));
        c.1 += 1.0;
    }

    /// Adds `delta`'s counts and clears it.
    pub(super) fn merge(&mut self, delta: &mut Calibration) {
        for (c, d) in self.cells.iter_mut().zip(delta.cells.iter_mut()) {
            c.0 += d.0;
            c.1 += d.1;
            *d = (0.0, 0.0);
        }
    }
}
