//! `decode_in_step`: passes on decoders of their own, one step each in
//! turn, decode what the same passes decode one after another, and each
//! counts only its own decoder's time; pinned to the history's near ties,
//! they decode the history's tokens.

mod common;

use selfspec::Config;
use selfspec_conversations::{Conversation, DraftSet};
use selfspec_llama_cpp_engine::run::{
    decode_in_step, decode_pass, reply_texts, Drafting, Pinning, Scopes,
};
use selfspec_llama_cpp_engine::Decoder;

const MAX_TOKENS: usize = 48;

fn tokens(pass: &selfspec_llama_cpp_engine::run::Pass) -> Vec<Vec<Vec<u32>>> {
    pass.replies
        .iter()
        .map(|turns| {
            turns
                .iter()
                .map(|r| r.as_ref().map(|r| r.tokens.clone()).unwrap_or_default())
                .collect()
        })
        .collect()
}

#[test]
fn in_step_passes_decode_as_passes_one_after_another() {
    let model = common::model();
    let convs = common::conversations("sample-code.text.jsonl", 3);
    let refs: Vec<&Conversation> = convs.iter().collect();
    let mut decoders: Vec<Decoder<'_>> = (0..3)
        .map(|_| Decoder::new(&model, common::settings(2)).unwrap())
        .collect();

    let history = decode_pass(&mut decoders[0], &refs, MAX_TOKENS, None, None).unwrap();
    let texts = reply_texts(&decoders[0], &history);
    let alone = decode_pass(&mut decoders[1], &refs, MAX_TOKENS, Some(&texts), None).unwrap();

    let set = DraftSet::from_config("recall", Config::recommended()).unwrap();
    let drafting = Drafting {
        set: &set,
        scopes: Scopes::Kind,
    };
    let before: Vec<_> = decoders.iter().map(|d| d.counters()).collect();
    let passes = decode_in_step(
        &mut decoders,
        &refs,
        MAX_TOKENS,
        &texts,
        &[None, None, Some(drafting)],
        None,
    )
    .unwrap();
    assert_eq!(passes.len(), 3);

    // Greedy plain decoding is deterministic on a context of its own: the
    // same tokens as the history's and the pass decoded alone.
    let expected = tokens(&history);
    assert!(expected.iter().flatten().all(|r| !r.is_empty()));
    assert_eq!(tokens(&alone), expected);
    assert_eq!(tokens(&passes[0]), expected);
    assert_eq!(tokens(&passes[1]), expected);
    // The speculative pass drafted and had drafts accepted
    // (the equivalence tests compare its tokens with plain decoding's).
    let accepted: usize = passes[2]
        .replies
        .iter()
        .flatten()
        .flatten()
        .map(|r| r.accepted)
        .sum();
    assert!(accepted > 0, "no draft accepted");
    // Each pass's time is its own decoder's decoding time over the pass.
    for ((pass, decoder), before) in passes.iter().zip(&decoders).zip(&before) {
        let own = decoder.counters().decode_time - before.decode_time;
        assert_eq!(pass.decode_time, own);
        assert!(!own.is_zero());
    }
}

#[test]
fn pinned_passes_decode_the_historys_tokens() {
    let model = common::model();
    let mut convs = common::conversations("sample-code.text.jsonl", 3);
    convs.extend(common::conversations("sample-chat.text.jsonl", 1));
    let refs: Vec<&Conversation> = convs.iter().collect();
    let mut decoders: Vec<Decoder<'_>> = (0..2)
        .map(|_| Decoder::new(&model, common::settings(2)).unwrap())
        .collect();
    let mut history = decode_pass(&mut decoders[0], &refs, MAX_TOKENS, None, None).unwrap();
    let texts = reply_texts(&decoders[0], &history);
    // A reference that is not the model's own: one token of the first
    // reply changed (to the token before it), so its passes prefer other
    // tokens there and after it.
    let first = history.replies[0][0].as_mut().unwrap();
    let i = (1..first.tokens.len())
        .find(|&i| first.tokens[i] != first.tokens[i - 1])
        .unwrap();
    first.tokens[i] = first.tokens[i - 1];
    let expected = tokens(&history);
    let set = DraftSet::from_config("recall", Config::recommended())
        .unwrap()
        .with_token_cost(Some(0.05))
        .unwrap();
    let pinned_pass = |decoders: &mut Vec<Decoder<'_>>, bound: f32| {
        let drafting = Drafting {
            set: &set,
            scopes: Scopes::Kind,
        };
        let pinning = Pinning {
            history: &history,
            bound,
        };
        decode_in_step(
            decoders,
            &refs,
            MAX_TOKENS,
            &texts,
            &[None, Some(drafting)],
            Some(pinning),
        )
        .unwrap()
    };
    // Every margin a near tie: any choice that differs from the
    // reference's is pinned, so both decode its tokens; a pin put at the
    // wrong position would change them.
    let passes = pinned_pass(&mut decoders, f32::INFINITY);
    assert_eq!(tokens(&passes[0]), expected);
    assert_eq!(tokens(&passes[1]), expected);
    assert!(passes[0].pinned > 0 && passes[1].pinned > 0);
    // No margin a near tie: nothing is pinned, and the changed reply is
    // the model's own again.
    let passes = pinned_pass(&mut decoders, 0.0);
    assert_eq!((passes[0].pinned, passes[1].pinned), (0, 0));
    let got = tokens(&passes[0]);
    assert_ne!(got[0][0], expected[0][0]);
    assert_eq!(got[1..], expected[1..]);
}
