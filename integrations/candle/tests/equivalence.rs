//! Speculative greedy decoding gives plain greedy decoding's tokens, in fewer
//! forward passes on repetitive text.

mod common;

use selfspec_candle::decode::{self, Sizing};
use selfspec_candle::RandomModel;

/// Every decision of both loops must have a top-1 / top-2 logit gap of at
/// least this much: 17 times the largest difference measured between the
/// logits of a batched pass and of token-by-token passes (5.7e-6,
/// `tests/margins.rs`), so a difference in output is the loop's fault, not
/// rounding's.
///
/// Random weights alone do not guarantee it: `tests/margins.rs` finds gaps
/// below 1e-4 at 0 to 4 of every 8,000 positions (whatever the successor
/// term's weight), and no argmax flip between batched and single passes in
/// 32,000 positions (a flip needs a gap below the logit difference, ~1e-6).
/// So the test's model is constructed for its workload
/// ([`common::with_clear_margins`]): the lm_head is nudged at every decision
/// of plain decoding whose gap is below 1e-3 until none is, then written
/// and read back. The assertion below checks that the construction held, so
/// the test fails with "near tie", not with a mismatch, if it ever does not.
const MIN_MARGIN: f32 = 1e-4;

#[test]
fn speculative_output_equals_plain_output() {
    let random = RandomModel::tiny(7);
    let vocab = 128;
    let config = selfspec::Config::recommended();
    let shared = selfspec::Shared::new(&config).unwrap();
    let shared_budget = selfspec::Shared::new(&config).unwrap();
    let succ = random.successors();
    let cycle: Vec<u32> = std::iter::successors(Some(3u32), |&t| Some(succ[t as usize]))
        .take(120)
        .collect();
    let prompts = [
        common::random_tokens(1, 64, vocab),
        common::random_tokens(2, 200, vocab),
        common::repeated(&common::random_tokens(3, 24, vocab), 5),
        common::repeated(&common::random_tokens(4, 9, vocab), 12),
        cycle,
        vec![5],
    ];
    let max_tokens = 400;
    // The seeded weights as written and read back: the loading code.
    let mut model = common::load(&random);
    let unrepaired = decode::plain(&mut model, &prompts[0], max_tokens).unwrap();
    let (mut model, nudges) = common::with_clear_margins(&random, &prompts, max_tokens);
    eprintln!(
        "lm_head nudges for clear margins: {nudges} (prompt 0's smallest margin before: {:e})",
        decode::min_margin(&unrepaired)
    );
    let (mut total, mut plain_passes, mut spec_passes) = (0, 0, 0);
    for (i, prompt) in prompts.iter().enumerate() {
        let plain = decode::plain(&mut model, prompt, max_tokens).unwrap();
        let spec = decode::speculative(
            &mut model,
            &config,
            &shared,
            prompt,
            max_tokens,
            Sizing::Drafter(None),
        )
        .unwrap();
        // With the draft budget, drafts are cut by measured pass times (no
        // two runs alike): the tokens are plain decoding's all the same.
        let budgeted = decode::speculative(
            &mut model,
            &config,
            &shared_budget,
            prompt,
            max_tokens,
            Sizing::Budget,
        )
        .unwrap();
        assert_eq!(plain.tokens, budgeted.tokens, "prompt {i}, with the budget");
        assert_eq!(plain.tokens.len(), max_tokens);
        assert!(
            decode::min_margin(&plain) > MIN_MARGIN && decode::min_margin(&spec) > MIN_MARGIN,
            "prompt {i}: a decision with a top-1/top-2 margin of {} / {} (below {MIN_MARGIN}): \
             the test model no longer has clear argmaxes",
            decode::min_margin(&plain),
            decode::min_margin(&spec)
        );
        if let Some(p) = plain
            .tokens
            .iter()
            .zip(&spec.tokens)
            .position(|(a, b)| a != b)
        {
            panic!(
                "prompt {i}: speculative output differs from plain output at token {p}: {:?} vs {:?}",
                &plain.tokens[p..(p + 8).min(max_tokens)],
                &spec.tokens[p..(p + 8).min(spec.tokens.len())]
            );
        }
        assert_eq!(plain.tokens, spec.tokens, "prompt {i}");
        assert_eq!(decode::passes(&plain), max_tokens);
        eprintln!(
            "prompt {i} ({} tokens): plain {} passes, speculative {} passes (tau {:.2}, {} drafted, {} accepted), min margin {:.4}",
            prompt.len(),
            decode::passes(&plain),
            decode::passes(&spec),
            spec.tau(),
            spec.drafted,
            spec.accepted,
            decode::min_margin(&plain).min(decode::min_margin(&spec))
        );
        total += spec.tokens.len();
        plain_passes += decode::passes(&plain);
        spec_passes += decode::passes(&spec);
    }
    eprintln!(
        "total: {total} tokens, plain {plain_passes} passes, speculative {spec_passes} passes"
    );
    assert!(total >= 2000);
}

#[test]
fn repetitive_prompt_needs_fewer_passes() {
    let random = RandomModel::tiny(11);
    let mut model = common::load(&random);
    let config = selfspec::Config::recommended();
    let shared = selfspec::Shared::new(&config).unwrap();
    let prompt = common::repeated(&common::random_tokens(5, 32, 128), 6);
    let plain = decode::plain(&mut model, &prompt, 256).unwrap();
    let sizing = Sizing::Drafter(None);
    let spec = decode::speculative(&mut model, &config, &shared, &prompt, 256, sizing).unwrap();
    assert_eq!(plain.tokens, spec.tokens);
    eprintln!(
        "repetitive prompt: plain {} passes, speculative {} passes for {} tokens",
        decode::passes(&plain),
        decode::passes(&spec),
        spec.tokens.len()
    );
    assert!(
        decode::passes(&spec) < decode::passes(&plain),
        "speculative {} passes, plain {}",
        decode::passes(&spec),
        decode::passes(&plain)
    );
    assert!(spec.accepted > 0);
}
