//! `selfspec-llama-cpp`: text conversations decoded by llama.cpp (through
//! `llama-cpp-2`), plainly and with selfspec's drafts, S sequences in one
//! batch, in the same sitting; prints tokens/s, speed-up, tau, acceptance
//! and how the replies compare, per kind and in total. `--help` lists the
//! options.

mod args;
mod report;

use std::process::ExitCode;
use std::time::Instant;

use selfspec_conversations::{self as conv, cli, Conversation, DraftSet, Progress, Tally};
use selfspec_llama_cpp_engine::cost::{self, PassCurve};
use selfspec_llama_cpp_engine::record;
use selfspec_llama_cpp_engine::run::{self, Drafting, LoopWork, TurnDivergence};
use selfspec_llama_cpp_engine::{Decoder, Error, Message, Model, Prices, Role, Settings};

use args::Args;

/// One drafting set, ready to run, and what it measured.
struct Set {
    set: DraftSet,
    tally: Tally,
    divergences: Vec<TurnDivergence>,
    /// The budget's prices of its speculative passes, by kind.
    prices: Vec<(String, Prices)>,
    /// The loop's work around the passes: plain decoding's, the set's.
    loop_work: [LoopWork; 2],
    /// `--pin-near-ties`: choices pinned to the history's token, plain
    /// decoding's and the set's.
    pinned: [usize; 2],
}

fn print_curve(curve: &PassCurve) {
    let points = curve.points();
    let t1 = points.first().map_or(1e-9, |c| c.median.as_secs_f64());
    println!(
        "llama.cpp pass cost after a {}-token cache (median of 15):",
        curve.cache()
    );
    for c in points {
        let t = c.median.as_secs_f64();
        println!(
            "  {:>3} tokens: {:>7.2} ms  {:>5.2}x one token  {:>6.3} ms a token",
            c.rows,
            t * 1e3,
            t / t1,
            t * 1e3 / c.rows as f64
        );
    }
}

fn kinds(conversations: &[Conversation]) -> Vec<String> {
    let mut kinds: Vec<String> = conversations.iter().map(|c| c.kind.clone()).collect();
    kinds.sort();
    kinds.dedup();
    kinds
}

/// llama.cpp's OpenMP threads wait at every barrier of a pass (hundreds a
/// pass) by `OMP_WAIT_POLICY`: `passive` puts them to sleep each time, which
/// slows every pass and flatters drafting's ratios (measured in
/// BENCHMARKS.md, "The OpenMP wait policy"); figures name the policy they
/// ran under.
fn wait_policy_line() -> String {
    match std::env::var("OMP_WAIT_POLICY") {
        Ok(p) if p.eq_ignore_ascii_case("passive") => {
            "OpenMP wait policy: passive (threads sleep at each barrier of a pass: passes are \
             slower than under the default; unset OMP_WAIT_POLICY to time them)"
                .to_string()
        }
        Ok(p) => format!("OpenMP wait policy: {p}"),
        Err(_) => "OpenMP wait policy: the runtime's default (threads spin briefly, then sleep)"
            .to_string(),
    }
}

/// The drafting sets; an `auto` token cost is measured once, on `decoder`.
fn build_sets(args: &Args, decoder: &mut Decoder<'_>) -> Result<Vec<Set>, Error> {
    let sets = args.common.draft_sets(|| {
        let x = cost::measure_token_cost(decoder, args.parallel)?;
        println!(
            "measured token cost: {x:.3} (S = {}: (t(S + 16) - t(S)) / 16 / (t(S) / S) after a 256-token cache)",
            args.parallel
        );
        Ok::<f64, Error>(x)
    })?;
    Ok(sets
        .into_iter()
        .map(|set| Set {
            set,
            tally: Tally::new(),
            divergences: Vec::new(),
            prices: Vec::new(),
            loop_work: [LoopWork::default(); 2],
            pinned: [0; 2],
        })
        .collect())
}

