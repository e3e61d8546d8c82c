//! The engine commands' shared options: the model, the conversations, the
//! reply length, the drafting sets (`--strategy`, `--draft-max/min`,
//! `--token-cost`, `--next`), the near-tie bound and the JSON file. Each
//! command adds options of its own through [`parse`]'s `extra` callback.

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;

use lexopt::Arg;

pub use crate::set::Cost;
use crate::{DraftSet, Error, Source};

/// One drafting set's options (those after the previous `--next`).
#[derive(Debug, Default, Clone, PartialEq)]
pub struct SetArgs {
    /// `--strategy` values in order (a chain when several; recall when none).
    pub strategies: Vec<String>,
    /// `--draft-max`.
    pub draft_max: Option<usize>,
    /// `--draft-min`.
    pub draft_min: Option<usize>,
    /// `--token-cost`.
    pub cost: Cost,
    /// Always false: [`parse`] refuses `--paced` (pacing drafts by the
    /// speed-up so far was replaced by selfspec's draft budget); kept so
    /// that commands checking it still build.
    pub paced: bool,
}

/// The options every engine command takes.
#[derive(Debug, Clone, PartialEq)]
pub struct CommonArgs {
    /// `--gguf`.
    pub gguf: Option<PathBuf>,
    /// `--conversations` (empty: the figure set).
    pub conversations: Vec<Source>,
    /// `--max-tokens` (default 256).
    pub max_tokens: usize,
    /// The drafting sets, at least one.
    pub sets: Vec<SetArgs>,
    /// `--near-tie`.
    pub near_tie: Option<f32>,
    /// `--json`.
    pub json: Option<PathBuf>,
    /// `-h` / `--help`.
    pub help: bool,
}

impl CommonArgs {
    /// The conversation files to read: those given, else the figure set in
    /// the package's data folder.
    #[must_use]
    pub fn sources(&self) -> Vec<Source> {
        if self.conversations.is_empty() {
            crate::figure_set(&crate::default_data_dir())
        } else {
            self.conversations.clone()
        }
    }

    /// The drafting sets, ready to run: each one's configuration and
    /// memory and its token cost (`auto` measured once, with `measure`,
    /// only if a set asks for it).
    ///
    /// # Errors
    ///
    /// `measure`'s, and selfspec's for a set it rejects (sets are checked
    /// when parsed: only those changed since can fail).
    ///
    /// ```
    /// use selfspec_conversations::cli::parse;
    ///
    /// let args = parse(
    ///     ["--next", "--token-cost", "0.5", "--next", "--token-cost", "none"]
    ///         .map(String::from)
    ///         .into_iter(),
    ///     |_, _| Ok(false),
    /// )
    /// .unwrap();
    /// let sets = args.draft_sets(|| Ok::<f64, selfspec::Error>(0.25))?;
    /// let labels: Vec<String> = sets.iter().map(|s| s.label()).collect();
    /// assert_eq!(labels, ["recall (token cost 0.250)", "recall (token cost 0.500)", "recall"]);
    /// # Ok::<(), selfspec::Error>(())
    /// ```
    pub fn draft_sets<E: From<selfspec::Error>>(
        &self,
        measure: impl FnOnce() -> Result<f64, E>,
    ) -> Result<Vec<DraftSet>, E> {
        let auto = self.sets.iter().any(|s| s.cost == Cost::Auto);
        let measured = if auto { Some(measure()?) } else { None };
        let mut sets = Vec::with_capacity(self.sets.len());
        for s in &self.sets {
            let cost = match s.cost {
                Cost::Auto => measured,
                Cost::Off => None,
                Cost::Fixed(x) => Some(x),
            };
            let set = DraftSet::new(&s.strategies, s.draft_max, s.draft_min)?;
            sets.push(set.with_token_cost(cost)?);
        }
        Ok(sets)
    }
}

