//! One step: the batch (drafts, pending rows, prompt chunks), the forward
//! pass, and each sequence's outcome.

use std::time::Instant;

use super::reply::{Finished, Sampling, Stop, TokenEvent};
use super::sequence::{Phase, Sequence};
use super::target::{Kept, SeqId, Split, Target};
use super::{Pass, StepError, Stepper};

impl Stepper {
    /// One step: every live sequence's rows in one batch (a decoding
    /// sequence's `[last] + draft`, a joining one's next prompt chunk), one
    /// [`Target::forward`], then each sequence verified, committed and
    /// rolled back. The tokens it generated are in
    /// [`events`](Stepper::events), the replies that ended in
    /// [`finished`](Stepper::finished). A step with nothing to do returns
    /// without calling the target.
    ///
    /// # Errors
    ///
    /// [`StepError::Target`] when the target fails: every sequence that had
    /// rows in the batch ends ([`Stop::Failed`], in
    /// [`finished`](Stepper::finished)) and its cache is emptied before
    /// its next request; the others go on at the next step.
    /// [`StepError::Selfspec`] ([`Error::Rows`](crate::Error::Rows)) for a
    /// row the verification cannot use: that sequence ends, [`Stop::Failed`].
    pub fn step<T: Target + ?Sized>(&mut self, target: &mut T) -> Result<(), StepError<T::Error>> {
        self.events.clear();
        self.last_pass = None;
        let result = self.step_inner(target);
        if result.is_err() {
            self.fail_batch();
        }
        self.collect();
        result
    }

    fn step_inner<T: Target + ?Sized>(
        &mut self,
        target: &mut T,
    ) -> Result<(), StepError<T::Error>> {
        self.cut_caches(target)?;
        self.build();
        if self.batch.is_empty() {
            return Ok(());
        }
        let predicted = self
            .budget
            .as_mut()
            .and_then(|b| b.price(self.split, self.seqs.iter().map(Sequence::load)));
        let t = Instant::now();
        target.forward(&self.batch).map_err(StepError::Target)?;
        let took = target.pass_time().unwrap_or_else(|| t.elapsed());
        let prompt_rows = self
            .seqs
            .iter()
            .filter(|s| s.joining())
            .map(|s| s.rows)
            .sum();
        // A whole pass's curve learns from decoding passes only: a prompt
        // chunk's rows cost differently (and a simulated target may not
        // charge them at all). A split pass's fit counts a chunk as the
        // computation of several rows a sequence it is.
        let whole = matches!(self.split, Split::Whole { .. });
        if let (Some(budget), true) = (&mut self.budget, prompt_rows == 0 || !whole) {
            budget.record(self.split, self.seqs.iter().map(Sequence::load), took);
        }
        let expected_tokens = self.budget.as_ref().and_then(|b| b.expected);
        self.last_pass = Some(Pass {
            rows: self.batch.len(),
            prompt_rows,
            sequences: self.seqs.iter().filter(|s| s.rows > 0).count(),
            duration: took,
            predicted,
            tokens: 0,
            expected_tokens,
        });
        for s in 0..self.seqs.len() {
            self.outcome(target, s)?;
        }
        if let Some(pass) = &mut self.last_pass {
            pass.tokens = self.events.len();
        }
        Ok(())
    }

    /// Removes what a sequence's cache holds beyond what its next rows
    /// follow (a new prompt's differing part, a forgotten cache).
    fn cut_caches<T: Target + ?Sized>(
        &mut self,
        target: &mut T,
    ) -> Result<(), StepError<T::Error>> {
        for (i, s) in self.seqs.iter_mut().enumerate() {
            s.rows = 0;
            if let Some(from) = s.cut_to.take() {
                s.cached = cut(target, SeqId::new(i), from)?;
            }
        }
        Ok(())
    }

