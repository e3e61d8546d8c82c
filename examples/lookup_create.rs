//! Builds a llama.cpp lookup cache file (as `llama-lookup-create` does) from the
//! outputs of a workload file, and shows what it is worth as a static cache.
//!
//! ```text
//! cargo run --release --example lookup_create                  # the embedded samples
//! cargo run --release --example lookup_create -- WORKLOAD.jsonl OUT.bin [--dynamic]
//! ```
//!
//! `--dynamic` writes 1..4-gram counts (a dynamic cache) instead of 2-grams.
//! Without arguments: builds a static cache from each embedded sample and
//! replays the *other* sample with ngram-cache, with and without it.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use selfspec::replay::{replay, Session};
use selfspec::strategies::ngram_cache::NGRAM_STATIC;
use selfspec::strategies::LookupCache;
use selfspec::{Config, Speculative, Strategy, Token};

const SAMPLES: [(&str, &str); 2] = [
    ("sample-chat", include_str!("data/sample-chat.jsonl")),
    (
        "sample-code-edit",
        include_str!("data/sample-code-edit.jsonl"),
    ),
];

/// Every request's output, one after another (the corpus of recorded generations).
fn corpus(sessions: &[Session]) -> Vec<Token> {
    sessions
        .iter()
        .flat_map(|s| &s.requests)
        .flat_map(|r| r.output.iter().copied())
        .collect()
}

fn build(sessions: &[Session], out: &Path, dynamic: bool) -> Result<LookupCache, String> {
    let sizes = if dynamic {
        1..=4
    } else {
        NGRAM_STATIC..=NGRAM_STATIC
    };
    let cache = LookupCache::from_tokens(&corpus(sessions), sizes);
    cache.save(out).map_err(|e| e.to_string())?;
    let bytes = std::fs::metadata(out)
        .map_err(|e| format!("{}: {e}", out.display()))?
        .len();
    println!(
        "{}: {} n-grams, {bytes} bytes ({} cache)",
        out.display(),
        cache.len(),
        if dynamic {
            "dynamic 1..4-gram"
        } else {
            "static 2-gram"
        }
    );
    Ok(cache)
}

fn tau(sessions: &[Session], strategy: Strategy) -> Result<(f64, f64), String> {
    let mut spec = Speculative::new(&Config::new([strategy])).map_err(|e| e.to_string())?;
    let r = replay(&mut spec, sessions);
    Ok((r.tau(), r.acceptance()))
}

fn demo() -> Result<(), String> {
    let samples: Vec<(&str, Vec<Session>)> = SAMPLES
        .iter()
        .map(|(name, text)| selfspec::replay::parse_workload(name, text).map(|s| (*name, s)))
        .collect::<Result<_, _>>()
        .map_err(|e| e.to_string())?;
    for (i, (name, sessions)) in samples.iter().enumerate() {
        let (other, other_sessions) = &samples[1 - i];
        let path: PathBuf = std::env::temp_dir().join(format!("selfspec-{other}.bin"));
        build(other_sessions, &path, false)?;
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
            println!(
                "  {name} with {label}: tau {t0:.3} (acceptance {a0:.3}) without a static cache, \
                 {t1:.3} ({a1:.3}) with the one built from {other}"
            );
        }
    }
    Ok(())
}

fn run() -> Result<(), String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.is_empty() {
        return demo();
    }
    let dynamic = args.iter().any(|a| a == "--dynamic");
    let files: Vec<&String> = args.iter().filter(|a| !a.starts_with("--")).collect();
    if let Some(bad) = args
        .iter()
        .find(|a| a.starts_with("--") && *a != "--dynamic")
    {
        return Err(format!(
            "unknown option `{bad}`; usage: lookup_create WORKLOAD.jsonl OUT.bin [--dynamic]"
        ));
    }
    let [input, output] = files[..] else {
        return Err("usage: lookup_create WORKLOAD.jsonl OUT.bin [--dynamic]".into());
    };
    let sessions = selfspec::replay::read_workload(input).map_err(|e| e.to_string())?;
    build(&sessions, Path::new(output), dynamic)?;
    Ok(())
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("lookup_create: {e}");
            ExitCode::from(2)
        }
    }
}
