//! The stepper's edges, as tables: bad requests and shapes, every stop
//! reason, a stop token inside an accepted draft, a full context, a
//! failing target, cancellation, and prefix reuse across requests.

mod mock;

use mock::{plain_greedy, Mock};
use selfspec::step::{Decode, Finished, Sampler, SeqId, Shape, StepError, Stepper, Stop, Target};
use selfspec::{Config, Error, Shared, Speculative, Token};

const V: u32 = 12;
const VOCAB: usize = V as usize;

/// A prompt whose greedy continuation the mock repeats (recall drafts it).
fn prompt(seed: u32) -> Vec<Token> {
    (0..24).map(|i| (seed + i * 5) % V).collect()
}

fn recall() -> Speculative {
    Speculative::new(&Config::recommended()).unwrap()
}

/// Runs until every request has ended; the finished replies.
fn drain(stepper: &mut Stepper, target: &mut Mock) -> Vec<Finished> {
    let mut out = Vec::new();
    for _ in 0..10_000 {
        if !stepper.is_running() {
            break;
        }
        stepper.step(target).unwrap();
        out.extend(stepper.finished());
    }
    out
}

#[test]
fn bad_shapes_are_typed_errors() {
    let cases: &[(Shape, &str)] = &[
        (
            Shape {
                sequences: 0,
                context: 64,
                vocab: 12,
                batch: 64,
            },
            "sequences",
        ),
        (
            Shape {
                sequences: 5000,
                context: 64,
                vocab: 12,
                batch: 1 << 20,
            },
            "sequences",
        ),
        (
            Shape {
                sequences: 1,
                context: 1,
                vocab: 12,
                batch: 64,
            },
            "context",
        ),
        (
            Shape {
                sequences: 1,
                context: 64,
                vocab: 0,
                batch: 64,
            },
            "vocab",
        ),
        (
            Shape {
                sequences: 4,
                context: 64,
                vocab: 12,
                batch: 7,
            },
            "batch",
        ),
    ];
    for (shape, field) in cases {
        let mut m = Mock::new(1, 1, 1, 1);
        m.shape = *shape;
        match Stepper::new(&m) {
            Err(Error::Shape { field: f, .. }) => assert_eq!(f, *field, "{shape:?}"),
            other => panic!("{shape:?}: {other:?}"),
        }
    }
}

#[test]
fn bad_requests_are_typed_errors_and_leave_the_sequence_idle() {
    let target = Mock::new(2, 64, VOCAB, 32);
    let mut stepper = Stepper::new(&target).unwrap();
    stepper
        .start(SeqId::new(1), &[1, 2], Decode::greedy(4), None)
        .unwrap();
    let hot = Sampler {
        temperature: f32::NAN,
        ..Sampler::default()
    };
    let long: Vec<Token> = vec![1; 64];
    let cases: Vec<(SeqId, &[Token], Decode, &str)> = vec![
        (SeqId::new(2), &[1], Decode::greedy(4), "Sequence"),
        (SeqId::new(1), &[1], Decode::greedy(4), "Sequence"),
        (SeqId::new(0), &[], Decode::greedy(4), "EmptyPrompt"),
        (SeqId::new(0), &long, Decode::greedy(4), "PromptTooLong"),
        (
            SeqId::new(0),
            &[1, 12],
            Decode::greedy(4),
            "TokenOutOfRange",
        ),
        (SeqId::new(0), &[1], Decode::greedy(0), "OutOfRange"),
        (SeqId::new(0), &[1], Decode::sampled(4, hot), "Sampler"),
        (
            SeqId::new(0),
            &[1],
            Decode::sampled(
                4,
                Sampler {
                    top_p: 0.0,
                    ..Sampler::default()
                },
            ),
            "Sampler",
        ),
    ];
    for (seq, prompt, decode, kind) in cases {
        let err = stepper.start(seq, prompt, decode, None).unwrap_err();
        assert!(format!("{err:?}").starts_with(kind), "{kind}: {err:?}");
        assert!(!err.to_string().is_empty());
    }
    assert!(!stepper.is_busy(SeqId::new(0)));
}

