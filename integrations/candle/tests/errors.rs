//! Errors say what is wrong; nothing panics on bad input.

mod common;

use selfspec_candle::{prompts, Error, Model, ModelConfig, RandomModel};

#[test]
fn bad_tokens_and_files_are_errors() {
    let random = RandomModel::tiny(1);
    let mut model = common::load(&random);
    assert!(matches!(model.forward(&[]), Err(Error::EmptyPrompt)));
    let e = model.forward(&[1, 500]).unwrap_err();
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

    let dir = common::TempDir::new("errors");
    let missing = dir.0.join("nothing.safetensors");
    assert!(matches!(
        Model::load(&missing, &random.config),
        Err(Error::Weights { .. })
    ));
    let cfg = dir.0.join("config.json");
    std::fs::write(&cfg, "{\"hidden_size\": 64}").unwrap();
    assert!(matches!(
        ModelConfig::from_file(&cfg),
        Err(Error::ConfigJson { .. })
    ));

    // Weights of another shape: a missing or mis-shaped tensor is named.
    let (weights, _) = random.write(&dir.0).unwrap();
    let mut other = random.config.clone();
    other.hidden_size = 32;
    let e = Model::load(&weights, &other).unwrap_err();
    assert!(e.to_string().contains("model.safetensors"), "{e}");

    let mut bad = random.config.clone();
    bad.num_key_value_heads = Some(3);
    assert!(matches!(bad.validate(), Err(Error::Config(_))));
}

#[test]
fn prompts_parse() {
    assert_eq!(prompts::parse_ids("1, 2 3,4").unwrap(), vec![1, 2, 3, 4]);
    assert!(prompts::parse_ids("1 x").is_err());
    assert!(prompts::parse_ids(" ,").is_err());
    let text = "{\"prompt\": [1, 2]}\n\n{\"prompt\": \"hi\"}\n{\"requests\": [{\"prompt\": [3]}, {\"prompt\": [4, 5]}]}\n";
    assert_eq!(
        prompts::parse_jsonl(text).unwrap(),
        vec![
            prompts::Prompt::Tokens(vec![1, 2]),
            prompts::Prompt::Text("hi".into()),
            prompts::Prompt::Tokens(vec![3]),
            prompts::Prompt::Tokens(vec![4, 5]),
        ]
    );
    let e = prompts::parse_jsonl("{\"prompt\": [1]}\n{\"x\": 1}\n").unwrap_err();
    assert!(e.to_string().contains("line 2"), "{e}");
    assert!(prompts::parse_jsonl("{\"prompt\": [-1]}").is_err());
}

#[test]
fn tied_embeddings_load_without_lm_head() {
    let mut random = RandomModel::tiny(2);
    random.config.tie_word_embeddings = true;
    let mut model = common::load(&random);
    assert_eq!(model.forward(&[1, 2]).unwrap().dims(), &[2, 128]);
}
