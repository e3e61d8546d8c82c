//! How far a batched pass's logits are from one-token passes' on a real
//! model: the measurement behind the near-tie bound
//! (`selfspec_candle::numerics`).
//!
//! For the first turn of some conversations, plain decoding gives the
//! one-token logits of 64 positions; passes of 2..=33 tokens over the same
//! tokens from the same cache give the batched ones. A speculative reply can
//! only differ where the plain top-1 / top-2 gap is smaller than the change
//! of a top-1 minus top-k difference between the two, which this prints
//! (top-k: the plain row's 8 best).
//!
//! ```sh
//! cargo run --release --example numerics -- [--weights q8_0|f32|native] [--gguf PATH] [FILE[:N]...]
//! ```

use std::process::ExitCode;

use selfspec_candle::numerics::{batch_drift, Drift};
use selfspec_candle::tokenizer::Message;
use selfspec_candle::{GgufFile, Representation, TextTokenizer};
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
    let mut total = Drift::default();
    for c in conv::load(&sources).map_err(|e| e.to_string())? {
        let prompt = tokenizer
            .encode(&tokenizer.render(&[Message::user(&c.turns[0])]))
            .map_err(|e| e.to_string())?;
        let d =
            batch_drift(&mut model, &prompt, 64, &[2, 4, 8, 17, 33]).map_err(|e| e.to_string())?;
        println!(
            "{:<36} {:>4} positions  max |logit diff| {:.4}  max top-k difference change {:.4}  argmax flips {}",
            c.id, d.positions, d.max_logit_diff, d.max_gap_change, d.flips
        );
        total.merge(&d);
    }
    println!(
        "{weights}: {} positions, max |logit diff| {:.4}, max top-k difference change {:.4}, argmax flips {} (smallest plain gap at a flip {:.4})",
        total.positions, total.max_logit_diff, total.max_gap_change, total.flips, total.min_flip_gap
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
