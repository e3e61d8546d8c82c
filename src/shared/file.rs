//! The memory file: [`Shared::save`] and [`Shared::load`].
//!
//! Little-endian throughout:
//!
//! | offset | field |
//! |---|---|
//! | 0 | magic `SELFSPEC` |
//! | 8 | format version (u32, [`VERSION`]) |
//! | 12 | number of recall orders (u32), then the 8 orders (u32 each) |
//! | 48 | learned numbers (u64; 0: no recall memory) |
//! | 56 | the memory budget it was built with (u64, bytes) |
//! | 64 | its capacity (u64, tokens) |
//! | 72 | tokens held (u64) |
//! | 80 | request runs (u64) |
//! | 88 | ngram-mod pool cells (u64; 0: no pool) |
//! | 96 | pool generation (u32), 0 (u32) |
//! | 104 | pool cells used (u64) |
//! | 112 | learned numbers (f64 each); runs (76 bytes each: length u64, context length u32, 16 context tokens u32); tokens (u32 each); pool cells (u64 each) |
//! | end - 8 | FNV-1a 64 of everything before it |

use std::path::Path;

use super::Shared;
use crate::config::Config;
use crate::error::MemoryFileProblem as Problem;
use crate::strategies::{NgramPool, RecallMemory, RunContext, LEARNED_NUMBERS, SAVED_ORDERS};
use crate::sync;
use crate::Error;
use crate::Token;

const MAGIC: &[u8; 8] = b"SELFSPEC";
/// A file of several scopes: each scope's single-scope file, named.
const SCOPES_MAGIC: &[u8; 8] = b"SELFSCOP";
const SCOPES_VERSION: u32 = 1;
/// The format version this build reads and writes.
pub const VERSION: u32 = 1;
const HEADER: usize = 112;
/// Context tokens saved per run: the memory's (16 in format version 1,
/// checked at compile time).
const RUN_CONTEXT: usize = crate::strategies::RUN_CONTEXT;
const _: () = assert!(RUN_CONTEXT == 16);
/// Bytes per saved run.
const RUN_BYTES: u64 = 8 + 4 + 4 * crate::int::wide(RUN_CONTEXT);

pub(super) fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

fn error(path: &Path, offset: u64, problem: Problem) -> Error {
    Error::MemoryFile {
        path: path.to_path_buf(),
        offset,
        problem,
    }
}

pub(super) fn io(path: &Path, e: std::io::Error) -> Error {
    error(path, 0, Problem::Io(std::sync::Arc::new(e)))
}

/// Reads little-endian fields off a byte slice, tracking the offset.
pub(super) struct Reader<'a> {
    pub(super) bytes: &'a [u8],
    pub(super) at: usize,
}

impl Reader<'_> {
    fn take<const N: usize>(&mut self) -> Option<[u8; N]> {
        let out = self.bytes.get(self.at..self.at + N)?.try_into().ok()?;
        self.at += N;
        Some(out)
    }
    pub(super) fn u32(&mut self) -> Option<u32> {
        self.take().map(u32::from_le_bytes)
    }
    pub(super) fn u64(&mut self) -> Option<u64> {
        self.take().map(u64::from_le_bytes)
    }
    fn f64(&mut self) -> Option<f64> {
        self.take().map(f64::from_le_bytes)
    }
}

