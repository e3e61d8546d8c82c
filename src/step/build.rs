//! A step's batch: each decoding sequence's draft (proposed, cut to the
//! room it has, sized by the budget when there is one), its rows, then the
//! prompt chunks of joining sequences.

use super::budget::{Budget, Load, Slot};
use super::reply::Sampling;
use super::sequence::{Live, Phase, Sequence};
use super::target::{Row, SeqId, Split};
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

    /// Its rows in this step's batch (a filler row included) and the
    /// cache they read, for the budget's pass times.
    pub(super) fn load(&self) -> Load {
        Load {
            rows: self.rows + usize::from(self.filler),
            cached: self.cached,
        }
    }
}

impl Stepper {
    /// Drafts and the batch: decoding sequences first (at most an equal
    /// share of the batch each, after room for a prompt chunk when a
    /// sequence is joining), then prompt chunks in what is left; the rows
    /// in sequence order (an engine that splits a pass by sequence takes
    /// runs of consecutive sequences).
    pub(super) fn build(&mut self) {
        self.batch.clear();
        let n_decoding = self.seqs.iter().filter(|s| s.decoding().is_some()).count();
        let joining = self.seqs.iter().any(Sequence::joining);
        let reserve = if joining { self.prefill_chunk } else { 0 };
        let share = (self.shape.batch - reserve) / n_decoding.max(1);
        for s in &mut self.seqs {
            s.rows = 0;
            s.filler = false;
            propose(s, share, self.shape.context);
        }
        if let Some(budget) = &mut self.budget {
            let room = Room {
                share,
                chunk: self.prefill_chunk.min(reserve),
                context: self.shape.context,
            };
            size_drafts(budget, &mut self.seqs, self.split, room);
        }
        let fill = self.budget.as_ref().map_or(&[][..], |b| &b.fill[..]);
        let decode_rows_total: usize = self.seqs.iter().map(|s| decode_len(s, share)).sum();
        let fillers = fill.iter().filter(|&&f| f).count();
        let mut left = self.shape.batch.saturating_sub(decode_rows_total + fillers);
        for (i, s) in self.seqs.iter_mut().enumerate() {
            if fill.get(i) == Some(&true) {
                filler_row(&mut self.batch, SeqId::new(i), s);
            } else if s.decoding().is_some() {
                decode_rows(&mut self.batch, SeqId::new(i), s, share);
            } else if left > 0 && s.joining() {
                let before = self.batch.len();
                prompt_rows(
                    &mut self.batch,
                    SeqId::new(i),
                    s,
                    left.min(self.prefill_chunk),
                );
                left -= self.batch.len() - before;
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
    live.drafted = 0;
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
    live.drafted = live.draft.len();
}

/// The rows a decoding sequence sends this step (none when it waits).
fn decode_len(s: &Sequence, share: usize) -> usize {
    match (s.decoding(), &s.live) {
        (Some(_), Some(live)) if s.pending() < share => s.pending() + 1 + live.draft.len(),
        _ => 0,
    }
}

/// The budget's cut of every draft: the drafted tokens with the most
/// expected tokens per unit of pass time, for the whole batch; padded to
/// one length where that keeps a pass that splits by sequence whole.
fn size_drafts(budget: &mut Budget, seqs: &mut [Sequence], split: Split, room: Room) {
    budget.clear(room.share);
    for (i, s) in seqs.iter_mut().enumerate() {
        let slot = slot(s, room);
        budget.slots.push(slot);
        let Some(live) = s.live.as_mut().filter(|_| slot.room.is_some()) else {
            continue;
        };
        let (Some(spec), false) = (&live.spec, live.draft.is_empty()) else {
            continue;
        };
        let sampled = matches!(live.decode.sampling, Sampling::Random(_));
        let margin = live.reply.last_margin();
        budget.estimate(spec, live.draft.len(), sampled, margin);
        let probabilities = std::mem::take(&mut budget.probabilities);
        budget.add(crate::int::small(i), &probabilities);
        budget.probabilities = probabilities;
    }
    let Some(choice) = budget.choose(split) else {
        budget.fill.clear();
        return;
    };
    budget.expected = Some(choice.tokens);
    let cost = budget.settle(choice);
    budget.fill_gaps(split, choice);
    budget.keep.clear();
    budget.keep.resize(seqs.len(), choice.level);
    if choice.level == 0 {
        for c in &budget.candidates[..choice.rows] {
            budget.keep[crate::int::ix32(c.seq)] += 1;
        }
    }
    for ((s, &k), slot) in seqs.iter_mut().zip(&budget.keep).zip(&budget.slots) {
        let (Some(last), Some(_)) = (s.decoding(), slot.room) else {
            continue;
        };
        let Some(live) = s.live.as_mut() else {
            continue;
        };
        live.draft.truncate(k);
        live.drafted = live.draft.len();
        // Padding: a guess the target may even confirm.
        let pad = live.draft.last().copied().unwrap_or(last);
        live.draft.resize(k, pad);
        if let Some(spec) = &mut live.spec {
            spec.truncate_draft(k);
            // Told for its next draft; the reference strategies ignore it.
            let _ = spec.set_token_cost(cost);
        }
    }
}

/// The room a step leaves a sequence.
#[derive(Clone, Copy, Debug)]
struct Room {
    /// Rows of the batch a decoding sequence may take.
    share: usize,
    /// Rows of a joining sequence's prompt chunk.
    chunk: usize,
    /// Positions a sequence's cache holds.
    context: usize,
}

/// What the budget needs of a sequence: its rows without a draft, its
/// cache and, when decoding, its room for draft rows.
fn slot(s: &Sequence, room: Room) -> Slot {
    let cached = s.cached;
    if s.joining() {
        let base = s.pending().min(room.chunk);
        return Slot {
            base,
            cached,
            ..Slot::default()
        };
    }
    match (s.decoding(), &s.live) {
        (Some(_), Some(live)) if s.pending() < room.share => {
            let batch_room = room.share - s.pending() - 1;
            let room = live.draft_room(s.tokens.len(), room.context, batch_room);
            Slot {
                base: s.pending() + 1,
                room: Some(room),
                fillable: false,
                cached,
            }
        }
        _ => Slot {
            fillable: s.live.is_none() && s.cached < room.context,
            cached,
            ..Slot::default()
        },
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

/// An idle sequence's filler row, after what its cache holds (removed at
/// the next step): it keeps a pass that splits by sequence runs in one run.
fn filler_row(batch: &mut Batch, id: SeqId, s: &mut Sequence) {
    let token = s.tokens.last().copied().unwrap_or(0);
    batch.push(Row {
        seq: id,
        token,
        pos: s.cached,
        output: false,
    });
    s.filler = true;
    s.cut_to = Some(s.cached);
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
