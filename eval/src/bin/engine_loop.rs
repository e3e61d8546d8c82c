//! A multi-sequence engine simulation, in the pattern engines use: one
//! engine-wide [`Shared`] state (cloned into every worker thread), one
//! [`Speculative`] per request on top of it (built when the request arrives;
//! its `end_request`, when the request ends, publishes the request's tokens
//! to the shared memory, where later requests, on any worker, draft from
//! them), each request decoded by selfspec's `Stepper` against a target
//! that generates its recorded output (greedy decoding; [`Slot`]).
//!
//! ```text
//! cargo run --release --bin engine_loop            # the embedded samples, 4 workers
//! cargo run --release --bin engine_loop -- FILE.jsonl [WORKERS]
//! ```

use std::collections::VecDeque;
use std::io::Write;
use std::process::ExitCode;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use selfspec::{Config, Shared, Speculative};
use selfspec_eval::cli::{self, Out, Result};
use selfspec_eval::{Session, Slot};

struct Served {
    id: String,
    kind: String,
    tokens: usize,
    passes: usize,
    /// How long each request's `end_request` took (the writer lock's hold
    /// and any wait for it).
    ends: Vec<Duration>,
}

/// Time a drafter spent in `draft` and `accept` calls.
fn drafting(spec: Option<&mut Speculative>) -> Duration {
    spec.map_or(Duration::ZERO, |s| {
        s.stats().iter().map(|s| s.t_draft + s.t_accept).sum()
    })
}

/// Serves one session (its requests in turn, as a chat's turns arrive).
fn serve(config: &Config, shared: &Shared, session: &Session) -> Result<Served> {
    let (mut tokens, mut passes) = (0, 0);
    let mut ends = Vec::with_capacity(session.requests.len());
    let mut slot = Slot::new()?;
    for request in &session.requests {
        // Prefill: a Speculative for this request, on the engine-wide
        // state, indexes the prompt.
        slot.start(request, Some(Speculative::with_shared(config, shared)?))?;
        // The step that ends the request calls its `end_request` (the
        // request's tokens join the engine-wide memory): its time less
        // the draft and accept calls'.
        let mut end = Duration::ZERO;
        loop {
            let before = drafting(slot.spec_mut());
            let t = Instant::now();
            if slot.step()?.is_none() {
                break;
            }
            let took = t.elapsed();
            end = took.saturating_sub(drafting(slot.spec_mut()).saturating_sub(before));
            passes += 1;
        }
        tokens += request.output.len();
        ends.push(end);
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
    let args = cli::positional(cli::args(), USAGE, HELP, 2)?;
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