impl Shared {
    /// Saves the engine-wide state (every scope: recall's memory and
    /// learned tables, the ngram-mod pool) to `path`, so that a restarted
    /// server starts warm.
    ///
    /// Crash-safe: each save writes a temporary file of its own beside
    /// `path` (`.NAME.PID.N.tmp`), syncs it to disk, renames it onto `path`
    /// and syncs the directory, so `path` always holds one whole save, even
    /// after a crash or a power loss. Saves of one engine are serialised;
    /// saves while drafters run are fine (each scope is read under its
    /// writer lock, so a save holds up request ends, never drafts).
    ///
    /// ```
    /// use selfspec::{Config, Shared, Speculative};
    ///
    /// let config = Config::recommended();
    /// let shared = Shared::new(&config)?;
    /// drop(Speculative::with_shared(&config, &shared)?); // ... serve requests ...
    /// let path = std::env::temp_dir().join(format!("selfspec-doc-{}.mem", std::process::id()));
    /// shared.save(&path)?;
    /// let warm = Shared::load(&config, &path)?;
    /// # std::fs::remove_file(&path).ok();
    /// # Ok::<(), selfspec::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::MemoryFile`] naming the file that failed (the temporary
    /// file when it cannot be written, `path` when the rename fails).
    pub fn save(&self, path: impl AsRef<Path>) -> Result<(), Error> {
        let started = std::time::Instant::now();
        let saved = self.write_file(path.as_ref());
        if saved.is_ok() {
            self.count_save(started.elapsed());
        }
        saved
    }

    /// Writes the memory file to `path` (see [`save`](Shared::save)).
    fn write_file(&self, path: &Path) -> Result<(), Error> {
        // One save at a time per engine; other engines' saves to the same
        // path have temporary files of their own.
        let _saving = self.lock_saves();
        let bytes = self.to_bytes();
        let tmp = temporary_beside(path);
        let written = (|| {
            let mut file = std::fs::File::create(&tmp)?;
            std::io::Write::write_all(&mut file, &bytes)?;
            // On disk before it has the target's name: a power loss after
            // the rename finds the whole file, never an empty one.
            file.sync_all()
        })();
        if let Err(e) = written {
            let _ = std::fs::remove_file(&tmp);
            return Err(io(&tmp, e));
        }
        if let Err(e) = std::fs::rename(&tmp, path) {
            let _ = std::fs::remove_file(&tmp);
            return Err(io(path, e));
        }
        // The rename itself is durable once the directory is synced (where
        // the platform opens directories; elsewhere the rename stands alone).
        let dir = match path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => Path::new("."),
        };
        if let Ok(dir) = std::fs::File::open(dir) {
            dir.sync_all().map_err(|e| io(path, e))?;
        }
        Ok(())
    }

    /// The memory file's bytes (what [`save`](Shared::save) writes: every
    /// scope of the engine), for an engine that stores them elsewhere;
    /// [`SharedBuilder::build_from_bytes`](super::SharedBuilder::build_from_bytes)
    /// reads them back.
    #[must_use]
    pub fn to_bytes(&self) -> Vec<u8> {
        let scopes = self.every_scope();
        if scopes.len() == 1 {
            return scopes[0].scope_bytes();
        }
        let mut out = Vec::new();
        out.extend_from_slice(SCOPES_MAGIC);
        out.extend_from_slice(&SCOPES_VERSION.to_le_bytes());
        out.extend_from_slice(
            &u32::try_from(scopes.len())
                .unwrap_or(u32::MAX)
                .to_le_bytes(),
        );
        for scope in &scopes {
            let name = scope.scope_name().as_bytes();
            let blob = scope.scope_bytes();
            out.extend_from_slice(&u32::try_from(name.len()).unwrap_or(u32::MAX).to_le_bytes());
            out.extend_from_slice(name);
            out.extend_from_slice(&(blob.len() as u64).to_le_bytes());
            out.extend_from_slice(&blob);
        }
        let checksum = fnv1a(&out);
        out.extend_from_slice(&checksum.to_le_bytes());
        out
    }

    /// One scope's memory file (the single-scope format).
    fn scope_bytes(&self) -> Vec<u8> {
        let recall = self.existing_recall_memory();
        let pool = self.existing_pool();
        let learned = recall
            .as_ref()
            .map(|m| m.learned_numbers())
            .unwrap_or_default();
        let (tokens, runs) = recall.as_ref().map(|m| m.runs()).unwrap_or_default();
        let mut out =
            Vec::with_capacity(HEADER + 8 * learned.len() + 8 * runs.len() + 4 * tokens.len() + 8);
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&VERSION.to_le_bytes());
        out.extend_from_slice(
            &u32::try_from(SAVED_ORDERS.len())
                .unwrap_or(u32::MAX)
                .to_le_bytes(),
        );
        for k in SAVED_ORDERS {
            out.extend_from_slice(&u32::try_from(k).unwrap_or(u32::MAX).to_le_bytes());
        }
        let (pool_generation, pool_used, pool_size) = match &pool {
            Some(p) => {
                let (generation, used, _) = p.raw();
                (generation, used as u64, p.size() as u64)
            }
            None => (0, 0, 0),
        };
        for field in [
            learned.len() as u64,
            self.inner.budget.memory as u64,
            recall.as_ref().map_or(0, |m| m.capacity() as u64),
            tokens.len() as u64,
            runs.len() as u64,
            pool_size,
        ] {
            out.extend_from_slice(&field.to_le_bytes());
        }
        out.extend_from_slice(&pool_generation.to_le_bytes());
        out.extend_from_slice(&0u32.to_le_bytes());
        out.extend_from_slice(&pool_used.to_le_bytes());
        debug_assert_eq!(out.len(), HEADER);
        for x in learned {
            out.extend_from_slice(&x.to_le_bytes());
        }
        for (len, context) in runs {
            out.extend_from_slice(&len.to_le_bytes());
            let c = context.as_slice();
            out.extend_from_slice(&u32::try_from(c.len()).unwrap_or(u32::MAX).to_le_bytes());
            for i in 0..RUN_CONTEXT {
                out.extend_from_slice(&c.get(i).copied().unwrap_or(0).to_le_bytes());
            }
        }
        for t in tokens {
            out.extend_from_slice(&t.to_le_bytes());
        }
        if let Some(p) = &pool {
            out.reserve(8 * p.size() + 8);
            for word in p.raw().2 {
                out.extend_from_slice(&word.to_le_bytes());
            }
        }
        let checksum = fnv1a(&out);
        out.extend_from_slice(&checksum.to_le_bytes());
        out
    }
}

