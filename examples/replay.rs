//! Replays recorded generations through selfspec's drafters and prints tau,
//! acceptance and cost per strategy (the protocol of `REPLAY.md`).
//!
//! ```text
//! cargo run --release --example replay                      # embedded samples, every strategy
//! cargo run --release --example replay -- FILE.jsonl ... \
//!     [--strategy NAME[:k=v,...]]... [--draft-max N] [--draft-min N] [--pool-size N] \
//!     [--per-kind] [--json]
//! ```
//!
//! `--per-kind` replays each session kind of a file separately (a fresh
//! instance per kind); `--json` prints the figures and reports as JSON.
//!
//! Several `--strategy` options form one chain, in the order given. Without
//! `--strategy`, each strategy is replayed alone and then llama.cpp's chain.

use std::process::ExitCode;

use selfspec::replay::{replay, replay_engine, Engine, ReplayReport, Session};
use selfspec::{Config, Shared, Speculative, Strategy};

const SAMPLES: [(&str, &str); 3] = [
    ("sample-chat", include_str!("data/sample-chat.jsonl")),
    ("sample-code", include_str!("data/sample-code.jsonl")),
    (
        "sample-code-edit",
        include_str!("data/sample-code-edit.jsonl"),
    ),
];

const USAGE: &str = "usage: replay [FILE.jsonl ...] [--strategy NAME[:n=..,m=..,min_hits=..]]... \
[--draft-max N] [--draft-min N] [--pool-size N] [--per-kind] [--json] [--slots N] [--fresh] [--memory FILE]";

fn parse_workload(name: &str, text: &str) -> Result<Vec<Session>, String> {
    let sessions = selfspec::replay::parse_workload(name, text).map_err(|e| e.to_string())?;
    if sessions.is_empty() {
        return Err(format!("{name}: no sessions"));
    }
    Ok(sessions)
}

struct Options {
    files: Vec<String>,
    strategies: Vec<Strategy>,
    draft_max: Option<usize>,
    draft_min: Option<usize>,
    pool_size: Option<usize>,
    per_kind: bool,
    json: bool,
    /// Replay on an engine of this many slots (`REPLAY.md`, "Concurrent engine").
    slots: Option<usize>,
    /// A new drafter per request.
    fresh: bool,
    /// Load the engine-wide memory from this file if it exists; save it at the end.
    memory: Option<String>,
}

