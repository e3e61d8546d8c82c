//! Shared by the tools: the embedded samples, workload loading, output and
//! exit codes, so that all of them behave the same.
//!
//! - Output goes through [`Out`] (a buffered, locked stdout) with `writeln!`;
//!   every write returns an `io::Result`.
//! - A closed pipe (`replay | head -1`) ends the tool quietly (exit 0); any
//!   other write error (`> /dev/full`) is one line on stderr, exit 2.
//! - Errors (bad options, unreadable or empty workloads, invalid
//!   configurations) are one line on stderr, exit 2, before any output
//!   where they can be found up front.

use std::fmt;
use std::io::{self, BufWriter, StdoutLock, Write};
use std::process::ExitCode;

use crate::Session;

/// The embedded samples (real public data, Qwen3 tokenizer; see `examples/data/`).
pub const SAMPLES: [(&str, &str); 4] = [
    (
        "sample-chat",
        include_str!("../../examples/data/sample-chat.jsonl"),
    ),
    (
        "sample-code-edit",
        include_str!("../../examples/data/sample-code-edit.jsonl"),
    ),
    (
        "sample-code",
        include_str!("../../examples/data/sample-code.jsonl"),
    ),
    (
        "sample-agent",
        include_str!("../../examples/data/sample-agent.jsonl"),
    ),
];

/// The tools' standard output.
pub type Out = BufWriter<StdoutLock<'static>>;

/// Why a tool stops early.
#[derive(Debug)]
pub enum Failure {
    /// The reader closed the pipe: nothing more to say.
    Quiet,
    /// A one-line message for stderr.
    Message(String),
    /// `--help`: the text for stdout, exit status 0.
    Help(&'static str),
}

/// The tools' result type.
pub type Result<T = ()> = std::result::Result<T, Failure>;

impl From<io::Error> for Failure {
    fn from(e: io::Error) -> Failure {
        if e.kind() == io::ErrorKind::BrokenPipe {
            Failure::Quiet
        } else {
            Failure::Message(format!("writing the output: {e}"))
        }
    }
}

impl From<crate::WorkloadError> for Failure {
    fn from(e: crate::WorkloadError) -> Failure {
        Failure::Message(e.to_string())
    }
}

impl From<String> for Failure {
    fn from(e: String) -> Failure {
        Failure::Message(e)
    }
}

impl From<&str> for Failure {
    fn from(e: &str) -> Failure {
        Failure::Message(e.to_string())
    }
}

impl From<selfspec::Error> for Failure {
    fn from(e: selfspec::Error) -> Failure {
        Failure::Message(e.to_string())
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Failure::Quiet => Ok(()),
            Failure::Message(m) => f.write_str(m),
            Failure::Help(h) => f.write_str(h),
        }
    }
}

/// Runs a tool: `run` writes to the locked stdout; an error becomes one line
/// on stderr (`NAME: message`) and exit status 2, a closed pipe exit 0.
pub fn main(name: &str, run: impl FnOnce(&mut Out) -> Result) -> ExitCode {
    let mut out = BufWriter::new(io::stdout().lock());
    let result = run(&mut out).and_then(|()| out.flush().map_err(Failure::from));
    match result {
        Ok(()) | Err(Failure::Quiet) => {
            // Nothing more reaches a closed pipe; do not try again on drop.
            let _ = out.into_parts();
            ExitCode::SUCCESS
        }
        Err(Failure::Help(text)) => {
            let _ = out.into_parts();
            let mut stdout = io::stdout().lock();
            match stdout
                .write_all(text.as_bytes())
                .and_then(|()| stdout.flush())
            {
                Err(e) if e.kind() != io::ErrorKind::BrokenPipe => {
                    eprintln!("{name}: writing the output: {e}");
                    ExitCode::from(2)
                }
                _ => ExitCode::SUCCESS,
            }
        }
        Err(Failure::Message(m)) => {
            let _ = out.into_parts();
            eprintln!("{name}: {m}");
            ExitCode::from(2)
        }
    }
}

/// An empty workload is an error.
fn non_empty(name: &str, sessions: Vec<Session>) -> Result<Vec<Session>> {
    if sessions.is_empty() {
        return Err(Failure::Message(format!("{name}: no sessions")));
    }
    Ok(sessions)
}

/// Reads the workload file `path` (JSON Lines); errors name the file.
///
/// # Errors
///
/// An unreadable, malformed or empty workload.
pub fn read(path: &str) -> Result<Vec<Session>> {
    non_empty(path, crate::read_workload(path)?)
}

/// The embedded samples, parsed.
///
/// # Errors
///
/// A sample that does not parse (a build with damaged data).
pub fn samples() -> Result<Vec<(String, Vec<Session>)>> {
    SAMPLES
        .iter()
        .map(|(name, text)| {
            let sessions = crate::parse_workload(name, text)?;
            Ok((name.to_string(), non_empty(name, sessions)?))
        })
        .collect()
}

/// The workloads named by `files`, or the embedded samples when there are none.
///
/// # Errors
///
/// As [`read`], for the first file that fails.
pub fn workloads(files: &[String]) -> Result<Vec<(String, Vec<Session>)>> {
    if files.is_empty() {
        return samples();
    }
    files.iter().map(|f| Ok((f.clone(), read(f)?))).collect()
}

