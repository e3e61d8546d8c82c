//! Where does a drafter lose? Replays a workload and sorts every step by what
//! happened, next to the hindsight bound (the longest prefix of the true
//! continuation found anywhere in what the engine has seen).
//!
//! ```text
//! cargo run --release --bin diagnose                       # recommended config, embedded samples
//! cargo run --release --bin diagnose -- FILE.jsonl [--strategy S]... [--draft-max N] [--sources]
//! ```
//!
//! Classes: `full` (every drafted token accepted, draft_max reached),
//! `short` (all accepted, stopped early), `rejected` (a wrong token), `empty`
//! (no draft); `+bound` marks steps where the bound was longer than what was
//! accepted: a better choice or a longer draft would have paid.
//!
//! `--sources` splits the tokens each `+bound` class lost (bound minus
//! accepted) by where the bound's copy is (the newest occurrence of the
//! longest copy): the request's output so far, the new text of its prompt
//! (a user turn, a tool's output), what the model generated in the
//! session's earlier requests, the rest of their prompts, or other
//! sessions; and by how many tokens before that copy match the tokens before
//! the current position (0: not even the last token, so no context points
//! to it); and by the most such tokens any occurrence has that copies more
//! than was accepted (0: no context of any length leads to a longer copy).

use std::collections::{BTreeMap, HashMap};
use std::io::Write;
use std::process::ExitCode;

use selfspec::{Config, Speculative, Strategy, Token};
use selfspec_eval::cli::{self, Out, Result};
use selfspec_eval::{Session, Slot};

/// Where a seen token came from, relative to the request being replayed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
enum Source {
    /// The request's output so far.
    #[default]
    Output,
    /// The part of its prompt that is new (not the previous request's
    /// prompt and output of the session): a user turn, a tool's output.
    PromptNew,
    /// What the model generated in the session's earlier requests (its
    /// earlier answers, thoughts, commands), repeated in the prompt.
    EarlierOutputs,
    /// The rest of the session's earlier prompts (instructions, earlier
    /// user turns and tool outputs).
    EarlierPromptText,
    /// Another session.
    OtherSession,
}

impl Source {
    fn name(self) -> &'static str {
        match self {
            Source::Output => "output so far",
            Source::PromptNew => "prompt, new text",
            Source::EarlierOutputs => "earlier outputs",
            Source::EarlierPromptText => "earlier prompt text",
            Source::OtherSession => "other sessions",
        }
    }
}

/// Each seen token's session and request, which part of the request, and
/// whether the model generated it (in this request or an earlier one).
#[derive(Clone, Copy, Default)]
struct Origin {
    session: usize,
    request: usize,
    part: Source,
    generated: bool,
}

/// Context-match buckets of `--sources` (tokens before the copy that match).
const CONTEXT_BUCKETS: [(usize, &str); 6] = [
    (0, "0"),
    (1, "1"),
    (2, "2-3"),
    (4, "4-7"),
    (8, "8-15"),
    (16, "16+"),
];

/// Everything seen so far, with the positions of every 4-gram, to find the
/// longest seen prefix of a continuation.
#[derive(Default)]
struct Seen {
    tokens: Vec<Token>,
    at: HashMap<[Token; 4], Vec<usize>>,
    origins: Vec<Origin>,
}

impl Seen {
    fn extend(&mut self, tokens: &[Token], origin: Origin) {
        for &t in tokens {
            self.push(t, origin);
        }
    }

