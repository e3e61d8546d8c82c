//! A progress line on stderr for runs that take minutes.

use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

/// How often a progress line is written when stderr is not a terminal (a
/// log file gets one line per interval, not one per turn).
const LOG_EVERY: Duration = Duration::from_secs(10);

/// Reports each finished turn on stderr: in place on a terminal, at most one
/// line every ten seconds otherwise (and always the last turn).
#[derive(Debug)]
pub struct Progress {
    total: usize,
    done: usize,
    started: Instant,
    last: Option<Instant>,
    terminal: bool,
}

impl Progress {
    /// A progress report over `total` turns.
    #[must_use]
    pub fn new(total: usize) -> Progress {
        Progress {
            total,
            done: 0,
            started: Instant::now(),
            last: None,
            terminal: std::io::stderr().is_terminal(),
        }
    }

    /// One turn finished: its kind, conversation id, tokens and both modes'
    /// tokens per second.
    pub fn turn(&mut self, kind: &str, id: &str, generated: usize, plain_tps: f64, spec_tps: f64) {
        self.done += 1;
        let now = Instant::now();
        let due =
            self.last.is_none_or(|t| now.duration_since(t) >= LOG_EVERY) || self.done == self.total;
        if !self.terminal && !due {
            return;
        }
        self.report(
            now,
            format_args!(
                "{kind} {id}: {generated} tokens, plain {plain_tps:.1} tok/s, spec {spec_tps:.1} tok/s"
            ),
        );
    }

    /// A pass over several turns finished (an engine that decodes a kind's
    /// turns in one pass per mode): `turns` turns of `kind` decoded by `mode`,
    /// `generated` tokens at `tps` tokens per second. Always reported: passes
    /// are minutes apart.
    pub fn pass(&mut self, kind: &str, mode: &str, turns: usize, generated: usize, tps: f64) {
        self.done += turns;
        self.report(
            Instant::now(),
            format_args!("{kind}, {mode}: {turns} turns, {generated} tokens, {tps:.1} tok/s"),
        );
    }

    /// Writes the progress line `[turn done/total elapsed] what`, at `now`:
    /// in place on a terminal, as a line of its own otherwise.
    fn report(&mut self, now: Instant, what: std::fmt::Arguments<'_>) {
        self.last = Some(now);
        let (done, total) = (self.done, self.total);
        let elapsed = self.started.elapsed().as_secs_f64();
        let mut err = std::io::stderr().lock();
        // A progress line that cannot be written is not worth failing a run for.
        let _ = if self.terminal {
            write!(err, "\r\x1b[2K[turn {done}/{total} {elapsed:.0} s] {what}")
        } else {
            writeln!(err, "[turn {done}/{total} {elapsed:.0} s] {what}")
        };
    }

    /// Ends the line on a terminal.
    pub fn finish(&mut self) {
        if self.terminal && self.done > 0 {
            let _ = writeln!(std::io::stderr());
        }
    }
}