/// The help lines of the options [`parse`] reads, for a command's `--help`.
pub const COMMON_HELP: &str =
    "  --gguf PATH            the model (default: $SELFSPEC_MODEL, else the file
                         integrations/fetch-model.sh fetches)
  --conversations FILE[:N]...  text conversations (JSON Lines; :N = the first N);
                         default: the figure set (all code-edit sessions,
                         10 chat sessions, 40 code problems)
  --max-tokens N         tokens a reply may have (default 256)
  --strategy S           a drafting strategy as the replay tool takes it
                         (NAME[:k=v,...]); several form a chain; default recall
  --draft-max N, --draft-min N   draft limits of the set
  --token-cost auto|none|X  the set's token cost (default auto: measured from
                         the engine's pass times at start)
  --next                 start another drafting set (the options above after
                         it belong to it); every set is compared with the
                         same plain decoding, turn by turn
  --near-tie X           top-1/top-2 logit gap under which a different reply
                         is a near tie (default: measured, see below)
  --json FILE            one object per set and kind, and one for all kinds
  -h, --help             this help";

/// `v` as a positive integer, or a message naming the option `name`.
///
/// # Errors
///
/// When `v` is not an integer above 0.
pub fn positive(name: &str, v: &str) -> Result<usize, String> {
    v.parse()
        .ok()
        .filter(|&n| n > 0)
        .ok_or_else(|| format!("{name}: {v:?} is not a positive integer"))
}

/// The option's value, as UTF-8.
fn value(p: &mut lexopt::Parser, name: &str) -> Result<String, String> {
    let v = p.value().map_err(|_| format!("{name} needs a value"))?;
    utf8(name, v)
}

fn utf8(name: &str, v: OsString) -> Result<String, String> {
    v.into_string()
        .map_err(|v| format!("{name}: {:?} is not UTF-8", v.to_string_lossy()))
}

fn cost(v: &str) -> Result<Cost, String> {
    match v {
        "auto" => Ok(Cost::Auto),
        "none" => Ok(Cost::Off),
        x => match x.parse::<f64>() {
            Ok(c) if (0.0..1.0).contains(&c) => Ok(Cost::Fixed(c)),
            _ => Err(format!(
                "--token-cost: {v:?} is not auto, none or a number in [0, 1)"
            )),
        },
    }
}

fn near_tie(v: &str) -> Result<f32, String> {
    v.parse()
        .ok()
        .filter(|x: &f32| x.is_finite() && *x >= 0.0)
        .ok_or_else(|| format!("--near-tie: {v:?} is not a non-negative number"))
}

/// Reads option `name` if it is one of [`COMMON_HELP`]'s into `a`, taking
/// its value from `p`; whether it was.
fn common_option(a: &mut CommonArgs, name: &str, p: &mut lexopt::Parser) -> Result<bool, String> {
    let set = a.sets.last_mut().ok_or("no drafting set")?;
    match name {
        "-h" | "--help" => a.help = true,
        "--gguf" => a.gguf = Some(value(p, name)?.into()),
        "--conversations" => {
            let files = p
                .values()
                .map_err(|_| format!("{name} needs at least one FILE[:N]"))?;
            for v in files {
                let file = utf8(name, v)?;
                a.conversations
                    .push(file.parse().map_err(|e: Error| e.to_string())?);
            }
        }
        "--max-tokens" => a.max_tokens = positive(name, &value(p, name)?)?,
        "--strategy" | "-s" => set.strategies.push(value(p, name)?),
        "--draft-max" => set.draft_max = Some(positive(name, &value(p, name)?)?),
        "--draft-min" => {
            let v = value(p, name)?;
            let n = v
                .parse()
                .map_err(|_| format!("{name}: {v:?} is not an integer"))?;
            set.draft_min = Some(n);
        }
        "--token-cost" => set.cost = cost(&value(p, name)?)?,
        "--paced" => {
            return Err(format!(
                "{name}: no longer taken (selfspec's draft budget sizes the drafts)"
            ))
        }
        "--next" => a.sets.push(SetArgs::default()),
        "--near-tie" => a.near_tie = Some(near_tie(&value(p, name)?)?),
        "--json" => a.json = Some(value(p, name)?.into()),
        _ => return Ok(false),
    }
    Ok(true)
}

