use std::path::PathBuf;

/// What can go wrong reading conversations, the model path, the drafting
/// configuration or writing the report.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A line of a conversation file is not a conversation.
    #[error("{path}:{line}: {message} (expected one JSON object a line: {{\"id\": \"...\", \"kind\": \"...\", \"turns\": [\"...\"]}})")]
    Parse {
        /// The file.
        path: PathBuf,
        /// The line, from 1.
        line: usize,
        /// What is wrong with it.
        message: String,
    },
    /// A `FILE[:N]` argument is malformed or selects nothing.
    #[error("{0}")]
    Source(String),
    /// The model file is not there.
    #[error("no model at {path}: fetch it with `bash integrations/fetch-model.sh` (from the repository's top), or give another GGUF with --gguf PATH")]
    ModelMissing {
        /// Where it was looked for.
        path: PathBuf,
    },
    /// A strategy or limit the drafting configuration rejects.
    #[error("drafting configuration: {0}")]
    Config(#[from] selfspec::Error),
    /// The report could not be serialized.
    #[error("JSON report: {0}")]
    Json(#[from] serde_json::Error),
}
