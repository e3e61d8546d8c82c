//! A multi-sequence engine simulation, in the pattern engines use: one
//! engine-wide [`Shared`] state (cloned into every worker thread), one
//! [`Speculative`] per request on top of it (built when the request arrives;
//! `end_request` publishes the request's tokens to the shared memory, where
//! later requests, on any worker, draft from them), and
//! a mock target model that verifies drafts against recorded outputs
//! (greedy decoding).
//!
//! ```text
//! cargo run --release --bin engine_loop            # the embedded samples, 4 workers
//! cargo run --release --bin engine_loop -- FILE.jsonl [WORKERS]
//! ```

use std::collections::VecDeque;
use std::io::Write;
use std::process::ExitCode;
use std::sync::Mutex;

use selfspec::{Config, Shared, Speculative, Token};
use selfspec_eval::cli::{self, Out, Result};
use selfspec_eval::Session;

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

/// One request in flight: the engine's hooks mapped onto selfspec's calls.
struct Request {
    spec: Speculative,
    /// The tokens the target has evaluated (the engine's own; engines with
    /// `i32` ids can let the `Speculative` keep it: `begin_owned` / `draft_next`).
    history: Vec<Token>,
}

impl Request {
    /// Prefill: the target evaluates the prompt; a `Speculative` for this
    /// request, on the engine-wide state, indexes it.
    fn prefill(config: &Config, shared: &Shared, prompt: &[Token]) -> Result<Request> {
        let mut spec = Speculative::with_shared(config, shared)?;
        spec.begin(prompt);
        Ok(Request {
            spec,
            history: prompt.to_vec(),
        })
    }

    /// Propose: after the target sampled `last`, the drafters propose tokens.
    fn propose(&mut self, last: Token) -> &[Token] {
        self.spec.draft(&self.history, last)
    }

    /// Commit: the target kept `last` and `accepted` draft tokens.
    fn commit(&mut self, last: Token, accepted: usize) {
        self.history.push(last);
        self.history
            .extend_from_slice(&self.spec.last_draft()[..accepted]);
        self.spec.accept(accepted);
    }
}

struct Served {
    id: String,
    kind: String,
    tokens: usize,
    passes: usize,
    /// How long each request's `end_request` took (the writer lock's hold
    /// and any wait for it).
    ends: Vec<std::time::Duration>,
}

/// Serves one session (its requests in turn, as a chat's turns arrive).
fn serve(config: &Config, shared: &Shared, session: &Session) -> Result<Served> {
    let (mut tokens, mut passes) = (0, 0);
    let mut ends = Vec::with_capacity(session.requests.len());
    for request in &session.requests {
        let target = MockTarget {
            output: &request.output,
        };
        let mut live = Request::prefill(config, shared, &request.prompt)?;
        let mut i = 0;
        while i < request.output.len() {
            let last = request.output[i];
            let accepted = target.forward(i, live.propose(last));
            live.commit(last, accepted);
            passes += 1;
            i += accepted + 1;
        }
        tokens += request.output.len();
        // The request ends: its tokens join the engine-wide memory.
        let t = std::time::Instant::now();
        live.spec.end_request();
        ends.push(t.elapsed());
    }
    Ok(Served {
        id: session.id.clone(),
        kind: session.kind.clone(),
        tokens,
        passes,
        ends,
    })
}

const USAGE: &str = "usage: engine_loop [FILE.jsonl [WORKERS]]";
const HELP: &str = "engine_loop: a multi-threaded engine simulation on one Shared (recall, greedy verification against recorded outputs)

usage: engine_loop [FILE.jsonl [WORKERS]]
  FILE.jsonl   workload (JSON Lines, docs/replay.md); default: the embedded samples
  WORKERS      worker threads, 1..=1024; default 4
  -h, --help   this text
";

fn run(out: &mut Out) -> Result {
    let args = cli::positional(USAGE, HELP, 2)?;
    let sessions: Vec<Session> = cli::workloads(&args[..args.len().min(1)])?
        .into_iter()
        .flat_map(|(_, sessions)| sessions)
        .collect();
    let workers = cli::count(args.get(1), "WORKERS", 4, cli::MAX_THREADS)?;

    // One engine-wide state; one Speculative per request, on any worker.
    let config = Config::recommended();
    let shared = Shared::new(&config)?;
    let queue = Mutex::new(sessions.into_iter().collect::<VecDeque<_>>());
    let served = Mutex::new(Vec::new());
    let failed = Mutex::new(None);
    std::thread::scope(|scope| {
        for _ in 0..workers {
            let shared = shared.clone(); // a handle: the state itself is shared
            let (config, queue, served, failed) = (&config, &queue, &served, &failed);
            scope.spawn(move || loop {
                let Some(session) = queue.lock().unwrap().pop_front() else {
                    break;
                };
                match serve(config, &shared, &session) {
                    Ok(result) => served.lock().unwrap().push(result),
                    Err(e) => {
                        failed.lock().unwrap().get_or_insert(e);
                        break;
                    }
                }
            });
        }
    });
    if let Some(e) = failed.into_inner().unwrap() {
        return Err(e);
    }

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
        "\ntotal: {} sequences on {workers} workers, {tokens} tokens in {passes} forward passes: tau {:.3}; shared memory {:.1} MiB",
        served.len(),
        tokens as f64 / passes.max(1) as f64,
        shared.heap_bytes() as f64 / f64::from(1 << 20),
    )?;
    let mut ends: Vec<std::time::Duration> =
        served.iter().flat_map(|s| s.ends.iter().copied()).collect();
    ends.sort_unstable();
    if let (Some(median), Some(longest)) = (ends.get(ends.len() / 2), ends.last()) {
        writeln!(
            out,
            "end_request: median {:.1} us, longest {:.1} us over {} requests (publishing to the shared memory)",
            median.as_secs_f64() * 1e6,
            longest.as_secs_f64() * 1e6,
            ends.len()
        )?;
    }
    Ok(())
}

fn main() -> ExitCode {
    cli::main("engine_loop", run)
}