/// The recall orders the file was built with must be this build's.
fn check_orders(r: &mut Reader<'_>, path: &Path) -> Result<(), Error> {
    let fail = |offset: usize, problem| error(path, offset as u64, problem);
    let n_orders = r.u32().unwrap_or(0);
    if n_orders as usize != SAVED_ORDERS.len() {
        let (file, config) = (u64::from(n_orders), SAVED_ORDERS.len() as u64);
        return Err(fail(
            12,
            Problem::Incompatible {
                field: "recall orders",
                file,
                config,
            },
        ));
    }
    for &k in &SAVED_ORDERS {
        let at = r.at;
        let file = u64::from(r.u32().unwrap_or(0));
        if file != k as u64 {
            let config = k as u64;
            return Err(fail(
                at,
                Problem::Incompatible {
                    field: "recall order",
                    file,
                    config,
                },
            ));
        }
    }
    Ok(())
}

/// A memory file's header, checked: sizes that add up to the file, the
/// checksum, and parameters this configuration can use.
#[derive(Clone, Copy)]
struct Header {
    n_learned: u64,
    n_tokens: u64,
    n_runs: u64,
    pool_size: u64,
    pool_generation: u32,
    pool_used: u64,
}

impl Header {
    /// Reads and checks the header of `bytes` (a file of `path`).
    fn read(config: &Config, path: &Path, bytes: &[u8]) -> Result<Header, Error> {
        let fail = |offset: usize, problem| error(path, offset as u64, problem);
        let truncated = |expected: usize| Problem::Truncated {
            expected: expected as u64,
            found: bytes.len() as u64,
        };
        if bytes.len() < 8 || &bytes[..8] != MAGIC {
            return Err(fail(0, Problem::NotAMemoryFile));
        }
        let mut r = Reader { bytes, at: 8 };
        let version = r.u32().ok_or_else(|| fail(8, truncated(HEADER + 8)))?;
        if version != VERSION {
            return Err(fail(
                8,
                Problem::Version {
                    found: version,
                    supported: VERSION,
                },
            ));
        }
        if bytes.len() < HEADER + 8 {
            return Err(fail(bytes.len(), truncated(HEADER + 8)));
        }
        let header = |r: &mut Reader<'_>| r.u64().unwrap_or(0);
        check_orders(&mut r, path)?;
        let n_learned = header(&mut r);
        let _budget = header(&mut r);
        let _capacity = header(&mut r);
        let n_tokens = header(&mut r);
        let n_runs = header(&mut r);
        let pool_size = header(&mut r);
        let pool_generation = r.u32().unwrap_or(0);
        let _ = r.u32();
        let pool_used = header(&mut r);
        let expected = [
            (n_learned, 8),
            (n_runs, RUN_BYTES),
            (n_tokens, 4),
            (pool_size, 8),
        ]
        .iter()
        .try_fold(HEADER as u64 + 8, |acc, &(n, size)| {
            n.checked_mul(size).and_then(|b| acc.checked_add(b))
        });
        let Some(expected) = expected else {
            return Err(fail(
                48,
                Problem::Corrupt {
                    what: "section sizes overflow",
                },
            ));
        };
        if expected != bytes.len() as u64 {
            return Err(fail(
                bytes
                    .len()
                    .min(usize::try_from(expected).unwrap_or(usize::MAX)),
                Problem::Truncated {
                    expected,
                    found: bytes.len() as u64,
                },
            ));
        }
        let body = bytes.len() - 8;
        let stored = u64::from_le_bytes(bytes[body..].try_into().unwrap_or_default());
        let computed = fnv1a(&bytes[..body]);
        if stored != computed {
            return Err(fail(body, Problem::Checksum { stored, computed }));
        }
        let header = Header {
            n_learned,
            n_tokens,
            n_runs,
            pool_size,
            pool_generation,
            pool_used,
        };
        header.check(config, path)?;
        Ok(header)
    }

