//! A llama.cpp context as selfspec's [`Target`]: a forward pass is one
//! `llama_decode` of the batch's rows, a row's logits are
//! `llama_get_logits_ith`, a truncation is `llama_memory_seq_rm`.

use std::borrow::BorrowMut;

use llama_cpp_2::context::LlamaContext;
use llama_cpp_2::llama_batch::LlamaBatch;
use llama_cpp_2::model::LlamaModel;
use llama_cpp_2::token::LlamaToken;
use selfspec::step::{Batch, Kept, Row, SeqId, Shape, Split, Target};

use crate::{Error, Options};

/// Sequences of a llama.cpp context the caller made (threads, GPU layers,
/// flash attention, `n_seq_max`, batch size: its own parameters), as a
/// [`Target`] for selfspec's [`Stepper`](selfspec::step::Stepper).
///
/// `C` is the context itself (`LlamaContext`, the target owns it) or a
/// mutable borrow of it (`&mut LlamaContext`, the caller keeps it).
/// Stepper sequence `i` is llama.cpp sequence id
/// [`Options::seq_ids`]`()[i]`.
///
/// It mirrors the tokens each of its sequences' KV caches holds, so that a
/// row that does not follow its sequence's cache is refused before
/// llama.cpp sees it: change those sequences' caches only through the
/// target ([`LlamaTarget::truncate`](Target::truncate),
/// [`LlamaTarget::clear`]).
pub struct LlamaTarget<'m, C = LlamaContext<'m>> {
    model: &'m LlamaModel,
    ctx: C,
    batch: LlamaBatch<'static>,
    options: Options,
    /// Positions one sequence holds; rows one pass carries; rows the
    /// stepper's passes carry.
    context: usize,
    rows: usize,
    step_rows: usize,
    vocab: usize,
    /// The tokens each sequence's KV cache holds, at positions 0.. .
    cached: Vec<Vec<u32>>,
    /// The last pass's rows: whether each one has logits.
    outputs: Vec<bool>,
    /// The last pass's rows of each sequence.
    seq_rows: Vec<usize>,
    /// The last pass's tokens, joining their caches when it succeeds.
    pending: Vec<(usize, u32)>,
    /// How llama.cpp computes a pass of this context.
    split: Split,
}

impl<C> std::fmt::Debug for LlamaTarget<'_, C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LlamaTarget")
            .field("options", &self.options)
            .field("vocab", &self.vocab)
            .finish_non_exhaustive()
    }
}

