//! The adapter's one error type.

use selfspec::step::{MeasureError, StepError};

/// What the adapter can report: a setting it refuses, a row that does not
/// follow its sequence's cache, llama.cpp's own failures, and selfspec's
/// errors passed through.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An option outside what the adapter takes.
    #[error("{what}: {value} is not allowed ({allowed})")]
    Setting {
        /// The option.
        what: &'static str,
        /// The value given.
        value: usize,
        /// What is allowed.
        allowed: &'static str,
    },
    /// A sequence index outside the target's sequences.
    #[error("sequence {seq} does not exist (the target has {sequences})")]
    Sequence {
        /// The index given.
        seq: usize,
        /// Sequences of the target.
        sequences: usize,
    },
    /// A token id outside the model's vocabulary.
    #[error("token {token} is outside the vocabulary (ids 0..{vocab})")]
    TokenOutOfRange {
        /// The id.
        token: u32,
        /// The vocabulary size.
        vocab: usize,
    },
    /// A pass without rows.
    #[error("a pass needs at least one row")]
    EmptyPass,
    /// More rows than the batch takes.
    #[error("{rows} rows in one pass: the batch takes {batch}")]
    BatchFull {
        /// Rows given.
        rows: usize,
        /// Rows the batch takes.
        batch: usize,
    },
    /// A row that does not follow its sequence's cache.
    #[error("a row at position {pos} of sequence {seq}, whose cache holds {held} positions")]
    Position {
        /// The sequence.
        seq: usize,
        /// The row's position.
        pos: usize,
        /// Positions the sequence's cache holds (with the pass's rows before it).
        held: usize,
    },
    /// A position past the sequence's context.
    #[error("position {pos} of sequence {seq} is past its context of {context} tokens")]
    ContextFull {
        /// The sequence.
        seq: usize,
        /// The row's position.
        pos: usize,
        /// Positions one sequence holds.
        context: usize,
    },
    /// A row of the last pass without logits.
    #[error("row {row} of the last pass has no logits")]
    NoLogits {
        /// The row.
        row: usize,
    },
    /// `llama_decode` failed (a full KV cache, a sequence id past the
    /// context's `n_seq_max`, an aborted pass).
    #[error("llama.cpp's decode failed: {0}")]
    Decode(#[from] llama_cpp_2::DecodeError),
    /// The KV cache refused a removal.
    #[error("llama.cpp's KV cache refused to remove positions {from}.. of sequence {seq}")]
    KvCache {
        /// The sequence.
        seq: usize,
        /// First position to remove.
        from: usize,
    },
    /// llama.cpp could not save or restore a sequence's state.
    #[error("llama.cpp's sequence state: {0}")]
    State(String),
    /// selfspec rejected a configuration, a request or a row it could not
    /// verify.
    #[error(transparent)]
    Selfspec(#[from] selfspec::Error),
    /// The stepper or a measurement failed in a way this version does not
    /// know.
    #[error("selfspec: {0}")]
    Other(String),
}

impl From<StepError<Error>> for Error {
    /// The target's error as it was, selfspec's as [`Error::Selfspec`].
    fn from(e: StepError<Error>) -> Error {
        match e {
            StepError::Target(e) => e,
            StepError::Selfspec(e) => Error::Selfspec(e),
            // A variant added to selfspec later: its message.
            e => Error::Other(e.to_string()),
        }
    }
}

impl From<MeasureError<Error>> for Error {
    /// The target's error as it was, selfspec's as [`Error::Selfspec`].
    fn from(e: MeasureError<Error>) -> Error {
        match e {
            MeasureError::Target(e) => e,
            MeasureError::Selfspec(e) => Error::Selfspec(e),
            e => Error::Other(e.to_string()),
        }
    }
}
