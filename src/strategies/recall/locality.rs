//! The locality cursor: where the next token is expected (right after the
//! last accepted token's source) and the recent copy regions a draft
//! resumes near after an excursion.

use super::chains::Chains;
use super::sources::{Pointer, Pos, Sources};

/// Copy regions remembered for locality.
/// Its sensitivity (replays at half and double, today's drafts):
/// BENCHMARKS.md, "Sensitivity of recall's tuned constants".
pub(super) const ANCHORS: usize = 4;
/// Sources closer than this belong to the same region.
/// Its sensitivity (replays at half and double, today's drafts):
/// BENCHMARKS.md, "Sensitivity of recall's tuned constants".
const REGION: u64 = 512;

/// Where drafting resumes.
#[derive(Clone, Debug, Default)]
pub(super) struct Locality {
    /// Where the next token is expected (locality across calls).
    expect: Option<Pos>,
    /// Recent distinct copy regions (their latest accepted source positions),
    /// newest first. Occurrences just after the first (the source of the
    /// last accepted token) are preferred, and after an excursion (an edited
    /// line copied from a diff) copying resumes near one of them.
    anchors: [Option<Pos>; ANCHORS],
}

impl Locality {
    /// Forgets the expected position (whether the last draft was accepted
    /// is unknown).
    pub(super) fn forget_expected(&mut self) {
        self.expect = None;
    }

    /// A new session: nothing is expected, no region is remembered.
    pub(super) fn clear(&mut self) {
        *self = Locality::default();
    }

    /// The newest anchor.
    pub(super) fn anchor(&self) -> Option<Pos> {
        self.anchors[0]
    }

    /// The copy pointer a draft call starts from: the expected position if
    /// it still follows the own index's last token, else the best match
    /// near an anchor. The expectation is used once.
    pub(super) fn start(&mut self, src: &Sources<'_>) -> Option<Pointer> {
        let len = src.own.end();
        let last = src.own.token(len - 1);
        self.expect
            .take()
            .filter(|&e| src.holds(e) && e.at() > src.floor(e) && src.token(Pos(e.0 - 1)) == last)
            .map(|e| Pointer {
                pos: e,
                matched: src.match_len(e, len, &[]),
            })
            .or_else(|| src.local(&self.anchors))
    }

    /// The last accepted token came from `source` (`None`: nothing was
    /// accepted): the next is expected right after it, and its region moves
    /// to the front (or evicts the oldest).
    pub(super) fn accepted(&mut self, source: Option<Pos>) {
        self.expect = source.map(|s| s.later(2));
        if let Some(s) = source {
            let i = self
                .anchors
                .iter()
                .position(|a| {
                    a.is_some_and(|a| a.same_store(s) && a.at().abs_diff(s.at()) < REGION)
                })
                .unwrap_or(ANCHORS - 1);
            self.anchors.copy_within(0..i, 1);
            self.anchors[0] = Some(s);
        }
    }
}
