//! A sequence's KV cache saved to host memory and restored into any
//! sequence of the same context: a server's prompt cache (a conversation's
//! next turn restores what its last turn left, after its slot served
//! others).

use std::borrow::BorrowMut;

use llama_cpp_2::context::session::{LlamaStateSeqFlags, SeqState};
use llama_cpp_2::context::LlamaContext;
use selfspec::step::SeqId;

use crate::{Error, LlamaTarget};

/// One sequence's cache: the tokens it held and llama.cpp's state of them
/// (`llama_state_seq_get_data`), in host memory.
#[derive(Clone, Debug)]
pub struct SavedSeq {
    tokens: Vec<u32>,
    state: SeqState,
}

impl SavedSeq {
    /// The tokens the cache held, at positions 0.. .
    #[must_use]
    pub fn tokens(&self) -> &[u32] {
        &self.tokens
    }

    /// Host memory it takes: llama.cpp's state and the tokens.
    #[must_use]
    pub fn bytes(&self) -> usize {
        self.state.byte_len() + std::mem::size_of_val(self.tokens.as_slice())
    }
}

impl<'m, C: BorrowMut<LlamaContext<'m>>> LlamaTarget<'m, C> {
    /// A copy of `seq`'s cache in host memory (the cache is unchanged).
    ///
    /// # Errors
    ///
    /// [`Error::Sequence`]; [`Error::State`] if llama.cpp cannot write the
    /// state.
    pub fn save(&self, seq: SeqId) -> Result<SavedSeq, Error> {
        let id = self.checked_id(seq)?;
        let state = self
            .context()
            .state_seq_get(id, LlamaStateSeqFlags::empty())
            .map_err(|e| Error::State(e.to_string()))?;
        Ok(SavedSeq {
            tokens: self.cached(seq).to_vec(),
            state,
        })
    }

    /// Replaces `seq`'s cache with `saved` (from this context or another of
    /// the same model and shape): [`LlamaTarget::cached`] is then
    /// `saved.tokens()`. Tell the stepper with
    /// [`Stepper::set_cached`](selfspec::step::Stepper::set_cached).
    ///
    /// # Errors
    ///
    /// [`Error::Sequence`]; [`Error::Setting`] if `saved` holds more tokens
    /// than a sequence's context; [`Error::State`] if llama.cpp refuses the
    /// state (its cache then emptied).
    pub fn restore(&mut self, seq: SeqId, saved: &SavedSeq) -> Result<(), Error> {
        let id = self.checked_id(seq)?;
        if saved.tokens.len() > self.shape_context() {
            return Err(Error::Setting {
                what: "a restored cache's tokens",
                value: saved.tokens.len(),
                allowed: "at most the context of a sequence",
            });
        }
        let set = self.context_mut().state_seq_set(&saved.state, id);
        if let Err(e) = set {
            self.clear(seq)?;
            return Err(Error::State(e.to_string()));
        }
        self.set_cached(seq, &saved.tokens);
        Ok(())
    }
}
