//! Builds a llama.cpp lookup cache file (as `llama-lookup-create` does) from the
//! outputs of a workload file, and shows what it is worth as a static cache.
//!
//! ```text
//! cargo run --release --bin lookup_create                  # the embedded samples
//! cargo run --release --bin lookup_create -- WORKLOAD.jsonl OUT.bin [--dynamic]
//! ```
//!
//! `--dynamic` writes 1..4-gram counts (a dynamic cache) instead of 2-grams.
//! Without arguments: builds a static cache from each of the chat and
//! code-edit samples and replays the *other* one with ngram-cache, with and
//! without it.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use selfspec::limits::NGRAM_STATIC;
use selfspec::strategies::LookupCache;
use selfspec::{Config, Speculative, Strategy, Token};
use selfspec_eval::cli::{self, Out, Result};
use selfspec_eval::{replay, Session};

/// Every request's output, one after another (the corpus of recorded generations).
fn corpus(sessions: &[Session]) -> Vec<Token> {
    sessions
        .iter()
        .flat_map(|s| &s.requests)
        .flat_map(|r| r.output.iter().copied())
        .collect()
}

fn build(out: &mut Out, sessions: &[Session], path: &Path, dynamic: bool) -> Result<LookupCache> {
    let sizes = if dynamic {
        1..=4
    } else {
        NGRAM_STATIC..=NGRAM_STATIC
    };
    let cache = LookupCache::from_tokens(&corpus(sessions), sizes);
    cache.save(path)?;
    let bytes = std::fs::metadata(path)
        .map_err(|e| format!("{}: {e}", path.display()))?
        .len();
    writeln!(
        out,
        "{}: {} n-grams, {bytes} bytes ({} cache)",
        path.display(),
        cache.len(),
        if dynamic {
            "dynamic 1..4-gram"
        } else {
            "static 2-gram"
        }
    )?;
    Ok(cache)
}

fn tau(sessions: &[Session], strategy: Strategy) -> Result<(f64, f64)> {
    let mut spec = Speculative::new(&Config::new([strategy]))?;
    let r = replay(&mut spec, sessions)?;
    Ok((r.tau(), r.acceptance()))
}

/// The chat and code-edit samples, each with a static cache built from the other.
fn demo(out: &mut Out) -> Result {
    let samples: Vec<(String, Vec<Session>)> = cli::samples()?.into_iter().take(2).collect();
    for (i, (name, sessions)) in samples.iter().enumerate() {
        let (other, other_sessions) = &samples[1 - i];
        let path: PathBuf = std::env::temp_dir().join(format!("selfspec-{other}.bin"));
        build(out, other_sessions, &path, false)?;
        for live in [false, true] {
            let (without, with) = if live {
                (
                    Strategy::NgramCacheLive {
                        static_cache: None,
                        dynamic_cache: None,
                    },
                    Strategy::NgramCacheLive {
                        static_cache: Some(path.clone()),
                        dynamic_cache: None,
                    },
                )
            } else {
                (
                    Strategy::NgramCache {
                        static_cache: None,
                        dynamic_cache: None,
                    },
                    Strategy::NgramCache {
                        static_cache: Some(path.clone()),
                        dynamic_cache: None,
                    },
                )
            };
            let label = without.name();
            let (t0, a0) = tau(sessions, without)?;
            let (t1, a1) = tau(sessions, with)?;
            writeln!(
                out,
                "  {name} with {label}: tau {t0:.3} (acceptance {a0:.3}) without a static cache, \
                 {t1:.3} ({a1:.3}) with the one built from {other}"
            )?;
        }
    }
    Ok(())
}

const USAGE: &str = "usage: lookup_create WORKLOAD.jsonl OUT.bin [--dynamic]";
const HELP: &str = "lookup_create: builds a llama.cpp lookup cache file (ngram-cache) from a workload; without arguments, a demo

usage: lookup_create WORKLOAD.jsonl OUT.bin [--dynamic]
  WORKLOAD.jsonl   workload (JSON Lines, docs/replay.md)
  OUT.bin          the cache file to write (llama.cpp's format)
  --dynamic        a dynamic cache (every n-gram size) instead of the static 2-gram one
  -h, --help       this text
";

fn run(out: &mut Out) -> Result {
    use lexopt::Arg::{Long, Short, Value};
    if std::env::args_os().len() < 2 {
        return demo(out);
    }
    let (mut files, mut dynamic) = (Vec::new(), false);
    let mut args = cli::args();
    while let Some(arg) = args.next().map_err(|e| cli::bad_args(e, USAGE))? {
        match arg {
            Long("dynamic") => dynamic = true,
            Long("help") | Short('h') => return Err(cli::Failure::Help(HELP)),
            Value(file) => files.push(cli::text(file)?),
            arg => return Err(cli::unexpected(&arg, USAGE)),
        }
    }
    let [input, output] = &files[..] else {
        return Err(USAGE.into());
    };
    // An unreadable or empty workload fails before any file is written.
    let sessions = cli::read(input)?;
    build(out, &sessions, Path::new(output), dynamic)?;
    Ok(())
}

fn main() -> ExitCode {
    cli::main("lookup_create", run)
}
