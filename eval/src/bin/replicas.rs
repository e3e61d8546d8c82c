//! Replicas that learn together, with files in a directory as the
//! transport: two engine replicas serve a workload's sessions alternately;
//! after every 8 requests each writes what it learned since its last export
//! (`Shared::export_since`) to a file, and imports the other's
//! (`Shared::import`). Prints tau against one engine that served every
//! session, and against replicas that never exchange.
//!
//! ```text
//! cargo run --release --bin replicas                 # sample-code
//! cargo run --release --bin replicas -- FILE.jsonl [EVERY]
//! ```

use std::io::Write;
use std::path::Path;
use std::process::ExitCode;

use selfspec::{Config, Cursor, Shared, Speculative};
use selfspec_eval::cli::{self, Out, Result};
use selfspec_eval::{Request, Session, Slot};

const USAGE: &str = "usage: replicas [FILE.jsonl [EVERY]]";
const HELP: &str =
    "replicas: two engine replicas exchanging what they learned through files, against one engine

usage: replicas [FILE.jsonl [EVERY]]
  FILE.jsonl   workload (JSON Lines, docs/replay.md); default: sample-code
  EVERY        requests between exchanges, 1..=10000; default 8
  -h, --help   this text
";

/// One request under greedy verification against its recorded output, a
/// drafter of its own on `shared`: (tokens, forward passes).
fn serve(config: &Config, shared: &Shared, request: &Request) -> Result<(u64, u64)> {
    let mut slot = Slot::new()?;
    slot.start(request, Some(Speculative::with_shared(config, shared)?))?;
    let mut passes = 0;
    while slot.step()?.is_some() {
        passes += 1;
    }
    Ok((request.output.len() as u64, passes))
}

/// One replica: its engine, and where its last export ended.
struct Replica {
    shared: Shared,
    cursor: Cursor,
}

impl Replica {
    /// Writes what it learned since its last export to `dir/NAME.delta`.
    fn publish(&mut self, dir: &Path, name: &str) -> Result {
        let (delta, next) = self.shared.export_since(&self.cursor);
        let tmp = dir.join(format!("{name}.delta.tmp"));
        std::fs::write(&tmp, &delta).map_err(|e| format!("{}: {e}", tmp.display()))?;
        std::fs::rename(&tmp, dir.join(format!("{name}.delta")))
            .map_err(|e| format!("{name}.delta: {e}"))?;
        self.cursor = next;
        Ok(())
    }

    /// Imports the other replica's last delta, if it wrote one.
    fn take(&self, dir: &Path, from: &str) -> Result {
        let path = dir.join(format!("{from}.delta"));
        if let Ok(delta) = std::fs::read(&path) {
            self.shared.import(&delta)?;
            std::fs::remove_file(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        }
        Ok(())
    }
}

/// tau of the two replicas (exchanging every `every` requests, or never).
fn replicas(
    config: &Config,
    sessions: &[Session],
    every: Option<usize>,
    dir: &Path,
) -> Result<f64> {
    let mut pair = [
        Replica {
            shared: Shared::new(config)?,
            cursor: Cursor::default(),
        },
        Replica {
            shared: Shared::new(config)?,
            cursor: Cursor::default(),
        },
    ];
    let names = ["a", "b"];
    let (mut tokens, mut passes, mut served) = (0, 0, 0);
    for (i, session) in sessions.iter().enumerate() {
        for r in &session.requests {
            let (t, p) = serve(config, &pair[i % 2].shared, r)?;
            (tokens, passes) = (tokens + t, passes + p);
            served += 1;
            if every.is_some_and(|n| served % n == 0) {
                for k in 0..2 {
                    pair[k].publish(dir, names[k])?;
                }
                for k in 0..2 {
                    pair[k].take(dir, names[1 - k])?;
                }
            }
        }
    }
    Ok(tokens as f64 / passes.max(1) as f64)
}

fn run(out: &mut Out) -> Result {
    let args = cli::positional(cli::args(), USAGE, HELP, 2)?;
    let every = cli::count(args.get(1), "EVERY", 8, 10_000)?;
    let (name, sessions) = match args.first() {
        Some(file) => (file.clone(), cli::read(file)?),
        None => (
            "sample-code".to_string(),
            cli::samples()?
                .into_iter()
                .find(|(n, _)| n == "sample-code")
                .map(|(_, s)| s)
                .unwrap_or_default(),
        ),
    };
    let config = Config::recommended();
    let dir = std::env::temp_dir().join(format!("selfspec-replicas-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let one = Shared::new(&config)?;
    let (mut tokens, mut passes) = (0, 0);
    for r in sessions.iter().flat_map(|s| &s.requests) {
        let (t, p) = serve(&config, &one, r)?;
        (tokens, passes) = (tokens + t, passes + p);
    }
    let one = tokens as f64 / passes.max(1) as f64;
    let together = replicas(&config, &sessions, Some(every), &dir)?;
    let apart = replicas(&config, &sessions, None, &dir)?;
    std::fs::remove_dir_all(&dir).ok();
    writeln!(
        out,
        "{name}: {} sessions, recall (Config::recommended()), tau",
        sessions.len()
    )?;
    let exchanging = format!("two replicas, deltas exchanged every {every} requests:");
    let rows = [
        ("one engine serving every session:".to_string(), one),
        (exchanging, together),
        ("two replicas that never exchange:".to_string(), apart),
    ];
    for (label, tau) in rows {
        writeln!(out, "  {label:<52} {tau:.3} ({:.3}x)", tau / one)?;
    }
    Ok(())
}

fn main() -> ExitCode {
    cli::main("replicas", run)
}
