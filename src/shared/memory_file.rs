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
use crate::error::MemoryFileProblem as Problem;
use crate::int::{ix32, wide};
use crate::strategies::SAVED_ORDERS;
use crate::Error;

pub(super) const MAGIC: &[u8; 8] = b"SELFSPEC";
/// A file of several scopes: each scope's single-scope file, named.
pub(super) const SCOPES_MAGIC: &[u8; 8] = b"SELFSCOP";
pub(super) const SCOPES_VERSION: u32 = 1;
/// The format version this build reads and writes.
pub const VERSION: u32 = 1;
pub(super) const HEADER: usize = 112;
/// Context tokens saved per run: the memory's (16 in format version 1,
/// checked at compile time).
pub(super) const RUN_CONTEXT: usize = crate::strategies::RUN_CONTEXT;
const _: () = assert!(RUN_CONTEXT == 16);
/// Bytes per saved run.
pub(super) const RUN_BYTES: u64 = 8 + 4 + 4 * crate::int::wide(RUN_CONTEXT);

pub(super) use crate::index::hash::fnv1a;

pub(super) fn error(path: &Path, offset: u64, problem: Problem) -> Error {
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
    pub(super) fn f64(&mut self) -> Option<f64> {
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
            out.extend_from_slice(&(wide(blob.len())).to_le_bytes());
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
                (generation, wide(used), wide(p.size()))
            }
            None => (0, 0, 0),
        };
        for field in [
            wide(learned.len()),
            wide(self.inner.budget.memory),
            recall.as_ref().map_or(0, |m| wide(m.capacity())),
            wide(tokens.len()),
            wide(runs.len()),
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
        wide(at),
        Problem::Truncated {
            expected: wide(at) + 8,
            found: wide(len),
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
    let fail = |offset: usize, problem| error(path, wide(offset), problem);
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
    let n = ix32(r.u32().ok_or_else(|| truncated_at(path, at, len))?);
    let bytes: &'a [u8] = r.bytes;
    let name = bytes
        .get(r.at..r.at.saturating_add(n))
        .ok_or_else(|| truncated_at(path, r.at, len))?;
    let name = std::str::from_utf8(name).map_err(|_| {
        let what = "a scope name that is not UTF-8";
        error(path, wide(r.at), Problem::Corrupt { what })
    })?;
    r.at += n;
    Ok(name)
}
