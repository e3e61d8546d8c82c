//! The adapter on a context the test made itself, as a user would: greedy
//! speculative decoding gives plain greedy decoding's replies (except at a
//! measured near tie) in fewer passes, on the sequence ids it was given,
//! leaving the context's other sequences alone; its caches follow every
//! rollback; bad options and rows are typed errors.

mod common;

use selfspec::step::{Decode, LogitNoise, PassTimes, Reply, Row, SeqId, Stepper, Target};
use selfspec::{Config, Shared, Speculative};
use selfspec_conversations::{compare, Divergence};
use selfspec_llama_cpp::{end_tokens, Error, LlamaTarget, Options};

const MAX_TOKENS: usize = 96;
/// Stepper sequences 0 and 1 are llama.cpp's 3 and 1 of a context of 4.
const IDS: [i32; 2] = [3, 1];

/// Every prompt through the two sequences, with recall on one `Shared`
/// when `spec`; the replies in prompt order and the passes run.
fn decode_all<T: Target>(
    target: &mut T,
    stop: &[u32],
    prompts: &[Vec<u32>],
    spec: bool,
) -> (Vec<Reply>, usize) {
    let mut stepper = Stepper::new(&*target)
        .unwrap_or_else(|e| panic!("{e}"))
        .with_stop_tokens(stop)
        .with_budget(PassTimes::new());
    let config = Config::recommended();
    let shared = Shared::new(&config).unwrap();
    let mut replies: Vec<Option<Reply>> = vec![None; prompts.len()];
    let mut owner = [usize::MAX; IDS.len()];
    let (mut next, mut passes) = (0, 0);
    while next < prompts.len() || stepper.is_running() {
        while let (Some(seq), true) = (stepper.idle(), next < prompts.len()) {
            let s = spec.then(|| Speculative::with_shared(&config, &shared).unwrap());
            stepper.forget(seq);
            let decode = Decode::greedy(MAX_TOKENS);
            stepper.start(seq, &prompts[next], decode, s).unwrap();
            owner[seq.index()] = next;
            next += 1;
        }
        stepper.step(target).unwrap_or_else(|e| panic!("{e}"));
        passes += usize::from(stepper.last_pass().is_some());
        for f in stepper.finished() {
            replies[owner[f.seq.index()]] = Some(f.reply);
        }
    }
    (replies.into_iter().map(Option::unwrap).collect(), passes)
}

#[test]
fn greedy_speculative_equals_plain_on_the_users_own_context() {
    let model = common::model();
    let (mut ctx, params) = common::context(&model, 4 * 1024, 4);
    let stop = end_tokens(&model);
    let mut prompts: Vec<Vec<u32>> = common::first_turns("sample-code.text.jsonl", 6)
        .iter()
        .map(|t| common::chat(&model, t))
        .collect();
    prompts.extend(
        common::first_turns("sample-chat.text.jsonl", 2)
            .iter()
            .map(|t| common::chat(&model, t)),
    );

    // The user's own work in sequence 0: the adapter must leave it.
    let own = common::chat(&model, "Some other request of the engine's.");
    let options = Options::new(&params).with_seq_ids([0]).with_batch(256);
    let mut users = LlamaTarget::new(&model, &mut ctx, options).unwrap();
    let rows = own.iter().enumerate().map(|(pos, &token)| Row {
        seq: SeqId::new(0),
        token,
        pos,
        output: false,
    });
    users.decode_rows(rows).unwrap();
    drop(users);

    let options = Options::new(&params)
        .with_seq_ids(IDS)
        .with_context(1024)
        .with_step_rows(63);
    let mut target = LlamaTarget::new(&model, &mut ctx, options).unwrap();
    let reach = prompts.iter().map(Vec::len).max().unwrap() + MAX_TOKENS;
    let noise =
        LogitNoise::calibrate(&mut target, &prompts[0], prompts[0].len(), 63, reach).unwrap();
    assert!(noise.rows > 100, "{noise:?}");
    let bound = noise.near_tie_bound();

    let (plain, plain_passes) = decode_all(&mut target, &stop, &prompts, false);
    let (spec, spec_passes) = decode_all(&mut target, &stop, &prompts, true);
    let (mut tokens, mut near_ties, mut accepted) = (0, 0, 0);
    for (i, (p, s)) in plain.iter().zip(&spec).enumerate() {
        tokens += p.tokens.len();
        accepted += s.accepted;
        match compare(&p.tokens, &p.margins, &s.tokens, bound) {
            Divergence::Identical => {}
            Divergence::NearTie { position, gap } => {
                near_ties += 1;
                eprintln!("prompt {i}: near tie at {position} (gap {gap:.4} < {bound:.4})");
            }
            d => panic!("prompt {i}: {d:?} (bound {bound:.4})"),
        }
    }
    eprintln!(
        "{tokens} tokens, {near_ties} near ties, passes plain {plain_passes} spec {spec_passes}, \
         accepted {accepted}"
    );
    assert!(tokens >= 500, "only {tokens} tokens");
    assert!(accepted > 0 && spec_passes < plain_passes);
    // Every cache holds what the target says, the rejected drafts rolled
    // out; sequence 0 still holds the user's own tokens, sequence 2 nothing.
    for seq in 0..IDS.len() {
        let seq = SeqId::new(seq);
        assert_eq!(target.kv_pos_max(seq) + 1, target.cached(seq).len() as i64);
    }
    let ctx = target.into_inner();
    assert_eq!(ctx.kv_cache_seq_pos_max(0) + 1, own.len() as i32);
    assert_eq!(ctx.kv_cache_seq_pos_max(2), -1);
}

