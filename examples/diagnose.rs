//! Where does a drafter lose? Replays a workload and sorts every step by what
//! happened, next to the hindsight bound (the longest prefix of the true
//! continuation found anywhere in what the engine has seen).
//!
//! ```text
//! cargo run --release --example diagnose                       # recommended config, embedded samples
//! cargo run --release --example diagnose -- FILE.jsonl [--strategy S]... [--draft-max N]
//! ```
//!
//! Classes: `full` (every drafted token accepted, draft_max reached),
//! `short` (all accepted, stopped early), `rejected` (a wrong token), `empty`
//! (no draft); `+bound` marks steps where the bound was longer than what was
//! accepted: a better choice or a longer draft would have paid.

mod common;

use std::collections::{BTreeMap, HashMap};
use std::io::Write;
use std::process::ExitCode;

use common::{Out, Result};
use selfspec::replay::Session;
use selfspec::{Config, Speculative, Strategy, Token};

/// Everything seen so far, with the positions of every 4-gram, to find the
/// longest seen prefix of a continuation.
#[derive(Default)]
struct Seen {
    tokens: Vec<Token>,
    at: HashMap<[Token; 4], Vec<usize>>,
}

impl Seen {
    fn extend(&mut self, tokens: &[Token]) {
        for &t in tokens {
            self.tokens.push(t);
            let n = self.tokens.len();
            if n >= 4 {
                let key = [
                    self.tokens[n - 4],
                    self.tokens[n - 3],
                    self.tokens[n - 2],
                    t,
                ];
                self.at.entry(key).or_default().push(n - 4);
            }
        }
    }

    /// Longest prefix of `truth` that occurs in what was seen (4 tokens at least;
    /// the 200 most recent occurrences of its first 4-gram are tried).
    fn bound(&self, truth: &[Token]) -> usize {
        let Some(key) = truth.get(..4) else { return 0 };
        let key = [key[0], key[1], key[2], key[3]];
        let Some(starts) = self.at.get(&key) else {
            return 0;
        };
        starts
            .iter()
            .rev()
            .take(200)
            .map(|&p| {
                truth
                    .iter()
                    .zip(&self.tokens[p..])
                    .take_while(|(a, b)| a == b)
                    .count()
            })
            .max()
            .unwrap_or(0)
    }
}

fn diagnose(out: &mut Out, name: &str, sessions: &[Session], config: &Config) -> Result {
    let mut spec = Speculative::new(config)?;
    let dmax = config.draft_max;
    let mut seen = Seen::default();
    // class -> (steps, accepted tokens, bound tokens)
    let mut classes: BTreeMap<String, (usize, usize, usize)> = BTreeMap::new();
    let (mut steps, mut tokens) = (0usize, 0usize);
    for request in sessions.iter().flat_map(|s| &s.requests) {
        let mut history = request.prompt.clone();
        seen.extend(&request.prompt);
        spec.begin(&history);
        let output = &request.output;
        tokens += output.len();
        let mut i = 0;
        while i < output.len() {
            let last = output[i];
            seen.extend(&[last]);
            let draft = spec.draft(&history, last).to_vec();
            let truth = &output[i + 1..(i + 1 + dmax).min(output.len())];
            let accepted = draft.iter().zip(truth).take_while(|(d, t)| d == t).count();
            let bound = seen.bound(truth);
            let class = match (
                draft.is_empty(),
                accepted == draft.len(),
                draft.len() == dmax,
            ) {
                (true, _, _) => "empty",
                (false, true, true) => "full",
                (false, true, false) => "short",
                (false, false, _) => "rejected",
            };
            let class = if bound > accepted && class != "full" {
                format!("{class} +bound")
            } else {
                class.to_string()
            };
            let e = classes.entry(class).or_default();
            *e = (e.0 + 1, e.1 + accepted, e.2 + bound.max(accepted));
            spec.accept(accepted);
            history.push(last);
            history.extend_from_slice(&draft[..accepted]);
            seen.extend(&draft[..accepted]);
            i += accepted + 1;
            steps += 1;
        }
    }
    writeln!(
        out,
        "\n== {name}: {} > tau {:.3} ({tokens} tokens, {steps} steps)",
        config
            .strategies
            .iter()
            .map(|s| s.to_string())
            .collect::<Vec<_>>()
            .join(" > "),
        tokens as f64 / steps.max(1) as f64
    )?;
    writeln!(
        out,
        "{:<16} {:>7} {:>9} {:>9}",
        "class", "steps", "accepted", "bound"
    )?;
    for (class, (n, a, b)) in classes {
        writeln!(out, "{class:<16} {n:>7} {a:>9} {b:>9}")?;
    }
    Ok(())
}

const USAGE: &str = "usage: diagnose [FILE.jsonl ...] [--strategy S]... [--draft-max N]";
const HELP: &str = "diagnose: where a drafter loses tokens, by class, next to the hindsight copy bound

usage: diagnose [FILE.jsonl ...] [--strategy S]... [--draft-max N]
  FILE.jsonl        workloads (JSON Lines, docs/replay.md); default: the embedded samples
  -s, --strategy S  a strategy (NAME[:k=v,...]); several form a chain; default: Config::recommended()
  --draft-max N     the longest draft, 1..=4096; default 16
  -h, --help        this text
";

fn run(out: &mut Out) -> Result {
    let mut files = Vec::new();
    let mut strategies: Vec<Strategy> = Vec::new();
    let mut draft_max = 16;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--strategy" | "-s" => {
                let v = args.next().ok_or("--strategy needs a value")?;
                strategies.push(v.parse().map_err(|e| format!("--strategy: {e}"))?);
            }
            "--draft-max" => {
                let v = args.next().ok_or("--draft-max needs a value")?;
                draft_max = v
                    .parse()
                    .map_err(|_| format!("--draft-max `{v}` is not a number"))?;
            }
            "--help" | "-h" => return Err(common::Failure::Help(HELP)),
            flag if flag.starts_with('-') => {
                return Err(format!("unknown option `{flag}`; {USAGE}").into())
            }
            _ => files.push(arg),
        }
    }
    let mut config = if strategies.is_empty() {
        Config::recommended()
    } else {
        Config::new(strategies)
    };
    config.draft_max = draft_max;
    config.validate()?;
    // Builds (cache files exist...) and reads every workload before any output.
    Speculative::new(&config)?;
    for (name, sessions) in common::workloads(&files)? {
        diagnose(out, &name, &sessions, &config)?;
    }
    Ok(())
}

fn main() -> ExitCode {
    common::main("diagnose", run)
}
