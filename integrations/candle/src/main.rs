//! `selfspec-candle`: text conversations decoded by a GGUF model on candle's
//! CPU device, plainly and speculatively (selfspec's drafts), turn by turn in
//! the same sitting; prints tokens/s, speed-up, tau, acceptance and whether
//! the replies are identical, per kind and in total. `--help` lists the
//! options.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use selfspec::step::{PassCurve, SeqId};
use selfspec_candle::chat::{self, Chat, DraftSet, Outcome};
use selfspec_candle::tokenizer::Message;
use selfspec_candle::{numerics, GgufFile, Model, Representation, TextTokenizer};
use selfspec_conversations::cli::{self, CommonArgs};
use selfspec_conversations::{self as conv, Conversation, Decoded, Progress, Tally};

fn help() -> String {
    format!(
        "usage: selfspec-candle [options]
{}
  --tokenizer FILE       a tokenizer.json to use instead of the GGUF's own
  --weights REPR         q8_0 (default), f32 or native (as stored)
  --budget on|off        selfspec's draft budget (default on): each pass keeps
                         the drafted tokens that pay for their rows, from pass
                         times learned as it decodes (it sets the token cost);
                         off: each set's drafts as its drafter sizes them
The near-tie bound is measured at start, unless --near-tie gives it: the
largest shift of a top-1 margin between batched and one-token passes over the
first turn and the model's plain reply, and over longer caches up to those
the conversations reach. Exit status: 0, every reply as plain decoding's or
different at a near tie; 3, a reply differs elsewhere; 1, an error; 2, a bad
argument.",
        cli::COMMON_HELP
    )
}

#[derive(Debug)]
struct Args {
    common: CommonArgs,
    tokenizer: Option<PathBuf>,
    weights: Representation,
    /// `--budget`: whether the draft budget sizes the drafts.
    budget: bool,
}

fn parse_args(it: impl Iterator<Item = String>) -> Result<Args, String> {
    let (mut tokenizer, mut weights, mut budget) = (None, Representation::Q8_0, true);
    let common = cli::parse(it, |option, value| {
        match option {
            "--tokenizer" => tokenizer = Some(value(option)?.into()),
            "--weights" => {
                weights = value(option)?
                    .parse()
                    .map_err(|e| format!("--weights: {e}"))?;
            }
            "--budget" => {
                budget = match value(option)?.as_str() {
                    "on" => true,
                    "off" => false,
                    v => return Err(format!("--budget: {v:?} is not on or off")),
                };
            }
            _ => return Ok(false),
        }
        Ok(true)
    })?;
    Ok(Args {
        common,
        tokenizer,
        weights,
        budget,
    })
}

fn err(e: selfspec_candle::Error) -> String {
    e.to_string()
}

/// The model and its tokenizer, as `args` say.
fn load(args: &Args) -> Result<(Model, TextTokenizer), String> {
    let path = conv::model_path(args.common.gguf.clone()).map_err(|e| e.to_string())?;
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

/// The drafting sets; an `auto` token cost is measured once, on `model`.
fn draft_sets(args: &Args, model: &mut Model) -> Result<Vec<DraftSet>, String> {
    if args.common.sets.iter().any(|s| s.paced) {
        return Err(
            "--paced: this command does not pace drafts (the llama.cpp command does)".into(),
        );
    }
    args.common
        .draft_sets(|| {
            let curve = PassCurve::measure_for_token_cost(model, SeqId::new(0), 1)?;
            let x = curve.token_cost(1);
            println!(
                "measured token cost: {x:.3} ((t(17) - t(1)) / 16 / t(1) after a 256-token cache)"
            );
            Ok::<f64, selfspec_candle::Error>(x)
        })
        .map_err(err)
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

/// The near-tie bound: `--near-tie`, else measured on `model` over the
/// first conversation's first turn and the model's plain reply to it
/// ([`numerics::calibrate`]), with passes as long as the sets' longest
/// drafts and caches up to those the conversations reach.
fn near_tie_bound(
    args: &Args,
    model: &mut Model,
    tokenizer: &TextTokenizer,
    conversations: &[Conversation],
    sets: &[DraftSet],
) -> Result<f32, String> {
    if let Some(b) = args.common.near_tie {
        return Ok(b);
    }
    let first = conversations.first().and_then(|c| c.turns.first());
    let text = tokenizer.render(&[Message::user(first.map_or("Hello", String::as_str))]);
    let prompt = tokenizer.encode(&text).map_err(err)?;
    let context = model.config().max_position_embeddings.unwrap_or(usize::MAX);
    let prompt = &prompt[..prompt.len().min(context / 2)];
    let max_pass = 1 + sets.iter().map(|s| s.config().draft_max).max().unwrap_or(0);
    let max_tokens = args.common.max_tokens;
    let reach = chat::cache_reach(tokenizer, conversations, max_tokens).map_err(err)?;
    eprintln!(
        "measuring the near-tie bound (caches up to {} tokens; --near-tie X skips this)...",
        reach.min(context)
    );
    let started = Instant::now();
    let stop = [tokenizer.end_of_turn()];
    let noise = numerics::calibrate(model, prompt, 128, &stop, max_pass, reach).map_err(err)?;
    let bound = noise.near_tie_bound();
    println!(
        "near-tie bound: {bound:.4} (the largest shift of a top-1 margin between batched and \
         one-token passes; largest logit difference {:.4}; over {} rows; measured in {:.0} s)",
        noise.max_abs_diff,
        noise.rows,
        started.elapsed().as_secs_f64()
    );
    Ok(bound)
}

fn run(args: &Args) -> Result<bool, String> {
    let conversations = conv::load(&args.common.sources()).map_err(|e| e.to_string())?;
    let (mut model, tokenizer) = load(args)?;
    let sets = draft_sets(args, &mut model)?;
    let labels: Vec<String> = sets.iter().map(DraftSet::label).collect();
    let near_tie = near_tie_bound(args, &mut model, &tokenizer, &conversations, &sets)?;
    println!("draft budget: {}", if args.budget { "on" } else { "off" });
    let max_tokens = args.common.max_tokens;
    let mut chat = Chat::new(&mut model, &tokenizer, sets, max_tokens, args.budget).map_err(err)?;
    let tallies = decode_all(&mut chat, &conversations, near_tie)?;

    let mut summaries = Vec::new();
    for (label, tally) in labels.iter().zip(&tallies) {
        summaries.extend(tally.summaries(label, None));
    }
    let mut out = std::io::stdout().lock();
    conv::print_table(&mut out, &summaries).map_err(|e| e.to_string())?;
    println!("near-tie bound: {near_tie} (top-1 / top-2 logit gap of the plain pass)");
    if let Some(path) = &args.common.json {
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
    if args.common.help {
        println!("{}", help());
        return ExitCode::SUCCESS;
    }
    cli::exit_code("selfspec-candle", run(&args))
}
