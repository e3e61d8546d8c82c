//! The [`Target`] trait: what an engine implements for the [`Stepper`](super::Stepper).

use crate::int::ix32;
use crate::token::Token;

use super::choice::Choice;

/// A sequence of the target's batch: its index among the
/// [`Shape::sequences`] the target holds (llama.cpp's `seq_id`, an engine
/// slot).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SeqId(u32);

impl SeqId {
    /// The sequence with index `i` (saturating at `u32::MAX`).
    #[must_use]
    pub fn new(i: usize) -> SeqId {
        SeqId(crate::int::small(i))
    }

    /// Its index, `0..sequences`.
    #[must_use]
    pub fn index(self) -> usize {
        ix32(self.0)
    }
}

impl std::fmt::Display for SeqId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// What a target holds: its sequences, each one's context, its vocabulary
/// and the rows one forward pass takes at most.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Shape {
    /// Sequences decoded together (slots): [`SeqId`]s `0..sequences`.
    pub sequences: usize,
    /// Positions one sequence's cache holds at most.
    pub context: usize,
    /// The vocabulary's size: token ids are below it, logit rows this long.
    pub vocab: usize,
    /// Rows one forward pass takes at most (llama.cpp's `n_batch`).
    pub batch: usize,
}

/// One row of a [`Batch`]: `token` at position `pos` of sequence `seq`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Row {
    /// The sequence whose cache the row extends.
    pub seq: SeqId,
    /// The token evaluated.
    pub token: Token,
    /// Its position: the sequence's cache holds positions `0..pos` when the
    /// pass starts, or rows before this one in the batch bring it there.
    pub pos: usize,
    /// Whether the stepper reads this row's output ([`Target::logits`] or
    /// [`Target::greedy`]); prompt rows other than the last do not need it.
    pub output: bool,
}

/// The rows of one forward pass, several sequences' at once, each
/// sequence's rows contiguous and in position order.
#[derive(Clone, Debug, Default)]
pub struct Batch {
    rows: Vec<Row>,
}

impl Batch {
    /// The rows, in the order the pass evaluates them; [`Target::logits`]
    /// and [`Target::greedy`] take an index into this slice.
    #[must_use]
    pub fn rows(&self) -> &[Row] {
        &self.rows
    }

    /// Rows in the batch.
    #[must_use]
    pub fn len(&self) -> usize {
        self.rows.len()
    }

    /// Whether the batch has no rows.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    pub(super) fn with_capacity(rows: usize) -> Batch {
        Batch {
            rows: Vec::with_capacity(rows),
        }
    }

    pub(super) fn clear(&mut self) {
        self.rows.clear();
    }

    pub(super) fn push(&mut self, row: Row) {
        self.rows.push(row);
    }
}

/// What a cache removal left: the positions a sequence's cache now holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kept {
    /// Exactly the positions before the one asked for.
    Exact,
    /// Fewer: `0..len` (a cache that cannot remove positions, such as a
    /// recurrent model's state, restored a checkpoint taken at `len`). The
    /// stepper evaluates the tokens from `len` on again in the sequence's
    /// next rows, without reading their output.
    Restored {
        /// Positions held.
        len: usize,
    },
}

/// How an engine computes one forward pass: as one computation, or split
/// into several, each of which reads the model's weights again. The draft
/// budget prices a pass by its computations ([`Target::split`]): where a
/// pass splits by sequence, a draft in one sequence can cost a whole extra
/// computation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Split {
    /// One computation over all the rows, in chunks of at most `ubatch`
    /// rows (llama.cpp with one sequence or a unified cache, most GPU
    /// engines).
    Whole {
        /// Rows one computation takes at most.
        ubatch: usize,
    },
    /// Each sequence's rows alone (an engine that runs one sequence at a
    /// time).
    PerSequence,
    /// Computations of equal rows a sequence over runs of consecutive
    /// sequences: each takes the first sequence with rows left and the ones
    /// after it while they have rows left, and from each the same number of
    /// rows (the fewest any has left, at most `ubatch` in all): llama.cpp's
    /// `split_equal` when every sequence has a cache of its own (a context
    /// of several sequences without `kv_unified`).
    EqualRuns {
        /// Rows one computation takes at most.
        ubatch: usize,
    },
}

/// An engine's model, as the [`Stepper`](super::Stepper) drives it: one
/// forward pass over a batch of rows from several sequences, each row's
/// output, and removing a sequence's positions after a rejected draft.
///
/// An afternoon's work for an engine: [`forward`](Target::forward) is the
/// engine's batched decode (llama.cpp's `llama_decode`), [`logits`](Target::logits)
/// its output row, [`truncate`](Target::truncate) its cache removal
/// (`llama_memory_seq_rm`). A cache that cannot remove positions (a
/// recurrent or hybrid model's) keeps a checkpoint of each sequence before
/// every pass and returns [`Kept::Restored`] from `truncate`.
///
/// The guide (`docs/engine-guide.md` in the repository) has a whole target
/// and loop; [`Stepper`](super::Stepper)'s example is a mock target.
pub trait Target {
    /// The engine's error.
    type Error: std::error::Error + Send + Sync + 'static;

    /// The target's sequences, context, vocabulary and batch size (read
    /// once, by [`Stepper::new`](super::Stepper::new)).
    fn shape(&self) -> Shape;

    /// One forward pass over `batch`: each row's token joins its sequence's
    /// cache at its position. The outputs of rows marked
    /// [`output`](Row::output) are read afterwards, before the next pass.
    ///
    /// # Errors
    ///
    /// The engine's; the stepper then ends every sequence that had rows in
    /// the batch ([`Stop::Failed`](super::Stop::Failed)) and empties their
    /// caches before they are used again.
    fn forward(&mut self, batch: &Batch) -> Result<(), Self::Error>;

    /// The logits of row `row` of the last pass (a row marked
    /// [`output`](Row::output)), [`Shape::vocab`] of them. Sampled
    /// verification reads them; a target that only computes greedy choices
    /// may return an empty row (sampled requests then fail with
    /// [`Error::Rows`](crate::Error::Rows)).
    ///
    /// # Errors
    ///
    /// The engine's.
    fn logits(&mut self, row: usize) -> Result<&[f32], Self::Error>;

    /// The greedy choice of row `row` of the last pass. The default takes
    /// the argmax of [`logits`](Target::logits); a target that computes it
    /// on its device overrides it.
    ///
    /// # Errors
    ///
    /// The engine's. A row with no choice (empty, NaN) is reported by the
    /// stepper as [`Error::Rows`](crate::Error::Rows).
    fn greedy(&mut self, row: usize) -> Result<Option<Choice>, Self::Error> {
        Ok(Choice::of(self.logits(row)?))
    }

    /// The time the last [`forward`](Target::forward) took, when the target
    /// knows it better than a clock around the call (an engine that runs
    /// passes asynchronously, or a simulated one charging each pass from a
    /// cost curve). `None` by default: the stepper times the call.
    fn pass_time(&self) -> Option<std::time::Duration> {
        None
    }

    /// How the target computes a pass (read once, by
    /// [`Stepper::new`](super::Stepper::new)). The default is one
    /// computation of any size; a target whose passes split by sequence
    /// says so, or the draft budget prices drafts in one sequence as if
    /// they joined the others' computation.
    fn split(&self) -> Split {
        Split::Whole { ubatch: usize::MAX }
    }

    /// Removes the positions `from..` of `seq`'s cache.
    ///
    /// # Errors
    ///
    /// The engine's.
    fn truncate(&mut self, seq: SeqId, from: usize) -> Result<Kept, Self::Error>;
}
