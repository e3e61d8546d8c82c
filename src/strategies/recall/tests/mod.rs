//! recall's unit tests, by topic, and the helpers they share.

use super::*;
use crate::index::low32;
use crate::int::{ix, wide};
use calibrate::Lean;
use chains::{Chains, Hasher, SeqIndex};
use learner::SYNC_EVERY;
use memory::Span;

mod drafting;
mod lean;
mod publishing;

pub(super) fn draft(r: &mut Recall, history: &[Token], last: Token, max: usize) -> Vec<Token> {
    let mut out = Vec::new();
    r.draft(history, last, DraftLimits { min: 0, max }, &mut out);
    out
}

/// How a test drafts: as [`Drafter::draft`] does, or with a part of the
/// search held still to check the rest on its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Mode {
    /// The stop rule applies the session's lean (without: the cells' word
    /// alone).
    pub(super) lean: bool,
    /// A call's order search starts from the bound the last call left
    /// (without: from the longest order).
    pub(super) carry_top: bool,
}

/// [`Drafter::draft`]'s way.
pub(super) const SHIPPED: Mode = Mode {
    lean: true,
    carry_top: true,
};

/// [`draft`] in `mode`: the same steps as [`Drafter::draft`], with the
/// lean reset before the stop rule reads it (the lean still learns, from
/// 0, but is never applied) and the order bound replaced by the longest
/// order, as `mode` says.
pub(super) fn draft_in(
    mode: Mode,
    r: &mut Recall,
    history: &[Token],
    last: Token,
    max: usize,
) -> Vec<Token> {
    if mode == SHIPPED {
        return draft(r, history, last, max);
    }
    let mut out = Vec::new();
    let mut top = r.settle_last_draft(history, last);
    if !mode.carry_top {
        top = K - 1;
    }
    if !mode.lean {
        r.learner.lean = Lean::default();
    }
    r.draft_after(history, last, DraftLimits { min: 0, max }, &mut out, top);
    out
}

/// Draft calls over a periodic history whose target never follows the
/// pattern (every draft is rejected at its first token, so the orchestrator
/// calls no accept); whether each call drafted.
pub(super) fn rounds_rejected(mode: Mode, r: &mut Recall, rounds: usize) -> Vec<bool> {
    let mut history: Vec<Token> = [1, 2, 3].repeat(30);
    (0..rounds)
        .map(|round| {
            let last = [1, 2, 3][round % 3];
            let drafted = !draft_in(mode, r, &history, last, 16).is_empty();
            history.push(last);
            drafted
        })
        .collect()
}

/// Text made of `phrases` phrases of 2 to 20 tokens, picked at random, so
/// that contexts repeat at every order; a seeded LCG.
pub(super) fn phrase_text(seed: u64, phrases: usize, len: usize) -> Vec<Token> {
    let mut state = seed;
    let mut next = move |n: u64| {
        state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (state >> 33) % n
    };
    let book: Vec<Vec<Token>> = (0..phrases)
        .map(|_| (0..2 + next(19)).map(|_| low32(next(500))).collect())
        .collect();
    let mut text = Vec::with_capacity(len + 20);
    while text.len() < len {
        text.extend_from_slice(&book[ix(next(wide(phrases)))]);
    }
    text.truncate(len);
    text
}

/// One draft call verified greedily against `truth` (the tokens after
/// `last`), its accepted prefix reported: (drafted, accepted).
pub(super) fn greedy_step(
    mode: Mode,
    r: &mut Recall,
    history: &[Token],
    last: Token,
    truth: &[Token],
) -> (usize, usize) {
    let d = draft_in(mode, r, history, last, 16);
    let n = d.iter().zip(truth).take_while(|(a, b)| a == b).count();
    if n > 0 {
        r.accept(n);
    }
    (d.len(), n)
}

/// (forward passes, drafted tokens, accepted tokens) of one request under
/// greedy verification.
pub(super) fn greedy_request(
    mode: Mode,
    r: &mut Recall,
    prompt: &[Token],
    output: &[Token],
) -> (usize, usize, usize) {
    let mut history = prompt.to_vec();
    r.begin(&history);
    let (mut i, mut passes, mut drafted, mut accepted) = (0, 0, 0, 0);
    while i < output.len() {
        let last = output[i];
        let (d, n) = greedy_step(mode, r, &history, last, &output[i + 1..]);
        history.push(last);
        history.extend_from_slice(&output[i + 1..i + 1 + n]);
        (drafted, accepted) = (drafted + d, accepted + n);
        i += n + 1;
        passes += 1;
    }
    r.end_request();
    (passes, drafted, accepted)
}
