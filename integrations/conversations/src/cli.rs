//! The engine commands' shared options: the model, the conversations, the
//! reply length, the drafting sets (`--strategy`, `--draft-max/min`,
//! `--token-cost`, `--next`), the near-tie bound and the JSON file. Each
//! command adds options of its own through [`parse`]'s `extra` callback.

use std::path::PathBuf;
use std::process::ExitCode;

use crate::{Error, Source};

/// A set's `--token-cost`.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub enum Cost {
    /// Measured from the engine's pass times at start.
    #[default]
    Auto,
    /// No token cost given to selfspec.
    Off,
    /// This one.
    Fixed(f64),
}

impl Cost {
    /// The token cost to give selfspec: `None` for [`Cost::Off`]; for
    /// [`Cost::Auto`], `measured` (measured once with `measure` when it is
    /// still `None`, then kept for the other sets).
    ///
    /// # Errors
    ///
    /// `measure`'s.
    pub fn resolve<E>(
        self,
        measured: &mut Option<f64>,
        measure: impl FnOnce() -> Result<f64, E>,
    ) -> Result<Option<f64>, E> {
        Ok(match self {
            Cost::Off => None,
            Cost::Fixed(x) => Some(x),
            Cost::Auto => Some(match *measured {
                Some(x) => x,
                None => *measured.insert(measure()?),
            }),
        })
    }
}

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
    /// `--paced`: the set's drafts are paced (engines that pace: the
    /// llama.cpp command).
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
  --paced                pace the set's drafts: stop threshold = token cost
                         times the speed-up so far (llama.cpp command only)
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

/// Parses the arguments after the program's name. An option this module
/// does not know goes to `extra(option, value)`, where `value(name)` takes
/// the option's value; `extra` returns `Ok(false)` for an option the
/// command does not know either.
///
/// # Errors
///
/// A message naming the option for an unknown option, a missing value or a
/// value out of range.
///
/// ```
/// use selfspec_conversations::cli::{parse, positive, Cost};
///
/// let mut threads = None;
/// let args = parse(
///     ["--threads", "2", "--strategy", "recall", "--next", "--token-cost", "none"]
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
pub fn parse<I, F>(mut it: I, mut extra: F) -> Result<CommonArgs, String>
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
    // After --conversations, the arguments up to the next option are files.
    let mut files = false;
    while let Some(arg) = it.next() {
        if files && !arg.starts_with('-') {
            a.conversations
                .push(arg.parse().map_err(|e: Error| e.to_string())?);
            continue;
        }
        files = arg == "--conversations";
        let mut value = |name: &str| it.next().ok_or_else(|| format!("{name} needs a value"));
        let set = a.sets.last_mut().ok_or("no drafting set")?;
        match arg.as_str() {
            "-h" | "--help" => a.help = true,
            "--gguf" => a.gguf = Some(value("--gguf")?.into()),
            "--conversations" => {}
            "--max-tokens" => a.max_tokens = positive("--max-tokens", &value("--max-tokens")?)?,
            "--strategy" | "-s" => set.strategies.push(value("--strategy")?),
            "--draft-max" => set.draft_max = Some(positive("--draft-max", &value("--draft-max")?)?),
            "--draft-min" => {
                let v = value("--draft-min")?;
                let n = v.parse();
                set.draft_min =
                    Some(n.map_err(|_| format!("--draft-min: {v:?} is not an integer"))?);
            }
            "--token-cost" => set.cost = cost(&value("--token-cost")?)?,
            "--paced" => set.paced = true,
            "--next" => a.sets.push(SetArgs::default()),
            "--near-tie" => a.near_tie = Some(near_tie(&value("--near-tie")?)?),
            "--json" => a.json = Some(value("--json")?.into()),
            other => {
                if !extra(other, &mut value)? {
                    return Err(format!("unknown argument {other:?} (see --help)"));
                }
            }
        }
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
        let a = args("--max-tokens 64 --conversations a.jsonl b.jsonl:3 --strategy ngram-mod --draft-max 8 --next --token-cost 0.25 --paced --near-tie 0.5").unwrap();
        assert_eq!(a.max_tokens, 64);
        assert_eq!(a.conversations.len(), 2);
        assert_eq!(a.sets.len(), 2);
        assert_eq!(a.sets[0].strategies, ["ngram-mod"]);
        assert_eq!(a.sets[0].draft_max, Some(8));
        assert_eq!(a.sets[0].cost, Cost::Auto);
        assert_eq!(a.sets[1].cost, Cost::Fixed(0.25));
        assert!(!a.sets[0].paced && a.sets[1].paced);
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
            ("--frobnicate", "unknown argument"),
        ];
        for (line, want) in cases {
            let e = args(line).unwrap_err();
            assert!(e.contains(want), "{line}: {e}");
        }
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
    fn auto_cost_is_measured_once() {
        let mut measured = None;
        let mut calls = 0;
        let mut measure = || -> Result<f64, ()> {
            calls += 1;
            Ok(0.3)
        };
        assert_eq!(Cost::Off.resolve(&mut measured, &mut measure), Ok(None));
        assert_eq!(
            Cost::Fixed(0.1).resolve(&mut measured, &mut measure),
            Ok(Some(0.1))
        );
        assert_eq!(
            Cost::Auto.resolve(&mut measured, &mut measure),
            Ok(Some(0.3))
        );
        assert_eq!(
            Cost::Auto.resolve(&mut measured, &mut measure),
            Ok(Some(0.3))
        );
        assert_eq!(calls, 1);
        assert_eq!(
            Cost::Auto.resolve(&mut None, || Err::<f64, &str>("no model")),
            Err("no model")
        );
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
    }
}