#[test]
fn stop_reasons() {
    // (stop tokens, context, max tokens, expected stop)
    let plain = plain_greedy(&prompt(3), 200, VOCAB);
    let stop_token = plain[37];
    let first_stop = plain.iter().position(|&t| t == stop_token).unwrap();
    let cases: &[(&[Token], usize, usize, Stop, usize)] = &[
        (&[], 512, 60, Stop::MaxTokens, 60),
        (&[stop_token], 512, 200, Stop::StopToken, first_stop + 1),
        (&[], 24 + 50, 200, Stop::ContextFull, 51),
    ];
    for &(stops, context, max, stop, len) in cases {
        for drafting in [false, true] {
            let mut target = Mock::new(1, context, VOCAB, 64);
            let mut stepper = Stepper::new(&target).unwrap().with_stop_tokens(stops);
            let spec = drafting.then(recall);
            stepper
                .start(SeqId::new(0), &prompt(3), Decode::greedy(max), spec)
                .unwrap();
            let done = drain(&mut stepper, &mut target);
            let reply = &done[0].reply;
            assert_eq!(
                (reply.stop, reply.tokens.len()),
                (stop, len),
                "{stop:?}, drafting {drafting}"
            );
            assert_eq!(reply.tokens[..], plain[..len]);
            // The cache holds the prompt and the reply less its last token,
            // as plain decoding leaves it, even when the reply ended inside
            // an accepted draft.
            assert_eq!(
                target.caches[0].len(),
                24 + len - 1,
                "{stop:?}, drafting {drafting}"
            );
            assert_eq!(stepper.cached(SeqId::new(0)), &target.caches[0][..]);
        }
    }
}

#[test]
fn a_failing_pass_ends_the_batch_and_the_sequences_start_over() {
    let mut target = Mock::new(2, 256, VOCAB, 64);
    target.fail_at = Some(5);
    let mut stepper = Stepper::new(&target).unwrap();
    for s in 0..2 {
        stepper
            .start(
                SeqId::new(s),
                &prompt(u32::try_from(s).unwrap()),
                Decode::greedy(50),
                Some(recall()),
            )
            .unwrap();
    }
    let mut failed = 0;
    for _ in 0..10 {
        match stepper.step(&mut target) {
            Err(StepError::Target(_)) => failed += 1,
            Err(e) => panic!("{e}"),
            Ok(()) => {}
        }
        for f in stepper.finished() {
            assert_eq!(f.reply.stop, Stop::Failed);
        }
    }
    assert_eq!(failed, 1);
    assert!(!stepper.is_running());
    // Both start again from an emptied cache and decode as plain decoding.
    for s in 0..2 {
        stepper
            .start(
                SeqId::new(s),
                &prompt(u32::try_from(s).unwrap()),
                Decode::greedy(50),
                Some(recall()),
            )
            .unwrap();
    }
    for f in drain(&mut stepper, &mut target) {
        let s = f.seq.index();
        assert_eq!(
            f.reply.tokens,
            plain_greedy(&prompt(u32::try_from(s).unwrap()), 50, VOCAB)
        );
    }
}

#[test]
fn cancel_mid_prefill_and_mid_decode() {
    let mut target = Mock::new(2, 256, VOCAB, 16);
    let mut stepper = Stepper::new(&target).unwrap().with_prefill_chunk(4);
    stepper
        .start(
            SeqId::new(0),
            &prompt(1),
            Decode::greedy(80),
            Some(recall()),
        )
        .unwrap();
    stepper
        .start(SeqId::new(1), &prompt(2), Decode::greedy(80), None)
        .unwrap();
    stepper.step(&mut target).unwrap(); // both prefilling: 4 rows each
    assert!(stepper.cancel(SeqId::new(0)));
    let f: Vec<Finished> = stepper.finished().collect();
    assert_eq!(
        (f.len(), f[0].reply.stop, f[0].reply.tokens.len()),
        (1, Stop::Cancelled, 0)
    );
    for _ in 0..12 {
        stepper.step(&mut target).unwrap();
    }
    assert!(stepper.cancel(SeqId::new(1)));
    let f: Vec<Finished> = stepper.finished().collect();
    let n = f[0].reply.tokens.len();
    assert!(n > 0 && f[0].reply.stop == Stop::Cancelled);
    assert_eq!(f[0].reply.tokens, plain_greedy(&prompt(2), n, VOCAB));
    assert!(!stepper.cancel(SeqId::new(1)), "nothing left to cancel");
    // The cancelled sequences' next requests decode as plain decoding.
    stepper
        .start(
            SeqId::new(0),
            &prompt(1),
            Decode::greedy(30),
            Some(recall()),
        )
        .unwrap();
    let done = drain(&mut stepper, &mut target);
    assert_eq!(done[0].reply.tokens, plain_greedy(&prompt(1), 30, VOCAB));
}