    fn push(&mut self, t: Token, origin: Origin) {
        self.tokens.push(t);
        self.origins.push(origin);
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

    /// Longest prefix of `truth` that occurs in what was seen (4 tokens at
    /// least; the 200 most recent occurrences of its first 4-gram are
    /// tried), and where its newest occurrence starts.
    fn bound(&self, truth: &[Token]) -> (usize, usize) {
        let Some(key) = truth.get(..4) else {
            return (0, 0);
        };
        let key = [key[0], key[1], key[2], key[3]];
        let Some(starts) = self.at.get(&key) else {
            return (0, 0);
        };
        let mut best = (0, 0);
        for &p in starts.iter().rev().take(200) {
            let n = truth
                .iter()
                .zip(&self.tokens[p..])
                .take_while(|(a, b)| a == b)
                .count();
            if n > best.0 {
                best = (n, p);
            }
        }
        best
    }

    /// The most tokens before any occurrence that copies more than
    /// `accepted` tokens of `truth` (among the occurrences `bound` tries)
    /// that equal the last ones of `context`: 0 when no such copy is
    /// preceded even by the last token.
    fn best_context(&self, truth: &[Token], accepted: usize, context: &[Token]) -> usize {
        let Some(key) = truth.get(..4) else {
            return 0;
        };
        let key = [key[0], key[1], key[2], key[3]];
        let Some(starts) = self.at.get(&key) else {
            return 0;
        };
        starts
            .iter()
            .rev()
            .take(200)
            .filter(|&&p| {
                let n = truth
                    .iter()
                    .zip(&self.tokens[p..])
                    .take_while(|(a, b)| a == b)
                    .count();
                n > accepted
            })
            .map(|&p| self.context_match(p, context))
            .max()
            .unwrap_or(0)
    }

    /// How many tokens before position `p` equal the last ones of
    /// `context` (at most 64).
    fn context_match(&self, p: usize, context: &[Token]) -> usize {
        self.tokens[..p]
            .iter()
            .rev()
            .zip(context.iter().rev())
            .take(64)
            .take_while(|(a, b)| a == b)
            .count()
    }
}

/// Tokens lost (bound minus accepted) per `+bound` class, by the copy's
/// source and by its context match: (steps, tokens).
#[derive(Default)]
struct Losses {
    by_source: BTreeMap<(String, Source), (usize, usize)>,
    by_context: BTreeMap<(String, usize), (usize, usize)>,
    by_best_context: BTreeMap<(String, usize), (usize, usize)>,
}

/// The [`CONTEXT_BUCKETS`] bucket of `context` matching tokens.
fn context_bucket(context: usize) -> usize {
    CONTEXT_BUCKETS
        .iter()
        .rposition(|&(from, _)| context >= from)
        .unwrap_or(0)
}

impl Losses {
    /// One step's `lost` tokens; `context` is the newest longest copy's
    /// context match, `best` the most any longer copy has.
    fn add(&mut self, class: &str, source: Source, (context, best): (usize, usize), lost: usize) {
        for e in [
            self.by_source
                .entry((class.to_string(), source))
                .or_default(),
            self.by_context
                .entry((class.to_string(), context_bucket(context)))
                .or_default(),
            self.by_best_context
                .entry((class.to_string(), context_bucket(best)))
                .or_default(),
        ] {
            e.0 += 1;
            e.1 += lost;
        }
    }

