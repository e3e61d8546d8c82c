//! Plain vs self-speculative greedy decoding of token-id prompts on a candle
//! decoder from safetensors weights (or a seeded random one); prints
//! tokens/s, forward passes, tau and whether the outputs are identical.
//! `--help` lists the options. (Text conversations on a GGUF model: the
//! `selfspec-candle` command.)

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use selfspec::step::{PassCurve, Reply, SeqId};
use selfspec_candle::decode::{self, Sizing};
use selfspec_candle::prompts::{self, Prompt};
use selfspec_candle::{random, Model, ModelConfig, RandomModel};

const HELP: &str = "\
usage: ids (--model FILE | --random) [options]
  --model FILE          safetensors weights (Llama tensor names)
  --config FILE         config.json (default: config.json next to the weights)
  --prompt IDS          one prompt: token ids (comma/space separated)
  --prompts FILE        JSON Lines, one request per line: {\"prompt\": [ids]}
  --max-tokens N        tokens to generate per request (default 128)
  --token-cost auto|X   also run speculative decoding without the draft budget,
                        with this token cost (auto: measured)
  --random              a seeded random model written to a temp dir (no downloads)
  -h, --help            this help";

#[derive(Debug, Default)]
struct Args {
    model: Option<PathBuf>,
    config: Option<PathBuf>,
    prompt: Option<String>,
    prompts: Option<PathBuf>,
    max_tokens: usize,
    token_cost: Option<TokenCost>,
    random: bool,
    help: bool,
}

#[derive(Debug, Clone, Copy)]
enum TokenCost {
    Auto,
    Fixed(f64),
}

fn parse_args(mut it: impl Iterator<Item = String>) -> Result<Args, String> {
    let mut a = Args {
        max_tokens: 128,
        ..Args::default()
    };
    while let Some(arg) = it.next() {
        let mut value = |name: &str| it.next().ok_or_else(|| format!("{name} needs a value"));
        match arg.as_str() {
            "-h" | "--help" => a.help = true,
            "--random" | "--demo" => a.random = true,
            "--model" => a.model = Some(value("--model")?.into()),
            "--config" => a.config = Some(value("--config")?.into()),
            "--prompt" => a.prompt = Some(value("--prompt")?),
            "--prompts" => a.prompts = Some(value("--prompts")?.into()),
            "--max-tokens" => {
                let v = value("--max-tokens")?;
                a.max_tokens = v
                    .parse()
                    .ok()
                    .filter(|&n| n > 0)
                    .ok_or_else(|| format!("--max-tokens: {v:?} is not a positive integer"))?;
            }
            "--token-cost" => {
                let v = value("--token-cost")?;
                a.token_cost = Some(if v == "auto" {
                    TokenCost::Auto
                } else {
                    match v.parse::<f64>() {
                        Ok(x) if (0.0..1.0).contains(&x) => TokenCost::Fixed(x),
                        _ => {
                            return Err(format!(
                                "--token-cost: {v:?} is not auto or a number in [0, 1)"
                            ))
                        }
                    }
                });
            }
            other => return Err(format!("unknown argument {other:?} (see --help)")),
        }
    }
    if a.help {
        return Ok(a);
    }
    if a.random == a.model.is_some() {
        return Err("give exactly one of --model FILE and --random".into());
    }
    if a.prompt.is_some() && a.prompts.is_some() {
        return Err("give at most one of --prompt and --prompts".into());
    }
    if !a.random && a.prompt.is_none() && a.prompts.is_none() {
        return Err("give --prompt TEXT or --prompts FILE (or use --random)".into());
    }
    Ok(a)
}

fn tokens(prompt: Prompt) -> Result<Vec<u32>, String> {
    match prompt {
        Prompt::Tokens(t) => Ok(t),
        Prompt::Text(text) => prompts::parse_ids(&text).map_err(|_| {
            "prompts are token ids here (text conversations: the selfspec-candle command)".into()
        }),
    }
}

fn summary(name: &str, runs: &[Reply]) -> String {
    let tokens: usize = runs.iter().map(|r| r.tokens.len()).sum();
    let passes: usize = runs.iter().map(decode::passes).sum();
    let secs: f64 = runs.iter().map(|r| decode::elapsed(r).as_secs_f64()).sum();
    let (drafted, accepted): (usize, usize) = runs
        .iter()
        .map(|g| (g.drafted, g.accepted))
        .fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1));
    #[allow(clippy::cast_precision_loss)]
    let (tau, tps) = (
        tokens as f64 / passes.max(1) as f64,
        tokens as f64 / secs.max(1e-9),
    );
    format!(
        "{name:<38} {tokens:>6} tokens  {passes:>6} forward passes  tau {tau:>5.2}  {tps:>8.1} tokens/s  drafted {drafted} accepted {accepted}"
    )
}