    /// Whether `config` can use what the header describes.
    fn check(&self, config: &Config, path: &Path) -> Result<(), Error> {
        let fail = |offset: usize, problem| error(path, offset as u64, problem);
        let Header {
            n_learned,
            pool_size,
            pool_used,
            ..
        } = *self;
        if n_learned != 0 && n_learned != LEARNED_NUMBERS as u64 {
            return Err(fail(
                48,
                Problem::Incompatible {
                    field: "recall learned numbers",
                    file: n_learned,
                    config: LEARNED_NUMBERS as u64,
                },
            ));
        }
        if pool_size != 0 && config.uses_pool() && pool_size != config.pool_size as u64 {
            return Err(fail(
                88,
                Problem::Incompatible {
                    field: "pool_size",
                    file: pool_size,
                    config: config.pool_size as u64,
                },
            ));
        }
        if pool_used > pool_size {
            return Err(fail(
                104,
                Problem::Corrupt {
                    what: "more pool cells used than the pool has",
                },
            ));
        }
        Ok(())
    }
}

impl Shared {
    /// Restores a memory file of one scope (into this handle's scope) or
    /// of several (into the scopes of their names); every part is checked
    /// before anything is restored.
    pub(super) fn restore(&self, config: &Config, path: &Path, bytes: &[u8]) -> Result<(), Error> {
        if !bytes.starts_with(SCOPES_MAGIC) {
            return self.restore_scope(config, path, bytes);
        }
        let parts = scope_parts(path, bytes)?;
        for &(_, at, blob) in &parts {
            Header::read(config, path, blob).map_err(|e| shift(e, at))?;
        }
        for (name, at, blob) in parts {
            self.scope_named(name)
                .restore_scope(config, path, blob)
                .map_err(|e| shift(e, at))?;
        }
        Ok(())
    }

