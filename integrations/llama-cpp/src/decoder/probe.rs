//! Single passes for tests and measurements: evaluate tokens of one or
//! several sequences in one batch and read every row, roll a cache back.

use super::{push, setting, Decoder};
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
        self.check_slot(slot, true)?;
        if tokens.is_empty() {
            return Err(Error::EmptyPrompt);
        }
        let batch = self.settings.batch;
        setting(
            "tokens in one pass",
            tokens.len(),
            tokens.len() <= batch,
            "at most the batch size",
        )?;
        let len = self.slots[slot].cached.len() + tokens.len();
        if len > self.settings.context {
            return Err(Error::PromptTooLong {
                tokens: len,
                context: self.settings.context,
            });
        }
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
        self.check_slot(slot, true)?;
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
        let mut total = 0;
        for (i, &(slot, tokens)) in parts.iter().enumerate() {
            self.check_slot(slot, true)?;
            if parts[..i].iter().any(|&(s, _)| s == slot) {
                return Err(Error::Slot {
                    slot,
                    slots: self.slots.len(),
                    problem: "is given twice",
                });
            }
            if tokens.is_empty() {
                return Err(Error::EmptyPrompt);
            }
            let len = self.slots[slot].cached.len() + tokens.len();
            if len > self.settings.context {
                return Err(Error::PromptTooLong {
                    tokens: len,
                    context: self.settings.context,
                });
            }
            total += tokens.len();
        }
        let batch = self.settings.batch;
        setting(
            "tokens in one pass",
            total,
            total <= batch,
            "at most the batch size",
        )?;
        self.batch.clear();
        let vocab = self.model.n_vocab();
        for &(slot, tokens) in parts {
            let seq = [i32::try_from(slot).unwrap_or(0)];
            let pos = self.slots[slot].cached.len();
            for (i, &t) in tokens.iter().enumerate() {
                push(&mut self.batch, vocab, t, pos + i, &seq, true)?;
            }
        }
        if let Err(e) = self.ctx.decode(&mut self.batch) {
            for &(slot, _) in parts {
                let len = self.slots[slot].cached.len();
                self.truncate(slot, len)?;
            }
            return Err(e.into());
        }
        let mut out = Vec::with_capacity(parts.len());
        let mut row = 0;
        for &(slot, tokens) in parts {
            self.slots[slot].cached.extend_from_slice(tokens);
            out.push(
                (row..row + tokens.len())
                    .map(|i| self.row(i).to_vec())
                    .collect(),
            );
            row += tokens.len();
        }
        Ok(out)
    }
}
