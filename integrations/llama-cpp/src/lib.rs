//! selfspec's drafts verified inside llama.cpp's engine, through the
//! `llama-cpp-2` crate: the model, the batch, the KV cache and the logits
//! are llama.cpp's; selfspec proposes the drafts and
//! [`selfspec::verify::greedy_next`] checks them.
//!
//! A [`Decoder`] holds S sequences of one llama.cpp context. Each
//! [`Decoder::step`] puts every live sequence's `[last] + draft` into one
//! `llama_batch` (logits for every position), decodes once, verifies each
//! sequence greedily, removes its rejected positions from the KV cache
//! (`llama_memory_seq_rm`) and tells its [`selfspec::Speculative`] how many
//! were kept. A slot without a `Speculative` decodes plainly, one token a
//! step: the baseline, in the same engine.
//!
//! ```no_run
//! use selfspec::{Config, Shared, Speculative};
//! use selfspec_llama_cpp::{Decoder, Message, Model, Role, Settings};
//!
//! let model = Model::load("SmolLM2-135M-Instruct.Q4_1.gguf".as_ref())?;
//! let mut decoder = Decoder::new(&model, Settings { sequences: 4, ..Settings::default() })?;
//! let config = Config::recommended();
//! let shared = Shared::new(&config)?; // one per engine: every sequence drafts on it
//! let prompt = model.chat_prompt(&[Message { role: Role::User, content: "Write a haiku." }])?;
//! for slot in 0..4 {
//!     decoder.start(slot, &prompt, 64, Some(Speculative::with_shared(&config, &shared)?))?;
//! }
//! let mut finished = Vec::new();
//! while decoder.any_busy() {
//!     decoder.step(&mut finished)?; // one llama_decode for the four sequences
//! }
//! println!("{}", model.text(&finished[0].reply.tokens));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![deny(missing_docs)]

pub mod cost;
mod decoder;
mod error;
mod model;
pub mod run;

pub use decoder::{Counters, Decoder, Finished, Pacing, Reply, Settings, Stop};
pub use error::Error;
pub use model::{Message, Model, Role};
pub use selfspec_conversations::argmax_gap;
