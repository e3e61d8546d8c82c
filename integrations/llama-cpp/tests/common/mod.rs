//! What a user of the adapter has: llama.cpp's backend, a model and a
//! context made with llama-cpp-2 directly, with their own parameters; the
//! repository's text conversations as prompts.

#![allow(dead_code)]

use std::num::NonZeroU32;
use std::sync::OnceLock;

use llama_cpp_2::context::params::LlamaContextParams;
use llama_cpp_2::context::LlamaContext;
use llama_cpp_2::llama_backend::LlamaBackend;
use llama_cpp_2::model::params::LlamaModelParams;
use llama_cpp_2::model::{LlamaChatMessage, LlamaModel};
use selfspec_conversations as conv;
use selfspec_llama_cpp::tokenize;

pub fn backend() -> &'static LlamaBackend {
    static BACKEND: OnceLock<LlamaBackend> = OnceLock::new();
    BACKEND.get_or_init(|| {
        let mut b = LlamaBackend::init().expect("llama.cpp's backend");
        b.void_logs();
        b
    })
}

/// The real model; a missing file fails the test with the fetch command.
pub fn model() -> LlamaModel {
    let path = conv::model_path(None).unwrap_or_else(|e| panic!("{e}"));
    LlamaModel::load_from_file(backend(), path, &LlamaModelParams::default()).unwrap()
}

/// A context of `n_ctx` positions for `n_seq_max` sequences, two threads,
/// flash attention off (CPU), a batch of 512.
pub fn context(
    model: &LlamaModel,
    n_ctx: u32,
    n_seq_max: u32,
) -> (LlamaContext<'_>, LlamaContextParams) {
    let params = LlamaContextParams::default()
        .with_n_ctx(NonZeroU32::new(n_ctx))
        .with_n_batch(512)
        .with_n_seq_max(n_seq_max)
        .with_n_threads(2)
        .with_n_threads_batch(2)
        .with_flash_attention_policy(llama_cpp_sys_2::LLAMA_FLASH_ATTN_TYPE_DISABLED);
    (
        model.new_context(backend(), params.clone()).unwrap(),
        params,
    )
}

/// The prompt of `text` as a user's turn, with the model's chat template.
pub fn chat(model: &LlamaModel, text: &str) -> Vec<u32> {
    let template = model.chat_template(None).unwrap();
    let chat = [LlamaChatMessage::new("user".into(), text.into()).unwrap()];
    tokenize(
        model,
        &model.apply_chat_template(&template, &chat, true).unwrap(),
    )
}

/// The first user turns of the first `n` conversations of
/// `integrations/data/FILE`.
pub fn first_turns(file: &str, n: usize) -> Vec<String> {
    let source = conv::Source {
        path: conv::default_data_dir().join(file),
        limit: Some(n),
    };
    conv::load(&[source])
        .unwrap_or_else(|e| panic!("{e}"))
        .into_iter()
        .map(|c| c.turns[0].clone())
        .collect()
}