    fn print(&self, out: &mut Out) -> Result {
        writeln!(
            out,
            "tokens lost (bound - accepted) in +bound steps, by where the copy is:"
        )?;
        writeln!(
            out,
            "  {:<16} {:<22} {:>7} {:>9}",
            "class", "source", "steps", "lost"
        )?;
        for ((class, source), (n, lost)) in &self.by_source {
            writeln!(out, "  {class:<16} {:<22} {n:>7} {lost:>9}", source.name())?;
        }
        writeln!(out, "by how many tokens before the copy match the context:")?;
        writeln!(
            out,
            "  {:<16} {:<22} {:>7} {:>9}",
            "class", "matching tokens", "steps", "lost"
        )?;
        for ((class, bucket), (n, lost)) in &self.by_context {
            writeln!(
                out,
                "  {class:<16} {:<22} {n:>7} {lost:>9}",
                CONTEXT_BUCKETS[*bucket].1
            )?;
        }
        writeln!(
            out,
            "by the most context tokens any copy longer than the accepted part has:"
        )?;
        writeln!(
            out,
            "  {:<16} {:<22} {:>7} {:>9}",
            "class", "matching tokens", "steps", "lost"
        )?;
        for ((class, bucket), (n, lost)) in &self.by_best_context {
            writeln!(
                out,
                "  {class:<16} {:<22} {n:>7} {lost:>9}",
                CONTEXT_BUCKETS[*bucket].1
            )?;
        }
        Ok(())
    }
}

/// The length of the part of `prompt` that repeats `previous` (the
/// session's previous prompt and output).
fn repeated(prompt: &[Token], previous: &[Token]) -> usize {
    prompt
        .iter()
        .zip(previous)
        .take_while(|(a, b)| a == b)
        .count()
}

fn diagnose(
    out: &mut Out,
    name: &str,
    sessions: &[Session],
    config: &Config,
    sources: bool,
) -> Result {
    // The workload's drafter: the slot keeps it from request to request.
    let mut spec = Some(Speculative::new(config)?);
    let mut slot = Slot::new()?;
    let dmax = config.draft_max;
    let mut seen = Seen::default();
    // class -> (steps, accepted tokens, bound tokens)
    let mut classes: BTreeMap<String, (usize, usize, usize)> = BTreeMap::new();
    let (mut steps, mut tokens) = (0usize, 0usize);
    let mut losses = Losses::default();
    let requests = sessions.iter().enumerate().flat_map(|(s, session)| {
        session
            .requests
            .iter()
            .enumerate()
            .map(move |(r, q)| (s, r, q))
    });
    // The session's previous prompt and output, and which of their tokens
    // the model generated.
    let mut previous: Vec<Token> = Vec::new();
    let mut generated: Vec<bool> = Vec::new();
    for (session, r, request) in requests {
        if r == 0 {
            previous.clear();
            generated.clear();
        }
        let origin = |part, generated| Origin {
            session,
            request: r,
            part,
            generated,
        };
        let old = repeated(&request.prompt, &previous);
        generated.truncate(old);
        for (&t, &g) in request.prompt[..old].iter().zip(&generated) {
            let part = if g {
                Source::EarlierOutputs
            } else {
                Source::EarlierPromptText
            };
            seen.push(t, origin(part, g));
        }
        seen.extend(&request.prompt[old..], origin(Source::PromptNew, false));
        generated.resize(request.prompt.len(), false);
        generated.resize(request.prompt.len() + request.output.len(), true);
        previous.clear();
        previous.extend_from_slice(&request.prompt);
        previous.extend_from_slice(&request.output);
        slot.start(request, spec.take())?;
        let output = &request.output;
        tokens += output.len();
        while let Some(step) = slot.step()? {
            let (i, draft, accepted) = (step.index, &step.draft, step.accepted);
            seen.push(output[i], origin(Source::Output, true));
            let truth = &output[i + 1..(i + 1 + dmax).min(output.len())];
            let (bound, at) = seen.bound(truth);
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
                let class = format!("{class} +bound");
                if sources {
                    let copy = seen.origins[at];
                    let source = if copy.session != session {
                        Source::OtherSession
                    } else if copy.request != r {
                        // Seen in an earlier request of the session.
                        if copy.generated {
                            Source::EarlierOutputs
                        } else {
                            Source::EarlierPromptText
                        }
                    } else {
                        copy.part
                    };
                    let context = seen.context_match(at, &seen.tokens);
                    let best = seen.best_context(truth, accepted, &seen.tokens);
                    losses.add(&class, source, (context, best), bound - accepted);
                }
                class
            } else {
                class.to_string()
            };
            let e = classes.entry(class).or_default();
            *e = (e.0 + 1, e.1 + accepted, e.2 + bound.max(accepted));
            seen.extend(&draft[..accepted], origin(Source::Output, true));
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
    if sources {
        losses.print(out)?;
    }
    Ok(())
}

const USAGE: &str =
    "usage: diagnose [FILE.jsonl ...] [--strategy S]... [--draft-max N] [--sources]";
const HELP: &str = "diagnose: where a drafter loses tokens, by class, next to the hindsight copy bound

usage: diagnose [FILE.jsonl ...] [--strategy S]... [--draft-max N] [--sources]
  FILE.jsonl        workloads (JSON Lines, docs/replay.md); default: the embedded samples
  -s, --strategy S  a strategy (NAME[:k=v,...]); several form a chain; default: Config::recommended()
  --draft-max N     the longest draft, 1..=4096; default 16
  --sources         split the tokens lost in +bound steps by where the copy is and how much
                    context before it matches
  -h, --help        this text
";

fn run(out: &mut Out) -> Result {
    use lexopt::Arg::{Long, Short, Value};
    let mut files = Vec::new();
    let mut strategies: Vec<Strategy> = Vec::new();
    let mut draft_max = 16;
    let mut sources = false;
    let mut args = cli::args();
    while let Some(arg) = args.next().map_err(|e| cli::bad_args(e, USAGE))? {
        match arg {
            Long("strategy") | Short('s') => {
                strategies.push(
                    cli::value(&mut args, USAGE)?
                        .parse()
                        .map_err(|e| format!("--strategy: {e}"))?,
                );
            }
            Long("draft-max") => {
                let v = cli::value(&mut args, USAGE)?;
                draft_max = v
                    .parse()
                    .map_err(|_| format!("--draft-max `{v}` is not a number"))?;
            }
            Long("sources") => sources = true,
            Long("help") | Short('h') => return Err(cli::Failure::Help(HELP)),
            Value(file) => files.push(cli::text(file)?),
            arg => return Err(cli::unexpected(&arg, USAGE)),
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
    for (name, sessions) in cli::workloads(&files)? {
        diagnose(out, &name, &sessions, &config, sources)?;
    }
    Ok(())
}

fn main() -> ExitCode {
    cli::main("diagnose", run)
}