impl<'m, C: BorrowMut<LlamaContext<'m>>> LlamaTarget<'m, C> {
    /// The sequences `options.seq_ids` of `ctx`, a context of `model`.
    /// Their caches are emptied: the target starts from nothing.
    ///
    /// # Errors
    ///
    /// [`Error::Setting`] for no sequence ids, a negative or repeated one,
    /// a context under 2 positions a sequence or past the context's
    /// `n_ctx`, or a batch under 2 rows a sequence or past the context's
    /// `n_batch`; [`Error::KvCache`] if llama.cpp cannot empty a cache.
    pub fn new(model: &'m LlamaModel, mut ctx: C, options: Options) -> Result<Self, Error> {
        let (n_ctx, n_batch, n_ubatch) = {
            let c = ctx.borrow_mut();
            (
                to_usize(c.n_ctx()),
                to_usize(c.n_batch()),
                to_usize(c.n_ubatch()),
            )
        };
        let options = options.resolve(n_ctx, n_batch)?;
        let split = options.split(n_ubatch);
        let sequences = options.seq_ids().len();
        let context = options.context().unwrap_or(n_ctx);
        let rows = options.batch().unwrap_or(n_batch);
        let step_rows = options.step_rows().unwrap_or(rows);
        let vocab = usize::try_from(model.n_vocab()).unwrap_or(0);
        let mut target = LlamaTarget {
            model,
            ctx,
            batch: LlamaBatch::new(rows, 1),
            context,
            rows,
            step_rows,
            vocab,
            cached: (0..sequences)
                .map(|_| Vec::with_capacity(context))
                .collect(),
            outputs: Vec::with_capacity(rows),
            seq_rows: vec![0; sequences],
            pending: Vec::with_capacity(rows),
            options,
            split,
        };
        for seq in 0..sequences {
            target.clear(SeqId::new(seq))?;
        }
        Ok(target)
    }

    /// The options it was made with, with the context and the batch
    /// resolved.
    #[must_use]
    pub fn options(&self) -> &Options {
        &self.options
    }

    /// The model.
    #[must_use]
    pub fn model(&self) -> &'m LlamaModel {
        self.model
    }

    /// The context (read only: its caches change through the target).
    #[must_use]
    pub fn context(&self) -> &LlamaContext<'m> {
        self.ctx_ref()
    }

    /// The context back, its sequences' caches as the last pass left them.
    pub fn into_inner(self) -> C {
        self.ctx
    }

    /// The llama.cpp sequence id of stepper sequence `seq`.
    #[must_use]
    pub fn seq_id(&self, seq: SeqId) -> Option<i32> {
        self.options.seq_ids().get(seq.index()).copied()
    }

    /// The tokens `seq`'s KV cache holds (empty for a sequence that does
    /// not exist).
    #[must_use]
    pub fn cached(&self, seq: SeqId) -> &[u32] {
        self.cached.get(seq.index()).map_or(&[], Vec::as_slice)
    }

    /// The highest position llama.cpp's KV cache holds for `seq` (-1 when
    /// empty): `cached(seq).len() - 1` after every call.
    #[must_use]
    pub fn kv_pos_max(&self, seq: SeqId) -> i64 {
        self.seq_id(seq)
            .map_or(-1, |id| i64::from(self.ctx_ref().kv_cache_seq_pos_max(id)))
    }

    /// Rows `seq` had in the last pass.
    #[must_use]
    pub fn last_rows(&self, seq: SeqId) -> usize {
        self.seq_rows.get(seq.index()).copied().unwrap_or(0)
    }

    /// Empties `seq`'s KV cache.
    ///
    /// # Errors
    ///
    /// [`Error::Sequence`], [`Error::KvCache`] if llama.cpp refuses.
    pub fn clear(&mut self, seq: SeqId) -> Result<(), Error> {
        self.remove(seq, 0)
    }

    /// One `llama_decode` of `rows`, each following its sequence's cache
    /// (or the rows before it in this pass); [`Target::logits`] then reads
    /// the rows with `output`. For measurements and tests beside the
    /// stepper. On an error every cache is as before the call.
    ///
    /// # Errors
    ///
    /// [`Error::EmptyPass`], [`Error::BatchFull`], [`Error::Sequence`],
    /// [`Error::Position`], [`Error::ContextFull`],
    /// [`Error::TokenOutOfRange`], and llama.cpp's [`Error::Decode`].
    pub fn decode_rows(&mut self, rows: impl IntoIterator<Item = Row>) -> Result<(), Error> {
        self.batch.clear();
        self.outputs.clear();
        self.pending.clear();
        self.seq_rows.fill(0);
        let mut checked = Ok(());
        for row in rows {
            checked = self.push(row);
            if checked.is_err() {
                break;
            }
        }
        if checked.is_ok() && self.pending.is_empty() {
            checked = Err(Error::EmptyPass);
        }
        if let Err(e) = checked {
            // No pass ran: no row has logits.
            self.outputs.clear();
            self.seq_rows.fill(0);
            return Err(e);
        }
        if let Err(e) = self.ctx.borrow_mut().decode(&mut self.batch) {
            self.outputs.clear();
            // What llama.cpp wrote of the batch leaves the caches again.
            for seq in 0..self.cached.len() {
                if self.seq_rows[seq] > 0 {
                    let held = self.cached[seq].len();
                    self.remove(SeqId::new(seq), held)?;
                }
            }
            return Err(e.into());
        }
        for &(seq, token) in &self.pending {
            self.cached[seq].push(token);
        }
        Ok(())
    }

    /// Checks `row` and adds it to the batch.
    fn push(&mut self, row: Row) -> Result<(), Error> {
        let seq = row.seq.index();
        let sequences = self.cached.len();
        let held = match self.cached.get(seq) {
            Some(c) => c.len() + self.seq_rows[seq],
            None => return Err(Error::Sequence { seq, sequences }),
        };
        if row.pos != held {
            return Err(Error::Position {
                seq,
                pos: row.pos,
                held,
            });
        }
        let context = self.context;
        if row.pos >= context {
            let pos = row.pos;
            return Err(Error::ContextFull { seq, pos, context });
        }
        let batch = self.rows;
        if self.pending.len() >= batch {
            let rows = self.pending.len() + 1;
            return Err(Error::BatchFull { rows, batch });
        }
        let (token, vocab) = (row.token, self.vocab);
        let id = i32::try_from(token)
            .ok()
            .filter(|&t| to_usize_i(t) < vocab)
            .ok_or(Error::TokenOutOfRange { token, vocab })?;
        // Both fit: the position is under the context (an u32), the id
        // came from i32 options.
        let pos = i32::try_from(row.pos).unwrap_or(i32::MAX);
        let ids = [self.options.seq_ids()[seq]];
        self.batch
            .add(LlamaToken(id), pos, &ids, row.output)
            .map_err(|_| Error::BatchFull {
                rows: self.pending.len() + 1,
                batch,
            })?;
        self.outputs.push(row.output);
        self.pending.push((seq, token));
        self.seq_rows[seq] += 1;
        Ok(())
    }

    /// Removes `seq`'s KV positions from `from` on.
    fn remove(&mut self, seq: SeqId, from: usize) -> Result<(), Error> {
        let i = seq.index();
        let sequences = self.cached.len();
        let id = self
            .seq_id(seq)
            .ok_or(Error::Sequence { seq: i, sequences })?;
        let err = || Error::KvCache { seq: i, from };
        let p0 = u32::try_from(from).map_err(|_| err())?;
        self.ctx
            .borrow_mut()
            .kv_cache_seq_rm(id, Some(p0), None)
            .map_err(|_| err())?;
        self.cached[i].truncate(from);
        Ok(())
    }

    /// The llama.cpp id of `seq`, or [`Error::Sequence`].
    pub(crate) fn checked_id(&self, seq: SeqId) -> Result<i32, Error> {
        let sequences = self.cached.len();
        self.seq_id(seq).ok_or(Error::Sequence {
            seq: seq.index(),
            sequences,
        })
    }

    /// Positions one sequence holds.
    pub(crate) fn shape_context(&self) -> usize {
        self.context
    }

    /// The context, to change a sequence's cache (then
    /// [`set_cached`](Self::set_cached)).
    pub(crate) fn context_mut(&mut self) -> &mut LlamaContext<'m> {
        self.ctx.borrow_mut()
    }

    /// Records that `seq`'s cache holds `tokens` (after a restore).
    pub(crate) fn set_cached(&mut self, seq: SeqId, tokens: &[u32]) {
        if let Some(c) = self.cached.get_mut(seq.index()) {
            c.clear();
            c.extend_from_slice(tokens);
        }
    }

    fn ctx_ref(&self) -> &LlamaContext<'m> {
        // `BorrowMut` implies `Borrow`.
        std::borrow::Borrow::borrow(&self.ctx)
    }
}

