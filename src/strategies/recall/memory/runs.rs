//! The runs a memory holds (a request, or a piece of one in flight): where
//! each starts and the context it continues, so that a save rebuilds the
//! same memory and a replica's export sends only what this replica learned.

use std::collections::VecDeque;

use crate::int::wide;
use crate::token::Token;

use super::super::chains::Chains;
use super::ring::View;

/// Tokens of context a run keeps: the longest order's.
pub(crate) const RUN_CONTEXT: usize = super::super::chains::ORDERS[super::super::chains::K - 1];

/// Tokens a held run spans, on average, at least: the memory keeps at most
/// `capacity / RUN_SPAN` runs (and as many imported ranges). A drafter's
/// in-flight pieces are 16 tokens or more, so only requests shorter than 8
/// tokens, or appends of a few tokens at a time, reach the limit.
pub(super) const RUN_SPAN: usize = 8;

/// Heap bytes per token of capacity for the runs and imported ranges (one
/// of each per [`RUN_SPAN`] tokens at most).
pub(super) const BYTES_PER_TOKEN: usize =
    (std::mem::size_of::<Run>() + std::mem::size_of::<Span>()) / RUN_SPAN;

/// The most runs whose deque a draft call's in-flight append may grow
/// (moving 80 bytes a run): beyond it, growth waits for a request's end.
const IN_FLIGHT_RUNS: usize = 4096;

/// Pushes `x` onto `v`, which grows by doubling but never past `max` slots,
/// so that its heap stays within what the budget counts.
fn push_within<T>(v: &mut VecDeque<T>, x: T, max: usize) {
    if v.len() == v.capacity() {
        let room = max.saturating_sub(v.len()).max(1);
        v.reserve_exact(v.len().max(4).min(room));
    }
    v.push_back(x);
}

/// One run of appended tokens: its start and the context it continues.
#[derive(Clone, Copy, Debug)]
struct Run {
    start: u64,
    context: RunContext,
}

/// A range of memory positions, `start..end`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(in super::super) struct Span {
    pub(in super::super) start: u64,
    pub(in super::super) end: u64,
}

impl Span {
    /// Whether `p` is in the range.
    pub(in super::super) fn contains(self, p: u64) -> bool {
        p >= self.start && p < self.end
    }
}

/// Up to the longest order's worth of tokens a run continues.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct RunContext {
    tokens: [Token; RUN_CONTEXT],
    len: u8,
}

impl RunContext {
    /// The last (at most 16) of `tokens`.
    pub(crate) fn new(tokens: &[Token]) -> RunContext {
        let tokens = &tokens[tokens.len().saturating_sub(RUN_CONTEXT)..];
        let mut out = RunContext::default();
        out.tokens[..tokens.len()].copy_from_slice(tokens);
        out.len = u8::try_from(tokens.len()).unwrap_or(0);
        out
    }

    /// The tokens.
    #[must_use]
    pub(crate) fn as_slice(&self) -> &[Token] {
        &self.tokens[..usize::from(self.len)]
    }
}

/// The runs held and the ranges imported from other replicas, oldest
/// first, each at most `max` (the memory's capacity / [`RUN_SPAN`]).
#[derive(Debug, Default)]
pub(super) struct Runs {
    /// Each run held: where it starts and the tokens before it in its
    /// request (the first run may have lost its head). 80 bytes a run.
    runs: VecDeque<Run>,
    /// Ranges appended by an import (another replica's learning), which an
    /// export leaves out.
    imported: VecDeque<Span>,
}

impl Runs {
    /// Heap bytes of the two deques.
    pub(super) fn bytes(&self) -> usize {
        self.runs.capacity() * std::mem::size_of::<Run>()
            + self.imported.capacity() * std::mem::size_of::<Span>()
    }