fn run(args: &Args) -> Result<(), String> {
    let err = |e: selfspec_candle::Error| e.to_string();
    let tmp;
    let (weights, config_path) = if args.random {
        tmp = std::env::temp_dir().join(format!("selfspec-candle-random-{}", std::process::id()));
        let random = RandomModel::bench(1);
        let (w, c) = random.write(&tmp).map_err(err)?;
        println!(
            "random model (seed 1, {} layers, hidden {}, vocab {}) in {}",
            random.config.num_hidden_layers,
            random.config.hidden_size,
            random.config.vocab_size,
            tmp.display()
        );
        (w, args.config.clone().unwrap_or(c))
    } else {
        let w = args.model.clone().unwrap_or_default();
        let c = args
            .config
            .clone()
            .unwrap_or_else(|| w.with_file_name("config.json"));
        (w, c)
    };
    let config = ModelConfig::from_file(&config_path).map_err(err)?;
    let mut model = Model::load(&weights, &config).map_err(err)?;
    if args.random {
        let _ = std::fs::remove_dir_all(weights.parent().unwrap_or(Path::new("")));
    }

    let raw: Vec<(String, Prompt)> = if let Some(p) = &args.prompt {
        vec![("prompt".into(), Prompt::Text(p.clone()))]
    } else if let Some(file) = &args.prompts {
        let text = std::fs::read_to_string(file).map_err(|e| format!("{}: {e}", file.display()))?;
        let ps = prompts::parse_jsonl(&text).map_err(|e| format!("{}: {e}", file.display()))?;
        ps.into_iter()
            .enumerate()
            .map(|(i, p)| (format!("request {}", i + 1), p))
            .collect()
    } else {
        // --random without prompts: a repetitive prompt (four turns of one of
        // the model's successor cycles, which it goes on repeating, as a code
        // edit repeats the text it was given) and a non-repetitive one.
        let vocab = u32::try_from(config.vocab_size).unwrap_or(u32::MAX);
        let repetitive = RandomModel::bench(1).cycle(5, 256);
        let other = random::random_tokens(2, 256, vocab);
        vec![
            ("repetitive".into(), Prompt::Tokens(repetitive)),
            ("non-repetitive".into(), Prompt::Tokens(other)),
        ]
    };
    let requests: Vec<(String, Vec<u32>)> = raw
        .into_iter()
        .map(|(name, p)| tokens(p).map(|t| (name, t)))
        .collect::<Result<_, _>>()?;
    if let Some((name, _)) = requests.iter().find(|(_, t)| t.is_empty()) {
        return Err(format!("{name}: empty prompt"));
    }

    let token_cost = match args.token_cost {
        None => None,
        Some(TokenCost::Fixed(x)) => Some(x),
        Some(TokenCost::Auto) => {
            let curve = PassCurve::measure_for_token_cost(&mut model, SeqId::new(0), 1)
                .map_err(|e| err(e.into()))?;
            let c = curve.token_cost(1);
            println!("measured token cost: {c:.3} (marginal cost of one more token in a pass, relative to a one-token pass)");
            Some(c)
        }
    };

    // One Shared per mode, across its requests: what one request teaches the
    // drafters serves the next, and the modes do not learn from each other.
    let spec_config = selfspec::Config::recommended();
    let new_shared = || selfspec::Shared::new(&spec_config).map_err(|e| e.to_string());
    let (shared, shared_costed) = (new_shared()?, new_shared()?);
    let n = args.max_tokens;
    // Warm-up: page in the weights before timing.
    decode::plain(&mut model, &requests[0].1, 2).map_err(err)?;

    let mut plain = Vec::new();
    let mut spec = Vec::new();
    let mut costed = Vec::new();
    for (name, prompt) in &requests {
        let p = decode::plain(&mut model, prompt, n).map_err(err)?;
        let s = decode::speculative(&mut model, &spec_config, &shared, prompt, n, Sizing::Budget)
            .map_err(err)?;
        println!(
            "{}",
            summary(&format!("{name}: plain"), std::slice::from_ref(&p))
        );
        println!(
            "{}",
            summary(
                &format!("{name}: speculative (budget)"),
                std::slice::from_ref(&s)
            )
        );
        if let Some(c) = token_cost {
            let sizing = Sizing::Drafter(Some(c));
            let s =
                decode::speculative(&mut model, &spec_config, &shared_costed, prompt, n, sizing)
                    .map_err(err)?;
            println!(
                "{}",
                summary(
                    &format!("{name}: speculative cost {c:.3}"),
                    std::slice::from_ref(&s)
                )
            );
            costed.push(s);
        }
        plain.push(p);
        spec.push(s);
    }
    if requests.len() > 1 {
        println!("{}", summary("all: plain", &plain));
        println!("{}", summary("all: speculative (budget)", &spec));
        if !costed.is_empty() {
            println!("{}", summary("all: speculative with cost", &costed));
        }
    }
    let same = plain.iter().zip(&spec).all(|(a, b)| a.tokens == b.tokens)
        && plain.iter().zip(&costed).all(|(a, b)| a.tokens == b.tokens);
    println!(
        "identical outputs (plain vs speculative): {}",
        if same { "yes" } else { "NO" }
    );
    if same {
        Ok(())
    } else {
        Err("speculative output differs from plain output".into())
    }
}

fn main() -> ExitCode {
    let args = match parse_args(std::env::args().skip(1)) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("ids: {e}");
            return ExitCode::from(2);
        }
    };
    if args.help {
        println!("{HELP}");
        return ExitCode::SUCCESS;
    }
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ids: {e}");
            ExitCode::FAILURE
        }
    }
}