/// Parses the arguments after the program's name (with `lexopt`: an
/// option's value may follow it or be joined to it with `=`). An option
/// this module does not know goes to `extra(option, value)`, where
/// `value(name)` takes the option's value; `extra` returns `Ok(false)` for
/// an option the command does not know either. Each set's strategies and
/// draft limits are checked here (unless `--help` was given).
///
/// # Errors
///
/// A message naming the option for an unknown option, a missing value, a
/// value out of range or a set selfspec rejects.
///
/// ```
/// use selfspec_conversations::cli::{parse, positive, Cost};
///
/// let mut threads = None;
/// let args = parse(
///     ["--threads", "2", "--strategy", "recall", "--next", "--token-cost=none"]
///         .map(String::from)
///         .into_iter(),
///     |option, value| match option {
///         "--threads" => {
///             threads = Some(positive(option, &value(option)?)?);
///             Ok(true)
///         }
///         _ => Ok(false),
///     },
/// )
/// .unwrap();
/// assert_eq!(threads, Some(2));
/// assert_eq!(args.sets.len(), 2);
/// assert_eq!(args.sets[1].cost, Cost::Off);
/// ```
pub fn parse<I, F>(it: I, mut extra: F) -> Result<CommonArgs, String>
where
    I: Iterator<Item = String>,
    F: FnMut(&str, &mut dyn FnMut(&str) -> Result<String, String>) -> Result<bool, String>,
{
    let mut a = CommonArgs {
        gguf: None,
        conversations: Vec::new(),
        max_tokens: 256,
        sets: vec![SetArgs::default()],
        near_tie: None,
        json: None,
        help: false,
    };
    let mut p = lexopt::Parser::from_args(it);
    while let Some(arg) = p.next().map_err(|e| e.to_string())? {
        let name = match arg {
            Arg::Short(c) => format!("-{c}"),
            Arg::Long(l) => format!("--{l}"),
            Arg::Value(v) => {
                let v = v.to_string_lossy();
                return Err(format!("unknown argument {v:?} (see --help)"));
            }
        };
        if !common_option(&mut a, &name, &mut p)? && !extra(&name, &mut |n: &str| value(&mut p, n))?
        {
            return Err(format!("unknown argument {name:?} (see --help)"));
        }
    }
    for set in a.sets.iter().filter(|_| !a.help) {
        crate::config::chain_config(&set.strategies, set.draft_max, set.draft_min)
            .map_err(|e| e.to_string())?;
    }
    Ok(a)
}

