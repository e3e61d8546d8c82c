//! Choosing tokens from the target's rows: greedy (argmax) or sampled
//! (speculative sampling through [`verify`](crate::verify)).

use super::reply::Sampling;
use super::sampler::Sampler;
use super::sequence::Live;
use super::target::{SeqId, Target};
use super::StepError;
use crate::token::Token;
use crate::verify::{self, Rows, Verdict};
use crate::Error;

/// Scratch of the verification, reused from step to step.
#[derive(Debug, Default)]
pub(super) struct Work {
    argmax: Vec<Token>,
    /// Each chosen token's row margin (greedy), for the reply.
    pub margins: Vec<f32>,
    probs: Vec<f32>,
    order: Vec<u32>,
}

/// Rows of the target turned into distributions on demand.
struct Distributions<'a, T: Target + ?Sized> {
    target: &'a mut T,
    sampler: Sampler,
    first: usize,
    count: usize,
    probs: &'a mut Vec<f32>,
    order: &'a mut Vec<u32>,
    error: Option<T::Error>,
}

impl<T: Target + ?Sized> Rows for Distributions<'_, T> {
    fn count(&self) -> usize {
        self.count
    }

    fn row(&mut self, i: usize) -> &[f32] {
        match self.target.logits(self.first + i) {
            Ok(logits) => self.sampler.distribution(logits, self.probs, self.order),
            Err(e) => {
                self.error = Some(e);
                self.probs.clear();
            }
        }
        self.probs
    }
}

impl Work {
    /// Buffers for passes of up to `rows` rows over `vocab` tokens.
    pub(super) fn with_capacity(rows: usize, vocab: usize) -> Work {
        Work {
            argmax: Vec::with_capacity(rows),
            margins: Vec::with_capacity(rows),
            probs: Vec::with_capacity(vocab),
            order: Vec::with_capacity(vocab),
        }
    }

    /// The first reply token, from the prompt's last row.
    pub(super) fn first<T: Target + ?Sized>(
        &mut self,
        target: &mut T,
        live: &mut Live,
        row: usize,
        seq: SeqId,
    ) -> Result<(Token, f32), StepError<T::Error>> {
        let v = self.choose(target, live, row, seq, &[])?;
        Ok((
            v.next_token,
            self.margins.first().copied().unwrap_or(f32::NAN),
        ))
    }

    /// The verdict on this step's draft (rows `row..=row + draft.len()`).
    pub(super) fn verify<T: Target + ?Sized>(
        &mut self,
        target: &mut T,
        live: &mut Live,
        row: usize,
        seq: SeqId,
    ) -> Result<Verdict, StepError<T::Error>> {
        let draft = std::mem::take(&mut live.draft);
        let v = self.choose(target, live, row, seq, &draft);
        live.draft = draft;
        v
    }

    fn choose<T: Target + ?Sized>(
        &mut self,
        target: &mut T,
        live: &mut Live,
        row: usize,
        seq: SeqId,
        draft: &[Token],
    ) -> Result<Verdict, StepError<T::Error>> {
        self.argmax.clear();
        self.margins.clear();
        let unusable = || StepError::Selfspec(Error::Rows { seq: seq.index() });
        match live.decode.sampling {
            Sampling::Greedy => {
                // verify: rows until the first disagreement; row i predicts
                // the token after [last] + draft[..i].
                for i in 0..=draft.len() {
                    let c = target
                        .greedy(row + i)
                        .map_err(StepError::Target)?
                        .ok_or_else(unusable)?;
                    self.argmax.push(c.token);
                    self.margins.push(c.margin);
                    if i < draft.len() && c.token != draft[i] {
                        break;
                    }
                }
                verify::greedy_next(draft, &self.argmax).ok_or_else(unusable)
            }
            Sampling::Random(sampler) => {
                let mut rows = Distributions {
                    target,
                    sampler,
                    first: row,
                    count: draft.len() + 1,
                    probs: &mut self.probs,
                    order: &mut self.order,
                    error: None,
                };
                let rng = &mut live.rng;
                let v = verify::sampled_rows(draft, &mut rows, || rng.f64());
                if let Some(e) = rows.error {
                    return Err(StepError::Target(e));
                }
                v.ok_or_else(unusable)
            }
        }
    }
}
