//! Drafting decisions on a GPU, on paper: recorded outputs decoded through
//! selfspec's `Stepper` on B sequences at once, each pass charged from
//! measured pass-cost curves (`shared/gpu/h200-pass-cost.json` in the
//! project's material: B sequences x k rows after a cache of L tokens)
//! instead of run. Prints, per batch size, tokens per second of plain
//! decoding, of recall at each fixed draft length (its own stop rule,
//! `draft_max` = the length) and of recall sized by the stepper's budget
//! (`Stepper::with_budget`, `draft_max` 64, learning the simulated pass
//! times as it goes),
//! with the speed-ups over plain, and the bound of perfect sizing: recall
//! drafting long, each pass charged only for the rows before its drafts'
//! first wrong tokens. With `--after FILE`, the budget also
//! decodes FILE's sessions first through the same stepper and `Shared`
//! (each on a scope of its own): what the budget learned on that traffic,
//! at the cost of the traffic after it.
//!
//! ```text
//! cargo run --release --bin gpu_sim -- --curves h200-pass-cost.json --model llama-3.1-8b FILE.jsonl...
//! ```

use std::io::Write;
use std::process::ExitCode;

use selfspec_eval::cli::{self, Failure, Out, Result};
use selfspec_eval::{simulate, simulate_after, CostCurve, Policy, Session};

const USAGE: &str =
    "usage: gpu_sim --curves FILE.json --model NAME [--cache L] [--batch B ...] [--after FILE.jsonl] FILE.jsonl...";
const HELP: &str = "gpu_sim: plain, fixed draft lengths, the draft budget and the bound of perfect sizing (each draft cut at its first wrong token) on recorded outputs, passes charged from pass-cost curves

usage: gpu_sim --curves FILE.json --model NAME [--cache L] [--batch B ...] [--after FILE.jsonl] FILE.jsonl...
  --curves FILE  pass-cost curves (JSON: rows of model, batch, cache, ms {k: ms})
  --model NAME   the curves' model (e.g. smollm2-135m, llama-3.1-8b)
  --cache L      the curves' cache length (default 1024)
  --batch B      sequences decoded at once (several allowed; default 1, 8, 32)
  --after FILE   also the budget after FILE's sessions, through one stepper and Shared
  FILE.jsonl     recorded outputs (JSON Lines, docs/replay.md; their `margins`, if
                 recorded, are the simulated target's)
  -h, --help     this text
";

/// Fixed draft lengths tried.
const LENGTHS: [usize; 10] = [1, 2, 3, 4, 6, 8, 12, 16, 32, 64];

struct Args {
    curves: String,
    model: String,
    cache: usize,
    batches: Vec<usize>,
    after: Option<String>,
    files: Vec<String>,
}

fn parse() -> Result<Args> {
    let mut p = cli::args();
    let (mut curves, mut model, mut cache, mut batches, mut files) =
        (None, None, 1024, Vec::new(), Vec::new());
    let mut after = None;
    while let Some(arg) = p.next().map_err(|e| cli::bad_args(e, USAGE))? {
        match arg {
            lexopt::Arg::Long("help") | lexopt::Arg::Short('h') => return Err(Failure::Help(HELP)),
            lexopt::Arg::Long("curves") => curves = Some(cli::value(&mut p, USAGE)?),
            lexopt::Arg::Long("model") => model = Some(cli::value(&mut p, USAGE)?),
            lexopt::Arg::Long("cache") => {
                cache = cli::count(Some(&cli::value(&mut p, USAGE)?), "--cache", 0, 1 << 30)?
            }
            lexopt::Arg::Long("batch") => batches.push(cli::count(
                Some(&cli::value(&mut p, USAGE)?),
                "--batch",
                1,
                4096,
            )?),
            lexopt::Arg::Long("after") => after = Some(cli::value(&mut p, USAGE)?),
            lexopt::Arg::Value(v) => files.push(cli::text(v)?),
            arg => return Err(cli::unexpected(&arg, USAGE)),
        }
    }
    let (Some(curves), Some(model), false) = (curves, model, files.is_empty()) else {
        return Err(USAGE.into());
    };
    if batches.is_empty() {
        batches = vec![1, 8, 32];
    }
    Ok(Args {
        curves,
        model,
        cache,
        batches,
        after,
        files,
    })
}

/// The curves of `model` at `cache` from the JSON file.
fn curve(path: &str, model: &str, cache: usize) -> Result<CostCurve> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{path}: {e}"))?;
    let rows: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| format!("{path}: {e}"))?;
    let mut points = Vec::new();
    for row in rows.as_array().into_iter().flatten() {
        let of = |k: &str| {
            row.get(k)
                .and_then(serde_json::Value::as_u64)
                .and_then(|v| usize::try_from(v).ok())
        };
        if row.get("model").and_then(serde_json::Value::as_str) != Some(model)
            || of("cache") != Some(cache)
        {
            continue;
        }
        let Some((b, ms)) = of("batch").zip(row.get("ms").and_then(serde_json::Value::as_object))
        else {
            continue;
        };
        let mut ks: Vec<(usize, f64)> = ms
            .iter()
            .filter_map(|(k, v)| Some((k.parse().ok()?, v.as_f64()?)))
            .collect();
        ks.sort_by_key(|p| p.0);
        points.push((b, ks));
    }
    points.sort_by_key(|p| p.0);
    if points.is_empty() {
        return Err(format!("{path}: no curve of model `{model}` at cache {cache}").into());
    }
    Ok(CostCurve { points })
}

