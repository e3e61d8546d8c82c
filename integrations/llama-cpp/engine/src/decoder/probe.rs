//! Single passes for tests and measurements, beside the stepper: evaluate
//! tokens of one or several idle sequences in one batch and read every row,
//! roll a cache back. Each empties the slot's cache in the stepper's view,
//! so its next request starts from an empty cache.

use selfspec::step::{Row, SeqId, Target};

use super::{setting, Decoder};
use crate::Error;

impl Decoder<'_> {
    /// Evaluates `tokens` after what idle `slot`'s cache holds, in one pass
    /// (logits for every token), and returns each row. For tests and
    /// measurements, not the decoding loop (it copies the rows).
    ///
    /// # Errors
    ///
    /// [`Error::Slot`], [`Error::EmptyPrompt`] for no tokens,
    /// [`Error::Setting`] for more tokens than the batch takes,
    /// [`Error::PromptTooLong`] past the sequence's context, and llama.cpp's
    /// errors (the cache is then as before).
    pub fn evaluate(&mut self, slot: usize, tokens: &[u32]) -> Result<Vec<Vec<f32>>, Error> {
        let mut rows = self.evaluate_batch(&[(slot, tokens)])?;
        Ok(rows.remove(0))
    }

    /// Removes idle `slot`'s KV cache from position `len` on (its cache then
    /// holds `cached(slot)[..len]`).
    ///
    /// # Errors
    ///
    /// [`Error::Slot`], [`Error::KvCache`] if llama.cpp refuses.
    pub fn rollback(&mut self, slot: usize, len: usize) -> Result<(), Error> {
        self.truncate(slot, len)
    }

    /// Evaluates each `(slot, tokens)` part after what its idle slot's cache
    /// holds, all in one `llama_decode` (logits for every token), and
    /// returns each part's rows. For tests and measurements (it copies the
    /// rows).
    ///
    /// # Errors
    ///
    /// As [`Decoder::evaluate`], and [`Error::Slot`] for a slot given twice.
    pub fn evaluate_batch(
        &mut self,
        parts: &[(usize, &[u32])],
    ) -> Result<Vec<Vec<Vec<f32>>>, Error> {
        let settings = self.settings();
        let mut total = 0;
        for (i, &(slot, tokens)) in parts.iter().enumerate() {
            let held = self.target_for(slot)?.cached(SeqId::new(slot)).len();
            if parts[..i].iter().any(|&(s, _)| s == slot) {
                return Err(Error::Slot {
                    slot,
                    slots: settings.sequences,
                    problem: "is given twice",
                });
            }
            if tokens.is_empty() {
                return Err(Error::EmptyPrompt);
            }
            if held + tokens.len() > settings.context {
                return Err(Error::PromptTooLong {
                    tokens: held + tokens.len(),
                    context: settings.context,
                });
            }
            total += tokens.len();
        }
        setting(
            "tokens in one pass",
            total,
            total <= settings.batch,
            "at most the batch size",
        )?;
        let target = &mut self.target;
        let starts: Vec<usize> = parts
            .iter()
            .map(|&(s, _)| target.cached(SeqId::new(s)).len())
            .collect();
        target.decode_rows(
            parts
                .iter()
                .zip(&starts)
                .flat_map(|(&(slot, tokens), &pos)| {
                    tokens.iter().enumerate().map(move |(i, &token)| Row {
                        seq: SeqId::new(slot),
                        token,
                        pos: pos + i,
                        output: true,
                    })
                }),
        )?;
        let mut out = Vec::with_capacity(parts.len());
        let mut row = 0;
        for &(_, tokens) in parts {
            let rows = (row..row + tokens.len())
                .map(|i| target.logits(i).map(<[f32]>::to_vec))
                .collect::<Result<_, _>>()?;
            out.push(rows);
            row += tokens.len();
        }
        Ok(out)
    }

    /// Removes idle `slot`'s KV positions from `from` on.
    pub(crate) fn truncate(&mut self, slot: usize, from: usize) -> Result<(), Error> {
        self.target_for(slot)?.truncate(SeqId::new(slot), from)?;
        Ok(())
    }
}
