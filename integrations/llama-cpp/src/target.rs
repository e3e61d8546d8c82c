//! llama.cpp's context as selfspec's [`Target`]: a forward pass is one
//! `llama_decode` of the batch's rows, a row's logits are
//! `llama_get_logits_ith`, a truncation is `llama_memory_seq_rm`.

use std::num::NonZeroU32;

use llama_cpp_2::context::params::LlamaContextParams;
use llama_cpp_2::context::LlamaContext;
use llama_cpp_2::llama_batch::LlamaBatch;
use llama_cpp_2::token::LlamaToken;
use selfspec::step::{Batch, Kept, SeqId, Shape, Target};

use crate::model::backend;
use crate::{Error, Model, Settings};

/// S sequences of one llama.cpp context (`n_seq_max = S`, one sequence id
/// each), as a [`Target`] for selfspec's
/// [`Stepper`](selfspec::step::Stepper): its batch is
/// [`Settings::step_tokens`] rows.
///
/// It mirrors the tokens each sequence's KV cache holds, so that a row that
/// does not follow its sequence's cache is refused before llama.cpp sees it.
pub struct LlamaTarget<'m> {
    model: &'m Model,
    ctx: LlamaContext<'m>,
    batch: LlamaBatch<'static>,
    settings: Settings,
    /// The tokens each sequence's KV cache holds, at positions 0.. .
    cached: Vec<Vec<u32>>,
    /// The last pass's rows: whether each one has logits.
    outputs: Vec<bool>,
    /// The last pass's rows of each sequence, and its rows with logits.
    seq_rows: Vec<usize>,
    seq_outputs: Vec<usize>,
    /// The last pass's tokens, joining their caches when it succeeds.
    pending: Vec<(usize, u32)>,
}

impl std::fmt::Debug for LlamaTarget<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LlamaTarget")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

pub(crate) fn setting(
    what: &'static str,
    value: usize,
    ok: bool,
    allowed: &'static str,
) -> Result<(), Error> {
    if ok {
        Ok(())
    } else {
        Err(Error::Setting {
            what,
            value,
            allowed,
        })
    }
}

fn check(s: &Settings) -> Result<(), Error> {
    setting(
        "sequences",
        s.sequences,
        (1..=64).contains(&s.sequences),
        "1 to 64",
    )?;
    setting("context", s.context, s.context >= 16, "at least 16 tokens")?;
    setting(
        "threads",
        s.threads,
        (1..=1024).contains(&s.threads),
        "1 to 1024",
    )?;
    let ok = s.batch >= 2 * s.sequences && s.batch <= 1 << 20;
    setting("batch", s.batch, ok, "at least 2 tokens a sequence")?;
    let ok = s.step_tokens >= 2 * s.sequences && s.step_tokens <= s.batch;
    setting(
        "step_tokens",
        s.step_tokens,
        ok,
        "from two a sequence to the batch size",
    )
}

impl<'m> LlamaTarget<'m> {
    /// A context of `settings.sequences` sequences of `settings.context`
    /// tokens each on `model`.
    ///
    /// # Errors
    ///
    /// [`Error::Setting`] for zero sequences (or over 64), a context under
    /// 16 tokens, zero threads, a batch smaller than two tokens a sequence
    /// or a step under two tokens a sequence; [`Error::Context`] when
    /// llama.cpp cannot make the context.
    pub fn new(model: &'m Model, settings: Settings) -> Result<LlamaTarget<'m>, Error> {
        let s = settings;
        check(&s)?;
        let n_ctx = s.context.saturating_mul(s.sequences);
        let err = || Error::Context {
            n_ctx,
            sequences: s.sequences,
        };
        let as_u32 = |v: usize| u32::try_from(v).map_err(|_| err());
        let threads = i32::try_from(s.threads).map_err(|_| err())?;
        let params = LlamaContextParams::default()
            .with_n_ctx(NonZeroU32::new(as_u32(n_ctx)?))
            .with_n_batch(as_u32(s.batch)?)
            .with_n_seq_max(as_u32(s.sequences)?)
            .with_n_threads(threads)
            .with_n_threads_batch(threads)
            .with_flash_attention_policy(if s.flash_attention {
                llama_cpp_sys_2::LLAMA_FLASH_ATTN_TYPE_ENABLED
            } else {
                llama_cpp_sys_2::LLAMA_FLASH_ATTN_TYPE_DISABLED
            });
        let ctx = model
            .inner
            .new_context(backend()?, params)
            .map_err(|_| err())?;
        Ok(LlamaTarget {
            model,
            ctx,
            batch: LlamaBatch::new(s.batch, 1),
            settings: s,
            cached: vec![Vec::new(); s.sequences],
            outputs: Vec::new(),
            seq_rows: vec![0; s.sequences],
            seq_outputs: vec![0; s.sequences],
            pending: Vec::new(),
        })
    }

    /// The settings it was made with.
    #[must_use]
    pub fn settings(&self) -> Settings {
        self.settings
    }

    /// The model.
    #[must_use]
    pub fn model(&self) -> &'m Model {
        self.model
    }

    /// The tokens `seq`'s KV cache holds (empty for a sequence that does
    /// not exist).
    #[must_use]
    pub fn cached(&self, seq: usize) -> &[u32] {
        self.cached.get(seq).map_or(&[], Vec::as_slice)
    }