/// More worker threads than this is a typo, not a machine.
pub const MAX_THREADS: usize = 1024;

/// A tool's command line (the process's arguments), read with `lexopt`:
/// `--opt value`, `--opt=value`, `-s value`, `-svalue`.
#[must_use]
pub fn args() -> lexopt::Parser {
    lexopt::Parser::from_env()
}

/// A command line the tool cannot read: `lexopt`'s error, then `usage`.
#[must_use]
pub fn bad_args(e: lexopt::Error, usage: &str) -> Failure {
    match e {
        lexopt::Error::MissingValue {
            option: Some(option),
        } => format!("{option} needs a value; {usage}").into(),
        e => format!("{e}; {usage}").into(),
    }
}

/// An argument the tool does not take.
#[must_use]
pub fn unexpected(arg: &lexopt::Arg<'_>, usage: &str) -> Failure {
    match arg {
        lexopt::Arg::Long(name) => format!("unknown option `--{name}`; {usage}").into(),
        lexopt::Arg::Short(c) => format!("unknown option `-{c}`; {usage}").into(),
        lexopt::Arg::Value(v) => {
            format!("unexpected argument `{}`; {usage}", v.to_string_lossy()).into()
        }
    }
}

/// The value of the option just read, as text.
///
/// # Errors
///
/// A missing value, or one that is not UTF-8.
pub fn value(args: &mut lexopt::Parser, usage: &str) -> Result<String> {
    text(args.value().map_err(|e| bad_args(e, usage))?)
}

/// An argument as text.
///
/// # Errors
///
/// An argument that is not UTF-8.
pub fn text(arg: std::ffi::OsString) -> Result<String> {
    arg.into_string()
        .map_err(|a| format!("`{}` is not UTF-8", a.to_string_lossy()).into())
}

/// The arguments of a tool that takes positional ones only, at most `max`:
/// an option (`-x`) or one argument too many is an error that shows `usage`;
/// `--help` or `-h` shows `help`.
///
/// # Errors
///
/// [`Failure::Help`] for `--help`; a message for an option or too many
/// arguments.
pub fn positional(
    mut args: lexopt::Parser,
    usage: &str,
    help: &'static str,
    max: usize,
) -> Result<Vec<String>> {
    let mut out = Vec::new();
    while let Some(arg) = args.next().map_err(|e| bad_args(e, usage))? {
        match arg {
            lexopt::Arg::Long("help") | lexopt::Arg::Short('h') => return Err(Failure::Help(help)),
            lexopt::Arg::Value(v) if out.len() < max => out.push(text(v)?),
            lexopt::Arg::Value(_) => return Err(usage.into()),
            arg => return Err(unexpected(&arg, usage)),
        }
    }
    Ok(out)
}

/// A count argument named `name`: `default` when absent, else an integer in
/// `1..=max`.
///
/// # Errors
///
/// A message naming `name` when `arg` is not an integer in `1..=max`.
pub fn count(arg: Option<&String>, name: &str, default: usize, max: usize) -> Result<usize> {
    let Some(arg) = arg else {
        return Ok(default);
    };
    arg.parse()
        .ok()
        .filter(|&n| n > 0 && n <= max)
        .ok_or_else(|| format!("{name} `{arg}` is not an integer in 1..={max}").into())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str], max: usize) -> Result<Vec<String>> {
        positional(
            lexopt::Parser::from_args(args),
            "usage: t [A [B]]",
            "help",
            max,
        )
    }

    fn message(r: Result<Vec<String>>) -> String {
        match r {
            Err(Failure::Message(m)) => m,
            other => panic!("not a message: {other:?}"),
        }
    }

    #[test]
    fn positional_arguments_options_and_help() {
        assert_eq!(parse(&["a", "b"], 2).unwrap(), ["a", "b"]);
        assert!(parse(&[], 2).unwrap().is_empty());
        assert!(matches!(
            parse(&["a", "--help"], 2),
            Err(Failure::Help("help"))
        ));
        assert!(matches!(parse(&["-h"], 0), Err(Failure::Help("help"))));
        assert_eq!(message(parse(&["a", "b", "c"], 2)), "usage: t [A [B]]");
        assert_eq!(
            message(parse(&["--bogus"], 2)),
            "unknown option `--bogus`; usage: t [A [B]]"
        );
        assert_eq!(
            message(parse(&["-x"], 2)),
            "unknown option `-x`; usage: t [A [B]]"
        );
        // `--` ends the options.
        assert_eq!(parse(&["--", "-x"], 2).unwrap(), ["-x"]);
    }

    #[test]
    fn counts_are_in_range() {
        let n = |s: &str| count(Some(&s.to_string()), "N", 3, 10);
        assert_eq!(count(None, "N", 3, 10).unwrap(), 3);
        assert_eq!(n("10").unwrap(), 10);
        for bad in ["0", "11", "-1", "x"] {
            let m = match n(bad) {
                Err(Failure::Message(m)) => m,
                _ => panic!("{bad} was accepted"),
            };
            assert_eq!(m, format!("N `{bad}` is not an integer in 1..=10"));
        }
    }
}