#[test]
fn a_next_turn_reuses_the_cached_prefix() {
    let mut target = Mock::new(1, 512, VOCAB, 64);
    let shared = Shared::new(&Config::recommended()).unwrap();
    let mut stepper = Stepper::new(&target).unwrap();
    let first = prompt(5);
    let spec = Speculative::with_shared(&Config::recommended(), &shared).unwrap();
    stepper
        .start(SeqId::new(0), &first, Decode::greedy(40), Some(spec))
        .unwrap();
    let done = drain(&mut stepper, &mut target);
    let mut second = first.clone();
    second.extend_from_slice(&done[0].reply.tokens);
    second.extend_from_slice(&[1, 2, 3]);
    let before = target.rows_evaluated;
    stepper
        .start(
            SeqId::new(0),
            &second,
            Decode::greedy(40),
            done.into_iter().next().unwrap().spec,
        )
        .unwrap();
    stepper.step(&mut target).unwrap();
    // The prompt's new part only: the last reply token and the 3 new ones.
    assert_eq!(target.rows_evaluated - before, 4);
    let done = drain(&mut stepper, &mut target);
    assert_eq!(done[0].reply.tokens, plain_greedy(&second, 40, VOCAB));
    // A forgotten cache is evaluated whole.
    assert!(stepper.forget(SeqId::new(0)));
    let before = target.rows_evaluated;
    stepper
        .start(SeqId::new(0), &second, Decode::greedy(1), None)
        .unwrap();
    drain(&mut stepper, &mut target);
    assert_eq!(target.rows_evaluated - before, second.len());
}

#[test]
fn a_cache_restored_into_another_sequence_is_reused() {
    let mut target = Mock::new(2, 512, VOCAB, 64);
    let mut stepper = Stepper::new(&target).unwrap();
    let first = prompt(5);
    stepper
        .start(SeqId::new(0), &first, Decode::greedy(40), None)
        .unwrap();
    let done = drain(&mut stepper, &mut target);
    // The engine saves sequence 0's cache, and sequence 0 serves another
    // prompt.
    let saved = target.caches[0].clone();
    stepper
        .start(SeqId::new(0), &prompt(9), Decode::greedy(8), None)
        .unwrap();
    drain(&mut stepper, &mut target);
    // It restores the saved cache into sequence 1 and says so.
    target.caches[1] = saved.clone();
    stepper.set_cached(SeqId::new(1), &saved).unwrap();
    assert_eq!(stepper.cached(SeqId::new(1)), &saved[..]);
    let mut second = first.clone();
    second.extend_from_slice(&done[0].reply.tokens);
    second.extend_from_slice(&[1, 2, 3]);
    let before = target.rows_evaluated;
    stepper
        .start(SeqId::new(1), &second, Decode::greedy(40), None)
        .unwrap();
    stepper.step(&mut target).unwrap();
    // The prompt's part the saved cache did not hold only.
    assert_eq!(target.rows_evaluated - before, second.len() - saved.len());
    let done = drain(&mut stepper, &mut target);
    assert_eq!(done[0].reply.tokens, plain_greedy(&second, 40, VOCAB));
}

#[test]
fn set_cached_refuses_what_no_cache_can_hold() {
    let target = Mock::new(2, 64, VOCAB, 16);
    let mut stepper = Stepper::new(&target).unwrap();
    stepper
        .start(SeqId::new(0), &prompt(1), Decode::greedy(4), None)
        .unwrap();
    let cases: [(usize, Vec<u32>, &str); 4] = [
        (0, vec![1, 2], "is busy"),
        (2, vec![1, 2], "does not exist"),
        (1, vec![1; 64], "the context holds 64"),
        (1, vec![1, u32::try_from(VOCAB).unwrap()], "outside"),
    ];
    for (seq, tokens, message) in cases {
        let e = stepper.set_cached(SeqId::new(seq), &tokens).unwrap_err();
        assert!(e.to_string().contains(message), "{seq}: {e}");
    }
    assert!(stepper.cached(SeqId::new(1)).is_empty());
}