    fn restore_scope(&self, config: &Config, path: &Path, bytes: &[u8]) -> Result<(), Error> {
        let fail = |offset: usize, problem| error(path, offset as u64, problem);
        let header = Header::read(config, path, bytes)?;
        let Header {
            n_learned,
            n_tokens,
            n_runs,
            pool_size,
            ..
        } = header;
        let body = bytes.len() - 8;
        let mut r = Reader { bytes, at: HEADER };
        let numbers: Vec<f64> = (0..n_learned).filter_map(|_| r.f64()).collect();
        let runs_at = r.at;
        let mut runs: Vec<(u64, RunContext)> = Vec::new();
        for _ in 0..n_runs {
            let len = r.u64().unwrap_or(0);
            let n = r.u32().unwrap_or(0) as usize;
            let context: Vec<Token> = (0..RUN_CONTEXT).map(|_| r.u32().unwrap_or(0)).collect();
            if n > RUN_CONTEXT {
                return Err(fail(
                    r.at + 8 - usize::try_from(RUN_BYTES).unwrap_or(0),
                    Problem::Corrupt {
                        what: "a run context longer than 16 tokens",
                    },
                ));
            }
            runs.push((len, RunContext::new(&context[..n])));
        }
        if runs.iter().try_fold(0u64, |a, &(b, _)| a.checked_add(b)) != Some(n_tokens) {
            return Err(fail(
                runs_at,
                Problem::Corrupt {
                    what: "request runs do not add up to the tokens held",
                },
            ));
        }
        let tokens_at = r.at;
        if n_learned != 0 {
            let memory: sync::Arc<RecallMemory> = self.recall_memory();
            if !memory.set_learned_numbers(&numbers) {
                let what = "a learned number is not a whole, non-negative count or not finite";
                return Err(fail(HEADER, Problem::Corrupt { what }));
            }
            let mut at = tokens_at;
            let mut run = Vec::new();
            for (len, context) in &runs {
                let len = *len;
                run.clear();
                run.extend((0..len).map(|i| {
                    let p = at + 4 * usize::try_from(i).unwrap_or(0);
                    u32::from_le_bytes(bytes[p..p + 4].try_into().unwrap_or_default())
                }));
                memory.append_after(context.as_slice(), &run);
                at += 4 * usize::try_from(len).unwrap_or(0);
            }
        } else if n_tokens != 0 {
            return Err(fail(
                48,
                Problem::Corrupt {
                    what: "tokens without a recall memory",
                },
            ));
        }
        if pool_size != 0 && config.uses_pool() {
            let pool: std::sync::Arc<NgramPool> = self.pool()?;
            let start = tokens_at + 4 * usize::try_from(n_tokens).unwrap_or(0);
            let cells = bytes[start..body]
                .chunks_exact(8)
                .map(|c| u64::from_le_bytes(c.try_into().unwrap_or_default()));
            pool.restore(
                header.pool_generation,
                usize::try_from(header.pool_used).unwrap_or(0),
                cells,
            );
        }
        Ok(())
    }
}

/// One scope in a scope file: its name, where its file starts, its file.
type ScopePart<'a> = (&'a str, u64, &'a [u8]);

