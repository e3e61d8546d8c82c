//! On the real model (SmolLM2-135M-Instruct, fetched by
//! `integrations/fetch-model.sh`): speculative replies (the draft budget
//! on, as the command decodes) against plain ones over real conversations,
//! judged by the near-tie bound measured as the command measures it; the
//! GGUF's configuration against its metadata; the batched / one-token logit
//! noise behind the bound. Without the model these tests fail and say how
//! to fetch it.

use std::path::PathBuf;

use selfspec_candle::chat::{self, Chat, DraftSet, Outcome};
use selfspec_candle::numerics;
use selfspec_candle::tokenizer::Message;
use selfspec_candle::{decode, GgufFile, Representation, TextTokenizer};
use selfspec_conversations::{self as conv, Conversation, Divergence};

/// Tokens a reply may have.
const MAX_TOKENS: usize = 128;

/// The most the near-tie bound may be: the logit noise measured on this
/// model stays below it (`Q8_0` and `F32`, see
/// `the_logit_noise_stays_under_the_ceilings`), and a measured bound above
/// it is not used (the workload's divergences are judged against the
/// ceiling).
fn ceiling(repr: Representation) -> f32 {
    match repr {
        Representation::F32 => 1e-3,
        Representation::Q8_0 | Representation::Native => 1.0,
    }
}

fn model_path() -> PathBuf {
    conv::model_path(None).unwrap_or_else(|e| panic!("{e}"))
}

/// Chat, code-edit and code conversations, cut to keep the test short.
fn workload() -> Vec<Conversation> {
    let data = conv::default_data_dir();
    let read = |name: &str, sessions: usize, turns: usize| {
        let mut c = conv::read(&data.join(name)).expect("the shipped samples");
        c.truncate(sessions);
        c.iter_mut().for_each(|c| c.turns.truncate(turns));
        c
    };
    let mut all = read("sample-chat.text.jsonl", 3, 2);
    all.extend(read("sample-code-edit.text.jsonl", 1, 1));
    all.extend(read("sample-code.text.jsonl", 4, 1));
    all
}

/// Totals of one mode over the workload.
#[derive(Debug, Default)]
struct Totals {
    generated: usize,
    plain_passes: usize,
    spec_passes: usize,
    diverged: usize,
    not_near_tie: usize,
    kinds: Vec<String>,
}

fn decode_workload(repr: Representation, near_tie: f32) -> Totals {
    let mut file = GgufFile::open(&model_path()).unwrap();
    let tokenizer = TextTokenizer::from_gguf(&file).unwrap();
    let mut model = file.model(repr).unwrap();
    let set = DraftSet::from_config("recall", selfspec::Config::recommended()).unwrap();
    let mut chat = Chat::new(&mut model, &tokenizer, vec![set], MAX_TOKENS, true).unwrap();
    let mut t = Totals::default();
    for c in workload() {
        chat.run(&c, |i, outcome| {
            let Outcome::Decoded(turn) = outcome else {
                panic!("{} turn {i} does not fit the context", c.id)
            };
            let spec = &turn.spec[0];
            t.generated += turn.plain.tokens.len();
            t.plain_passes += decode::passes(&turn.plain);
            t.spec_passes += decode::passes(spec);
            let d = chat::divergence(&turn.plain, spec, near_tie);
            if d.diverged() {
                t.diverged += 1;
                eprintln!("{repr}: {} turn {i} differs: {d:?}", c.id);
            }
            if matches!(d, Divergence::NotNearTie { .. }) {
                t.not_near_tie += 1;
            }
            t.kinds.push(c.kind.clone());
        })
        .unwrap();
    }
    eprintln!("{repr}: {t:?}");
    t
}

fn check_workload(t: &Totals) {
    assert!(t.generated >= 1000, "only {} tokens generated", t.generated);
    for kind in ["chat", "code-edit", "code"] {
        assert!(t.kinds.iter().any(|k| k == kind), "no {kind} turn");
    }
    assert!(
        t.spec_passes < t.plain_passes,
        "{} speculative passes, {} plain",
        t.spec_passes,
        t.plain_passes
    );
}

#[test]
fn f32_speculative_replies_equal_plain_replies() {
    // Differences of 1e-4 between batched and one-token logits in f32: a
    // bound of 0 means any difference at all fails.
    let t = decode_workload(Representation::F32, 0.0);
    check_workload(&t);
    assert_eq!(t.diverged, 0, "{t:?}");
}

