//! The crate's one error type.

/// Everything that can go wrong when building a [`Speculative`](crate::Speculative)
/// or parsing a [`Strategy`](crate::Strategy).
///
/// Messages name the offending field and what is allowed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A numeric parameter is outside the range the strategy can use.
    #[error("{context}: `{field}` = {value} is out of range; allowed: {min}..={max}")]
    OutOfRange {
        /// Where the field lives (`ngram-simple`, `config`, ...).
        context: &'static str,
        /// The field's name (`n`, `m`, `draft_max`, ...).
        field: &'static str,
        /// The value given.
        value: usize,
        /// The smallest allowed value.
        min: usize,
        /// The largest allowed value.
        max: usize,
    },
    /// `draft_min` exceeds `draft_max`, so no draft could ever be used.
    #[error("config: `draft_min` = {draft_min} is greater than `draft_max` = {draft_max}; draft_min must be at most draft_max")]
    DraftMinAboveMax {
        /// The configured minimum draft length.
        draft_min: usize,
        /// The configured maximum draft length.
        draft_max: usize,
    },
    /// The chain of strategies is empty.
    #[error("config: `strategies` is empty; configure at least one strategy (e.g. ngram-simple)")]
    EmptyChain,
    /// A strategy name that does not exist.
    #[error(
        "unknown strategy `{name}`; expected one of: {}",
        crate::config::strategy_names()
    )]
    UnknownStrategy {
        /// The name given.
        name: String,
    },
    /// A workload file that cannot be read or parsed. Shown as
    /// `FILE:LINE: reason`, or `FILE: reason` for line 0 (the file itself: an
    /// I/O error).
    #[error("{}: {reason}", location(.source_name, *.line))]
    Workload {
        /// The file (or label) the workload came from.
        source_name: String,
        /// 1-based line of the offending session, 0 for the file as a whole.
        line: usize,
        /// What is wrong.
        reason: String,
    },
    /// A llama.cpp lookup cache file that cannot be read or is malformed.
    #[error("lookup cache {}: byte {offset}: {reason}", path.display())]
    CacheFile {
        /// The file.
        path: std::path::PathBuf,
        /// Byte offset of the problem (0 for the file as a whole).
        offset: u64,
        /// What is wrong.
        reason: String,
    },
    /// A memory file ([`Shared::save`](crate::Shared::save) /
    /// [`Shared::load`](crate::Shared::load)) that cannot be read, written or used.
    #[error("memory file {}: byte {offset}: {problem}", path.display())]
    MemoryFile {
        /// The file.
        path: std::path::PathBuf,
        /// Byte offset of the problem (0 for the file as a whole).
        offset: u64,
        /// What is wrong.
        problem: MemoryFileProblem,
    },
    /// A strategy string whose parameters do not parse.
    #[error("strategy `{input}`: {reason}")]
    ParseStrategy {
        /// The whole string given.
        input: String,
        /// What is wrong with it and what is expected.
        reason: String,
    },
    /// A buffer could not be allocated (the process keeps running).
    #[error("{what}: cannot allocate {bytes} bytes ({:.1} GiB); choose a smaller size", *.bytes as f64 / (1u64 << 30) as f64)]
    OutOfMemory {
        /// What was being allocated (`ngram-mod pool`, ...).
        what: &'static str,
        /// Bytes requested.
        bytes: usize,
    },
}

/// `FILE:LINE`, or `FILE` alone for line 0.
fn location(source: &str, line: usize) -> String {
    if line == 0 {
        source.to_string()
    } else {
        format!("{source}:{line}")
    }
}

/// What is wrong with a memory file ([`Error::MemoryFile`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum MemoryFileProblem {
    /// The file cannot be opened, read or written.
    #[error("{kind:?}: {message}")]
    Io {
        /// The I/O error's kind.
        kind: std::io::ErrorKind,
        /// The I/O error's message.
        message: String,
    },
    /// The file is not a selfspec memory file.
    #[error("not a selfspec memory file (no `SELFSPEC` magic)")]
    NotAMemoryFile,
    /// Written by another format version.
    #[error("format version {found}; this build reads version {supported}")]
    Version {
        /// The file's version.
        found: u32,
        /// The version this build reads and writes.
        supported: u32,
    },
    /// The file ends before its header says it does.
    #[error("truncated: {expected} bytes expected, {found} present")]
    Truncated {
        /// Bytes the header promises.
        expected: u64,
        /// Bytes present.
        found: u64,
    },
    /// The checksum does not match the content.
    #[error(
        "checksum mismatch (stored {stored:#018x}, computed {computed:#018x}): the file is corrupt"
    )]
    Checksum {
        /// The checksum stored in the file.
        stored: u64,
        /// The checksum of the content.
        computed: u64,
    },
    /// The file was built with parameters this configuration cannot use.
    #[error("built with {field} = {file}, but the configuration has {config}")]
    Incompatible {
        /// The parameter.
        field: &'static str,
        /// The file's value.
        file: u64,
        /// The configuration's value.
        config: u64,
    },
    /// A field holds a value that no writer produces.
    #[error("{what}")]
    Corrupt {
        /// What is wrong.
        what: &'static str,
    },
}