impl<'m, C: BorrowMut<LlamaContext<'m>>> Target for LlamaTarget<'m, C> {
    type Error = Error;

    fn shape(&self) -> Shape {
        Shape {
            sequences: self.cached.len(),
            context: self.context,
            vocab: self.vocab,
            batch: self.step_rows,
        }
    }

    /// One computation with a unified cache or a single sequence; else
    /// llama.cpp's `split_equal` over runs of consecutive sequence ids.
    fn split(&self) -> Split {
        self.split
    }

    fn forward(&mut self, batch: &Batch) -> Result<(), Error> {
        self.decode_rows(batch.rows().iter().copied())
    }

    fn logits(&mut self, row: usize) -> Result<&[f32], Error> {
        let computed = self.outputs.get(row).copied().unwrap_or(false);
        match i32::try_from(row) {
            Ok(ith) if computed => Ok(self.ctx_ref().get_logits_ith(ith)),
            _ => Err(Error::NoLogits { row }),
        }
    }

    fn truncate(&mut self, seq: SeqId, from: usize) -> Result<Kept, Error> {
        self.remove(seq, from)?;
        Ok(Kept::Exact)
    }
}

/// llama.cpp's sizes, as indices.
fn to_usize(v: u32) -> usize {
    usize::try_from(v).unwrap_or(usize::MAX)
}

/// A token id already known to be non-negative.
fn to_usize_i(v: i32) -> usize {
    usize::try_from(v).unwrap_or(usize::MAX)
}