    /// The highest position llama.cpp's KV cache holds for `seq` (-1 when
    /// empty): `cached(seq).len() - 1` after every call.
    #[must_use]
    pub fn kv_pos_max(&self, seq: usize) -> i64 {
        i32::try_from(seq).map_or(-1, |s| i64::from(self.ctx.kv_cache_seq_pos_max(s)))
    }

    /// Rows `seq` had in the last pass, and how many of them had logits.
    #[must_use]
    pub fn last_rows(&self, seq: usize) -> (usize, usize) {
        (
            self.seq_rows.get(seq).copied().unwrap_or(0),
            self.seq_outputs.get(seq).copied().unwrap_or(0),
        )
    }

    /// Forgets the last pass's rows (the next [`last_rows`](Self::last_rows)
    /// are 0 until a pass runs).
    pub(crate) fn clear_rows(&mut self) {
        self.seq_rows.fill(0);
        self.seq_outputs.fill(0);
    }

    /// The logits of row `i` of the last pass.
    ///
    /// # Errors
    ///
    /// [`Error::NoLogits`] for a row the pass did not compute logits for.
    pub fn row(&self, i: usize) -> Result<&[f32], Error> {
        let computed = self.outputs.get(i).copied().unwrap_or(false);
        match i32::try_from(i) {
            Ok(ith) if computed => Ok(self.ctx.get_logits_ith(ith)),
            _ => Err(Error::NoLogits { row: i }),
        }
    }

    /// Removes `seq`'s KV positions from `from` on.
    ///
    /// # Errors
    ///
    /// [`Error::KvCache`] if llama.cpp refuses (or `seq` does not exist).
    pub fn remove(&mut self, seq: usize, from: usize) -> Result<(), Error> {
        let err = || Error::KvCache { seq, from };
        let id = i32::try_from(seq).map_err(|_| err())?;
        let p0 = u32::try_from(from).map_err(|_| err())?;
        let cached = self.cached.get_mut(seq).ok_or_else(err)?;
        self.ctx
            .kv_cache_seq_rm(id, Some(p0), None)
            .map_err(|_| err())?;
        cached.truncate(from);
        Ok(())
    }

    /// One `llama_decode` of `rows` (sequence, token, position, logits):
    /// each row must follow its sequence's cache (or the rows before it in
    /// this pass). On an error every cache is as before the call.
    pub(crate) fn decode_rows(
        &mut self,
        rows: impl IntoIterator<Item = (usize, u32, usize, bool)>,
    ) -> Result<(), Error> {
        self.batch.clear();
        self.outputs.clear();
        self.pending.clear();
        self.clear_rows();
        let (vocab, sequences) = (self.model.n_vocab(), self.settings.sequences);
        for (seq, token, pos, logits) in rows {
            let held = match self.cached.get(seq) {
                Some(c) => c.len() + self.seq_rows[seq],
                None => {
                    return Err(Error::Slot {
                        slot: seq,
                        slots: sequences,
                        problem: "does not exist",
                    })
                }
            };
            if pos != held {
                return Err(Error::Position { seq, pos, held });
            }
            push(&mut self.batch, vocab, token, pos, seq, logits)?;
            self.outputs.push(logits);
            self.pending.push((seq, token));
            self.seq_rows[seq] += 1;
            self.seq_outputs[seq] += usize::from(logits);
        }
        if self.pending.is_empty() {
            return Err(Error::EmptyPrompt);
        }
        if let Err(e) = self.ctx.decode(&mut self.batch) {
            self.outputs.clear();
            // What llama.cpp wrote of the batch leaves the caches again.
            for seq in 0..sequences {
                if self.seq_rows[seq] > 0 {
                    self.remove(seq, self.cached[seq].len())?;
                }
            }
            return Err(e.into());
        }
        for &(seq, token) in &self.pending {
            self.cached[seq].push(token);
        }
        Ok(())
    }
}

impl Target for LlamaTarget<'_> {
    type Error = Error;

    fn shape(&self) -> Shape {
        Shape {
            sequences: self.settings.sequences,
            context: self.settings.context,
            vocab: self.model.n_vocab(),
            batch: self.settings.step_tokens,
        }
    }

    fn forward(&mut self, batch: &Batch) -> Result<(), Error> {
        self.decode_rows(
            batch
                .rows()
                .iter()
                .map(|r| (r.seq.index(), r.token, r.pos, r.output)),
        )
    }

    fn logits(&mut self, row: usize) -> Result<&[f32], Error> {
        self.row(row)
    }

    fn truncate(&mut self, seq: SeqId, from: usize) -> Result<Kept, Error> {
        self.remove(seq.index(), from)?;
        Ok(Kept::Exact)
    }
}

/// Adds `token` at `pos` of sequence `seq` to `batch`.
fn push(
    batch: &mut LlamaBatch<'static>,
    vocab: usize,
    token: u32,
    pos: usize,
    seq: usize,
    logits: bool,
) -> Result<(), Error> {
    let id = i32::try_from(token)
        .ok()
        .filter(|&t| usize::try_from(t).is_ok_and(|t| t < vocab))
        .ok_or(Error::TokenOutOfRange { token, vocab })?;
    let full = || Error::Setting {
        what: "batch",
        value: pos,
        allowed: "room for every token of a pass",
    };
    let pos = i32::try_from(pos).map_err(|_| full())?;
    let seq = [i32::try_from(seq).map_err(|_| full())?];
    // Callers keep within the batch's size; a full batch is a typed error.
    batch
        .add(LlamaToken(id), pos, &seq, logits)
        .map_err(|_| full())
}
