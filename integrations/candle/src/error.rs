//! The errors of this crate.

use std::path::PathBuf;

/// What went wrong while loading a model or decoding with it.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A tensor operation failed, or a tensor is missing or has the wrong shape.
    #[error("candle: {0}")]
    Candle(#[from] candle_core::Error),
    /// A file could not be read or written.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// What the system said.
        source: std::io::Error,
    },
    /// A `config.json` is not valid JSON or lacks a required field.
    #[error("{}: not a model config: {source}", path.display())]
    ConfigJson {
        /// The file.
        path: PathBuf,
        /// What the parser said.
        source: serde_json::Error,
    },
    /// A model configuration that no decoder can have (e.g. heads that do not
    /// divide the hidden size).
    #[error("invalid model config: {0}")]
    Config(String),
    /// The weights file could not be loaded.
    #[error("{}: cannot load weights: {source}", path.display())]
    Weights {
        /// The file.
        path: PathBuf,
        /// What candle said (a missing tensor name, a shape mismatch, ...).
        source: candle_core::Error,
    },
    /// selfspec refused a configuration or a token cost.
    #[error("selfspec: {0}")]
    Selfspec(#[from] selfspec::Error),
    /// A prompt token that the vocabulary does not have.
    #[error("token {token} is outside the vocabulary (0..{vocab})")]
    TokenOutOfRange {
        /// The token.
        token: u32,
        /// The vocabulary size.
        vocab: usize,
    },
    /// A prompt that cannot be read (`line` 0: a command-line prompt).
    #[error("prompt (line {line}): {what}")]
    Prompt {
        /// 1-based line of the JSONL file, 0 for `--prompt`.
        line: usize,
        /// What is wrong with it.
        what: String,
    },
    /// A request with no prompt tokens: there is nothing to prefill.
    #[error("empty prompt: decoding needs at least one prompt token")]
    EmptyPrompt,
    /// A pass would go past the positions the model was trained for.
    #[error("the sequence needs {needed} positions, the model has {max}")]
    ContextFull {
        /// Positions the pass would fill.
        needed: usize,
        /// The model's context length.
        max: usize,
    },
    /// A GGUF file that cannot be read, or whose metadata and tensors do not
    /// describe a model this crate runs.
    #[error("{}: {what}", path.display())]
    Gguf {
        /// The file.
        path: PathBuf,
        /// What is wrong (and, where it applies, what is allowed).
        what: String,
    },
    /// A batch the model cannot evaluate as the stepper's target (a row of
    /// another sequence, positions that do not follow the cache), or a row
    /// asked for that the last pass did not output.
    #[error("batch: {0}")]
    Batch(String),
    /// A tokenizer that cannot be built or read, or text it cannot encode.
    #[error("tokenizer: {0}")]
    Tokenizer(String),
}

impl From<selfspec::step::MeasureError<Error>> for Error {
    /// The model's own error, or selfspec's (an argument out of range, a
    /// row it could not compare).
    fn from(e: selfspec::step::MeasureError<Error>) -> Error {
        use selfspec::step::MeasureError;
        match e {
            MeasureError::Target(e) => e,
            MeasureError::Selfspec(e) => Error::Selfspec(e),
            e => Error::Batch(e.to_string()),
        }
    }
}
