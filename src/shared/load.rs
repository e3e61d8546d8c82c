//! Loading a memory file: its header checked against the configuration,
//! then each scope's pool, memory runs and learned tables restored.

use std::path::Path;

use super::memory_file::{error, fnv1a, open_container, read_name, truncated_at, Reader};
use super::memory_file::{
    HEADER, MAGIC, RUN_BYTES, RUN_CONTEXT, SCOPES_MAGIC, SCOPES_VERSION, VERSION,
};
use super::Shared;
use crate::config::Config;
use crate::error::MemoryFileProblem as Problem;
use crate::int::{ix32, wide};
use crate::strategies::{NgramPool, RecallMemory, RunContext, LEARNED_NUMBERS, SAVED_ORDERS};
use crate::sync;
use crate::Error;
use crate::Token;

/// The recall orders the file was built with must be this build's.
fn check_orders(r: &mut Reader<'_>, path: &Path) -> Result<(), Error> {
    let fail = |offset: usize, problem| error(path, wide(offset), problem);
    let n_orders = r.u32().unwrap_or(0);
    if ix32(n_orders) != SAVED_ORDERS.len() {
        let (file, config) = (u64::from(n_orders), wide(SAVED_ORDERS.len()));
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
        if file != wide(k) {
            let config = wide(k);
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
        let fail = |offset: usize, problem| error(path, wide(offset), problem);
        let truncated = |expected: usize| Problem::Truncated {
            expected: wide(expected),
            found: wide(bytes.len()),
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
        .try_fold(wide(HEADER) + 8, |acc, &(n, size)| {
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
        if expected != wide(bytes.len()) {
            return Err(fail(
                bytes
                    .len()
                    .min(usize::try_from(expected).unwrap_or(usize::MAX)),
                Problem::Truncated {
                    expected,
                    found: wide(bytes.len()),
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
        let fail = |offset: usize, problem| error(path, wide(offset), problem);
        let Header {
            n_learned,
            pool_size,
            pool_used,
            ..
        } = *self;
        if n_learned != 0 && n_learned != wide(LEARNED_NUMBERS) {
            return Err(fail(
                48,
                Problem::Incompatible {
                    field: "recall learned numbers",
                    file: n_learned,
                    config: wide(LEARNED_NUMBERS),
                },
            ));
        }
        if pool_size != 0 && config.uses_pool() && pool_size != wide(config.pool_size) {
            return Err(fail(
                88,
                Problem::Incompatible {
                    field: "pool_size",
                    file: pool_size,
                    config: wide(config.pool_size),
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
        let fail = |offset: usize, problem| error(path, wide(offset), problem);
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
            let n = ix32(r.u32().unwrap_or(0));
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
    let fail = |offset: usize, problem| error(path, wide(offset), problem);
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
        parts.push((name, wide(start), blob));
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
