//! The tokenizer made from the real model's GGUF: round trips, the ids its
//! vocabulary gives, and the chat template. Without the model these tests
//! fail and say how to fetch it.

use selfspec_candle::tokenizer::{Message, TextTokenizer};
use selfspec_candle::GgufFile;

fn tokenizer() -> TextTokenizer {
    let path = selfspec_conversations::model_path(None).unwrap_or_else(|e| panic!("{e}"));
    TextTokenizer::from_gguf(&GgufFile::open(&path).unwrap()).unwrap()
}

/// The ids of byte-level token strings (`Ġ` a space, `Ċ` a newline), as the
/// GGUF's vocabulary lists them.
fn ids(tok: &TextTokenizer, tokens: &[&str]) -> Vec<u32> {
    tokens
        .iter()
        .map(|t| {
            tok.token_id(t)
                .unwrap_or_else(|| panic!("{t:?} is not in the vocabulary"))
        })
        .collect()
}

#[test]
fn text_round_trips() {
    let tok = tokenizer();
    let texts = [
        "fn main() {\n    println!(\"{}\", 1 + 2);\n}\n",
        "a    b\n\n\n\tc  \t d   ",
        "   leading and trailing   ",
        "héllo wörld, 日本語のテキスト, emoji 🎉🦀, Ω≈ç√",
        "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n",
        "x = 1234567890; y = 3.14159e-10",
        "",
    ];
    for text in texts {
        let ids = tok.encode(text).unwrap();
        assert_eq!(tok.decode(&ids).unwrap(), text, "{ids:?}");
    }
}

#[test]
fn ids_are_the_vocabulary_s() {
    let tok = tokenizer();
    let cases: &[(&str, &[&str])] = &[
        // Special tokens are their own ids, wherever they are.
        ("<|im_start|>", &["<|im_start|>"]),
        ("a<|im_end|>b", &["a", "<|im_end|>", "b"]),
        // Digits one by one.
        ("2024", &["2", "0", "2", "4"]),
        ("x10", &["x", "1", "0"]),
        // No prefix space; a space joins the next word.
        ("hello world", &["hello", "Ġworld"]),
        (" hello", &["Ġhello"]),
        ("Hi\nthere", &["Hi", "Ċ", "there"]),
    ];
    for (text, tokens) in cases {
        assert_eq!(tok.encode(text).unwrap(), ids(&tok, tokens), "{text:?}");
    }
    assert_eq!(tok.end_of_turn(), ids(&tok, &["<|im_end|>"])[0]);
    assert_eq!(tok.end_of_turn(), 2);
}

#[test]
fn the_chat_template_renders_two_turns_as_chatml() {
    let tok = tokenizer();
    let system = tok
        .default_system()
        .expect("SmolLM2's template has a default system prompt");
    assert!(
        system.starts_with("You are a helpful AI assistant"),
        "{system}"
    );
    let messages = [
        Message::user("Hi"),
        Message::assistant("Hello"),
        Message::user("Hi"),
    ];
    let text = tok.render(&messages);
    assert_eq!(
        text,
        format!(
            "<|im_start|>system\n{system}<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n\
             <|im_start|>assistant\nHello<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n\
             <|im_start|>assistant\n"
        )
    );
    let got = tok.encode(&text).unwrap();
    // ("assistant" is not one token of this vocabulary: "ass" + "istant".)
    let system_ids = tok.encode(system).unwrap();
    let mut want = ids(&tok, &["<|im_start|>", "system", "Ċ"]);
    want.extend(&system_ids);
    want.extend(ids(
        &tok,
        &[
            "<|im_end|>",
            "Ċ",
            "<|im_start|>",
            "user",
            "Ċ",
            "Hi",
            "<|im_end|>",
            "Ċ",
            "<|im_start|>",
            "ass",
            "istant",
            "Ċ",
            "Hello",
            "<|im_end|>",
            "Ċ",
            "<|im_start|>",
            "user",
            "Ċ",
            "Hi",
            "<|im_end|>",
            "Ċ",
            "<|im_start|>",
            "ass",
            "istant",
            "Ċ",
        ],
    ));
    assert_eq!(got, want);
    // A system message given replaces the default one.
    let own = tok.render(&[
        Message {
            role: selfspec_candle::tokenizer::Role::System,
            content: "Be brief.".into(),
        },
        Message::user("Hi"),
    ]);
    assert!(own.starts_with("<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi"));
    assert!(!own.contains(system));
}
