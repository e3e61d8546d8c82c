//! selfspec's self-speculative decoding on a llama.cpp context you made:
//! your model, your context parameters (threads, GPU layers, flash
//! attention, `n_seq_max`, batch size), your sequence ids, llama.cpp's
//! sampler settings, your GPU backend.
//!
//! [`LlamaTarget`] is a `llama-cpp-2`
//! [`LlamaContext`](llama_cpp_2::context::LlamaContext) as selfspec's
//! [`Target`](selfspec::step::Target): a forward pass is one
//! `llama_decode` of a batch of rows of several sequences, a row's logits
//! `llama_get_logits_ith`, a rollback `llama_memory_seq_rm`. selfspec's
//! [`Stepper`](selfspec::step::Stepper) drives it: each step drafts from
//! every live sequence's token history (no draft model), puts all their
//! rows in one pass, verifies each draft (greedily, or sampled with the
//! exact distribution of plain sampling), keeps the accepted tokens, rolls
//! the rejected ones out of the KV cache and sizes the next drafts for the
//! whole batch from the pass times it measures.
//!
//! ```no_run
//! use llama_cpp_2::context::params::LlamaContextParams;
//! use llama_cpp_2::llama_backend::LlamaBackend;
//! use llama_cpp_2::model::{params::LlamaModelParams, LlamaModel};
//! use selfspec::step::{Decode, PassTimes, Sampler, SeqId, Stepper};
//! use selfspec::{Config, Shared, Speculative};
//! use selfspec_llama_cpp::{end_tokens, tokenize, LlamaTarget, Options, TextStream};
//!
//! // Your backend, model and context, with your own parameters.
//! let backend = LlamaBackend::init()?;
//! let model = LlamaModel::load_from_file(&backend, "model.gguf", &LlamaModelParams::default())?;
//! let params = LlamaContextParams::default().with_n_seq_max(4);
//! let mut ctx = model.new_context(&backend, params.clone())?;
//!
//! // Its sequences 0..4 as a target; a stepper over it.
//! let mut target = LlamaTarget::new(&model, &mut ctx, Options::new(&params))?;
//! let mut stepper = Stepper::new(&target)?
//!     .with_stop_tokens(&end_tokens(&model))
//!     .with_budget(PassTimes::new());
//! let config = Config::recommended();
//! let shared = Shared::new(&config)?; // one per engine: every request drafts on it
//!
//! let prompt = tokenize(&model, "<|im_start|>user\nCount to ten.<|im_end|>\n<|im_start|>assistant\n");
//! let sampling = Sampler { temperature: 0.8, top_k: 40, top_p: 0.95, min_p: 0.05, seed: 7 };
//! let spec = Speculative::with_shared(&config, &shared)?;
//! stepper.start(SeqId::new(0), &prompt, Decode::sampled(256, sampling), Some(spec))?;
//!
//! let mut text = TextStream::new();
//! while stepper.is_running() {
//!     stepper.step(&mut target)?;
//!     for event in stepper.events() {
//!         print!("{}", text.push(&model, event.token)); // as each token is accepted
//!     }
//! }
//! let done = stepper.finished().next().expect("the request ended");
//! println!("\n{} tokens in {} passes", done.reply.tokens.len(), done.reply.decode_passes);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Features `openmp`, `cuda`, `metal` and `vulkan` are forwarded to
//! `llama-cpp-2`; an engine that depends on `llama-cpp-2` itself may set
//! them there instead (Cargo builds one `llama-cpp-2` for both).

#![deny(missing_docs)]

mod error;
mod options;
mod saved;
mod target;
mod text;

pub use error::Error;
pub use options::Options;
pub use saved::SavedSeq;
pub use target::LlamaTarget;
pub use text::TextStream;

use llama_cpp_2::model::LlamaModel;
use llama_cpp_2::token::LlamaToken;

/// The tokens of `text` as the stepper takes them: special tokens such as
/// `<|im_start|>` parsed, a BOS token added when the model asks for one.
#[must_use]
pub fn tokenize(model: &LlamaModel, text: &str) -> Vec<u32> {
    let vocab = model.vocab();
    vocab
        .tokenize(text.as_bytes(), vocab.should_add_bos(), true)
        .into_iter()
        .filter_map(|t| u32::try_from(t.0).ok())
        .collect()
}

/// Every token of `model` that ends a turn (llama.cpp's end-of-generation
/// tokens: `<|im_end|>`, EOS, ...): the stepper's stop tokens
/// ([`Stepper::with_stop_tokens`](selfspec::step::Stepper::with_stop_tokens)).
#[must_use]
pub fn end_tokens(model: &LlamaModel) -> Vec<u32> {
    let vocab = model.vocab();
    (0..model.n_vocab())
        .filter(|&t| vocab.is_eog(LlamaToken(t)))
        .filter_map(|t| u32::try_from(t).ok())
        .collect()
}
