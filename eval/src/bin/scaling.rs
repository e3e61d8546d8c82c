//! How drafting scales with threads on one engine-wide [`Shared`], on this
//! machine: the recommended config replays a workload with a new drafter per
//! request, first on one thread, then split into parts (in order, of about
//! equal output tokens) on as many threads sharing one `Shared`, then on as
//! many threads with a `Shared` each (nothing shared: the machine's own
//! ceiling for this work; each part drafts from its own requests only).
//!
//! Each mode's line gives its wall times, its throughput at the median, the
//! time spent in `draft` calls summed over its threads (median; where
//! sharing costs, this grows) and its tau.
//!
//! The three runs alternate, round after round, and the speed-up is the
//! median of each round's ratio: on a noisy machine a neighbour's load then
//! hits both sides of a ratio alike, where two separately timed medians
//! drift apart (the `shared-memory` criterion bench times them separately).
//!
//! ```text
//! cargo run --release --bin scaling            # sample-chat, 2 threads, 21 rounds
//! cargo run --release --bin scaling -- FILE.jsonl [THREADS [ROUNDS]]
//! ```

use std::io::Write;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use selfspec::{Config, Shared};
use selfspec_eval::cli::{self, Out, Result};
use selfspec_eval::{replay_engine, Engine, ReplayReport, Session};

const USAGE: &str = "usage: scaling [FILE.jsonl [THREADS [ROUNDS]]]";
const HELP: &str = "scaling: how drafting scales with threads (one thread; THREADS on one Shared; THREADS with a Shared each)

usage: scaling [FILE.jsonl [THREADS [ROUNDS]]]
  FILE.jsonl   workload (JSON Lines, docs/replay.md); default: sample-chat
  THREADS      threads, 1..=1024; default 2
  ROUNDS       paired rounds, 1..=10000; default 21
  -h, --help   this text
";

/// Output tokens of a session.
fn output_tokens(session: &Session) -> u64 {
    session.requests.iter().map(|r| r.output.len() as u64).sum()
}

/// `sessions` in `n` consecutive parts of about equal output tokens: a part
/// ends once the parts so far hold their share of the total.
fn split(sessions: &[Session], n: usize) -> Vec<&[Session]> {
    let total: u64 = sessions.iter().map(output_tokens).sum();
    let mut parts = Vec::with_capacity(n);
    let (mut start, mut so_far) = (0, 0);
    for (i, session) in sessions.iter().enumerate() {
        so_far += output_tokens(session);
        let left = sessions.len() - i - 1;
        let due = so_far * n as u64 >= total * (parts.len() as u64 + 1);
        // Every part gets a session: close one when due, or when only as
        // many sessions are left as parts still to fill.
        if parts.len() + 1 < n && (due || left == n - parts.len() - 1) {
            parts.push(&sessions[start..=i]);
            start = i + 1;
        }
    }
    parts.push(&sessions[start..]);
    parts
}

/// Replays `parts`, one thread each, on one `Shared` (or a `Shared` each):
/// the wall time, the reports in order, and how often and how long (ns)
/// appends waited for the memory's writer lock.
fn run_parts(
    config: &Config,
    parts: &[&[Session]],
    private: bool,
) -> Result<(Duration, Vec<ReplayReport>, (u64, u64))> {
    let one = if private {
        None
    } else {
        Some(Shared::new(config)?)
    };
    let handles: Vec<Shared> = parts
        .iter()
        .map(|_| one.clone().map_or_else(|| Shared::new(config), Ok))
        .collect::<std::result::Result<_, _>>()?;
    let t = Instant::now();
    let reports = std::thread::scope(|scope| {
        let running: Vec<_> = parts
            .iter()
            .zip(&handles)
            .map(|(part, shared)| {
                scope.spawn(move || replay_engine(config, shared, part, Engine::fresh(1)))
            })
            .collect();
        running
            .into_iter()
            .map(|r| r.join().expect("a replay thread panicked"))
            .collect::<std::result::Result<Vec<_>, _>>()
    })?;
    let elapsed = t.elapsed();
    // Appends that waited for another thread's: one `Shared`'s, or the sum.
    let waits = if let Some(one) = &one {
        let s = one.stats();
        (s.writer_waits, s.writer_wait_ns)
    } else {
        handles.iter().fold((0, 0), |(n, ns), h| {
            let s = h.stats();
            (n + s.writer_waits, ns + s.writer_wait_ns)
        })
    };
    Ok((elapsed, reports, waits))
}

/// One way of running the workload, timed over the rounds.
struct Mode {
    name: String,
    times: Vec<Duration>,
    /// Time in `draft` calls, summed over the threads, per round.
    draft_times: Vec<Duration>,
    /// Time appends waited for the writer lock, per round.
    wait_times: Vec<Duration>,
    /// Appends that waited, over all rounds.
    waits: u64,
    /// Tokens and forward passes over all rounds (threads on one `Shared`
    /// draft a little differently each round: what the memory holds when
    /// depends on timing).
    tokens: u64,
    steps: u64,
}

impl Mode {
    fn new(name: String) -> Mode {
        Mode {
            name,
            times: Vec::new(),
            draft_times: Vec::new(),
            wait_times: Vec::new(),
            waits: 0,
            tokens: 0,
            steps: 0,
        }
    }

    fn add(
        &mut self,
        (time, reports, (waits, wait_ns)): (Duration, Vec<ReplayReport>, (u64, u64)),
    ) {
        self.times.push(time);
        self.waits += waits;
        self.wait_times.push(Duration::from_nanos(wait_ns));
        self.draft_times
            .push(reports.iter().map(|r| r.draft_time).sum());
        self.tokens += reports.iter().map(|r| r.tokens).sum::<u64>();
        self.steps += reports.iter().map(|r| r.steps).sum::<u64>();
    }
}

