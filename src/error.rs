//! The crate's one error type.

use std::io;
use std::sync::Arc;

/// Everything that can go wrong when building a [`Speculative`](crate::Speculative)
/// or a [`Shared`](crate::Shared), or parsing a [`Strategy`](crate::Strategy).
///
/// Messages name the offending field and what is allowed. Match on the
/// variant (the kind; new kinds may be added) rather than comparing errors.
/// File errors carry a typed problem ([`CacheFileProblem`],
/// [`MemoryFileProblem`]) as their [`source`](std::error::Error::source);
/// an I/O failure keeps its [`io::Error`] as the problem's source (shared in
/// an [`Arc`] so that `Error` stays `Clone`; [`Error::io_error`] reaches it).
///
/// ```
/// use selfspec::{Config, Error, Speculative};
///
/// let err = Speculative::new(&Config::default().with_draft_max(0)).unwrap_err();
/// assert!(matches!(err, Error::OutOfRange { field: "draft_max", .. }));
/// assert_eq!(err.to_string(), "config: `draft_max` = 0 is out of range; allowed: 1..=4096");
/// ```
#[derive(Debug, Clone, thiserror::Error)]
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
    /// A llama.cpp lookup cache file that cannot be read, written or parsed.
    #[error("lookup cache {}: byte {offset}: {problem}", path.display())]
    CacheFile {
        /// The file.
        path: std::path::PathBuf,
        /// Byte offset of the problem (0 for the file as a whole).
        offset: u64,
        /// What is wrong.
        #[source]
        problem: CacheFileProblem,
    },
    /// A token cost ([`Speculative::set_token_cost`](crate::Speculative::set_token_cost))
    /// outside `[0, 1)`.
    #[error("token cost {} is out of range; allowed: 0 <= cost < 1 (the price of one verified token relative to a forward pass)", short_float(*.cost))]
    TokenCost {
        /// The cost given.
        cost: f64,
    },
    /// [`Speculative::with_shared`](crate::Speculative::with_shared) for a
    /// chain with ngram-mod whose `pool_size` is not the one the
    /// [`Shared`](crate::Shared) was built with.
    #[error("config: `pool_size` = {config}, but the Shared was built with pool_size = {shared}; build the Shared from this configuration or set the same pool_size")]
    PoolSizeMismatch {
        /// The configuration's pool size.
        config: usize,
        /// The `Shared`'s.
        shared: usize,
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
        #[source]
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
    /// A [`Target`](crate::step::Target)'s shape the
    /// [`Stepper`](crate::step::Stepper) cannot drive.
    #[error("target shape: `{field}` = {value}; allowed: {allowed}")]
    Shape {
        /// The field (`sequences`, `context`, `vocab`, `batch`).
        field: &'static str,
        /// Its value.
        value: usize,
        /// What is allowed.
        allowed: &'static str,
    },
    /// A [`Stepper`](crate::step::Stepper) sequence that does not exist, or
    /// is busy with another request.
    #[error("sequence {seq} {problem} (the target has {sequences} sequences)")]
    Sequence {
        /// The sequence's index.
        seq: usize,
        /// Sequences the target has.
        sequences: usize,
        /// What is wrong (`does not exist`, `is busy`).
        problem: &'static str,
    },
    /// A request with no prompt token (the first reply token needs one).
    #[error("the prompt is empty; a request needs at least one prompt token")]
    EmptyPrompt,
    /// A prompt that leaves no room for a reply in the sequence's context.
    #[error("the prompt has {tokens} tokens; the context holds {context}: at most {} prompt tokens", .context - 1)]
    PromptTooLong {
        /// Prompt tokens.
        tokens: usize,
        /// The sequence's context.
        context: usize,
    },
    /// A token id outside the target's vocabulary.
    #[error("token {token} is outside the vocabulary ({vocab} tokens: ids 0..{vocab})")]
    TokenOutOfRange {
        /// The id.
        token: u32,
        /// The vocabulary's size.
        vocab: usize,
    },
    /// A sampler parameter outside its range.
    #[error("sampler: `{field}` = {} is out of range; allowed: {allowed}", short_float(*.value))]
    Sampler {
        /// The parameter (`temperature`, `top_p`, `min_p`).
        field: &'static str,
        /// Its value.
        value: f64,
        /// What is allowed.
        allowed: &'static str,
    },
    /// The target's output rows for a sequence cannot be verified: no
    /// greedy choice (an empty or NaN row), or no distribution to sample
    /// from (empty logits, all filtered out).
    #[error(
        "sequence {seq}: the target's rows have no usable output (empty, NaN or all filtered out)"
    )]
    Rows {
        /// The sequence's index.
        seq: usize,
    },
    /// A buffer could not be allocated (the process keeps running).
    #[error("{what}: cannot allocate {bytes} bytes ({:.1} GiB); choose a smaller size", crate::int::float(*.bytes) / f64::from(1u32 << 30))]
    OutOfMemory {
        /// What was being allocated (`ngram-mod pool`, ...).
        what: &'static str,
        /// Bytes requested.
        bytes: usize,
    },
}

