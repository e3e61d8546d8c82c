//! Searches each strategy's parameters on a grid for a workload and prints the
//! best setting per strategy (by tau, among settings whose acceptance reaches
//! `--min-acceptance`).
//!
//! ```text
//! cargo run --release --bin tune                        # the embedded samples
//! cargo run --release --bin tune -- FILE.jsonl [--draft-max N] [--min-acceptance F]
//! ```

use std::io::Write;
use std::process::ExitCode;

use selfspec::{Config, Speculative, Strategy};
use selfspec_eval::cli::{self, Out, Result};
use selfspec_eval::{replay, Session};

const USAGE: &str = "usage: tune [FILE.jsonl ...] [--draft-max N] [--min-acceptance F]";
const HELP: &str =
    "tune: a grid of strategy parameters and draft_min per workload; the best setting per strategy

usage: tune [FILE.jsonl ...] [--draft-max N] [--min-acceptance F]
  FILE.jsonl            workloads (JSON Lines, docs/replay.md); default: the embedded samples
  --draft-max N         the longest draft, 1..=4096; default 16
  --min-acceptance F    only settings whose acceptance is at least F, 0..=1; default 0
  -h, --help            this text
";

/// Every setting tried: strategy parameters x draft_min.
fn grid(draft_max: usize) -> Vec<Config> {
    let mut strategies = Vec::new();
    for n in [2, 3, 4, 6, 8, 12, 16] {
        for m in [8, 16, 32, 48] {
            strategies.push(Strategy::NgramSimple { n, m });
            strategies.push(Strategy::NgramMapK { n, m });
            for min_hits in [1, 2, 3] {
                strategies.push(Strategy::NgramMapK4v { n, m, min_hits });
            }
        }
    }
    for n in [4, 8, 12, 16, 24, 32] {
        strategies.push(Strategy::NgramMod { n });
    }
    let mut configs = Vec::new();
    for s in strategies {
        for draft_min in [0, 2, 4, 8, 16, 48] {
            if draft_min <= draft_max {
                configs.push(
                    Config::new([s.clone()])
                        .with_draft_max(draft_max)
                        .with_draft_min(draft_min),
                );
            }
        }
    }
    configs
}

struct Best {
    config: Config,
    tau: f64,
    acceptance: f64,
}

fn tune(
    out: &mut Out,
    name: &str,
    sessions: &[Session],
    draft_max: usize,
    min_acceptance: f64,
) -> Result {
    let grid = grid(draft_max);
    let mut best: Vec<(&'static str, Option<Best>)> =
        ["ngram-simple", "ngram-map-k", "ngram-map-k4v", "ngram-mod"]
            .iter()
            .map(|n| (*n, None))
            .collect();
    let mut stderr = std::io::stderr();
    for (k, config) in grid.iter().enumerate() {
        if k % 16 == 0 || k + 1 == grid.len() {
            let _ = write!(stderr, "\r{name}: {}/{} settings", k + 1, grid.len());
            let _ = stderr.flush();
        }
        let mut spec = Speculative::new(config)?;
        let report = replay(&mut spec, sessions)?;
        let (tau, acceptance) = (report.tau(), report.acceptance());
        if acceptance < min_acceptance {
            continue;
        }
        let slot = best
            .iter_mut()
            .find(|(n, _)| *n == config.strategies[0].name())
            .map(|(_, b)| b)
            .expect("every strategy has a slot");
        if slot.as_ref().map_or(true, |b| tau > b.tau) {
            *slot = Some(Best {
                config: config.clone(),
                tau,
                acceptance,
            });
        }
    }
    let _ = writeln!(stderr);
    writeln!(
        out,
        "\n== {name}: best per strategy, draft_max {draft_max}, acceptance >= {min_acceptance}"
    )?;
    writeln!(
        out,
        "{:<40} {:>9} {:>7} {:>7}",
        "strategy", "draft_min", "tau", "accept"
    )?;
    for (strategy, b) in best {
        match b {
            Some(b) => writeln!(
                out,
                "{:<40} {:>9} {:>7.3} {:>7.3}",
                b.config.strategies[0].to_string(),
                b.config.draft_min,
                b.tau,
                b.acceptance
            )?,
            None => writeln!(
                out,
                "{strategy:<40} (no setting reaches the acceptance floor)"
            )?,
        }
    }
    // Each workload's table as soon as it is done (the search is slow).
    out.flush()?;
    Ok(())
}

fn run(out: &mut Out) -> Result {
    use lexopt::Arg::{Long, Short, Value};
    let mut files = Vec::new();
    let (mut draft_max, mut min_acceptance) = (16usize, 0.0f64);
    let mut args = cli::args();
    while let Some(arg) = args.next().map_err(|e| cli::bad_args(e, USAGE))? {
        match arg {
            Long("draft-max") => {
                let v = cli::value(&mut args, USAGE)?;
                let max = selfspec::limits::MAX_DRAFT;
                draft_max = v
                    .parse()
                    .ok()
                    .filter(|d| (1..=max).contains(d))
                    .ok_or_else(|| format!("--draft-max `{v}`: expected 1..={max}"))?;
            }
            Long("min-acceptance") => {
                let v = cli::value(&mut args, USAGE)?;
                min_acceptance = v
                    .parse()
                    .ok()
                    .filter(|a: &f64| (0.0..=1.0).contains(a))
                    .ok_or_else(|| format!("--min-acceptance `{v}`: expected a number in 0..=1"))?;
            }
            Long("help") | Short('h') => return Err(cli::Failure::Help(HELP)),
            Value(file) => files.push(cli::text(file)?),
            arg => return Err(cli::unexpected(&arg, USAGE)),
        }
    }
    for (name, sessions) in cli::workloads(&files)? {
        tune(out, &name, &sessions, draft_max, min_acceptance)?;
    }
    Ok(())
}

fn main() -> ExitCode {
    cli::main("tune", run)
}
