//! A step's batch: each decoding sequence's draft (proposed, cut to the
//! room it has, sized by the budget when there is one), its rows, then the
//! prompt chunks of joining sequences.

use super::budget::Budget;
use super::reply::Sampling;
use super::sequence::{Live, Phase, Sequence};
use super::target::{Row, SeqId};
use super::{Batch, Stepper};
use crate::token::Token;

impl Sequence {
    fn decoding(&self) -> Option<Token> {
        match self.live.as_ref()? {
            l if l.done => None,
            Live {
                phase: Phase::Decode { last },
                ..
            } => Some(*last),
            _ => None,
        }
    }

    pub(super) fn joining(&self) -> bool {
        self.live
            .as_ref()
            .is_some_and(|l| !l.done && l.phase == Phase::Prefill)
    }

    /// Tokens to evaluate again before `last` (after a checkpoint restore).
    fn pending(&self) -> usize {
        self.tokens.len() - self.cached.min(self.tokens.len())
    }
}

impl Stepper {
    /// Drafts and the batch: decoding sequences first (at most an equal
    /// share of the batch each, after room for a prompt chunk when a
    /// sequence is joining), then prompt chunks in what is left.
    pub(super) fn build(&mut self) {
        self.batch.clear();
        let n_decoding = self.seqs.iter().filter(|s| s.decoding().is_some()).count();
        let joining = self.seqs.iter().any(Sequence::joining);
        let reserve = if joining { self.prefill_chunk } else { 0 };
        let share = (self.shape.batch - reserve) / n_decoding.max(1);
        for s in &mut self.seqs {
            propose(s, share, self.shape.context);
        }
        if let Some(budget) = &mut self.budget {
            let prompt_rows = self
                .seqs
                .iter()
                .filter(|s| s.joining())
                .map(|s| s.pending().min(self.prefill_chunk))
                .sum::<usize>()
                .min(reserve);
            size_drafts(budget, &mut self.seqs, prompt_rows);
        }
        for (i, s) in self.seqs.iter_mut().enumerate() {
            decode_rows(&mut self.batch, SeqId::new(i), s, share);
        }
        for (i, s) in self.seqs.iter_mut().enumerate() {
            let left = self.shape.batch - self.batch.len();
            if left > 0 && s.joining() {
                prompt_rows(
                    &mut self.batch,
                    SeqId::new(i),
                    s,
                    left.min(self.prefill_chunk),
                );
            }
        }
    }
}

/// propose: a decoding sequence's draft, cut to the reply's, the
/// context's and its share of the batch's room (its drafter told of the cut).
fn propose(s: &mut Sequence, share: usize, context: usize) {
    let Some(last) = s.decoding() else { return };
    let (pending, evaluated) = (s.pending(), s.tokens.len());
    let Some(live) = s.live.as_mut() else { return };
    live.draft.clear();
    if pending + 1 > share {
        return; // waits for a batch with room (only after a long restore)
    }
    let room = live.draft_room(evaluated, context, share - pending - 1);
    if let Some(spec) = &mut live.spec {
        let draft = spec.draft(&s.tokens, last);
        live.draft
            .extend_from_slice(&draft[..draft.len().min(room)]);
        spec.truncate_draft(room);
    }
}

/// The budget's cut of every draft: the drafted tokens with the most
/// expected tokens per unit of pass time, for the whole batch.
fn size_drafts(budget: &mut Budget, seqs: &mut [Sequence], prompt_rows: usize) {
    budget.candidates.clear();
    let (mut base_rows, mut sequences) = (prompt_rows, 0);
    for (i, s) in seqs.iter_mut().enumerate() {
        if s.decoding().is_none() {
            continue;
        }
        base_rows += s.pending() + 1;
        sequences += 1;
        let Some(live) = s.live.as_mut() else {
            continue;
        };
        let (Some(spec), false) = (&live.spec, live.draft.is_empty()) else {
            continue;
        };
        let sampled = matches!(live.decode.sampling, Sampling::Random(_));
        budget.estimate(spec, live.draft.len(), sampled);
        let probabilities = std::mem::take(&mut budget.probabilities);
        budget.add(crate::int::small(i), &probabilities);
        budget.probabilities = probabilities;
    }
    let Some(choice) = budget.choose(base_rows, sequences) else {
        return;
    };
    let cost = budget.settle(choice);
    budget.keep.clear();
    budget.keep.resize(seqs.len(), 0);
    for c in &budget.candidates[..choice.rows] {
        budget.keep[crate::int::ix32(c.seq)] += 1;
    }
    for (s, &k) in seqs.iter_mut().zip(&budget.keep) {
        let Some(live) = s.live.as_mut().filter(|l| !l.done) else {
            continue;
        };
        if let Some(spec) = &mut live.spec {
            live.draft.truncate(k);
            spec.truncate_draft(k);
            // Told for its next draft; the reference strategies ignore it.
            let _ = spec.set_token_cost(cost);
        }
    }
}

/// A decoding sequence's rows: tokens to evaluate again after a checkpoint
/// restore (output not read), then `[last] + draft`.
fn decode_rows(batch: &mut Batch, id: SeqId, s: &mut Sequence, share: usize) {
    let Some(last) = s.decoding() else { return };
    let (pending, pos) = (s.pending(), s.tokens.len());
    if pending + 1 > share {
        return;
    }
    for (p, &token) in s.tokens.iter().enumerate().skip(s.cached) {
        batch.push(Row {
            seq: id,
            token,
            pos: p,
            output: false,
        });
    }
    let Some(live) = s.live.as_mut() else { return };
    live.out_row = Some(batch.len());
    batch.push(Row {
        seq: id,
        token: last,
        pos,
        output: true,
    });
    for (i, &token) in live.draft.iter().enumerate() {
        batch.push(Row {
            seq: id,
            token,
            pos: pos + 1 + i,
            output: true,
        });
    }
    s.rows = pending + 1 + live.draft.len();
}

/// A joining sequence's next prompt chunk, at most `rows` rows; the
/// prompt's last row is read (it chooses the first reply token).
fn prompt_rows(batch: &mut Batch, id: SeqId, s: &mut Sequence, rows: usize) {
    let Some(live) = s.live.as_mut() else { return };
    let end = (s.cached + rows).min(s.tokens.len());
    for pos in s.cached..end {
        let last = pos + 1 == s.tokens.len();
        if last {
            live.out_row = Some(batch.len());
        }
        batch.push(Row {
            seq: id,
            token: s.tokens[pos],
            pos,
            output: last,
        });
    }
    s.rows = end - s.cached;
}
