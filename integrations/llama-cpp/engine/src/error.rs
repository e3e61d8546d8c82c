//! What can go wrong, as one typed error.

use std::path::PathBuf;

use selfspec::step::{MeasureError, StepError};

/// Everything the engine, the loops and the command can report.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The model file does not exist.
    #[error(
        "no model at {path}: fetch SmolLM2-135M-Instruct with `bash integrations/fetch-model.sh` \
         (from the repository root) or give any Llama-family GGUF with --gguf PATH"
    )]
    ModelMissing {
        /// The path looked at.
        path: PathBuf,
    },
    /// The file exists but is not a GGUF file.
    #[error("{path} is not a GGUF model: the file does not start with the GGUF magic bytes")]
    NotGguf {
        /// The file.
        path: PathBuf,
    },
    /// llama.cpp could not load the file (truncated, unsupported architecture, unreadable).
    #[error(
        "llama.cpp could not load {path} (a truncated file or an architecture it does not know)"
    )]
    Load {
        /// The file.
        path: PathBuf,
    },
    /// The file could not be read.
    #[error("cannot read {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// llama.cpp's backend could not start.
    #[error("llama.cpp's backend: {0}")]
    Backend(String),
    /// llama.cpp could not create the context.
    #[error("llama.cpp could not create a context of {n_ctx} tokens for {sequences} sequences")]
    Context {
        /// Total context (all sequences).
        n_ctx: usize,
        /// Sequences.
        sequences: usize,
    },
    /// A setting outside what the engine takes.
    #[error("{what}: {value} is not allowed ({allowed})")]
    Setting {
        /// The setting.
        what: &'static str,
        /// The value given.
        value: usize,
        /// What is allowed.
        allowed: &'static str,
    },
    /// The prompt leaves no room for a reply in one sequence's context.
    #[error(
        "the prompt has {tokens} tokens and a sequence's context holds {context}: \
         a prompt must be shorter than the context to leave room for the reply"
    )]
    PromptTooLong {
        /// Prompt tokens.
        tokens: usize,
        /// Tokens one sequence's context holds.
        context: usize,
    },
    /// An empty prompt.
    #[error("the prompt is empty: at least one token is needed")]
    EmptyPrompt,
    /// A token id outside the model's vocabulary.
    #[error("token {token} is outside the vocabulary (ids 0..{vocab})")]
    TokenOutOfRange {
        /// The id.
        token: u32,
        /// The vocabulary size.
        vocab: usize,
    },
    /// A slot index outside the decoder, or a slot already decoding.
    #[error("slot {slot}: {problem} (the decoder has {slots} slots)")]
    Slot {
        /// The slot.
        slot: usize,
        /// Slots in the decoder.
        slots: usize,
        /// `"does not exist"` or `"is busy"`.
        problem: &'static str,
    },
    /// The adapter (llama.cpp's decode, its KV cache, a row it refused).
    #[error(transparent)]
    Llama(selfspec_llama_cpp::Error),
    /// The stepper or a measurement failed in a way this version does not
    /// know.
    #[error("selfspec: {0}")]
    Other(String),
    /// The chat template could not be applied.
    #[error("the chat template: {0}")]
    Template(String),
    /// selfspec rejected a configuration, a token cost, a target's shape
    /// or a row it could not verify.
    #[error(transparent)]
    Selfspec(selfspec::Error),
    /// The conversations, the model path or the JSON file.
    #[error(transparent)]
    Conversations(#[from] selfspec_conversations::Error),
}

impl From<selfspec::Error> for Error {
    /// selfspec's request errors as this package's own (a slot, a prompt,
    /// a token), the others as [`Error::Selfspec`].
    fn from(e: selfspec::Error) -> Error {
        match e {
            selfspec::Error::Sequence {
                seq,
                sequences,
                problem,
            } => Error::Slot {
                slot: seq,
                slots: sequences,
                problem,
            },
            selfspec::Error::EmptyPrompt => Error::EmptyPrompt,
            selfspec::Error::PromptTooLong { tokens, context } => {
                Error::PromptTooLong { tokens, context }
            }
            selfspec::Error::TokenOutOfRange { token, vocab } => {
                Error::TokenOutOfRange { token, vocab }
            }
            e => Error::Selfspec(e),
        }
    }
}

impl From<selfspec_llama_cpp::Error> for Error {
    /// The adapter's errors about a request as this package's own, the
    /// others as [`Error::Llama`].
    fn from(e: selfspec_llama_cpp::Error) -> Error {
        use selfspec_llama_cpp::Error as E;
        match e {
            E::Selfspec(e) => e.into(),
            E::Sequence { seq, sequences } => Error::Slot {
                slot: seq,
                slots: sequences,
                problem: "does not exist",
            },
            E::TokenOutOfRange { token, vocab } => Error::TokenOutOfRange { token, vocab },
            E::EmptyPass => Error::EmptyPrompt,
            E::Setting {
                what,
                value,
                allowed,
            } => Error::Setting {
                what,
                value,
                allowed,
            },
            e => Error::Llama(e),
        }
    }
}

impl From<StepError<selfspec_llama_cpp::Error>> for Error {
    /// The adapter's error as [`From<selfspec_llama_cpp::Error>`],
    /// selfspec's as [`From<selfspec::Error>`].
    fn from(e: StepError<selfspec_llama_cpp::Error>) -> Error {
        match e {
            StepError::Target(e) => e.into(),
            StepError::Selfspec(e) => e.into(),
            // A variant added to selfspec later: its message.
            e => Error::Other(e.to_string()),
        }
    }
}

impl From<MeasureError<selfspec_llama_cpp::Error>> for Error {
    /// The adapter's error as [`From<selfspec_llama_cpp::Error>`],
    /// selfspec's as [`From<selfspec::Error>`].
    fn from(e: MeasureError<selfspec_llama_cpp::Error>) -> Error {
        match e {
            MeasureError::Target(e) => e.into(),
            MeasureError::Selfspec(e) => e.into(),
            // A variant added to selfspec later: its message.
            e => Error::Other(e.to_string()),
        }
    }
}