/// The near-tie bound of `repr` as the command measures it: the first
/// turn, the model's plain reply to it, and caches up to the workload's.
fn measured_bound(repr: Representation) -> f32 {
    let mut file = GgufFile::open(&model_path()).unwrap();
    let tokenizer = TextTokenizer::from_gguf(&file).unwrap();
    let mut model = file.model(repr).unwrap();
    let convs = workload();
    let prompt = tokenizer
        .encode(&tokenizer.render(&[Message::user(&convs[0].turns[0])]))
        .unwrap();
    let reach = chat::cache_reach(&tokenizer, &convs, MAX_TOKENS).unwrap();
    let max_pass = 1 + selfspec::Config::recommended().draft_max;
    let stop = [tokenizer.end_of_turn()];
    let noise = numerics::calibrate(&mut model, &prompt, 128, &stop, max_pass, reach).unwrap();
    eprintln!("{repr}: calibration over caches up to {reach} tokens: {noise:?}");
    // A bound of 0 would make every divergence fail: the measurement must
    // have compared rows.
    assert!(noise.rows > 100, "{noise:?}");
    noise.near_tie_bound()
}

#[test]
fn q8_0_speculative_replies_differ_only_at_near_ties() {
    let measured = measured_bound(Representation::Q8_0);
    let bound = measured.min(ceiling(Representation::Q8_0));
    eprintln!(
        "q8_0: measured near-tie bound {measured}, ceiling {}: judged at {bound}",
        ceiling(Representation::Q8_0)
    );
    let t = decode_workload(Representation::Q8_0, bound);
    check_workload(&t);
    eprintln!(
        "q8_0: {} of {} replies differ from plain decoding, all at a near tie (gap < {bound})",
        t.diverged,
        t.kinds.len()
    );
    assert_eq!(t.not_near_tie, 0, "{t:?}");
}

#[test]
fn the_logit_noise_stays_under_the_ceilings() {
    let mut file = GgufFile::open(&model_path()).unwrap();
    let tokenizer = TextTokenizer::from_gguf(&file).unwrap();
    let c = &workload()[0];
    let prompt = tokenizer
        .encode(&tokenizer.render(&[Message::user(&c.turns[0])]))
        .unwrap();
    for repr in [Representation::Q8_0, Representation::F32] {
        let mut model = file.model(repr).unwrap();
        let mut text = prompt.clone();
        text.extend(decode::plain(&mut model, &prompt, 48).unwrap().tokens);
        let n = numerics::measure(&mut model, &text, prompt.len(), &[2, 5, 17]).unwrap();
        eprintln!("{repr}: {n:?}");
        assert_eq!(n.rows, 3 * 48);
        assert!(
            n.near_tie_bound() < ceiling(repr),
            "{repr}: {n:?} exceeds the ceiling {}",
            ceiling(repr)
        );
    }
}

#[test]
fn the_configuration_is_the_metadata() {
    let mut file = GgufFile::open(&model_path()).unwrap();
    let c = file.config().unwrap();
    let m = |k: &str| file.usize(&format!("llama.{k}")).unwrap();
    assert_eq!(c.hidden_size, m("embedding_length"));
    assert_eq!(c.intermediate_size, m("feed_forward_length"));
    assert_eq!(c.num_hidden_layers, m("block_count"));
    assert_eq!(c.num_attention_heads, m("attention.head_count"));
    assert_eq!(c.kv_heads(), m("attention.head_count_kv"));
    assert_eq!(c.vocab_size, m("vocab_size"));
    assert_eq!(c.max_position_embeddings, Some(m("context_length")));
    assert_eq!(c.head_dim(), m("rope.dimension_count"));
    assert!((c.rope_theta - file.f64_or("llama.rope.freq_base", 0.0).unwrap()).abs() < 1e-3);
    // SmolLM2-135M: 30 layers of width 576, 9 query and 3 key-value heads,
    // the lm_head tied to the embedding, interleaved RoPE (llama.cpp's layout).
    assert_eq!(
        (
            c.num_hidden_layers,
            c.hidden_size,
            c.num_attention_heads,
            c.kv_heads()
        ),
        (30, 576, 9, 3)
    );
    assert!(c.tie_word_embeddings && c.rope_interleaved);
    let model = file.model(Representation::Native).unwrap();
    assert_eq!(model.config(), &c);
}