#[test]
fn bad_options_and_rows_are_typed_errors() {
    let model = common::model();
    let (mut ctx, params) = common::context(&model, 1024, 2);
    let o = || Options::new(&params);
    let cases: [(Options, &str); 8] = [
        (o().with_seq_ids([]), "sequences"),
        (o().with_seq_ids([0, 0]), "a sequence id"),
        (o().with_seq_ids([-1]), "a sequence id"),
        (o().with_seq_ids([2]), "a sequence id"),
        (o().with_context(4096), "context"),
        (o().with_context(1), "context"),
        (o().with_batch(1 << 20), "batch"),
        (o().with_step_rows(3), "step rows"),
    ];
    for (options, what) in cases {
        let e = LlamaTarget::new(&model, &mut ctx, options.clone()).unwrap_err();
        assert!(
            matches!(e, Error::Setting { what: w, .. } if w == what),
            "{options:?}: {e:?}"
        );
    }
    let mut target = LlamaTarget::new(&model, &mut ctx, o()).unwrap();
    let row = |seq, token, pos| Row {
        seq: SeqId::new(seq),
        token,
        pos,
        output: true,
    };
    let vocab = target.shape().vocab;
    type Case = (Vec<Row>, fn(&Error) -> bool);
    let bad: [Case; 5] = [
        (vec![], |e| matches!(e, Error::EmptyPass)),
        (vec![row(0, 1, 1)], |e| {
            matches!(e, Error::Position { held: 0, .. })
        }),
        (vec![row(2, 1, 0)], |e| {
            matches!(e, Error::Sequence { seq: 2, .. })
        }),
        (vec![row(0, u32::MAX, 0)], |e| {
            matches!(e, Error::TokenOutOfRange { .. })
        }),
        (vec![row(1, 1, 0), row(1, 1, 2)], |e| {
            matches!(e, Error::Position { pos: 2, .. })
        }),
    ];
    for (rows, ok) in bad {
        let e = target.decode_rows(rows.clone()).unwrap_err();
        assert!(ok(&e), "{rows:?}: {e:?}");
        assert!(target.cached(SeqId::new(0)).is_empty() && target.cached(SeqId::new(1)).is_empty());
    }
    assert!(matches!(target.logits(0), Err(Error::NoLogits { row: 0 })));
    assert!(vocab > 0);

    // A pass llama.cpp refuses (a sequence past its positions: the
    // context's cache holds 512 a sequence, the target was told 1024 by
    // mistake): a typed error, the target's view of the cache still
    // llama.cpp's, the request ended, and the sequence usable again.
    drop(target);
    let mut target = LlamaTarget::new(&model, &mut ctx, o().with_context(1024)).unwrap();
    let prompt: Vec<u32> = (0..600).map(|i| 100 + i % 50).collect();
    let mut stepper = Stepper::new(&target).unwrap().with_prefill_chunk(256);
    let seq = SeqId::new(0);
    stepper
        .start(seq, &prompt, Decode::greedy(4), None)
        .unwrap();
    let mut failed = None;
    while stepper.is_running() {
        if let Err(e) = stepper.step(&mut target) {
            failed = Some(e.to_string());
        }
    }
    let f: Vec<_> = stepper.finished().collect();
    let failed = failed.expect("llama.cpp refused a pass");
    assert!(failed.contains("decode failed"), "{failed}");
    assert_eq!(f[0].reply.stop, selfspec::step::Stop::Failed);
    assert_eq!(target.kv_pos_max(seq) + 1, target.cached(seq).len() as i64);
    // The next request's first step empties the failed one's cache.
    stepper
        .start(seq, &prompt[..40], Decode::greedy(4), None)
        .unwrap();
    while stepper.is_running() {
        stepper.step(&mut target).unwrap();
    }
    let f: Vec<_> = stepper.finished().collect();
    assert_eq!(f[0].reply.stop, selfspec::step::Stop::MaxTokens);
    assert_eq!(
        target.kv_pos_max(seq),
        42,
        "40 prompt tokens and 3 of the reply's 4"
    );
    assert_eq!(target.cached(seq).len(), 43);
}
