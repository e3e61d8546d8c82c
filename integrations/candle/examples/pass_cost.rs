//! The real model's pass-cost curve, measured by selfspec
//! (`selfspec::step::PassCurve::measure` on the model as its target): the
//! median time of a forward pass of 1, 2, 4, 8, 16, 17 and 32 tokens after
//! a 256-token cache, each row's greedy choice read, in each weight
//! representation, and the token cost `(t(17) - t(1)) / 16 / t(1)` that
//! `--token-cost auto` derives from it (`PassCurve::token_cost`).
//!
//! ```sh
//! cargo run --release --example pass_cost -- [--gguf PATH] [--reps N] [q8_0 f32 native]
//! ```

use std::process::ExitCode;

use selfspec::step::{PassCurve, SeqId};
use selfspec_candle::{Model, Representation};

const SIZES: [usize; 7] = [1, 2, 4, 8, 16, 17, 32];
const CACHE: usize = 256;

fn run() -> Result<(), String> {
    let mut gguf = None;
    let mut reps = 15;
    let mut reprs = Vec::new();
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--gguf" => gguf = Some(args.next().ok_or("--gguf needs a value")?.into()),
            "--reps" => {
                reps = args
                    .next()
                    .and_then(|v| v.parse().ok())
                    .filter(|n| (1..=PassCurve::MAX_REPS).contains(n))
                    .ok_or("--reps needs an integer from 1 to 10000")?;
            }
            "-h" | "--help" => {
                println!("usage: pass_cost [--gguf PATH] [--reps N] [q8_0 f32 native]");
                return Ok(());
            }
            r => reprs.push(r.parse::<Representation>()?),
        }
    }
    if reprs.is_empty() {
        reprs = vec![
            Representation::Q8_0,
            Representation::F32,
            Representation::Native,
        ];
    }
    let path = selfspec_conversations::model_path(gguf).map_err(|e| e.to_string())?;
    let header: Vec<String> = SIZES.iter().map(|n| format!("{n:>7}")).collect();
    println!("ms per pass after a {CACHE}-token cache (median of {reps})");
    println!("{:<8}{}  token cost", "weights", header.join(""));
    let seq = SeqId::new(0);
    for repr in reprs {
        let mut model = Model::from_gguf(&path, repr).map_err(|e| e.to_string())?;
        // Warm-up: page in the weights, fill the caches.
        PassCurve::measure(&mut model, seq, CACHE, &[17], 3).map_err(|e| e.to_string())?;
        let curve =
            PassCurve::measure(&mut model, seq, CACHE, &SIZES, reps).map_err(|e| e.to_string())?;
        let cells: Vec<String> = curve
            .points()
            .iter()
            .map(|p| format!("{:>7.1}", p.median.as_secs_f64() * 1e3))
            .collect();
        println!(
            "{:<8}{}  {:.3}",
            repr.to_string(),
            cells.join(""),
            curve.token_cost(1)
        );
    }
    Ok(())
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("pass_cost: {e}");
            ExitCode::from(2)
        }
    }
}
