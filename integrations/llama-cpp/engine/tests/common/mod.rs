//! The real model and the repository's text conversations for the tests.

#![allow(dead_code)]

use std::path::PathBuf;

use selfspec_conversations as conv;
use selfspec_llama_cpp_engine::{Model, Settings};

/// The real model; a missing file fails the test with the fetch command.
pub fn model() -> Model {
    let path = conv::model_path(None).unwrap_or_else(|e| panic!("{e}"));
    Model::load(&path).unwrap_or_else(|e| panic!("{e}"))
}

/// `integrations/data/FILE`.
pub fn data(file: &str) -> PathBuf {
    conv::default_data_dir().join(file)
}

/// The first `n` conversations of `file`.
pub fn conversations(file: &str, n: usize) -> Vec<conv::Conversation> {
    let source = conv::Source {
        path: data(file),
        limit: Some(n),
    };
    conv::load(&[source]).unwrap_or_else(|e| panic!("{e}"))
}

/// Two threads (CI's machines), `sequences` sequences of 4096 tokens.
pub fn settings(sequences: usize) -> Settings {
    Settings {
        sequences,
        context: 4096,
        threads: 2,
        batch: 1024,
        step_tokens: 63,
        flash_attention: false,
        kv_unified: false,
    }
}
