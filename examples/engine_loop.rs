//! A multi-sequence engine simulation: worker threads serve sessions, each
//! sequence has its own `Speculative`, all share one ngram-mod pool, and a mock
//! target model verifies drafts against recorded outputs (greedy decoding).
//!
//! ```text
//! cargo run --release --example engine_loop            # the embedded samples, 4 workers
//! cargo run --release --example engine_loop -- FILE.jsonl [WORKERS]
//! ```

mod common;

use std::collections::VecDeque;
use std::io::Write;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};

use common::{Out, Result};
use selfspec::replay::Session;
use selfspec::{Config, NgramPool, Speculative, Strategy, Token};

/// The target model, mocked: it "generates" a recorded output. One call of
/// `forward` is one batched forward pass over `last` and the draft.
struct MockTarget<'a> {
    output: &'a [Token],
}

impl MockTarget<'_> {
    /// Verifies `draft` after the token at `i`: how many draft tokens the target
    /// agrees with (greedy verification).
    fn forward(&self, i: usize, draft: &[Token]) -> usize {
        draft
            .iter()
            .zip(&self.output[i + 1..])
            .take_while(|(d, t)| d == t)
            .count()
    }
}

/// One engine sequence: the engine's hooks mapped onto selfspec's calls.
struct Sequence {
    spec: Speculative,
    history: Vec<Token>,
}

impl Sequence {
    /// Prefill: the target evaluates the prompt; the drafters index it.
    fn prefill(&mut self, prompt: &[Token]) {
        self.history.clear();
        self.history.extend_from_slice(prompt);
        self.spec.begin(&self.history);
    }

    /// Propose: after the target sampled `last`, the drafters propose tokens.
    fn propose(&mut self, last: Token) -> Vec<Token> {
        self.spec.draft(&self.history, last).to_vec()
    }

    /// Commit: the target kept `last` and `accepted` draft tokens.
    fn commit(&mut self, last: Token, draft: &[Token], accepted: usize) {
        self.spec.accept(accepted);
        self.history.push(last);
        self.history.extend_from_slice(&draft[..accepted]);
    }
}

struct Served {
    id: String,
    kind: String,
    tokens: usize,
    passes: usize,
}

fn serve(seq: &mut Sequence, session: &Session) -> Served {
    let (mut tokens, mut passes) = (0, 0);
    for request in &session.requests {
        let target = MockTarget {
            output: &request.output,
        };
        seq.prefill(&request.prompt);
        let mut i = 0;
        while i < request.output.len() {
            let last = request.output[i];
            let draft = seq.propose(last);
            let accepted = target.forward(i, &draft);
            seq.commit(last, &draft, accepted);
            passes += 1;
            i += accepted + 1;
        }
        tokens += request.output.len();
    }
    Served {
        id: session.id.clone(),
        kind: session.kind.clone(),
        tokens,
        passes,
    }
}

const USAGE: &str = "usage: engine_loop [FILE.jsonl [WORKERS]]";

fn run(out: &mut Out) -> Result {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let Some(flag) = args.iter().find(|a| a.starts_with('-')) {
        return Err(format!("unknown option `{flag}`; {USAGE}").into());
    }
    if args.len() > 2 {
        return Err(USAGE.into());
    }
    let sessions: Vec<Session> = common::workloads(&args[..args.len().min(1)])?
        .into_iter()
        .flat_map(|(_, sessions)| sessions)
        .collect();
    let workers: usize = match args.get(1) {
        None => 4,
        Some(w) => w
            .parse()
            .ok()
            .filter(|&w| w > 0)
            .ok_or_else(|| format!("WORKERS `{w}` is not a positive integer"))?,
    };

    // One pool per engine; one Speculative per sequence.
    let config = Config::new([
        Strategy::NgramSimple { n: 12, m: 48 },
        Strategy::NgramMod { n: 24 },
    ]);
    let pool = Arc::new(NgramPool::new(config.pool_size)?);
    let queue = Mutex::new(sessions.into_iter().collect::<VecDeque<_>>());
    let served = Mutex::new(Vec::new());
    std::thread::scope(|scope| {
        for _ in 0..workers {
            scope.spawn(|| {
                let mut seq = Sequence {
                    spec: Speculative::with_pool(&config, pool.clone()).expect("a valid config"),
                    history: Vec::new(),
                };
                loop {
                    let Some(session) = queue.lock().unwrap().pop_front() else {
                        break;
                    };
                    let result = serve(&mut seq, &session);
                    served.lock().unwrap().push(result);
                }
            });
        }
    });

    let served = served.into_inner().unwrap();
    writeln!(
        out,
        "{:<48} {:>10} {:>8} {:>8} {:>6}",
        "sequence", "kind", "tokens", "passes", "tau"
    )?;
    for s in &served {
        let id: String = s.id.chars().take(48).collect();
        writeln!(
            out,
            "{:<48} {:>10} {:>8} {:>8} {:>6.2}",
            id,
            s.kind,
            s.tokens,
            s.passes,
            s.tokens as f64 / s.passes as f64
        )?;
    }
    let tokens: usize = served.iter().map(|s| s.tokens).sum();
    let passes: usize = served.iter().map(|s| s.passes).sum();
    writeln!(
        out,
        "\ntotal: {} sequences on {workers} workers, {tokens} tokens in {passes} forward passes: tau {:.3}; pool {} of {} cells used",
        served.len(),
        tokens as f64 / passes.max(1) as f64,
        pool.used(),
        pool.size()
    )?;
    Ok(())
}

fn main() -> ExitCode {
    common::main("engine_loop", run)
}