impl Error {
    /// The I/O error behind a file error ([`Error::CacheFile`] or
    /// [`Error::MemoryFile`] that could not read or
    /// write its file), if any.
    ///
    /// ```
    /// let e = selfspec::strategies::LookupCache::load("/nonexistent/cache.bin").unwrap_err();
    /// assert_eq!(e.io_error().map(|e| e.kind()), Some(std::io::ErrorKind::NotFound));
    /// ```
    #[must_use]
    pub fn io_error(&self) -> Option<&io::Error> {
        match self {
            Error::CacheFile {
                problem: CacheFileProblem::Io(e),
                ..
            }
            | Error::MemoryFile {
                problem: MemoryFileProblem::Io(e),
                ..
            } => Some(e),
            _ => None,
        }
    }
}

/// What is wrong with a llama.cpp lookup cache file ([`Error::CacheFile`];
/// the error's offset says where).
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum CacheFileProblem {
    /// The file cannot be read or written.
    #[error(transparent)]
    Io(Arc<io::Error>),
    /// A record ends after its key, without a follower count.
    #[error("truncated record: missing follower count")]
    MissingFollowerCount,
    /// A follower count that is not positive.
    #[error("follower count {count}; must be positive")]
    FollowerCount {
        /// The count read.
        count: i32,
    },
    /// A record with fewer bytes left than its followers need.
    #[error("truncated record at {record}: {followers} followers need {need} bytes, {left} left")]
    Truncated {
        /// Byte offset of the record.
        record: u64,
        /// Followers the record announces.
        followers: i32,
        /// Bytes they need.
        need: u64,
        /// Bytes left in the file.
        left: u64,
    },
    /// A follower's count that is not positive.
    #[error("count {count} of token {token}; must be positive")]
    Count {
        /// The follower.
        token: u32,
        /// Its count.
        count: i32,
    },
}

/// What is wrong with a memory file ([`Error::MemoryFile`]).
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum MemoryFileProblem {
    /// The file cannot be opened, read or written.
    #[error(transparent)]
    Io(Arc<io::Error>),
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

/// A float for a message: at most 6 significant digits, in scientific
/// notation far from 1 (`-1e-300`, not 300 digits).
pub(crate) fn short_float(x: f64) -> String {
    let trim = |m: &str| {
        if m.contains('.') {
            m.trim_end_matches('0').trim_end_matches('.').to_string()
        } else {
            m.to_string()
        }
    };
    if x != 0.0 && x.is_finite() && !(1e-4..1e6).contains(&x.abs()) {
        let s = format!("{x:.5e}");
        match s.split_once('e') {
            Some((mantissa, exp)) => format!("{}e{exp}", trim(mantissa)),
            None => s,
        }
    } else {
        trim(&format!("{x:.6}"))
    }
}