/// The median of `xs` (sorted in place).
fn median(xs: &mut [f64]) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs[xs.len() / 2]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn report(
    out: &mut Out,
    name: &str,
    sessions: &[Session],
    threads: usize,
    rounds: usize,
) -> Result {
    if sessions.len() < threads {
        return Err(format!(
            "{name} has {} sessions: fewer than the {threads} threads",
            sessions.len()
        )
        .into());
    }
    let config = Config::recommended();
    let parts = split(sessions, threads);
    let sizes: Vec<String> = parts
        .iter()
        .map(|p| format!("{}", p.iter().map(output_tokens).sum::<u64>()))
        .collect();
    let mut modes = [
        Mode::new("1 thread, the whole file".into()),
        Mode::new(format!("{threads} threads, one Shared")),
        Mode::new(format!("{threads} threads, a Shared each")),
    ];
    let tokens: u64 = sessions.iter().map(output_tokens).sum();
    writeln!(
        out,
        "{name}: {} sessions, {tokens} output tokens; {threads} parts of {} tokens; {rounds} rounds",
        sessions.len(),
        sizes.join(" / ")
    )?;
    out.flush()?;
    for _ in 0..rounds {
        modes[0].add(run_parts(&config, &[sessions], false)?);
        modes[1].add(run_parts(&config, &parts, false)?);
        modes[2].add(run_parts(&config, &parts, true)?);
    }
    writeln!(
        out,
        "  {:<32} {:>9} {:>9} {:>9} {:>12} {:>9} {:>9} {:>7}",
        "mode", "min ms", "median", "max", "tokens/s", "draft ms", "wait ms", "tau"
    )?;
    for mode in &modes {
        let mut t: Vec<f64> = mode.times.iter().map(|&d| ms(d)).collect();
        let mid = median(&mut t);
        let mut drafting: Vec<f64> = mode.draft_times.iter().map(|&d| ms(d)).collect();
        let mut waiting: Vec<f64> = mode.wait_times.iter().map(|&d| ms(d)).collect();
        writeln!(
            out,
            "  {:<32} {:>9.1} {:>9.1} {:>9.1} {:>12.0} {:>9.1} {:>9.2} {:>7.3}",
            mode.name,
            t[0],
            mid,
            t[t.len() - 1],
            tokens as f64 / (mid / 1e3),
            median(&mut drafting),
            median(&mut waiting),
            mode.tokens as f64 / mode.steps.max(1) as f64,
        )?;
    }
    for (i, what) in [(1, "one Shared"), (2, "a Shared each")] {
        let mut ratios: Vec<f64> = modes[0]
            .times
            .iter()
            .zip(&modes[i].times)
            .map(|(&one, &many)| one.as_secs_f64() / many.as_secs_f64())
            .collect();
        let mid = median(&mut ratios);
        writeln!(
            out,
            "  speed-up, {what}: {mid:.2}x (median of the rounds' ratios; {:.2}x to {:.2}x)",
            ratios[0],
            ratios[ratios.len() - 1]
        )?;
    }
    Ok(())
}

fn run(out: &mut Out) -> Result {
    let args = cli::positional(cli::args(), USAGE, HELP, 3)?;
    let threads = cli::count(args.get(1), "THREADS", 2, cli::MAX_THREADS)?;
    let rounds = cli::count(args.get(2), "ROUNDS", 21, 10_000)?;
    let workloads = match args.first() {
        Some(file) => vec![(file.clone(), cli::read(file)?)],
        None => cli::samples()?
            .into_iter()
            .filter(|(name, _)| name == "sample-chat")
            .collect(),
    };
    for (name, sessions) in &workloads {
        report(out, name, sessions, threads, rounds)?;
    }
    Ok(())
}

fn main() -> ExitCode {
    cli::main("scaling", run)
}

#[cfg(test)]
mod tests {
    use super::*;
    use selfspec_eval::Request;

    fn sessions(outputs: &[usize]) -> Vec<Session> {
        outputs
            .iter()
            .map(|&n| Session {
                id: String::new(),
                kind: String::new(),
                requests: vec![Request::new(vec![1], vec![2; n])],
            })
            .collect()
    }

    #[test]
    fn split_covers_the_file_in_order_with_a_session_a_part() {
        for (outputs, n) in [
            (&[5, 5, 5, 5][..], 2),
            (&[100, 1, 1, 1], 2),
            (&[1, 1, 1, 100], 2),
            (&[1, 1, 1, 100], 4),
            (&[3, 0, 0, 3, 7], 3),
            (&[9], 1),
        ] {
            let all = sessions(outputs);
            let parts = split(&all, n);
            assert_eq!(parts.len(), n, "{outputs:?} in {n}");
            assert!(parts.iter().all(|p| !p.is_empty()), "{outputs:?} in {n}");
            // The parts are the file, cut in order.
            assert_eq!(parts[0].as_ptr(), all.as_ptr());
            for pair in parts.windows(2) {
                assert_eq!(pair[0].as_ptr_range().end, pair[1].as_ptr());
            }
            assert_eq!(parts[n - 1].as_ptr_range().end, all.as_ptr_range().end);
        }
        // Equal sessions split evenly; a long one closes its part early.
        let even = sessions(&[5; 8]);
        assert!(split(&even, 4).iter().all(|p| p.len() == 2));
        let first_long = sessions(&[100, 1, 1, 1]);
        assert_eq!(split(&first_long, 2)[0].len(), 1);
    }
}
