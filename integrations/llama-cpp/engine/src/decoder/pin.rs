//! Near-tie pinning for measurements: a request given a reference reply
//! (the history pass's, `--pin-near-ties`) keeps the reference's token
//! wherever its pass prefers another one at a near tie of the reference's
//! own pass, so that plain and speculative decoding decode the same tokens.
//!
//! Without it a reply that first differs at a near tie (batched and
//! one-row passes round the two candidates differently) goes on with a
//! text of its own and often ends at another length; with many sequences
//! in one batch, whose passes cost about the same however many of them
//! are still decoding, tokens a second then follow the replies' lengths
//! more than the decoding's speed. A difference anywhere else is never
//! pinned: it stays a divergence, and the report says so.

use selfspec::step::{Batch, Choice, Kept, Row, SeqId, Shape, Split, Target};

/// A reference reply: its tokens and the margin (top-1 minus top-2 logit)
/// its own pass chose each with.
#[derive(Clone, Copy, Debug)]
pub struct Reference<'a> {
    /// The reply's tokens.
    pub tokens: &'a [u32],
    /// The margin of each of `tokens`.
    pub margins: &'a [f32],
    /// Margins under this are near ties: the reference's token is kept
    /// there.
    pub bound: f32,
}

/// A slot's reference, from the request's start.
#[derive(Debug)]
struct Pinned {
    prompt_len: usize,
    tokens: Vec<u32>,
    margins: Vec<f32>,
    bound: f32,
}

/// Every slot's reference, and the rows of the last pass.
#[derive(Debug, Default)]
pub(crate) struct Pins {
    slots: Vec<Option<Pinned>>,
    /// The last pass's rows.
    rows: Vec<Row>,
    /// Choices replaced by the reference's token.
    pub pinned: usize,
}

impl Pins {
    /// `slot`'s request, whose prompt is `prompt_len` tokens, decodes
    /// against `reference` (none: as its passes choose).
    pub(crate) fn start(
        &mut self,
        slot: usize,
        prompt_len: usize,
        reference: Option<Reference<'_>>,
    ) {
        if self.slots.len() <= slot {
            self.slots.resize_with(slot + 1, || None);
        }
        self.slots[slot] = reference.map(|r| Pinned {
            prompt_len,
            tokens: r.tokens.to_vec(),
            margins: r.margins.to_vec(),
            bound: r.bound,
        });
    }

    /// The choice of row `row` of the last pass: `choice`, or the
    /// reference's token where `choice` differs from it at a near tie.
    fn pin(&mut self, row: usize, choice: Choice) -> Choice {
        let Some(&Row {
            seq, pos, token, ..
        }) = self.rows.get(row)
        else {
            return choice;
        };
        let Some(Some(p)) = self.slots.get(seq.index()) else {
            return choice;
        };
        // The row at `pos` chooses the reply's token `pos + 1 - prompt_len`;
        // its own token must be the reference's before it (or the prompt's
        // last), or the row decodes another text than the reference's.
        let Some(i) = (pos + 1).checked_sub(p.prompt_len) else {
            return choice;
        };
        let on_reference = i == 0 || p.tokens.get(i - 1) == Some(&token);
        match (p.tokens.get(i), p.margins.get(i)) {
            (Some(&want), Some(&margin))
                if on_reference && want != choice.token && margin < p.bound =>
            {
                self.pinned += 1;
                Choice {
                    token: want,
                    margin: choice.margin,
                }
            }
            _ => choice,
        }
    }
}

/// A target whose greedy choices are pinned by [`Pins`].
pub(crate) struct PinnedTarget<'a, T> {
    pub target: &'a mut T,
    pub pins: &'a mut Pins,
}

impl<T: Target> Target for PinnedTarget<'_, T> {
    type Error = T::Error;

    fn shape(&self) -> Shape {
        self.target.shape()
    }

    fn forward(&mut self, batch: &Batch) -> Result<(), T::Error> {
        self.pins.rows.clear();
        self.pins.rows.extend_from_slice(batch.rows());
        self.target.forward(batch)
    }

    fn logits(&mut self, row: usize) -> Result<&[f32], T::Error> {
        self.target.logits(row)
    }

    fn greedy(&mut self, row: usize) -> Result<Option<Choice>, T::Error> {
        let choice = self.target.greedy(row)?;
        Ok(choice.map(|c| self.pins.pin(row, c)))
    }

    fn pass_time(&self) -> Option<std::time::Duration> {
        self.target.pass_time()
    }

    fn split(&self) -> Split {
        self.target.split()
    }

    fn truncate(&mut self, seq: SeqId, from: usize) -> Result<Kept, T::Error> {
        self.target.truncate(seq, from)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pins_only_near_ties_on_the_reference() {
        let tokens = [10, 11, 12, 13];
        let margins = [5.0, 0.2, 3.0, 0.1];
        let reference = Reference {
            tokens: &tokens,
            margins: &margins,
            bound: 1.0,
        };
        let mut pins = Pins::default();
        // prompt of 4 tokens (positions 0..4): the row at position 3 (the
        // prompt's last) chooses reply token 0.
        pins.start(1, 4, Some(reference));
        let row = |seq, pos, token| Row {
            seq: SeqId::new(seq),
            token,
            pos,
            output: true,
        };
        pins.rows = vec![
            row(1, 3, 99),
            row(1, 4, 10),
            row(1, 5, 11),
            row(1, 6, 50),
            row(0, 5, 11),
        ];
        let c = |token| Choice { token, margin: 0.5 };
        // (case, row, the pass's choice, the choice kept)
        let cases = [
            ("reply token 0, margin 5: not a near tie", 0, 77, 77),
            ("reply token 1, near tie: pinned", 1, 77, 11),
            ("the pass agrees: nothing to pin", 1, 11, 11),
            ("reply token 2, margin 3: not pinned", 2, 77, 77),
            ("off the reference (row token 50): not pinned", 3, 77, 77),
            ("a slot without a reference", 4, 77, 77),
            ("a row past the last pass's", 9, 77, 77),
        ];
        for (case, row, chose, want) in cases {
            assert_eq!(pins.pin(row, c(chose)).token, want, "{case}");
        }
        assert_eq!(pins.pinned, 1);
    }
}