fn parse_args(args: impl Iterator<Item = String>) -> Result<Options, String> {
    let mut o = Options {
        files: Vec::new(),
        strategies: Vec::new(),
        draft_max: None,
        draft_min: None,
        pool_size: None,
        per_kind: false,
        json: false,
        slots: None,
        fresh: false,
        memory: None,
    };
    let mut args = args.peekable();
    while let Some(arg) = args.next() {
        let mut value = |flag: &str| {
            args.next()
                .ok_or_else(|| format!("{flag} needs a value; {USAGE}"))
        };
        let number = |flag: &str, v: String| {
            v.parse::<usize>()
                .map_err(|_| format!("{flag} `{v}` is not a non-negative integer"))
        };
        match arg.as_str() {
            "--strategy" | "-s" => {
                let v = value(&arg)?;
                o.strategies
                    .push(v.parse().map_err(|e| format!("--strategy: {e}"))?);
            }
            "--draft-max" => o.draft_max = Some(number(&arg, value(&arg)?)?),
            "--draft-min" => o.draft_min = Some(number(&arg, value(&arg)?)?),
            "--pool-size" => o.pool_size = Some(number(&arg, value(&arg)?)?),
            "--per-kind" => o.per_kind = true,
            "--slots" => o.slots = Some(number(&arg, value(&arg)?)?.max(1)),
            "--fresh" => o.fresh = true,
            "--memory" => o.memory = Some(value(&arg)?),
            "--json" => o.json = true,
            "--help" | "-h" => return Err(USAGE.to_string()),
            flag if flag.starts_with('-') => {
                return Err(format!("unknown option `{flag}`; {USAGE}"))
            }
            _ => o.files.push(arg),
        }
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

fn row(label: &str, config: &Config, r: &ReplayReport) {
    println!(
        "{:<36} {:>4}..{:<4} {:>7.3} {:>7.3} {:>9} {:>9} {:>9.2}",
        label,
        config.draft_min,
        config.draft_max,
        r.tau(),
        r.acceptance(),
        r.drafted,
        r.accepted,
        r.micros_per_draft()
    );
}

/// The sessions replayed together: a whole workload, or one kind of it.
struct Group {
    workload: String,
    kind: Option<String>,
    sessions: Vec<Session>,
}

fn groups(o: &Options) -> Result<Vec<Group>, String> {
    let mut workloads = Vec::new();
    if o.files.is_empty() {
        for (name, text) in SAMPLES {
            workloads.push((name.to_string(), parse_workload(name, text)?));
        }
    } else {
        for f in &o.files {
            let text = std::fs::read_to_string(f).map_err(|e| format!("{f}: {e}"))?;
            workloads.push((f.clone(), parse_workload(f, &text)?));
        }
    }
    let mut out = Vec::new();
    for (workload, sessions) in workloads {
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

fn run(o: Options) -> Result<(), String> {
    let groups = groups(&o)?;
    let configs = configs(&o);
    for (_, c) in &configs {
        c.validate().map_err(|e| e.to_string())?;
    }
    let mut json = Vec::new();
    for group in &groups {
        let sessions = &group.sessions;
        let requests: usize = sessions.iter().map(|s| s.requests.len()).sum();
        let tokens: usize = sessions
            .iter()
            .flat_map(|s| &s.requests)
            .map(|r| r.output.len())
            .sum();
        let title = match &group.kind {
            Some(kind) => format!("{} [{kind}]", group.workload),
            None => group.workload.clone(),
        };
        if !o.json {
            println!(
                "\n== {title}: {} sessions, {requests} requests, {tokens} output tokens",
                sessions.len()
            );
            println!(
                "{:<36} {:>10} {:>7} {:>7} {:>9} {:>9} {:>9}",
                "strategy", "draft", "tau", "accept", "drafted", "accepted", "us/draft"
            );
        }
        let mut lines = Vec::new();
        for (label, config) in &configs {
            let (report, stats) = replay_with(&o, config, sessions)?;
            if o.json {
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
            } else {
                row(label, config, &report);
                lines.push((label.clone(), stats));
            }
        }
        if !o.json {
            println!();
            for (label, stats) in lines {
                println!("[{label}]");
                for s in stats {
                    println!("  {s}");
                }
            }
        }
    }
    if o.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&json).map_err(|e| e.to_string())?
        );
    }
    Ok(())
}

/// One replay: sequential on one `Speculative`, or on an engine of slots
/// over one `Shared` (loaded from and saved to `--memory FILE`).
fn replay_with(
    o: &Options,
    config: &Config,
    sessions: &[Session],
) -> Result<(ReplayReport, Vec<selfspec::DrafterStats>), String> {
    let engine = Engine {
        slots: o.slots.unwrap_or(1),
        fresh: o.fresh,
    };
    if engine == Engine::SEQUENTIAL && o.memory.is_none() {
        let mut spec = Speculative::new(config).map_err(|e| e.to_string())?;
        let report = replay(&mut spec, sessions);
        return Ok((report, spec.stats().to_vec()));
    }
    let shared = match &o.memory {
        Some(path) if std::path::Path::new(path).exists() => {
            Shared::load(config, path).map_err(|e| e.to_string())?
        }
        _ => Shared::new(config).map_err(|e| e.to_string())?,
    };
    let report = replay_engine(config, &shared, sessions, engine).map_err(|e| e.to_string())?;
    if let Some(path) = &o.memory {
        shared.save(path).map_err(|e| e.to_string())?;
    }
    let stats = report.stats.clone();
    Ok((report, stats))
}

fn main() -> ExitCode {
    match parse_args(std::env::args().skip(1)).and_then(run) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("replay: {e}");
            ExitCode::from(2)
        }
    }
}
