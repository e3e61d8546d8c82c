//! The model as selfspec's target: a stepper kept across requests reuses
//! the cached prefix of the next prompt, leaves the cache as it says, and
//! a cache changed behind its back is an error, not a wrong reply.

mod common;

use selfspec::step::SeqId;
use selfspec_candle::{decode, Error, RandomModel};

#[test]
fn a_kept_stepper_reuses_the_cached_prefix() {
    let random = RandomModel::tiny(5);
    let mut model = common::load(&random);
    let mut fresh = model.clone();
    let mut stepper = decode::stepper(&model, &[], false).unwrap();
    let seq = SeqId::new(0);

    // 300 prompt tokens: two chunks of at most 256.
    let prompt = common::random_tokens(6, 300, 128);
    let first = decode::plain_until(&mut model, &mut stepper, &prompt, 20).unwrap();
    assert_eq!(first.prefill_passes, 2);
    assert_eq!(first.tokens.len(), 20);
    // The cache holds the prompt and the reply but its last token.
    let mut held = prompt.clone();
    held.extend_from_slice(&first.tokens[..19]);
    assert_eq!(model.cached_tokens(), held.as_slice());
    assert_eq!(stepper.cached(seq), held.as_slice());

    // The next turn: only what follows the cached prefix is evaluated (25
    // tokens, one pass), and the reply is that of a fresh cache.
    let mut next = prompt.clone();
    next.extend_from_slice(&first.tokens);
    next.extend(common::random_tokens(7, 5, 128));
    let second = decode::plain_until(&mut model, &mut stepper, &next, 20).unwrap();
    assert_eq!(second.prefill_passes, 1);
    let alone = decode::plain(&mut fresh, &next, 20).unwrap();
    assert_eq!(alone.prefill_passes, 2);
    assert_eq!(second.tokens, alone.tokens);
    assert_eq!(model.cached_tokens(), stepper.cached(seq));
}

#[test]
fn a_cache_emptied_behind_the_stepper_is_an_error() {
    let random = RandomModel::tiny(5);
    let mut model = common::load(&random);
    let mut stepper = decode::stepper(&model, &[], false).unwrap();
    let prompt = common::random_tokens(8, 40, 128);
    let reply = decode::plain_until(&mut model, &mut stepper, &prompt, 10).unwrap();

    model.reset();
    let mut next = prompt.clone();
    next.extend_from_slice(&reply.tokens);
    let e = decode::plain_until(&mut model, &mut stepper, &next, 10).unwrap_err();
    assert!(matches!(e, Error::Batch(_)), "{e}");

    // The failed request emptied the stepper's view of the cache: the next
    // one evaluates its prompt whole and decodes as from a fresh cache.
    let again = decode::plain_until(&mut model, &mut stepper, &next, 10).unwrap();
    let mut fresh = common::load(&random);
    assert_eq!(
        again.tokens,
        decode::plain(&mut fresh, &next, 10).unwrap().tokens
    );
}

#[test]
fn bad_requests_are_errors() {
    let random = RandomModel::tiny(5);
    let mut model = common::load(&random);
    let mut stepper = decode::stepper(&model, &[], false).unwrap();
    let e = decode::plain_until(&mut model, &mut stepper, &[], 10).unwrap_err();
    assert!(matches!(e, Error::EmptyPrompt), "{e}");
    let e = decode::plain_until(&mut model, &mut stepper, &[1, 500], 10).unwrap_err();
    assert!(
        matches!(
            e,
            Error::TokenOutOfRange {
                token: 500,
                vocab: 128
            }
        ),
        "{e}"
    );
    let e = decode::plain_until(&mut model, &mut stepper, &[1, 2], 0).unwrap_err();
    assert!(matches!(e, Error::Selfspec(_)), "{e}");
    // The stepper is still usable.
    let r = decode::plain_until(&mut model, &mut stepper, &[1, 2], 3).unwrap();
    assert_eq!(r.tokens.len(), 3);
}

#[test]
fn a_stop_token_ends_the_reply() {
    let random = RandomModel::tiny(5);
    let mut model = common::load(&random);
    let prompt = common::random_tokens(9, 30, 128);
    let free = decode::plain(&mut model, &prompt, 30).unwrap();
    let stop = free.tokens[4];
    let at = free.tokens.iter().position(|&t| t == stop).unwrap();
    model.reset();
    let mut stepper = decode::stepper(&model, &[stop], false).unwrap();
    let r = decode::plain_until(&mut model, &mut stepper, &prompt, 30).unwrap();
    assert_eq!(r.tokens, free.tokens[..=at]);
    assert_eq!(r.stop, selfspec::step::Stop::StopToken);
}