fn near_tie_bound(
    args: &Args,
    decoder: &mut Decoder<'_>,
    conversations: &[Conversation],
) -> Result<f32, Error> {
    if let Some(b) = args.common.near_tie {
        return Ok(b);
    }
    if args.sampler.is_some() {
        // Not compared token for token (see `report`).
        return Ok(f32::INFINITY);
    }
    let model = decoder.model();
    let first = conversations.first().and_then(|c| c.turns.first());
    let prompt = model.chat_prompt(&[Message {
        role: Role::User,
        content: first.map_or("Hello", String::as_str),
    }])?;
    let prompt = &prompt[..prompt.len().min(decoder.settings().context / 2)];
    let reach = run::cache_reach(model, conversations, args.common.max_tokens)?;
    // Minutes at S = 4 after long caches: say what is going on.
    eprintln!(
        "measuring the near-tie bound (caches up to {} tokens, {} sequences; --near-tie X skips this)...",
        reach.min(decoder.settings().context),
        decoder.settings().sequences
    );
    let started = Instant::now();
    let noise = cost::calibrate(decoder, prompt, 128, reach)?;
    let bound = noise.near_tie_bound();
    println!(
        "near-tie bound: {bound:.4} (the largest shift of a top-1 margin between batched and one-token passes; \
         largest logit difference {:.4}; over {} rows; measured in {:.0} s)",
        noise.max_abs_diff,
        noise.rows,
        started.elapsed().as_secs_f64()
    );
    Ok(bound)
}

fn run(args: &Args) -> Result<bool, Error> {
    let path = conv::model_path(args.common.gguf.clone())?;
    let loading = Instant::now();
    let model = Model::load(&path)?;
    let settings = Settings {
        sequences: args.parallel,
        context: args.context,
        threads: args.threads.unwrap_or(Settings::default().threads),
        batch: 2048.max(args.parallel * 2),
        step_tokens: 63.max(2 * args.parallel),
        flash_attention: args.flash_attention,
        kv_unified: args.kv_unified,
    };
    let mut decoder = new_decoder(args, &model, settings)?;
    println!(
        "model: {} (vocabulary {}, trained context {}), loaded in {:.1} s; {} sequences of {} tokens, {} threads, flash attention {}, unified KV cache {}",
        path.display(),
        model.n_vocab(),
        model.n_ctx_train(),
        loading.elapsed().as_secs_f64(),
        settings.sequences,
        settings.context,
        settings.threads,
        if settings.flash_attention { "on" } else { "off" },
        if settings.kv_unified { "on" } else { "off" }
    );
    println!("draft budget: {}", if args.budget { "on" } else { "off" });
    println!("{}", wait_policy_line());
    if let Some(s) = args.sampler {
        println!(
            "sampled at temperature {} (top-k {}, top-p {}, min-p {}), seeds from {}: replies \
             differ by their draws, so they are not compared token for token (plain and \
             speculative sampling have one distribution: the adapter's tests/sampled.rs)",
            s.temperature, s.top_k, s.top_p, s.min_p, s.seed
        );
    }
    if args.pass_cost {
        // Conversations' caches grow to thousands of tokens (code edits):
        // a pass's cost is measured at several lengths, not only 256.
        for cache in [256, 2048, 4096] {
            let sizes = [1, 2, 4, 8, 16, 17, 32, 48, 63];
            let curve = cost::pass_cost_curve(&mut decoder, 0, cache, &sizes, 15)?;
            print_curve(&curve);
            let c = curve.token_cost(1);
            println!("token cost (S = 1): {c:.3} = (t(17) - t(1)) / 16 / t(1)");
        }
        print_shapes(&mut decoder)?;
        return Ok(true);
    }
    let conversations = conv::load(&args.common.sources())?;
    if conversations.is_empty() {
        println!("no conversations");
        return Ok(true);
    }
    let bound = near_tie_bound(args, &mut decoder, &conversations)?;
    let mut sets = build_sets(args, &mut decoder)?;
    // With --in-step, a context for each set beside plain decoding's.
    let mut decoders = vec![decoder];
    if args.in_step {
        for _ in &sets {
            decoders.push(new_decoder(args, &model, settings)?);
        }
    }
    let started = Instant::now();
    let recorded = decode_all(args, &mut decoders, &conversations, &mut sets, bound)?;
    if let Some(path) = &args.record {
        record::write_workload(path, recorded.iter().flatten())?;
        let sessions = recorded.iter().flatten().count();
        println!(
            "recorded the plain replies of {sessions} conversations in {}",
            path.display()
        );
    }
    report::report(args, &sets, bound, started.elapsed().as_secs_f64())
}

/// A decoder of `settings` on `model`, with the budget and sampling the
/// arguments ask for.
fn new_decoder<'m>(
    args: &Args,
    model: &'m Model,
    settings: Settings,
) -> Result<Decoder<'m>, Error> {
    let mut decoder = Decoder::new(model, settings)?;
    if !args.budget {
        decoder = decoder.with_budget(None)?;
    }
    Ok(decoder.with_sampling(args.sampler))
}