#[test]
fn a_target_without_logits_cannot_sample() {
    struct GreedyOnly(Mock);
    impl Target for GreedyOnly {
        type Error = mock::MockError;
        fn shape(&self) -> Shape {
            self.0.shape()
        }
        fn forward(&mut self, b: &selfspec::step::Batch) -> Result<(), Self::Error> {
            self.0.forward(b)
        }
        fn logits(&mut self, _row: usize) -> Result<&[f32], Self::Error> {
            Ok(&[])
        }
        fn truncate(&mut self, s: SeqId, from: usize) -> Result<selfspec::step::Kept, Self::Error> {
            self.0.truncate(s, from)
        }
    }
    let mut target = GreedyOnly(Mock::new(1, 64, VOCAB, 16));
    let mut stepper = Stepper::new(&target).unwrap();
    stepper
        .start(
            SeqId::new(0),
            &[1, 2],
            Decode::sampled(5, Sampler::default()),
            None,
        )
        .unwrap();
    let err = stepper.step(&mut target).unwrap_err();
    assert!(
        matches!(err, StepError::Selfspec(Error::Rows { seq: 0 })),
        "{err}"
    );
    let f: Vec<Finished> = stepper.finished().collect();
    assert_eq!(f[0].reply.stop, Stop::Failed);
}

#[test]
fn the_budget_prices_each_pass_and_its_tokens_before_it_runs() {
    use selfspec::step::{PassTimes, Split};
    // (split, the largest median error of the price allowed): a computation
    // costs 2 ms and 0.1 ms a row, which both models can learn exactly
    // (a whole pass's curve by its measured sizes, a split pass's linear
    // fit everywhere); prices of sizes not measured yet read cheap.
    let cases = [
        (Split::Whole { ubatch: usize::MAX }, 0.01),
        (Split::PerSequence, 0.01),
        (Split::EqualRuns { ubatch: 512 }, 0.01),
    ];
    for (split, bound) in cases {
        let mut target = Mock::new(3, 512, VOCAB, 64);
        target.cost = Some((2000.0, 100.0));
        target.split = split;
        let mut stepper = Stepper::new(&target).unwrap().with_budget(PassTimes::new());
        for s in 0..3 {
            let d = Decode::greedy(120 + 40 * s);
            let seed = u32::try_from(s).unwrap();
            stepper
                .start(SeqId::new(s), &prompt(seed), d, Some(recall()))
                .unwrap();
        }
        let (mut errors, mut drafted, mut unpriced) = (Vec::new(), 0, 0);
        while stepper.is_running() {
            stepper.step(&mut target).unwrap();
            let _ = stepper.finished().count();
            let pass = stepper.last_pass().unwrap();
            if pass.prompt_rows > 0 {
                continue;
            }
            drafted += usize::from(pass.rows > pass.sequences);
            let expected = pass.expected_tokens.unwrap();
            if pass.rows == pass.sequences {
                // No draft row: one token a sequence, as expected.
                assert_eq!(pass.tokens, pass.sequences, "{split:?}: {pass:?}");
                assert!((expected - pass.sequences as f64).abs() < 1e-9, "{pass:?}");
            } else {
                assert!(expected > pass.sequences as f64, "{split:?}: {pass:?}");
                assert!(pass.tokens >= pass.sequences, "{split:?}: {pass:?}");
            }
            // The first decoding pass (a whole pass's curve does not learn
            // from prompt chunks) has no price yet.
            let Some(p) = pass.predicted else {
                unpriced += 1;
                continue;
            };
            let d = pass.duration;
            errors.push((p.as_secs_f64() - d.as_secs_f64()).abs() / d.as_secs_f64());
        }
        errors.sort_by(f64::total_cmp);
        let median = errors[errors.len() / 2];
        assert!(drafted > 10, "{split:?}: drafts were sent ({drafted})");
        assert!(
            unpriced <= 1,
            "{split:?}: {unpriced} passes without a price"
        );
        assert!(median < bound, "{split:?}: median error {median}");
    }
    // Without a budget: no price, no expected tokens.
    let mut target = Mock::new(1, 512, VOCAB, 64);
    let mut stepper = Stepper::new(&target).unwrap();
    stepper
        .start(SeqId::new(0), &prompt(1), Decode::greedy(4), None)
        .unwrap();
    stepper.step(&mut target).unwrap();
    let pass = stepper.last_pass().unwrap();
    assert_eq!((pass.predicted, pass.expected_tokens), (None, None));
}
