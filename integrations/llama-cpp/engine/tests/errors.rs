//! What cannot be decoded gives a typed error, never a panic, and leaves the
//! other sequences decoding as if it had not been asked for.

mod common;

use std::path::Path;

use selfspec_conversations::Conversation;
use selfspec_llama_cpp_engine::run::decode_pass;
use selfspec_llama_cpp_engine::{Decoder, Error, Message, Model, Role, Settings, Stop};

fn temp_file(name: &str, bytes: &[u8]) -> std::path::PathBuf {
    let path =
        std::env::temp_dir().join(format!("selfspec-llama-cpp-{}-{name}", std::process::id()));
    std::fs::write(&path, bytes).unwrap();
    path
}

#[test]
fn a_missing_model_says_how_to_fetch_it() {
    let e = Model::load(Path::new("/nonexistent/model.gguf")).unwrap_err();
    assert!(matches!(e, Error::ModelMissing { .. }), "{e:?}");
    assert!(e.to_string().contains("integrations/fetch-model.sh"), "{e}");
}

#[test]
fn a_file_that_is_not_gguf_is_refused() {
    let text = temp_file("text.gguf", b"this is not a model\n");
    let e = Model::load(&text).unwrap_err();
    assert!(matches!(e, Error::NotGguf { .. }), "{e:?}");
    assert!(e.to_string().contains("GGUF"), "{e}");
    let empty = temp_file("empty.gguf", b"");
    assert!(matches!(Model::load(&empty), Err(Error::NotGguf { .. })));
    // The magic bytes and nothing a model needs: llama.cpp refuses it.
    let mut fake = b"GGUF".to_vec();
    fake.extend_from_slice(&[3, 0, 0, 0]);
    fake.extend_from_slice(&[0xff; 64]);
    let fake = temp_file("fake.gguf", &fake);
    assert!(matches!(Model::load(&fake), Err(Error::Load { .. })));
    for p in [text, empty, fake] {
        let _ = std::fs::remove_file(p);
    }
}

fn solo_reply(model: &Model, prompt: &[u32]) -> Vec<u32> {
    let mut d = Decoder::new(
        model,
        Settings {
            sequences: 1,
            context: 512,
            threads: 2,
            batch: 512,
            step_tokens: 63,
            flash_attention: false,
            kv_unified: false,
        },
    )
    .unwrap();
    d.start(0, prompt, 48, None).unwrap();
    let mut finished = Vec::new();
    while d.any_busy() {
        d.step(&mut finished).unwrap();
    }
    finished.remove(0).reply.tokens
}

#[test]
fn a_prompt_over_the_context_is_refused_and_the_other_sequence_goes_on() {
    let model = common::model();
    let settings = Settings {
        sequences: 2,
        context: 512,
        threads: 2,
        batch: 512,
        step_tokens: 63,
        flash_attention: false,
        kv_unified: false,
    };
    let mut d = Decoder::new(&model, settings).unwrap();
    let prompt = model
        .chat_prompt(&[Message {
            role: Role::User,
            content: "Name three colours.",
        }])
        .unwrap();
    let long: Vec<u32> = prompt.iter().copied().cycle().take(600).collect();

    d.start(0, &prompt, 48, None).unwrap();
    let e = d.start(1, &long, 48, None).unwrap_err();
    assert!(
        matches!(
            e,
            Error::PromptTooLong {
                tokens: 600,
                context: 512
            }
        ),
        "{e:?}"
    );
    assert!(!d.is_busy(1));
    assert!(matches!(
        d.start(0, &prompt, 48, None),
        Err(Error::Slot { .. })
    ));
    assert!(matches!(
        d.start(7, &prompt, 48, None),
        Err(Error::Slot { .. })
    ));
    assert!(matches!(d.start(1, &[], 48, None), Err(Error::EmptyPrompt)));
    let vocab = u32::try_from(model.n_vocab()).unwrap();
    assert!(matches!(
        d.start(1, &[vocab], 48, None),
        Err(Error::TokenOutOfRange { .. })
    ));

    let mut finished = Vec::new();
    while d.any_busy() {
        d.step(&mut finished).unwrap();
    }
    assert_eq!(finished.len(), 1);
    assert_eq!(finished[0].seq.index(), 0);
    assert_eq!(finished[0].reply.tokens, solo_reply(&model, &prompt));
}

#[test]
fn a_reply_stops_at_the_end_of_the_context() {
    let model = common::model();
    let settings = Settings {
        sequences: 1,
        context: 64,
        threads: 2,
        batch: 64,
        step_tokens: 63,
        flash_attention: false,
        kv_unified: false,
    };
    let mut d = Decoder::new(&model, settings).unwrap();
    let prompt = model
        .chat_prompt(&[Message {
            role: Role::User,
            content: "Count from one to one hundred in words.",
        }])
        .unwrap();
    d.start(0, &prompt, 1000, None).unwrap();
    let mut finished = Vec::new();
    while d.any_busy() {
        d.step(&mut finished).unwrap();
    }
    let reply = &finished[0].reply;
    if reply.stop == Stop::ContextFull {
        assert_eq!(prompt.len() + reply.tokens.len(), 64 + 1);
    } else {
        assert_eq!(reply.stop, Stop::StopToken);
    }
}

#[test]
fn a_conversation_over_the_context_is_skipped_and_counted() {
    let model = common::model();
    let settings = Settings {
        sequences: 2,
        context: 256,
        threads: 2,
        batch: 256,
        step_tokens: 63,
        flash_attention: false,
        kv_unified: false,
    };
    let mut d = Decoder::new(&model, settings).unwrap();
    let conv = |id: &str, turn: String| Conversation {
        id: id.into(),
        kind: "chat".into(),
        turns: vec![turn],
    };
    let convs = [
        conv("long", "word ".repeat(400)),
        conv("short", "Say yes.".into()),
    ];
    let refs: Vec<&Conversation> = convs.iter().collect();
    let pass = decode_pass(&mut d, &refs, 16, None, None).unwrap();
    assert!(pass.replies[0][0].is_none());
    let short = pass.replies[1][0].as_ref().unwrap();
    assert!(!short.tokens.is_empty());
}

#[test]
fn bad_settings_are_typed_errors() {
    let model = common::model();
    let bad = [
        Settings {
            sequences: 0,
            ..Settings::default()
        },
        Settings {
            context: 4,
            ..Settings::default()
        },
        Settings {
            threads: 0,
            ..Settings::default()
        },
        Settings {
            sequences: 8,
            batch: 8,
            ..Settings::default()
        },
    ];
    for s in bad {
        assert!(
            matches!(Decoder::new(&model, s), Err(Error::Setting { .. })),
            "{s:?}"
        );
    }
}