/// With several slots: what passes of S sequences cost as llama.cpp splits
/// them (each row count a sequence, after caches of 256 and 2048 tokens).
fn print_shapes(decoder: &mut Decoder<'_>) -> Result<(), Error> {
    let n = decoder.settings().sequences;
    if n < 2 {
        return Ok(());
    }
    let with = |first: usize, rest: usize| {
        let mut v = vec![rest; n];
        v[0] = first;
        v
    };
    let mut gap = vec![1; n];
    gap[n / 2] = 0;
    let shapes = vec![
        vec![1; n],
        gap,
        with(2, 1),
        with(4, 1),
        with(9, 1),
        vec![2; n],
        vec![4; n],
    ];
    for cache in [256, 2048] {
        let times = cost::pass_shapes(decoder, cache, &shapes, 9)?;
        println!("passes of {n} sequences after {cache}-token caches (rows a sequence: ms, against all one row):");
        let plain = times[0].as_secs_f64();
        for (shape, t) in shapes.iter().zip(&times) {
            let ms = t.as_secs_f64() * 1000.0;
            println!("  {shape:?}: {ms:.1} ms, {:.2}x", t.as_secs_f64() / plain);
        }
    }
    Ok(())
}

/// Decodes every kind's conversations plainly, then with each set, into the
/// sets' tallies, `--rounds` times over, alternating: the first round
/// drafts on the sets' own memories, each later one on fresh copies of the
/// sets, kept from one kind to the next as the first round's are. With
/// `--record`, each conversation's plain replies of the first round as a
/// workload line, in the conversations' order. With `--in-step`
/// (`decoders` holds one for plain decoding, then one for each set), each
/// kind is first decoded plainly once more, for the rounds' history.
fn decode_all(
    args: &Args,
    decoders: &mut [Decoder<'_>],
    conversations: &[Conversation],
    sets: &mut [Set],
    bound: f32,
) -> Result<Vec<Option<String>>, Error> {
    let total: usize = conversations.iter().map(|c| c.turns.len()).sum();
    // Plain decoding and every set each decode every turn once a round.
    let passes = (sets.len() + 1) * args.rounds + usize::from(args.in_step);
    let mut progress = Progress::new(total * passes);
    let mut recorded = vec![None; conversations.len()];
    // (a clone of a set drafts on the set's own memory: `Shared` is a handle)
    let drafts: Vec<Vec<DraftSet>> = (0..args.rounds)
        .map(|r| {
            let copy = |s: &Set| {
                if r == 0 {
                    Ok(s.set.clone())
                } else {
                    s.set.fresh()
                }
            };
            sets.iter().map(copy).collect()
        })
        .collect::<Result<_, _>>()?;
    for kind in kinds(conversations) {
        let (index, convs): (Vec<usize>, Vec<&Conversation>) = conversations
            .iter()
            .enumerate()
            .filter(|(_, c)| c.kind == kind)
            .unzip();
        let history = if args.in_step {
            Some(history_pass(
                args,
                &mut decoders[0],
                &kind,
                &convs,
                &mut progress,
            )?)
        } else {
            None
        };
        for (r, drafts) in drafts.iter().enumerate() {
            let round = Round {
                kind: &kind,
                convs: &convs,
                drafts,
                history: history.as_ref().map(|(texts, _)| &texts[..]),
                reference: history.as_ref().map(|(_, pass)| pass),
            };
            let plain = decode_round(args, decoders, &round, sets, bound, &mut progress)?;
            if args.record.is_some() && r == 0 {
                let family = decoders[0].model().family();
                for (c, &i) in index.iter().enumerate() {
                    recorded[i] = record::session_line(convs[c], &plain, c, &family)?;
                }
            }
        }
    }
    progress.finish();
    Ok(recorded)
}

/// `--in-step`'s plain pass of one kind, not counted: its replies are the
/// history of the kind's rounds (as texts, and the pass itself: the
/// reference of `--pin-near-ties`).
fn history_pass(
    args: &Args,
    decoder: &mut Decoder<'_>,
    kind: &str,
    convs: &[&Conversation],
    progress: &mut Progress,
) -> Result<(Vec<Vec<String>>, run::Pass), Error> {
    let pass = run::decode_pass(decoder, convs, args.common.max_tokens, None, None)?;
    let turns: usize = convs.iter().map(|c| c.turns.len()).sum();
    let generated = generated_tokens(&pass);
    let speed = tps(generated, pass.decode_time);
    progress.pass(kind, "history", turns, generated, speed);
    Ok((run::reply_texts(decoder, &pass), pass))
}

/// One kind's conversations in one round, and the sets that draft in it
/// (one for each of the report's sets, in their order).
struct Round<'a> {
    kind: &'a str,
    convs: &'a [&'a Conversation],
    drafts: &'a [DraftSet],
    /// `--in-step`: the replies of the kind's history pass.
    history: Option<&'a [Vec<String>]>,
    /// `--in-step`: the history pass.
    reference: Option<&'a run::Pass>,
}