/// A scope file's parts: each scope's name, where its file starts, and its
/// file; the container's sizes and checksum checked.
fn scope_parts<'a>(path: &Path, bytes: &'a [u8]) -> Result<Vec<ScopePart<'a>>, Error> {
    let fail = |offset: usize, problem| error(path, offset as u64, problem);
    let truncated = |at: usize| truncated_at(path, at, bytes.len());
    let mut r = open_container(path, bytes, SCOPES_MAGIC, SCOPES_VERSION)?;
    let body = r.bytes.len();
    let count = r.u32().unwrap_or(0);
    let mut parts = Vec::new();
    let mut names: Vec<&str> = Vec::new();
    for _ in 0..count {
        let name = read_name(&mut r, path, bytes.len())?;
        if names.contains(&name) {
            let what = "a scope saved twice";
            return Err(fail(r.at, Problem::Corrupt { what }));
        }
        names.push(name);
        let blob_len = r.u64().ok_or_else(|| truncated(r.at))?;
        let blob_len = usize::try_from(blob_len).map_err(|_| truncated(r.at))?;
        let start = r.at;
        let blob = r
            .bytes
            .get(start..start.saturating_add(blob_len))
            .ok_or_else(|| truncated(start))?;
        r.at += blob_len;
        parts.push((name, start as u64, blob));
    }
    if r.at != body {
        let what = "bytes after the last scope";
        return Err(fail(r.at, Problem::Corrupt { what }));
    }
    Ok(parts)
}

/// An error of a scope's file inside a scope file: its offset counted from
/// the start of the whole file.
fn shift(e: Error, by: u64) -> Error {
    match e {
        Error::MemoryFile {
            path,
            offset,
            problem,
        } => Error::MemoryFile {
            path,
            offset: offset.saturating_add(by),
            problem,
        },
        other => other,
    }
}

/// A temporary file's name beside `path`, unique to this process and call.
fn temporary_beside(path: &Path) -> std::path::PathBuf {
    static SAVES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = SAVES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let name = path
        .file_name()
        .map_or_else(|| "memory".into(), |n| n.to_string_lossy());
    path.with_file_name(format!(".{name}.{}.{n}.tmp", std::process::id()))
}

/// A truncation at `at` of a file of `len` bytes.
pub(super) fn truncated_at(path: &Path, at: usize, len: usize) -> Error {
    error(
        path,
        at as u64,
        Problem::Truncated {
            expected: at as u64 + 8,
            found: len as u64,
        },
    )
}

/// Checks a container's magic, size, checksum and version (the formats of
/// several parts: scope files, replica deltas): a reader of its body after
/// the version.
pub(super) fn open_container<'a>(
    path: &Path,
    bytes: &'a [u8],
    magic: &[u8; 8],
    version: u32,
) -> Result<Reader<'a>, Error> {
    let fail = |offset: usize, problem| error(path, offset as u64, problem);
    if bytes.len() < 8 || &bytes[..8] != magic {
        return Err(fail(0, Problem::NotAMemoryFile));
    }
    if bytes.len() < 24 {
        return Err(truncated_at(path, bytes.len(), bytes.len()));
    }
    let body = bytes.len() - 8;
    let stored = u64::from_le_bytes(bytes[body..].try_into().unwrap_or_default());
    let computed = fnv1a(&bytes[..body]);
    if stored != computed {
        return Err(fail(body, Problem::Checksum { stored, computed }));
    }
    let mut r = Reader {
        bytes: &bytes[..body],
        at: 8,
    };
    let found = r.u32().unwrap_or(0);
    if found != version {
        return Err(fail(
            8,
            Problem::Version {
                found,
                supported: version,
            },
        ));
    }
    Ok(r)
}

/// A scope name (u32 length, UTF-8) at the reader's position.
pub(super) fn read_name<'a>(r: &mut Reader<'a>, path: &Path, len: usize) -> Result<&'a str, Error> {
    let at = r.at;
    let n = r.u32().ok_or_else(|| truncated_at(path, at, len))? as usize;
    let bytes: &'a [u8] = r.bytes;
    let name = bytes
        .get(r.at..r.at.saturating_add(n))
        .ok_or_else(|| truncated_at(path, r.at, len))?;
    let name = std::str::from_utf8(name).map_err(|_| {
        let what = "a scope name that is not UTF-8";
        error(path, r.at as u64, Problem::Corrupt { what })
    })?;
    r.at += n;
    Ok(name)
}
