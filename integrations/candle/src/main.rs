//! `selfspec-candle`: text conversations decoded by a GGUF model on candle's
//! CPU device, plainly and speculatively (selfspec's drafts), turn by turn in
//! the same sitting; prints tokens/s, speed-up, tau, acceptance and whether
//! the replies are identical, per kind and in total. `--help` lists the
//! options.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use selfspec_candle::chat::{self, Chat, DraftSet, Outcome};
use selfspec_candle::{decode, numerics, GgufFile, Model, Representation, TextTokenizer};
use selfspec_conversations::{self as conv, Conversation, Decoded, Progress, Source, Tally};

const HELP: &str = "\
usage: selfspec-candle [options]
  --gguf PATH            the model (default: $SELFSPEC_MODEL, else the file
                         integrations/fetch-model.sh fetches)
  --tokenizer FILE       a tokenizer.json to use instead of the GGUF's own
  --conversations FILE[:N]...  text conversations (JSON Lines; :N = the first N);
                         default: the figure set (all code-edit sessions,
                         10 chat sessions, 40 code problems)
  --max-tokens N         tokens a reply may have (default 256)
  --weights REPR         q8_0 (default), f32 or native (as stored)
  --strategy S           a drafting strategy as the replay tool takes it
                         (NAME[:k=v,...]); several form a chain; default recall
  --draft-max N, --draft-min N   draft limits of the set
  --token-cost auto|none|X  the set's token cost (default auto: measured from
                         the model's own pass times at start)
  --next                 start another drafting set (the options above after
                         it belong to it); every set is compared with the
                         same plain decoding, turn by turn
  --near-tie X           top-1/top-2 logit gap under which a different reply
                         is a near tie (default: measured bound of --weights)
  --json FILE            one object per set and kind, and one for all kinds
  -h, --help             this help";

/// A set's `--token-cost`.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
enum Cost {
    /// Measured from the model's pass times at start.
    #[default]
    Auto,
    /// No token cost given to selfspec.
    Off,
    /// This one.
    Fixed(f64),
}

#[derive(Debug, Default)]
struct SetArgs {
    strategies: Vec<String>,
    draft_max: Option<usize>,
    draft_min: Option<usize>,
    cost: Cost,
}

#[derive(Debug)]
struct Args {
    gguf: Option<PathBuf>,
    tokenizer: Option<PathBuf>,
    conversations: Vec<Source>,
    max_tokens: usize,
    weights: Representation,
    sets: Vec<SetArgs>,
    near_tie: Option<f32>,
    json: Option<PathBuf>,
    help: bool,
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

fn parse_args(mut it: impl Iterator<Item = String>) -> Result<Args, String> {
    let mut a = Args {
        gguf: None,
        tokenizer: None,
        conversations: Vec::new(),
        max_tokens: 256,
        weights: Representation::Q8_0,
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
            "--tokenizer" => a.tokenizer = Some(value("--tokenizer")?.into()),
            "--conversations" => files = true,
            "--max-tokens" => a.max_tokens = positive("--max-tokens", &value("--max-tokens")?)?,
            "--weights" => {
                a.weights = value("--weights")?
                    .parse()
                    .map_err(|e| format!("--weights: {e}"))?;
            }
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
            "--json" => a.json = Some(value("--json")?.into()),
            other => return Err(format!("unknown argument {other:?} (see --help)")),
        }
    }
    Ok(a)
}

fn err(e: selfspec_candle::Error) -> String {
    e.to_string()
}

/// The model and its tokenizer, as `args` say.
fn load(args: &Args) -> Result<(Model, TextTokenizer), String> {
    let path = conv::model_path(args.gguf.clone()).map_err(|e| e.to_string())?;
    let loading = Instant::now();
    let mut file = GgufFile::open(&path).map_err(err)?;
    let tokenizer = match &args.tokenizer {
        Some(t) => TextTokenizer::from_file(t),
        None => TextTokenizer::from_gguf(&file),
    }
    .map_err(err)?;
    let model = file.model(args.weights).map_err(err)?;
    let c = model.config();
    println!(
        "model: {} ({} layers, hidden {}, vocabulary {}, context {}), weights {}, loaded in {:.1} s",
        path.display(),
        c.num_hidden_layers,
        c.hidden_size,
        c.vocab_size,
        c.max_position_embeddings.unwrap_or(0),
        args.weights,
        loading.elapsed().as_secs_f64()
    );
    Ok((model, tokenizer))
}