    /// Records a run starting at `start` after `context`; runs wholly below
    /// `floor` are forgotten, and beyond `max` runs the oldest absorbs the
    /// next (the index is unchanged; a save or an export then gives the
    /// second's first tokens the first's last ones as their context).
    pub(super) fn push(&mut self, start: u64, context: &[Token], floor: u64, max: usize) {
        let run = Run {
            start,
            context: RunContext::new(context),
        };
        push_within(&mut self.runs, run, max + 1);
        while self.runs.len() > 1 && self.runs[1].start <= floor {
            self.runs.pop_front();
        }
        while self.runs.len() > max {
            self.runs.remove(1);
        }
    }

    /// Whether one more run needs the runs' deque to grow past
    /// [`IN_FLIGHT_RUNS`]: a copy of more than 320 KiB, which an append that
    /// may wait (a request's end) makes rather than a draft call.
    pub(super) fn must_grow_far(&self, max: usize) -> bool {
        self.runs.len() == self.runs.capacity()
            && self.runs.len() >= IN_FLIGHT_RUNS
            && self.runs.len() <= max
    }

    /// Records `span` as imported; ranges below `floor` are forgotten.
    pub(super) fn imported(&mut self, span: Span, floor: u64, max: usize) {
        while self.imported.front().is_some_and(|s| s.end <= floor) {
            self.imported.pop_front();
        }
        match self.imported.back_mut() {
            Some(last) if last.end == span.start => last.end = span.end,
            _ => {
                push_within(&mut self.imported, span, max + 1);
                // Beyond the bound the oldest range is forgotten: an export
                // would then send its tokens back as this replica's own.
                while self.imported.len() > max {
                    self.imported.pop_front();
                }
            }
        }
    }

    /// Each run's length and context (see
    /// [`RecallMemory::runs`](super::RecallMemory::runs)).
    pub(super) fn lengths(&self, view: &View<'_>) -> Vec<(u64, RunContext)> {
        let mut out = Vec::with_capacity(self.runs.len());
        for (i, run) in self.runs.iter().enumerate() {
            let next = self.runs.get(i + 1).map_or(view.end(), |r| r.start);
            // A run that lost its head lost its context too.
            let context = if run.start < view.floor() {
                RunContext::default()
            } else {
                run.context
            };
            out.push((next - run.start.max(view.floor()), context));
        }
        out
    }

    /// What is held from position `from` on, run by run, leaving out
    /// imported ranges (see
    /// [`RecallMemory::runs_since`](super::RecallMemory::runs_since)).
    pub(super) fn since(&self, view: &View<'_>, from: u64) -> Vec<(RunContext, Vec<Token>)> {
        let mut out = Vec::new();
        // Runs and imported ranges are in order: start at the run that holds
        // `from` (an export after every request reads only what is new, not
        // every run held).
        let first = self
            .runs
            .partition_point(|r| r.start <= from)
            .saturating_sub(1);
        for (i, run) in self.runs.iter().enumerate().skip(first) {
            let next = self.runs.get(i + 1).map_or(view.end(), |r| r.start);
            let start = run.start.max(view.floor()).max(from);
            if start >= next {
                continue;
            }
            // The parts of start..next that were not imported.
            let mut at = start;
            let overlapping = self.imported.partition_point(|s| s.end <= start);
            for s in self
                .imported
                .range(overlapping..)
                .take_while(|s| s.start < next)
            {
                if s.start > at {
                    out.push(piece(view, run, at, s.start));
                }
                at = at.max(s.end);
            }
            if at < next {
                out.push(piece(view, run, at, next));
            }
        }
        out
    }

    /// Runs held and the room their deque has for them.
    #[cfg(all(test, not(loom)))]
    pub(super) fn room(&self) -> (usize, usize) {
        (self.runs.len(), self.runs.capacity())
    }
}

/// Tokens `from..to` of `run`, with their context.
fn piece(view: &View<'_>, run: &Run, from: u64, to: u64) -> (RunContext, Vec<Token>) {
    let context = if from == run.start {
        run.context
    } else {
        let k = (from - view.floor().max(run.start)).min(wide(RUN_CONTEXT));
        let before: Vec<Token> = (from - k..from).map(|p| view.token(p)).collect();
        RunContext::new(&before)
    };
    (context, (from..to).map(|p| view.token(p)).collect())
}