/// One round of one kind, tallied into the sets: plain decoding, then each
/// set's; or, with a history, all of them step by step in turn (a decoder
/// each). Returns the plain pass, for `--record`.
fn decode_round(
    args: &Args,
    decoders: &mut [Decoder<'_>],
    round: &Round<'_>,
    sets: &mut [Set],
    bound: f32,
    progress: &mut Progress,
) -> Result<run::Pass, Error> {
    let max_tokens = args.common.max_tokens;
    let drafting: Vec<Option<Drafting<'_>>> = std::iter::once(None)
        .chain(round.drafts.iter().map(|set| {
            Some(Drafting {
                set,
                scopes: args.scopes,
            })
        }))
        .collect();
    let passes = if let Some(history) = round.history {
        let pinning = round
            .reference
            .filter(|_| args.pin_near_ties)
            .map(|history| run::Pinning { history, bound });
        run::decode_in_step(
            decoders,
            round.convs,
            max_tokens,
            history,
            &drafting,
            pinning,
        )?
    } else {
        let decoder = &mut decoders[0];
        let plain = run::decode_pass(decoder, round.convs, max_tokens, None, None)?;
        let texts = run::reply_texts(decoder, &plain);
        let mut passes = vec![plain];
        for d in &drafting[1..] {
            let spec =
                run::decode_pass(decoder, round.convs, max_tokens, Some(&texts), d.as_ref())?;
            passes.push(spec);
        }
        passes
    };
    let mut passes = passes.into_iter();
    // (a pass for each decoding, plain decoding's first: never empty)
    let plain = passes.next().expect("a plain pass");
    let turns: usize = round.convs.iter().map(|c| c.turns.len()).sum();
    let plain_generated = generated_tokens(&plain);
    progress.pass(
        round.kind,
        "plain",
        turns,
        plain_generated,
        tps(plain_generated, plain.decode_time),
    );
    for (set, spec) in sets.iter_mut().zip(passes) {
        let d = run::tally_kind(
            &mut set.tally,
            round.kind,
            round.convs,
            &plain,
            &spec,
            bound,
        );
        set.divergences.extend(d);
        set.loop_work[0].add(plain.loop_work);
        set.loop_work[1].add(spec.loop_work);
        set.pinned[0] += plain.pinned;
        set.pinned[1] += spec.pinned;
        match set.prices.iter_mut().find(|(k, _)| k == round.kind) {
            Some((_, p)) => p.extend(&spec.prices),
            None => set
                .prices
                .push((round.kind.to_string(), spec.prices.clone())),
        }
        let generated = generated_tokens(&spec);
        progress.pass(
            round.kind,
            &set.set.label(),
            turns,
            generated,
            tps(generated, spec.decode_time),
        );
    }
    Ok(plain)
}

/// Tokens a pass generated over all its replies.
fn generated_tokens(pass: &run::Pass) -> usize {
    pass.replies
        .iter()
        .flatten()
        .flatten()
        .map(|r| r.tokens.len())
        .sum()
}

/// Tokens per second, for progress lines.
fn tps(tokens: usize, time: std::time::Duration) -> f64 {
    tokens as f64 / time.as_secs_f64().max(1e-9)
}

fn main() -> ExitCode {
    let args = match args::parse(std::env::args().skip(1)) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("selfspec-llama-cpp: {e}");
            return ExitCode::from(2);
        }
    };
    if args.common.help {
        println!("{}", args::help());
        return ExitCode::SUCCESS;
    }
    cli::exit_code("selfspec-llama-cpp", run(&args).map_err(|e| e.to_string()))
}
