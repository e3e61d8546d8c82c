//! The command's report: each set's table, the budget's prices, how the
//! replies compare with plain decoding's.

use selfspec_conversations::{self as conv, Summary};
use selfspec_llama_cpp_engine::{Error, Prices};

use crate::args::Args;
use crate::Set;

/// The draft budget's prices and expected tokens of each kind's
/// speculative passes, and of all (nothing with the budget off).
fn print_prices(by_kind: &[(String, Prices)]) {
    let mut all = Prices::default();
    for (_, p) in by_kind {
        all.extend(p);
    }
    if all.line().is_none() {
        return;
    }
    println!("the draft budget's pass prices against the measured passes:");
    for (kind, p) in by_kind
        .iter()
        .map(|(k, p)| (k.as_str(), p))
        .chain([("all", &all)])
    {
        if let Some(line) = p.line() {
            println!("  {kind:<10} {line}");
        }
    }
}

pub fn report(args: &Args, sets: &[Set], bound: f32, wall: f64) -> Result<bool, Error> {
    let mut all: Vec<Summary> = Vec::new();
    let mut ok = true;
    for set in sets {
        let label = set.set.label();
        if args.in_step {
            println!(
                "\n{label} (parallel {}, {} round(s): plain and speculative decoding one step \
                 each in turn, on contexts of their own, on a first plain pass's replies; \
                 tokens and times summed):",
                args.parallel, args.rounds
            );
        } else if args.rounds > 1 {
            println!(
                "\n{label} (parallel {}, {} rounds: each kind plain then speculative, \
                 alternated; tokens and times summed):",
                args.parallel, args.rounds
            );
        } else {
            println!("\n{label} (parallel {}):", args.parallel);
        }
        let rows = set.tally.summaries(&label, Some(args.parallel));
        conv::print_table(&mut std::io::stdout(), &rows).map_err(|source| conv::Error::Io {
            path: "stdout".into(),
            source,
        })?;
        all.extend(rows);
        print_prices(&set.prices);
        let [plain, spec] = set.loop_work.map(|w| w.per_step().as_secs_f64() * 1e6);
        println!(
            "the loop's work a decoding step outside llama_decode (drafting, reading logits, \
             verifying): plain {plain:.0} us, speculative {spec:.0} us"
        );
        if args.sampler.is_some() {
            println!(
                "outputs against plain decoding: sampled, not compared token for token \
                 (the identical and near-tie columns do not apply)"
            );
            continue;
        }
        if args.pin_near_ties {
            let [plain, spec] = set.pinned;
            println!(
                "choices pinned to the history pass's token at its near ties (gap under \
                 {bound:.4}): plain {plain}, speculative {spec}"
            );
        }
        for d in &set.divergences {
            println!("  diverged: {} turn {}: {:?}", d.id, d.turn, d.divergence);
        }
        let near: usize = set
            .divergences
            .iter()
            .filter(|d| matches!(d.divergence, conv::Divergence::NearTie { .. }))
            .count();
        let other = set.divergences.len() - near;
        println!(
            "outputs against plain decoding: {} diverged at a near tie (gap under {bound:.4}), {other} elsewhere",
            near
        );
        ok &= other == 0;
    }
    println!("wall {wall:.1} s");
    if let Some(path) = &args.common.json {
        conv::write_json(path, &all)?;
    }
    Ok(ok)
}
