//! The command's arguments.

use std::path::PathBuf;

use selfspec_conversations::{self as conv, Source};

pub const HELP: &str = "\
usage: selfspec-llama-cpp [options]
  --gguf PATH            the model (default: $SELFSPEC_MODEL, else the file
                         integrations/fetch-model.sh fetches)
  --conversations FILE[:N]...  text conversations (JSON Lines; :N = the first N);
                         default: the figure set (all code-edit sessions,
                         10 chat sessions, 40 code problems)
  --max-tokens N         tokens a reply may have (default 256)
  --parallel S           sequences decoded side by side in one batch (default 1)
  --threads N            llama.cpp's CPU threads (default: all cores)
  --context N            tokens one sequence's context holds (default 8192);
                         a turn whose prompt does not fit is skipped, counted
  --flash-attn on|off    llama.cpp's flash attention (default off: slower on
                         CPUs for passes under 64 tokens)
  --strategy S           a drafting strategy as the replay tool takes it
                         (NAME[:k=v,...]); several form a chain; default recall
  --draft-max N, --draft-min N   draft limits of the set
  --token-cost auto|none|X  the set's token cost (default auto: measured from
                         llama.cpp's pass times at start, for --parallel S)
  --next                 start another drafting set (the options above after
                         it belong to it); every set is compared with the
                         same plain decoding, turn by turn
  --near-tie X           top-1/top-2 logit gap under which a different reply
                         is a near tie (default: measured at start, twice the
                         largest batched vs one-token logit difference)
  --pass-cost            print llama.cpp's pass-cost curve (1 to 63 tokens after
                         caches of 256, 2048 and 4096 tokens) and exit
  --json FILE            one object per set and kind, and one for all kinds
  -h, --help             this help";

/// A set's `--token-cost`.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub enum Cost {
    /// Measured from llama.cpp's pass times at start.
    #[default]
    Auto,
    /// No token cost given to selfspec.
    Off,
    /// This one.
    Fixed(f64),
}

#[derive(Debug, Default)]
pub struct SetArgs {
    pub strategies: Vec<String>,
    pub draft_max: Option<usize>,
    pub draft_min: Option<usize>,
    pub cost: Cost,
}

#[derive(Debug)]
pub struct Args {
    pub gguf: Option<PathBuf>,
    pub conversations: Vec<Source>,
    pub max_tokens: usize,
    pub parallel: usize,
    pub threads: Option<usize>,
    pub context: usize,
    pub sets: Vec<SetArgs>,
    pub near_tie: Option<f32>,
    pub pass_cost: bool,
    pub flash_attention: bool,
    pub json: Option<PathBuf>,
    pub help: bool,
}

fn positive(name: &str, v: &str) -> Result<usize, String> {
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

/// Parses the arguments after the program's name.
pub fn parse(mut it: impl Iterator<Item = String>) -> Result<Args, String> {
    let mut a = Args {
        gguf: None,
        conversations: Vec::new(),
        max_tokens: 256,
        parallel: 1,
        threads: None,
        context: 8192,
        sets: vec![SetArgs::default()],
        near_tie: None,
        pass_cost: false,
        flash_attention: false,
        json: None,
        help: false,
    };
    // After --conversations, the arguments up to the next option are files.
    let mut files = false;
    while let Some(arg) = it.next() {
        if files && !arg.starts_with('-') {
            a.conversations
                .push(arg.parse().map_err(|e: conv::Error| e.to_string())?);
            continue;
        }
        files = false;
        let mut value = |name: &str| it.next().ok_or_else(|| format!("{name} needs a value"));
        let n = a.sets.len() - 1;
        let set = &mut a.sets[n];
        match arg.as_str() {
            "-h" | "--help" => a.help = true,
            "--gguf" => a.gguf = Some(value("--gguf")?.into()),
            "--conversations" => files = true,
            "--max-tokens" => a.max_tokens = positive("--max-tokens", &value("--max-tokens")?)?,
            "--parallel" => {
                a.parallel = positive("--parallel", &value("--parallel")?)?;
                if a.parallel > 64 {
                    return Err(format!("--parallel: {} is over 64", a.parallel));
                }
            }
            "--threads" => a.threads = Some(positive("--threads", &value("--threads")?)?),
            "--context" => a.context = positive("--context", &value("--context")?)?,
            "--strategy" | "-s" => set.strategies.push(value("--strategy")?),
            "--draft-max" => set.draft_max = Some(positive("--draft-max", &value("--draft-max")?)?),
            "--draft-min" => {
                let v = value("--draft-min")?;
                set.draft_min = Some(
                    v.parse()
                        .map_err(|_| format!("--draft-min: {v:?} is not an integer"))?,
                );
            }
            "--token-cost" => set.cost = cost(&value("--token-cost")?)?,
            "--next" => a.sets.push(SetArgs::default()),
            "--near-tie" => {
                let v = value("--near-tie")?;
                a.near_tie = Some(
                    v.parse()
                        .ok()
                        .filter(|x: &f32| x.is_finite() && *x >= 0.0)
                        .ok_or_else(|| format!("--near-tie: {v:?} is not a non-negative number"))?,
                );
            }
            "--pass-cost" => a.pass_cost = true,
            "--flash-attn" => {
                a.flash_attention = match value("--flash-attn")?.as_str() {
                    "on" => true,
                    "off" => false,
                    v => return Err(format!("--flash-attn: {v:?} is not on or off")),
                }
            }
            "--json" => a.json = Some(value("--json")?.into()),
            other => return Err(format!("unknown argument {other:?} (see --help)")),
        }
    }
    Ok(a)
}
