//! Speculative greedy decoding in llama.cpp's engine gives plain greedy
//! decoding's replies (except where plain's choice is a near tie): one
//! sequence, in fewer `llama_decode` calls, and four sequences in one batch
//! (drafts padded to one length, idle sequences filled).

mod common;

use selfspec::Config;
use selfspec_conversations::{compare, Conversation, Divergence, DraftSet};
use selfspec_llama_cpp_engine::cost::calibrate;
use selfspec_llama_cpp_engine::run::{cache_reach, decode_pass, reply_texts, Drafting, Scopes};
use selfspec_llama_cpp_engine::{Decoder, Message, Model, Role};

const MAX_TOKENS: usize = 128;

fn conversations() -> Vec<Conversation> {
    let mut c = common::conversations("sample-code.text.jsonl", 8);
    c.extend(common::conversations("sample-chat.text.jsonl", 1));
    c
}

fn bound(decoder: &mut Decoder<'_>, model: &Model, convs: &[Conversation]) -> f32 {
    let prompt = model
        .chat_prompt(&[Message {
            role: Role::User,
            content: &convs[0].turns[0],
        }])
        .unwrap();
    let reach = cache_reach(model, convs, MAX_TOKENS).unwrap();
    let noise = calibrate(decoder, &prompt, 128, reach).unwrap();
    // A bound of 0 would make every divergence fail: the measurement must
    // have compared rows.
    assert!(noise.rows > 100, "{noise:?}");
    noise.near_tie_bound()
}

/// `fewer_calls`: whether the draft budget is sure to draft enough to save
/// calls (one sequence: a pass is one computation, and drafts pay); at four
/// sequences with a cache each, llama.cpp splits uneven drafts into several
/// computations and the budget may rightly draft little, so only the
/// replies and that drafts were verified are checked there.
fn same_replies_fewer_passes(sequences: usize, fewer_calls: bool) {
    let model = common::model();
    let mut decoder = Decoder::new(&model, common::settings(sequences)).unwrap();
    let convs = conversations();
    let refs: Vec<&Conversation> = convs.iter().collect();
    let bound = bound(&mut decoder, &model, &convs);

    decoder.reset_counters();
    let plain = decode_pass(&mut decoder, &refs, MAX_TOKENS, None, None).unwrap();
    let plain_steps = decoder.counters().steps;
    let texts = reply_texts(&decoder, &plain);

    let set = DraftSet::from_config("recall", Config::recommended())
        .unwrap()
        .with_token_cost(Some(0.05))
        .unwrap();
    let drafting = Drafting {
        set: &set,
        scopes: Scopes::Kind,
    };
    decoder.reset_counters();
    let spec = decode_pass(
        &mut decoder,
        &refs,
        MAX_TOKENS,
        Some(&texts),
        Some(&drafting),
    )
    .unwrap();
    let spec_steps = decoder.counters().steps;

    let (mut generated, mut accepted, mut turns, mut near_ties) = (0, 0, 0, 0);
    let mut under_bound = 0;
    for (c, conv) in convs.iter().enumerate() {
        for (t, (p, s)) in plain.replies[c].iter().zip(&spec.replies[c]).enumerate() {
            let (p, s) = (p.as_ref().unwrap(), s.as_ref().unwrap());
            turns += 1;
            generated += p.tokens.len();
            under_bound += p.margins.iter().filter(|&&g| g < bound).count();
            accepted += s.accepted;
            match compare(&p.tokens, &p.margins, &s.tokens, bound) {
                Divergence::Identical => {}
                Divergence::NearTie { position, gap } => {
                    near_ties += 1;
                    eprintln!(
                        "{} turn {t}: near tie at {position} (gap {gap:.4} < {bound:.4})",
                        conv.id
                    );
                }
                d @ Divergence::NotNearTie { .. } => {
                    panic!("{} turn {t}: {d:?} (bound {bound:.4})", conv.id)
                }
            }
        }
    }
    eprintln!(
        "S = {sequences}: {turns} turns, {generated} tokens, {near_ties} near ties, \
         decode calls plain {plain_steps} spec {spec_steps}, accepted {accepted}"
    );
    assert!(generated >= 1000, "only {generated} tokens generated");
    assert!(accepted > 0);
    assert!(
        spec_steps < plain_steps || !fewer_calls,
        "speculative decoding took {spec_steps} decode calls, plain {plain_steps}"
    );
    // The exemption is not a blanket: most of plain's choices are farther
    // from their runner-up than the bound, and a different reply there
    // fails the test (a quarter at most; about 15% measured on these
    // turns, with flash attention off). How many replies meet a near tie
    // is not bounded: llama.cpp's batched and one-token passes differ a
    // little in every row, so in a 128-token reply of this small model a
    // near tie often flips.
    eprintln!("{under_bound} of {generated} plain choices are near ties");
    assert!(
        under_bound * 4 <= generated,
        "{under_bound} of {generated} plain choices are under the bound {bound}"
    );
}

#[test]
fn one_sequence_same_replies_in_fewer_decode_calls() {
    same_replies_fewer_passes(1, true);
}

#[test]
fn four_sequences_in_one_batch_same_replies() {
    same_replies_fewer_passes(4, false);
}
