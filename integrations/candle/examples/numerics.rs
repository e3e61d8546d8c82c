//! How far a batched pass's logits are from one-token passes' on a real
//! model: the measurement behind the near-tie bound
//! (`selfspec::step::LogitNoise`, through `selfspec_candle::numerics`).
//!
//! For the first turn of some conversations, the model's plain reply (64
//! tokens) is evaluated one token a pass, and again in passes of 2, 4, 8,
//! 17 and 33 tokens from the same cache; every row is compared. A
//! speculative reply can only differ where the plain top-1 / top-2 gap is
//! smaller than the shift of a top-1 margin between the two (over the
//! tokens close enough to the top to overtake it), which this prints: the
//! largest is the near-tie bound.
//!
//! ```sh
//! cargo run --release --example numerics -- [--weights q8_0|f32|native] [--gguf PATH] [FILE[:N]...]
//! ```

use std::process::ExitCode;

use selfspec::step::LogitNoise;
use selfspec_candle::tokenizer::Message;
use selfspec_candle::{decode, numerics, GgufFile, Representation, TextTokenizer};
use selfspec_conversations as conv;

fn run() -> Result<(), String> {
    let mut weights = Representation::Q8_0;
    let mut gguf = None;
    let mut sources = Vec::new();
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--weights" => {
                weights = args
                    .next()
                    .ok_or("--weights needs a value")?
                    .parse()
                    .map_err(|e| format!("--weights: {e}"))?;
            }
            "--gguf" => gguf = Some(args.next().ok_or("--gguf needs a value")?.into()),
            "-h" | "--help" => {
                println!("usage: numerics [--weights q8_0|f32|native] [--gguf PATH] [FILE[:N]...]");
                return Ok(());
            }
            f => sources.push(f.parse::<conv::Source>().map_err(|e| e.to_string())?),
        }
    }
    if sources.is_empty() {
        let data = conv::default_data_dir();
        sources = [
            "sample-chat.text.jsonl:4",
            "sample-code.text.jsonl:4",
            "sample-code-edit.text.jsonl:1",
        ]
        .iter()
        .map(|s| data.join(s).to_string_lossy().parse())
        .collect::<Result<_, _>>()
        .map_err(|e: conv::Error| e.to_string())?;
    }
    let path = conv::model_path(gguf).map_err(|e| e.to_string())?;
    let mut file = GgufFile::open(&path).map_err(|e| e.to_string())?;
    let tokenizer = TextTokenizer::from_gguf(&file).map_err(|e| e.to_string())?;
    let mut model = file.model(weights).map_err(|e| e.to_string())?;
    let mut total = LogitNoise::NONE;
    let err = |e: selfspec_candle::Error| e.to_string();
    for c in conv::load(&sources).map_err(|e| e.to_string())? {
        let Some(turn) = c.turns.first() else {
            continue;
        };
        let prompt = tokenizer
            .encode(&tokenizer.render(&[Message::user(turn)]))
            .map_err(err)?;
        let mut text = prompt.clone();
        text.extend(decode::plain(&mut model, &prompt, 64).map_err(err)?.tokens);
        let n =
            numerics::measure(&mut model, &text, prompt.len(), &[2, 4, 8, 17, 33]).map_err(err)?;
        println!(
            "{:<36} {:>4} rows  max |logit diff| {:.4}  max margin shift {:.4}",
            c.id, n.rows, n.max_abs_diff, n.max_margin_shift
        );
        total = total.max(n);
    }
    println!(
        "{weights}: {} rows, max |logit diff| {:.4}, max margin shift (the near-tie bound) {:.4}",
        total.rows,
        total.max_abs_diff,
        total.near_tie_bound()
    );
    Ok(())
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("numerics: {e}");
            ExitCode::from(2)
        }
    }
}
