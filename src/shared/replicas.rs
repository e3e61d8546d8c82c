//! Replicas that learn together: [`Shared::export_since`] writes what a
//! replica's memory learned since a [`Cursor`], [`Shared::import`] adds
//! another replica's delta to a running engine.
//!
//! A delta, little-endian: magic `SELFDLTA`, version (u32), scopes (u32);
//! per scope its name (u32 length, UTF-8) and runs (u64), per run its
//! context (u32 length, 16 tokens u32), its length (u64) and tokens (u32
//! each); last, FNV-1a 64 of everything before it.

use std::path::Path;

use super::memory_file::{fnv1a, open_container, read_name, truncated_at};
use super::Shared;
use crate::error::MemoryFileProblem as Problem;
use crate::int::{ix32, wide};
use crate::token::Token;
use crate::Error;

const MAGIC: &[u8; 8] = b"SELFDLTA";
const VERSION: u32 = 1;
/// Context tokens a run carries: the memory's (16 in format version 1,
/// checked at compile time).
const CONTEXT: usize = crate::strategies::RUN_CONTEXT;
const _: () = assert!(CONTEXT == 16);

/// Where a replica's last export ended, per scope: pass it to the next
/// [`Shared::export_since`]. `Cursor::default()` exports everything held.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Cursor {
    ends: Vec<(String, u64)>,
}

impl Cursor {
    fn end_of(&self, scope: &str) -> u64 {
        self.ends
            .iter()
            .find(|(name, _)| name == scope)
            .map_or(0, |&(_, end)| end)
    }
}

/// One scope's runs in a delta: (context, tokens) each.
type ScopeRuns<'a> = (&'a str, Vec<(Vec<Token>, Vec<Token>)>);

impl Shared {
    /// What this replica's engine (every scope) published to recall's
    /// memory since `cursor` and still holds, as bytes in a checked format
    /// (magic, version, checksum), and the cursor for the next export.
    /// Runs imported from other replicas are left out, so deltas do not
    /// echo between replicas. Learned tables (calibration, weights) and
    /// ngram-mod's pool are not exported: each replica keeps its own.
    ///
    /// ```
    /// use selfspec::{Config, Cursor, Shared, Speculative};
    ///
    /// let config = Config::recommended();
    /// let (a, b) = (Shared::new(&config)?, Shared::new(&config)?);
    /// let text: Vec<u32> = (0..300).map(|i| i * 7919 % 1000).collect();
    /// let mut spec = Speculative::with_shared(&config, &a)?;
    /// spec.begin(&text);
    /// spec.end_request();
    /// let (delta, _next) = a.export_since(&Cursor::default());
    /// b.import(&delta)?; // the transport is the engine's: a bus, a file...
    /// let mut spec = Speculative::with_shared(&config, &b)?;
    /// spec.begin(&text[..20]);
    /// assert_eq!(spec.draft(&text[..20], text[20]).first(), Some(&text[21]));
    /// # Ok::<(), selfspec::Error>(())
    /// ```
    #[must_use]
    pub fn export_since(&self, cursor: &Cursor) -> (Vec<u8>, Cursor) {
        let mut out = Vec::new();
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&VERSION.to_le_bytes());
        let scopes = self.every_scope();
        out.extend_from_slice(
            &u32::try_from(scopes.len())
                .unwrap_or(u32::MAX)
                .to_le_bytes(),
        );
        let mut next = Cursor::default();
        for scope in &scopes {
            let name = scope.scope_name();
            let (runs, end) = match scope.existing_recall_memory() {
                Some(m) => m.runs_since(cursor.end_of(name)),
                None => (Vec::new(), 0),
            };
            next.ends.push((name.to_string(), end));
            out.extend_from_slice(&u32::try_from(name.len()).unwrap_or(u32::MAX).to_le_bytes());
            out.extend_from_slice(name.as_bytes());
            out.extend_from_slice(&(wide(runs.len())).to_le_bytes());
            for (context, tokens) in &runs {
                let c = context.as_slice();
                out.extend_from_slice(&u32::try_from(c.len()).unwrap_or(0).to_le_bytes());
                for i in 0..CONTEXT {
                    out.extend_from_slice(&c.get(i).copied().unwrap_or(0).to_le_bytes());
                }
                out.extend_from_slice(&(wide(tokens.len())).to_le_bytes());
                for t in tokens {
                    out.extend_from_slice(&t.to_le_bytes());
                }
            }
        }
        let checksum = fnv1a(&out);
        out.extend_from_slice(&checksum.to_le_bytes());
        (out, next)
    }

    /// Adds another replica's delta ([`export_since`](Shared::export_since))
    /// to this running engine: each scope's runs to the scope of that name
    /// (made if new), where this replica's drafters draft from them.
    ///
    /// # Errors
    ///
    /// [`Error::MemoryFile`] (labelled `delta`, with the byte offset) for a
    /// delta that is not one, of another version, truncated, with a wrong
    /// checksum or a malformed field; the whole delta is checked first, so
    /// on an error nothing was added.
    pub fn import(&self, delta: &[u8]) -> Result<(), Error> {
        let scopes = parse(Path::new("delta"), delta)?;
        for (name, runs) in scopes {
            if runs.is_empty() {
                continue;
            }
            let memory = self.scope_named(name).recall_memory();
            for (context, tokens) in &runs {
                memory.import_run(context, tokens);
            }
        }
        Ok(())
    }
}

/// Checks and reads a whole delta.
fn parse<'a>(path: &Path, bytes: &'a [u8]) -> Result<Vec<ScopeRuns<'a>>, Error> {
    let fail = |offset: usize, problem| Error::MemoryFile {
        path: path.to_path_buf(),
        offset: wide(offset),
        problem,
    };
    let truncated = |at: usize| truncated_at(path, at, bytes.len());
    let mut r = open_container(path, bytes, MAGIC, VERSION)?;
    let body = r.bytes.len();
    let n_scopes = r.u32().ok_or_else(|| truncated(r.at))?;
    let mut out = Vec::new();
    for _ in 0..n_scopes {
        let name = read_name(&mut r, path, bytes.len())?;
        let n_runs = r.u64().ok_or_else(|| truncated(r.at))?;
        let mut runs = Vec::new();
        for _ in 0..n_runs {
            let at = r.at;
            let c = ix32(r.u32().ok_or_else(|| truncated(at))?);
            let mut context = Vec::with_capacity(CONTEXT);
            for _ in 0..CONTEXT {
                context.push(r.u32().ok_or_else(|| truncated(r.at))?);
            }
            if c > CONTEXT {
                let what = "a run context longer than 16 tokens";
                return Err(fail(at, Problem::Corrupt { what }));
            }
            context.truncate(c);
            let n = r.u64().ok_or_else(|| truncated(r.at))?;
            // Every token needs 4 bytes: a length beyond what is left is a
            // truncation, found before anything is allocated for it.
            let left = (body - r.at) / 4;
            let n = usize::try_from(n)
                .ok()
                .filter(|&n| n <= left)
                .ok_or_else(|| truncated(r.at))?;
            let tokens: Vec<Token> = (0..n).filter_map(|_| r.u32()).collect();
            runs.push((context, tokens));
        }
        out.push((name, runs));
    }
    if r.at != body {
        let what = "bytes after the last scope";
        return Err(fail(r.at, Problem::Corrupt { what }));
    }
    Ok(out)
}