/// The exit status of a command named `command` that ran `result`: 0 when
/// every reply matched plain decoding (or differed at a near tie), 3 when
/// one differed elsewhere, 1 on an error (printed to stderr). A usage error
/// (status 2) is the command's own, before it runs.
#[must_use]
pub fn exit_code(command: &str, result: Result<bool, String>) -> ExitCode {
    match result {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => {
            eprintln!(
                "{command}: a speculative reply differs from the plain one away from a near tie"
            );
            ExitCode::from(3)
        }
        Err(e) => {
            eprintln!("{command}: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(line: &str) -> Result<CommonArgs, String> {
        parse(line.split_whitespace().map(String::from), |_, _| Ok(false))
    }

    #[test]
    fn options_and_sets() {
        let a = args("--max-tokens 64 --conversations a.jsonl b.jsonl:3 --strategy ngram-mod --draft-max 8 --next --token-cost 0.25 --near-tie 0.5").unwrap();
        assert_eq!(a.max_tokens, 64);
        assert_eq!(a.conversations.len(), 2);
        assert_eq!(a.sets.len(), 2);
        assert_eq!(a.sets[0].strategies, ["ngram-mod"]);
        assert_eq!(a.sets[0].draft_max, Some(8));
        assert_eq!(a.sets[0].cost, Cost::Auto);
        assert_eq!(a.sets[1].cost, Cost::Fixed(0.25));
        assert_eq!(a.near_tie, Some(0.5));
    }

    #[test]
    fn bad_arguments_name_the_option() {
        let cases = [
            ("--max-tokens 0", "--max-tokens"),
            ("--max-tokens", "needs a value"),
            ("--token-cost 1.5", "--token-cost"),
            ("--token-cost much", "--token-cost"),
            ("--near-tie -1", "--near-tie"),
            ("--near-tie NaN", "--near-tie"),
            ("--draft-min x", "--draft-min"),
            ("--frobnicate", "unknown argument \"--frobnicate\""),
            ("stray", "unknown argument \"stray\""),
            (
                "--conversations --json x",
                "--conversations needs at least one FILE",
            ),
            ("--conversations a.jsonl:0", "a.jsonl:0"),
            ("--help=yes", "--help"),
            ("--strategy no-such", "no-such"),
            ("--draft-max 4 --draft-min 5", "draft_min"),
            ("--next --strategy ngram-simple:n=0", "ngram-simple"),
            ("--paced", "--paced: no longer taken"),
        ];
        for (line, want) in cases {
            let e = args(line).unwrap_err();
            assert!(e.contains(want), "{line}: {e}");
        }
    }

    #[test]
    fn values_may_be_joined_and_files_end_at_the_next_option() {
        let a = args(
            "--max-tokens=7 -s ngram-mod --conversations a.jsonl b.jsonl --json=out.json --next",
        )
        .unwrap();
        assert_eq!(a.max_tokens, 7);
        assert_eq!(a.sets[0].strategies, ["ngram-mod"]);
        assert_eq!(a.conversations.len(), 2);
        assert_eq!(a.json, Some(PathBuf::from("out.json")));
        assert_eq!(a.sets.len(), 2);
        // A value that looks like an option is still the option's value.
        let e = args("--near-tie --json").unwrap_err();
        assert!(e.contains("\"--json\" is not a non-negative number"), "{e}");
        let h = args("-h").unwrap();
        assert!(h.help && h.conversations.is_empty() && h.sources().len() > 1);
    }

    #[test]
    fn sets_are_measured_once_and_only_when_asked() {
        let line = "--next --token-cost none --next --token-cost 0.5 --next";
        let a = args(line).unwrap();
        let mut calls = 0;
        let sets = a
            .draft_sets(|| {
                calls += 1;
                Ok::<f64, selfspec::Error>(0.125)
            })
            .unwrap();
        assert_eq!(calls, 1);
        let costs: Vec<Option<f64>> = sets.iter().map(DraftSet::token_cost).collect();
        assert_eq!(costs, [Some(0.125), None, Some(0.5), Some(0.125)]);
        let fixed = args("--token-cost none --next --token-cost 0.1").unwrap();
        let sets = fixed.draft_sets(|| -> Result<f64, selfspec::Error> { panic!("measured") });
        assert_eq!(sets.unwrap().len(), 2);
        let failed = args("")
            .unwrap()
            .draft_sets(|| Err(Error::Source("no model".into())));
        let e = failed.unwrap_err().to_string();
        assert!(e.contains("no model"), "{e}");
    }

    #[test]
    fn help_lines_are_indented_alike() {
        for line in COMMON_HELP.lines() {
            assert!(
                line.starts_with("  -") || line.starts_with("    "),
                "{line:?}"
            );
        }
    }

    #[test]
    fn extra_options_reach_the_command() {
        let mut seen = Vec::new();
        let a = parse(
            ["--flag", "--level", "3", "--max-tokens", "9"]
                .map(String::from)
                .into_iter(),
            |o, value| {
                match o {
                    "--flag" => seen.push(o.to_string()),
                    "--level" => seen.push(value(o)?),
                    _ => return Ok(false),
                }
                Ok(true)
            },
        )
        .unwrap();
        assert_eq!(seen, ["--flag", "3"]);
        assert_eq!(a.max_tokens, 9);
        let e = parse(["--level"].map(String::from).into_iter(), |o, value| {
            value(o).map(|_| true)
        });
        assert_eq!(e.unwrap_err(), "--level needs a value");
    }
}
