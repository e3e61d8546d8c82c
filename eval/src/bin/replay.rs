//! Replays recorded generations through selfspec's drafters and prints tau,
//! acceptance and cost per strategy (the protocol of `docs/replay.md`).
//!
//! ```text
//! cargo run --release --bin replay                      # embedded samples, every strategy
//! cargo run --release --bin replay -- FILE.jsonl ... \
//!     [--strategy NAME[:k=v,...]]... [--draft-max N] [--draft-min N] [--pool-size N] \
//!     [--per-kind] [--json] [--verbose] [--slots N] [--fresh] [--memory FILE] [--repeat N]
//! ```
//!
//! `--slots N` replays on an engine of N slots sharing one `Shared` (the
//! "Concurrent engine" protocol of `docs/replay.md`), `--fresh` with a new drafter
//! per request; `--memory FILE` loads the engine-wide memory from FILE if it
//! exists and saves it there at the end (a restarted server starts warm).
//! `--repeat N` replays each cell N times from a new state and reports the
//! run with the median draft time (the figures are the same in every run):
//! timings from one run are cold (first-touch page faults, cold caches) and
//! vary by tens of percent on a shared machine.
//!
//! The first table sums everything up (rows: strategies, columns: samples);
//! per-sample details follow. `--per-kind` replays each session kind of a
//! file separately (a fresh instance per kind); `--json` prints the figures
//! and reports as JSON; `--verbose` adds llama.cpp's `statistics` lines.
//!
//! Several `--strategy` options form one chain, in the order given. Without
//! `--strategy`, each strategy is replayed alone and then llama.cpp's chain.

use std::io::Write;
use std::process::ExitCode;

use selfspec::{Config, DrafterStats, Shared, Speculative, Strategy};
use selfspec_eval::cli::{self, Failure, Out, Result};
use selfspec_eval::{replay, replay_engine, Engine, ReplayReport, Session};

const USAGE: &str = "usage: replay [FILE.jsonl ...] [--strategy NAME[:n=..,m=..,min_hits=..]]... \
[--draft-max N] [--draft-min N] [--pool-size N] [--per-kind] [--json] [--verbose] \
[--slots N] [--fresh] [--scope-per-session] [--memory FILE] [--repeat N]";

const HELP: &str = "replay: selfspec's drafters over recorded generations; tau (tokens per target forward pass) and acceptance per strategy