/// The drafting sets; `auto` token costs are measured once, on `model`.
fn draft_sets(args: &Args, model: &mut Model) -> Result<Vec<DraftSet>, String> {
    let mut measured = None;
    let mut sets = Vec::new();
    for s in &args.sets {
        let config =
            conv::config(&s.strategies, s.draft_max, s.draft_min).map_err(|e| e.to_string())?;
        let token_cost = match s.cost {
            Cost::Off => None,
            Cost::Fixed(x) => Some(x),
            Cost::Auto => Some(match measured {
                Some(x) => x,
                None => {
                    let x = decode::measure_token_cost(model).map_err(err)?;
                    println!("measured token cost: {x:.3} ((t(17) - t(1)) / 16 / t(1) after a 256-token cache)");
                    measured = Some(x);
                    x
                }
            }),
        };
        let mut label = conv::strategy_label(&s.strategies);
        if s.draft_min.is_some() || s.draft_max.is_some() {
            label = format!(
                "{label} (draft {}..={})",
                config.draft_min, config.draft_max
            );
        }
        if let Some(x) = token_cost {
            label = format!("{label} (token cost {x:.2})");
        }
        sets.push(DraftSet::new(label, config, token_cost).map_err(err)?);
    }
    Ok(sets)
}

#[allow(clippy::cast_precision_loss)]
fn tokens_per_s(d: &Decoded) -> f64 {
    d.generated as f64 / d.decode_time.as_secs_f64().max(1e-9)
}

/// Decodes every conversation with every set; one tally per set.
fn decode_all(
    chat: &mut Chat,
    conversations: &[Conversation],
    near_tie: f32,
) -> Result<Vec<Tally>, String> {
    let mut tallies: Vec<Tally> = chat.sets.iter().map(|_| Tally::new()).collect();
    let turns: usize = conversations.iter().map(|c| c.turns.len()).sum();
    let mut progress = Progress::new(turns);
    for conversation in conversations {
        let kind = conversation.kind.as_str();
        chat.run(conversation, |_, outcome| match outcome {
            Outcome::Skipped { .. } => {
                tallies.iter_mut().for_each(|t| t.note_skipped(kind));
                progress.turn(kind, &conversation.id, 0, 0.0, 0.0);
            }
            Outcome::Decoded(turn) => {
                let plain = chat::decoded(&turn.plain);
                for (tally, spec) in tallies.iter_mut().zip(&turn.spec) {
                    let d = chat::divergence(&turn.plain, spec, near_tie);
                    tally.add_turn(kind, &plain, &chat::decoded(spec), &d);
                }
                let first = turn
                    .spec
                    .first()
                    .map_or(0.0, |s| tokens_per_s(&chat::decoded(s)));
                progress.turn(
                    kind,
                    &conversation.id,
                    plain.generated,
                    tokens_per_s(&plain),
                    first,
                );
            }
        })
        .map_err(err)?;
    }
    progress.finish();
    Ok(tallies)
}

fn run(args: &Args) -> Result<bool, String> {
    let sources = if args.conversations.is_empty() {
        conv::figure_set(&conv::default_data_dir())
    } else {
        args.conversations.clone()
    };
    let conversations = conv::load(&sources).map_err(|e| e.to_string())?;
    let (mut model, tokenizer) = load(args)?;
    let sets = draft_sets(args, &mut model)?;
    let labels: Vec<String> = sets.iter().map(|s| s.label.clone()).collect();
    let near_tie = args
        .near_tie
        .unwrap_or_else(|| numerics::near_tie_bound(args.weights));
    let mut chat = Chat {
        model: &mut model,
        tokenizer: &tokenizer,
        sets,
        max_tokens: args.max_tokens,
    };
    let tallies = decode_all(&mut chat, &conversations, near_tie)?;

    let mut summaries = Vec::new();
    for (label, tally) in labels.iter().zip(&tallies) {
        summaries.extend(tally.summaries(label, None));
    }
    let mut out = std::io::stdout().lock();
    conv::print_table(&mut out, &summaries).map_err(|e| e.to_string())?;
    println!("near-tie bound: {near_tie} (top-1 / top-2 logit gap of the plain pass)");
    if let Some(path) = &args.json {
        conv::write_json(path, &summaries).map_err(|e| e.to_string())?;
    }
    Ok(summaries.iter().all(|s| s.diverged_not_near_tie == 0))
}

fn main() -> ExitCode {
    let args = match parse_args(std::env::args().skip(1)) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("selfspec-candle: {e}");
            return ExitCode::from(2);
        }
    };
    if args.help {
        println!("{HELP}");
        return ExitCode::SUCCESS;
    }
    match run(&args) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => {
            eprintln!("selfspec-candle: a speculative reply differs from the plain one away from a near tie");
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("selfspec-candle: {e}");
            ExitCode::FAILURE
        }
    }
}