    /// After the pass: sequence `s`'s first token (its prompt done) or its
    /// verified draft, committed, the rejected positions removed.
    fn outcome<T: Target + ?Sized>(
        &mut self,
        target: &mut T,
        s: usize,
    ) -> Result<(), StepError<T::Error>> {
        let seq = &mut self.seqs[s];
        if seq.rows == 0 {
            return Ok(());
        }
        seq.cached += seq.rows;
        let Some(live) = seq.live.as_mut() else {
            return Ok(());
        };
        let Some(row) = live.out_row.take() else {
            live.reply.prefill_passes += 1; // a prompt chunk before the last
            return Ok(());
        };
        let id = SeqId::new(s);
        match live.phase {
            Phase::Prefill => {
                live.reply.prefill_passes += 1;
                let choice = self.work.first(target, live, row, id)?;
                let now = Instant::now();
                live.first_token = Some(now);
                live.reply.prefill_time = now - live.started;
                live.phase = Phase::Decode { last: choice.0 };
                if let Some(spec) = &mut live.spec {
                    spec.begin(&seq.tokens);
                }
                self.events.push(TokenEvent {
                    seq: id,
                    token: choice.0,
                    index: 0,
                });
                live.push(choice.0, choice.1, &self.stop_tokens);
            }
            Phase::Decode { last } => {
                let verdict = self.work.verify(target, live, row, id)?;
                let (n, next) = (verdict.n_accepted, verdict.next_token);
                let k = live.draft.len();
                seq.tokens.push(last);
                seq.tokens.extend_from_slice(&live.draft[..n]);
                if n < k {
                    // rollback: the rejected draft positions leave the cache.
                    seq.cached = cut(target, id, seq.tokens.len())?;
                }
                live.reply.decode_passes += 1;
                live.reply.drafted += k;
                live.reply.accepted += n;
                if let Some(spec) = &mut live.spec {
                    // The drafter's own tokens: not the budget's padding.
                    let (k, n) = (live.drafted, n.min(live.drafted));
                    if let Some(budget) = &mut self.budget {
                        let sampled = matches!(live.decode.sampling, Sampling::Random(_));
                        let margin = live.reply.last_margin();
                        budget.learn(spec, k, n, sampled, margin);
                    }
                    spec.accept(n);
                }
                live.phase = Phase::Decode { last: next };
                for i in 0..=n {
                    let t = if i < n { live.draft[i] } else { next };
                    let margin = self.work.margins.get(i).copied().unwrap_or(f32::NAN);
                    self.events.push(TokenEvent {
                        seq: id,
                        token: t,
                        index: live.reply.tokens.len(),
                    });
                    if live.push(t, margin, &self.stop_tokens) {
                        break;
                    }
                }
            }
        }
        self.after_commit(target, s)
    }

    /// Ends the reply when the context has no room for its next token; a
    /// reply that ended inside an accepted draft leaves the cache as plain
    /// decoding would (the prompt and the reply less its last token).
    fn after_commit<T: Target + ?Sized>(
        &mut self,
        target: &mut T,
        s: usize,
    ) -> Result<(), StepError<T::Error>> {
        let seq = &mut self.seqs[s];
        let Some(live) = seq.live.as_mut() else {
            return Ok(());
        };
        if !live.done && seq.tokens.len() >= self.shape.context {
            live.end(Stop::ContextFull);
        }
        if live.done {
            let keep = live.prompt_len + live.reply.tokens.len() - 1;
            if seq.tokens.len() > keep {
                seq.tokens.truncate(keep);
                if seq.cached > keep {
                    seq.cached = cut(target, SeqId::new(s), keep)?;
                }
            }
        }
        Ok(())
    }

    /// After a failed step: every sequence with rows in the batch ends
    /// ([`Stop::Failed`]), its cache to be emptied.
    fn fail_batch(&mut self) {
        for s in &mut self.seqs {
            if s.rows == 0 {
                continue;
            }
            if let Some(live) = s.live.as_mut().filter(|l| !l.done) {
                live.end(Stop::Failed);
            }
            s.tokens.clear();
            s.cached = 0;
            s.cut_to = Some(0);
        }
    }

    /// Hands the ended replies over to [`finished`](Stepper::finished)
    /// (after their drafters' `end_request`).
    pub(super) fn collect(&mut self) {
        for (i, s) in self.seqs.iter_mut().enumerate() {
            if !s.live.as_ref().is_some_and(|l| l.done) {
                continue;
            }
            let Some(mut live) = s.live.take() else {
                continue;
            };
            s.spare = std::mem::take(&mut live.draft);
            // end of request: the tokens join the engine-wide memory.
            if let Some(spec) = &mut live.spec {
                spec.end_request();
            }
            if let Some(first) = live.first_token {
                live.reply.decode_time = first.elapsed();
            }
            self.finished.push(Finished {
                seq: SeqId::new(i),
                reply: live.reply,
                spec: live.spec,
            });
        }
    }
}

/// Removes `seq`'s positions from `from` on; the positions its cache then
/// holds (fewer after a checkpoint restore).
fn cut<T: Target + ?Sized>(
    target: &mut T,
    seq: SeqId,
    from: usize,
) -> Result<usize, StepError<T::Error>> {
    Ok(
        match target.truncate(seq, from).map_err(StepError::Target)? {
            Kept::Exact => from,
            Kept::Restored { len } => len.min(from),
        },
    )
}