usage: replay [FILE.jsonl ...] [options]
  FILE.jsonl            workloads (JSON Lines, docs/replay.md); default: the embedded samples
  -s, --strategy S      a strategy (NAME[:k=v,...], e.g. ngram-mod:n=24); several form a chain; default: each strategy alone
  --draft-max N         the longest draft, 1..=4096 (default: each configuration's, 16 for most)
  --draft-min N         the shortest draft worth verifying (default: each configuration's)
  --pool-size N         ngram-mod's pool, in cells
  --slots N             an engine of N slots (1..=4096) on one Shared, decoded in rounds
  --fresh               with --slots: a new drafter per request
  --scope-per-session   each session in a scope of its own (a new drafter per request)
  --memory FILE         load the engine-wide memory from FILE if it exists, save it there at the end
  --repeat N            replay each cell N times (1..=1000), timings from the median run
  --per-kind            replay each session kind of a file separately
  --json                the figures and reports as JSON
  -v, --verbose         add llama.cpp's statistics lines
  -h, --help            this text
";

/// What the first screen says about its figures.
const LEGEND: &str =
    "selfspec's drafters replayed over recorded generations (one instance per workload unless --slots/--fresh)\n\
tau = tokens per target forward pass, 1.0 = no speed-up; \
accept = share of drafted tokens the target kept\n\
draft a..b = draft_min..draft_max: drafts shorter than a are dropped, longer ones cut to b; \
greedy verification against the recorded outputs";

/// Command-line options (one field per option; `parse_args` fills them).
#[derive(Default)]
struct Options {
    files: Vec<String>,
    strategies: Vec<Strategy>,
    draft_max: Option<usize>,
    draft_min: Option<usize>,
    pool_size: Option<usize>,
    per_kind: bool,
    json: bool,
    verbose: bool,
    /// Replay on an engine of this many slots.
    slots: Option<usize>,
    /// A new drafter per request.
    fresh: bool,
    /// Each session in a scope of its own.
    scoped: bool,
    /// Load the engine-wide memory from this file if it exists; save it at the end.
    memory: Option<String>,
    /// Replays per cell (the timings are the median run's).
    repeat: Option<usize>,
}

fn parse_args(mut args: lexopt::Parser) -> Result<Options> {
    use lexopt::Arg::{Long, Short, Value};
    let mut o = Options::default();
    let number = |flag: &str, v: String| {
        v.parse::<usize>()
            .map_err(|_| Failure::from(format!("{flag} `{v}` is not a non-negative integer")))
    };
    while let Some(arg) = args.next().map_err(|e| cli::bad_args(e, USAGE))? {
        match arg {
            Long("strategy") | Short('s') => o.strategies.push(
                cli::value(&mut args, USAGE)?
                    .parse()
                    .map_err(|e| format!("--strategy: {e}"))?,
            ),
            Long("draft-max") => {
                o.draft_max = Some(number("--draft-max", cli::value(&mut args, USAGE)?)?)
            }
            Long("draft-min") => {
                o.draft_min = Some(number("--draft-min", cli::value(&mut args, USAGE)?)?)
            }
            Long("pool-size") => {
                o.pool_size = Some(number("--pool-size", cli::value(&mut args, USAGE)?)?)
            }
            Long("per-kind") => o.per_kind = true,
            Long("json") => o.json = true,
            Long("verbose") | Short('v') => o.verbose = true,
            Long("slots") => {
                o.slots = Some(cli::count(
                    Some(&cli::value(&mut args, USAGE)?),
                    "--slots",
                    1,
                    4096,
                )?)
            }
            Long("fresh") => o.fresh = true,
            Long("scope-per-session") => o.scoped = true,
            Long("memory") => o.memory = Some(cli::value(&mut args, USAGE)?),
            Long("repeat") => {
                o.repeat = Some(cli::count(
                    Some(&cli::value(&mut args, USAGE)?),
                    "--repeat",
                    1,
                    1000,
                )?)
            }
            Long("help") | Short('h') => return Err(Failure::Help(HELP)),
            Value(file) => o.files.push(cli::text(file)?),
            arg => return Err(cli::unexpected(&arg, USAGE)),
        }
    }
    if o.repeat.is_some_and(|n| n > 1) && o.memory.is_some() {
        return Err(
            "--repeat with --memory: each run would start from the last one's file; use one".into(),
        );
    }
    Ok(o)
}

fn configs(o: &Options) -> Vec<(String, Config)> {
    let limits = |mut c: Config| {
        c.draft_max = o.draft_max.unwrap_or(c.draft_max);
        c.draft_min = o.draft_min.unwrap_or(c.draft_min);
        c.pool_size = o.pool_size.unwrap_or(c.pool_size);
        c
    };
    if !o.strategies.is_empty() {
        let label = o
            .strategies
            .iter()
            .map(|s| s.to_string())
            .collect::<Vec<_>>()
            .join(" > ");
        return vec![(label, limits(Config::new(o.strategies.clone())))];
    }
    let mut list: Vec<(String, Config)> =
        ["ngram-simple", "ngram-map-k", "ngram-map-k4v", "ngram-mod"]
            .iter()
            .filter_map(|name| Strategy::from_name(name))
            .map(|s| (s.to_string(), limits(Config::new([s]))))
            .collect();
    // llama.cpp's recommended ngram-mod setting, with its own limits unless overridden.
    let mod24 = Config::new([Strategy::NgramMod { n: 24 }])
        .with_draft_max(64)
        .with_draft_min(48);
    let mut mod24 = limits(mod24);
    if o.draft_max.is_none() && o.draft_min.is_none() {
        mod24 = mod24.with_draft_max(64).with_draft_min(48);
    }
    list.push(("ngram-mod:n=24".to_string(), mod24));
    list.push((
        "llama.cpp chain".to_string(),
        limits(Config::llama_cpp_chain()),
    ));
    list.push((
        "ngram-cache".to_string(),
        limits(Config::new(Strategy::from_name("ngram-cache"))),
    ));
    list.push((
        "ngram-cache-live".to_string(),
        limits(Config::new(Strategy::from_name("ngram-cache-live"))),
    ));
    list.push((
        "recommended (recall 0.13)".to_string(),
        limits(Config::recommended()),
    ));
    list
}

/// The sessions replayed together: a whole workload, or one kind of it.
struct Group {
    workload: String,
    kind: Option<String>,
    sessions: Vec<Session>,
}

impl Group {
    fn title(&self) -> String {
        match &self.kind {
            Some(kind) => format!("{} [{kind}]", self.workload),
            None => self.workload.clone(),
        }
    }
}

fn groups(o: &Options) -> Result<Vec<Group>> {
    let mut out = Vec::new();
    for (workload, sessions) in cli::workloads(&o.files)? {
        if !o.per_kind {
            out.push(Group {
                workload,
                kind: None,
                sessions,
            });
            continue;
        }
        let mut kinds: Vec<String> = Vec::new();
        for s in &sessions {
            if !kinds.contains(&s.kind) {
                kinds.push(s.kind.clone());
            }
        }
        for kind in kinds {
            let part = sessions
                .iter()
                .filter(|s| s.kind == kind)
                .cloned()
                .collect();
            out.push(Group {
                workload: workload.clone(),
                kind: Some(kind),
                sessions: part,
            });
        }
    }
    Ok(out)
}

/// One strategy's replay of one group.
struct Run {
    report: ReplayReport,
    stats: Vec<DrafterStats>,
}

/// The figures of every configuration (outer) on every group (inner).
fn replay_all(
    o: &Options,
    groups: &[Group],
    configs: &[(String, Config)],
) -> Result<Vec<Vec<Run>>> {
    // Every configuration builds (cache files exist...) before any replay or output.
    for (_, config) in configs {
        Speculative::new(config)?;
    }
    let mut runs = Vec::new();
    for (_, config) in configs {
        let mut row = Vec::new();
        for group in groups {
            row.push(replay_with(o, config, &group.sessions)?);
        }
        runs.push(row);
    }
    Ok(runs)
}

/// `--repeat` replays of one cell: the run with the median draft time.
fn replay_with(o: &Options, config: &Config, sessions: &[Session]) -> Result<Run> {
    let mut runs = Vec::new();
    for _ in 0..o.repeat.unwrap_or(1) {
        runs.push(replay_once(o, config, sessions)?);
    }
    runs.sort_by_key(|run| run.report.draft_time);
    Ok(runs.swap_remove(runs.len() / 2))
}

/// One replay: sequential on one `Speculative`, or on an engine of slots
/// over one `Shared` (loaded from and saved to `--memory FILE`).
fn replay_once(o: &Options, config: &Config, sessions: &[Session]) -> Result<Run> {
    let engine = Engine {
        slots: o.slots.unwrap_or(1),
        fresh: o.fresh || o.scoped,
        scoped: o.scoped,
    };
    if engine == Engine::SEQUENTIAL && o.memory.is_none() {
        let mut spec = Speculative::new(config)?;
        let report = replay(&mut spec, sessions)?;
        let stats = spec.stats().to_vec();
        return Ok(Run { report, stats });
    }
    let shared = match &o.memory {
        Some(path) if std::path::Path::new(path).exists() => Shared::load(config, path)?,
        _ => Shared::new(config)?,
    };
    let report = replay_engine(config, &shared, sessions, engine)?;
    if let Some(path) = &o.memory {
        shared.save(path)?;
    }
    let stats = report.stats.clone();
    Ok(Run { report, stats })
}

fn summary(
    out: &mut Out,
    groups: &[Group],
    configs: &[(String, Config)],
    runs: &[Vec<Run>],
) -> Result {
    let titles: Vec<String> = groups.iter().map(Group::title).collect();
    writeln!(out, "{LEGEND}\n")?;
    write!(out, "{:<34} {:>7}", "strategy", "draft")?;
    for t in &titles {
        write!(out, "  {:>16}", truncate(t, 16))?;
    }
    writeln!(out)?;
    write!(out, "{:<34} {:>7}", "", "")?;
    for _ in &titles {
        write!(out, "  {:>8} {:>7}", "tau", "accept")?;
    }
    writeln!(out)?;
    for ((label, config), row) in configs.iter().zip(runs) {
        write!(
            out,
            "{:<34} {:>7}",
            truncate(label, 34),
            format!("{}..{}", config.draft_min, config.draft_max)
        )?;
        for run in row {
            write!(
                out,
                "  {:>8.3} {:>7.3}",
                run.report.tau(),
                run.report.acceptance()
            )?;
        }
        writeln!(out)?;
    }
    Ok(())
}

fn truncate(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else {
        let mut t: String = s.chars().take(n - 1).collect();
        t.push('~');
        t
    }
}

fn details(
    out: &mut Out,
    groups: &[Group],
    configs: &[(String, Config)],
    runs: &[Vec<Run>],
    verbose: bool,
) -> Result {
    for (g, group) in groups.iter().enumerate() {
        let sessions = &group.sessions;
        let requests: usize = sessions.iter().map(|s| s.requests.len()).sum();
        let tokens: usize = sessions
            .iter()
            .flat_map(|s| &s.requests)
            .map(|r| r.output.len())
            .sum();
        writeln!(
            out,
            "\n== {}: {} sessions, {requests} requests, {tokens} output tokens",
            group.title(),
            sessions.len()
        )?;
        writeln!(
            out,
            "{:<36} {:>10} {:>7} {:>7} {:>9} {:>9} {:>9}",
            "strategy", "draft", "tau", "accept", "drafted", "accepted", "us/draft"
        )?;
        for ((label, config), row) in configs.iter().zip(runs) {
            let r = &row[g].report;
            writeln!(
                out,
                "{:<36} {:>4}..{:<4} {:>7.3} {:>7.3} {:>9} {:>9} {:>9.2}",
                label,
                config.draft_min,
                config.draft_max,
                r.tau(),
                r.acceptance(),
                r.drafted,
                r.accepted,
                r.micros_per_draft()
            )?;
            // A mixed workload: each kind's share of the same replay.
            if r.kinds.len() > 1 {
                for k in &r.kinds {
                    writeln!(
                        out,
                        "  [{}]{:>w$} {:>7.3} {:>7.3} {:>9} {:>9}",
                        k.kind,
                        "",
                        k.tau(),
                        k.acceptance(),
                        k.drafted,
                        k.accepted,
                        w = 43usize.saturating_sub(k.kind.len() + 4),
                    )?;
                }
            }
        }
        if verbose {
            writeln!(out)?;
            for ((label, _), row) in configs.iter().zip(runs) {
                writeln!(out, "[{label}]")?;
                for s in &row[g].stats {
                    writeln!(out, "  {s}")?;
                }
            }
        }
    }
    if !verbose {
        writeln!(
            out,
            "\n(--verbose adds llama.cpp's statistics lines; --json the full reports)"
        )?;
    }
    Ok(())
}

fn json(
    out: &mut Out,
    groups: &[Group],
    configs: &[(String, Config)],
    runs: &[Vec<Run>],
) -> Result {
    let mut json = Vec::new();
    for (g, group) in groups.iter().enumerate() {
        for ((label, config), row) in configs.iter().zip(runs) {
            let report = &row[g].report;
            json.push(serde_json::json!({
                "workload": group.workload,
                "kind": group.kind,
                "strategy": label,
                "config": config,
                "tau": report.tau(),
                "acceptance": report.acceptance(),
                "micros_per_draft": report.micros_per_draft(),
                "report": report,
            }));
        }
    }
    serde_json::to_writer_pretty(&mut *out, &json).map_err(std::io::Error::from)?;
    writeln!(out)?;
    Ok(())
}

fn run(o: Options, out: &mut Out) -> Result {
    let configs = configs(&o);
    for (_, c) in &configs {
        c.validate()?;
    }
    let groups = groups(&o)?;
    let runs = replay_all(&o, &groups, &configs)?;
    if o.json {
        return json(out, &groups, &configs, &runs);
    }
    summary(out, &groups, &configs, &runs)?;
    details(out, &groups, &configs, &runs, o.verbose)
}

fn main() -> ExitCode {
    cli::main("replay", |out| {
        let options = parse_args(cli::args())?;
        run(options, out)
    })
}