fn run(out: &mut Out) -> Result {
    let args = parse()?;
    let curve = curve(&args.curves, &args.model, args.cache)?;
    let mut sessions: Vec<Session> = Vec::new();
    for (_, s) in cli::workloads(&args.files)? {
        sessions.extend(s);
    }
    let before: Option<Vec<Session>> = match &args.after {
        Some(f) => Some(
            cli::workloads(std::slice::from_ref(f))?
                .into_iter()
                .flat_map(|(_, s)| s)
                .collect(),
        ),
        None => None,
    };
    writeln!(
        out,
        "{} at cache {}, {} sessions; tokens/s of simulated time (speed-up over plain)",
        args.model,
        args.cache,
        sessions.len()
    )?;
    for &b in &args.batches {
        let plain = simulate(&sessions, b, &curve, Policy::Plain)?.tokens_per_second();
        let mut best = (0, 0.0);
        let mut line = format!("B = {b:>2}: plain {plain:.0}");
        for l in LENGTHS {
            let t = simulate(&sessions, b, &curve, Policy::Fixed(l))?.tokens_per_second();
            line += &format!(", fixed {l} {:.2}x", t / plain);
            if t > best.1 {
                best = (l, t);
            }
        }
        // The budget may send as much as the longest fixed length.
        let sized = simulate(&sessions, b, &curve, Policy::Budget(64))?;
        let budget = sized.tokens_per_second();
        let bound = simulate(&sessions, b, &curve, Policy::Hindsight(64))?;
        writeln!(out, "{line}")?;
        writeln!(
            out,
            "B = {b:>2}: budget {:.3}x plain, {:.3}x the best fixed length ({}: {:.2}x plain)",
            budget / plain,
            budget / best.1,
            best.0,
            best.1 / plain
        )?;
        writeln!(
            out,
            "B = {b:>2}: tau {:.2} with the budget; hindsight {:.2}x plain, tau {:.2} (each draft cut at its first wrong token)",
            sized.tau(),
            bound.tokens_per_second() / plain,
            bound.tau()
        )?;
        if let (Some(before), Some(f)) = (&before, &args.after) {
            let after = simulate_after(before, &sessions, b, &curve, 64)?.tokens_per_second();
            writeln!(
                out,
                "B = {b:>2}: budget after {f}: {:.2}x plain, {:.3}x the budget alone",
                after / plain,
                after / budget
            )?;
        }
    }
    Ok(())
}

fn main() -> ExitCode {
    cli::main("gpu_sim", run)
}
