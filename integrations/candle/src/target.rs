//! [`Model`] as a [`selfspec::step::Target`]: one sequence, whose KV cache
//! is the model's own. A pass evaluates the batch's rows after the cache
//! ([`Model::hidden`]), the lm_head runs on the rows the stepper reads, and
//! a cut is [`Model::truncate`].

use candle_core::Tensor;
use selfspec::step::{Batch, Kept, SeqId, Shape, Target};

use crate::decode::PREFILL_CHUNK;
use crate::{Error, Model};

/// The logits of the last pass's output rows.
#[derive(Debug, Clone, Default)]
pub(crate) struct Outputs {
    /// `[rows read, vocab]`, row-major.
    logits: Vec<f32>,
    /// For each row of the batch, its row in `logits` (`None`: not read).
    index: Vec<Option<usize>>,
}

impl Target for Model {
    type Error = Error;

    /// One sequence; the context is the model's (unbounded when its
    /// configuration has none); a batch holds two prompt chunks
    /// ([`PREFILL_CHUNK`]), so that the stepper prefills in chunks of that
    /// size.
    fn shape(&self) -> Shape {
        let c = self.config();
        Shape {
            sequences: 1,
            context: c.max_position_embeddings.unwrap_or(usize::MAX),
            vocab: c.vocab_size,
            batch: 2 * PREFILL_CHUNK,
        }
    }

    /// Evaluates the batch's tokens in one pass ([`Model::hidden`]) and
    /// keeps the logits of the rows marked for output.
    ///
    /// # Errors
    ///
    /// [`Error::Batch`] for a row of another sequence, or positions that do
    /// not continue the cache one by one; as [`Model::forward`] otherwise.
    fn forward(&mut self, batch: &Batch) -> Result<(), Error> {
        self.outputs.logits.clear();
        self.outputs.index.clear();
        let rows = batch.rows();
        let start = self.cache_len();
        for (i, row) in rows.iter().enumerate() {
            if row.seq.index() != 0 {
                return Err(Error::Batch(format!(
                    "row {i} is of sequence {}; the model has one",
                    row.seq
                )));
            }
            if row.pos != start + i {
                return Err(Error::Batch(format!(
                    "row {i} is at position {}; the cache holds {start} positions",
                    row.pos
                )));
            }
        }
        if rows.is_empty() {
            return Ok(());
        }
        let tokens: Vec<u32> = rows.iter().map(|r| r.token).collect();
        let hidden = self.hidden(&tokens)?;
        let mut read = Vec::new();
        for (i, row) in rows.iter().enumerate() {
            self.outputs.index.push(row.output.then_some(read.len()));
            if row.output {
                read.push(u32::try_from(i).map_err(|_| Error::Batch("too many rows".into()))?);
            }
        }
        if read.is_empty() {
            return Ok(());
        }
        let hidden = if read.len() == rows.len() {
            hidden
        } else {
            let ids = Tensor::new(read.as_slice(), hidden.device())?;
            hidden.index_select(&ids, 0)?
        };
        self.outputs.logits = self.head(&hidden)?.flatten_all()?.to_vec1::<f32>()?;
        Ok(())
    }

    /// The logits of row `row` of the last pass.
    ///
    /// # Errors
    ///
    /// [`Error::Batch`] for a row that was not marked for output.
    fn logits(&mut self, row: usize) -> Result<&[f32], Error> {
        let vocab = self.config().vocab_size;
        self.outputs
            .index
            .get(row)
            .copied()
            .flatten()
            .and_then(|i| self.outputs.logits.get(i * vocab..(i + 1) * vocab))
            .ok_or_else(|| Error::Batch(format!("row {row} of the last pass has no output")))
    }

    /// Keeps the first `from` positions of the cache ([`Model::truncate`]).
    ///
    /// # Errors
    ///
    /// [`Error::Batch`] for a sequence other than 0.
    fn truncate(&mut self, seq: SeqId, from: usize) -> Result<Kept, Error> {
        if seq.index() != 0 {
            return Err(Error::Batch(format!(
                "sequence {seq} does not exist; the model has one"
            )));
        }
        Model::truncate(self, from);
        Ok(Kept::Exact)
    }
}
