//! Which sequences of the caller's context the target decodes, and how much
//! of the context and the batch they take.

use llama_cpp_2::context::params::LlamaContextParams;
use selfspec::step::Split;

use crate::Error;

/// The sequences of the caller's context a [`LlamaTarget`](crate::LlamaTarget)
/// decodes, the positions each may hold and the rows one pass may carry.
///
/// Made from the parameters the context was made with: llama.cpp aborts
/// the process on a sequence id at or past the context's `n_seq_max`,
/// which a context does not tell, so the options check the ids against
/// the parameters' `n_seq_max`.
///
/// ```
/// use llama_cpp_2::context::params::LlamaContextParams;
/// use selfspec_llama_cpp::Options;
///
/// let params = LlamaContextParams::default().with_n_seq_max(8);
/// // llama.cpp sequences 4..8 of a context shared with other work,
/// // 2048 positions each, the stepper's passes of at most 64 rows.
/// let options = Options::new(&params)
///     .with_seq_ids([4, 5, 6, 7])
///     .with_context(2048)
///     .with_step_rows(64);
/// assert_eq!(options.seq_ids(), &[4, 5, 6, 7]);
/// assert_eq!(Options::new(&params).seq_ids().len(), 8);
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Options {
    n_seq_max: u32,
    kv_unified: bool,
    seq_ids: Vec<i32>,
    context: Option<usize>,
    batch: Option<usize>,
    step_rows: Option<usize>,
}

impl Options {
    /// The options of a context made with `params`: every one of its
    /// sequences (ids `0..n_seq_max`), the defaults below.
    #[must_use]
    pub fn new(params: &LlamaContextParams) -> Options {
        let n_seq_max = params.n_seq_max();
        Options {
            n_seq_max,
            kv_unified: params.kv_unified(),
            seq_ids: (0..n_seq_max)
                .map_while(|i| i32::try_from(i).ok())
                .collect(),
            context: None,
            batch: None,
            step_rows: None,
        }
    }

    /// Stepper sequence `i` is llama.cpp sequence id `seq_ids[i]`: ids
    /// below the context's `n_seq_max`, each once.
    #[must_use]
    pub fn with_seq_ids(mut self, seq_ids: impl IntoIterator<Item = i32>) -> Options {
        self.seq_ids = seq_ids.into_iter().collect();
        self
    }

    /// Positions each sequence may hold (default: the context's `n_ctx`
    /// split evenly between the sequences, which is what each gets from a
    /// KV cache that is not unified).
    #[must_use]
    pub fn with_context(mut self, positions: usize) -> Options {
        self.context = Some(positions);
        self
    }

    /// Rows one pass may carry, every sequence's together (default: the
    /// context's `n_batch`): the size of the target's `llama_batch`.
    #[must_use]
    pub fn with_batch(mut self, rows: usize) -> Options {
        self.batch = Some(rows);
        self
    }

    /// Rows the stepper puts into one pass at most (its
    /// [`Shape::batch`](selfspec::step::Shape::batch); default: the
    /// batch). Fewer than the batch bounds what a step of drafts costs;
    /// [`LlamaTarget::decode_rows`](crate::LlamaTarget::decode_rows) still
    /// takes the whole batch.
    #[must_use]
    pub fn with_step_rows(mut self, rows: usize) -> Options {
        self.step_rows = Some(rows);
        self
    }

    /// The llama.cpp sequence ids, in stepper order.
    #[must_use]
    pub fn seq_ids(&self) -> &[i32] {
        &self.seq_ids
    }

    /// Positions each sequence may hold, when set.
    #[must_use]
    pub fn context(&self) -> Option<usize> {
        self.context
    }

    /// Rows one pass may carry, when set.
    #[must_use]
    pub fn batch(&self) -> Option<usize> {
        self.batch
    }

    /// Rows the stepper puts into one pass, when set.
    #[must_use]
    pub fn step_rows(&self) -> Option<usize> {
        self.step_rows
    }

    /// The options checked against a context of `n_ctx` positions and
    /// `n_batch` rows, the defaults filled in.
    /// How llama.cpp computes a pass of this context: one computation
    /// (split in `n_ubatch` chunks) with one cache for all sequences, else
    /// equal rows a sequence over runs of consecutive sequence ids
    /// (`split_equal`), which the target's sequences form when their ids
    /// follow one another (else, roughly, each sequence alone).
    pub(crate) fn split(&self, n_ubatch: usize) -> Split {
        let ubatch = n_ubatch.max(1);
        let ids = &self.seq_ids;
        if self.n_seq_max <= 1 || self.kv_unified {
            Split::Whole { ubatch }
        } else if ids.windows(2).all(|w| w[1] == w[0] + 1) {
            Split::EqualRuns { ubatch }
        } else {
            Split::PerSequence
        }
    }

    pub(crate) fn resolve(mut self, n_ctx: usize, n_batch: usize) -> Result<Options, Error> {
        let n = self.seq_ids.len();
        setting("sequences", n, n >= 1, "at least one sequence id")?;
        for (i, &id) in self.seq_ids.iter().enumerate() {
            let value = usize::try_from(id).unwrap_or(usize::MAX);
            let ok = u32::try_from(id).is_ok_and(|id| id < self.n_seq_max);
            setting("a sequence id", value, ok, "ids from 0 to n_seq_max - 1")?;
            let repeated = self.seq_ids[..i].contains(&id);
            setting("a sequence id", value, !repeated, "each id once")?;
        }
        let context = self.context.unwrap_or(n_ctx / n);
        let ok = context >= 2 && context <= n_ctx;
        setting("context", context, ok, "2 positions to the context's n_ctx")?;
        let batch = self.batch.unwrap_or(n_batch);
        let ok = batch >= 2 * n && batch <= n_batch;
        let allowed = "2 rows a sequence to the context's n_batch";
        setting("batch", batch, ok, allowed)?;
        let step = self.step_rows.unwrap_or(batch);
        let ok = step >= 2 * n && step <= batch;
        setting("step rows", step, ok, "2 rows a sequence to the batch")?;
        self.context = Some(context);
        self.batch = Some(batch);
        self.step_rows = Some(step);
        Ok(self)
    }
}

fn setting(what: &'static str, value: usize, ok: bool, allowed: &'static str) -> Result<(), Error> {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_split_follows_the_cache_layout() {
        let params = |n: u32, unified: bool| {
            LlamaContextParams::default()
                .with_n_seq_max(n)
                .with_kv_unified(unified)
        };
        let whole = Split::Whole { ubatch: 512 };
        let runs = Split::EqualRuns { ubatch: 512 };
        // (case, options, expected split)
        let cases = [
            ("one sequence", Options::new(&params(1, false)), whole),
            ("unified", Options::new(&params(4, true)), whole),
            ("a cache each", Options::new(&params(4, false)), runs),
            (
                "consecutive ids",
                Options::new(&params(4, false)).with_seq_ids([2, 3]),
                runs,
            ),
            (
                "ids apart",
                Options::new(&params(4, false)).with_seq_ids([3, 1]),
                Split::PerSequence,
            ),
        ];
        for (case, options, want) in cases {
            assert_eq!(options.split(512), want, "{case}");
        }
    }
}
