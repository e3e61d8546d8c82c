//! An engine on [`selfspec_llama_cpp`] (the adapter of a llama.cpp
//! context to selfspec's stepper), and the command that measures it: the
//! model, the batch, the KV cache and the logits are llama.cpp's;
//! selfspec's [`Stepper`](selfspec::step::Stepper) drafts, verifies and
//! rolls back.
//!
//! [`Model`] loads a GGUF file with its chat template;
//! [`selfspec_llama_cpp::LlamaTarget`] is S sequences of one context the
//! [`Decoder`] makes ([`Settings`]), as selfspec's
//! [`Target`](selfspec::step::Target). A [`Decoder`] drives it with a stepper: each [`Decoder::step`] puts every
//! live sequence's `[last] + draft` (or its prompt's next chunk) into one
//! batch, decodes once, and the stepper verifies each sequence greedily,
//! removes its rejected positions and tells its [`selfspec::Speculative`]
//! how many were kept. Its draft budget (on by default,
//! [`Decoder::with_budget`]) keeps, of every drafted token in the batch,
//! those that pay for their rows, from the pass times it measures as it
//! decodes. A slot without a `Speculative` decodes plainly, one token a
//! step: the baseline, in the same engine.
//!
//! ```no_run
//! use selfspec::{Config, Shared, Speculative};
//! use selfspec_llama_cpp_engine::{Decoder, Message, Model, Role, Settings};
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
mod prices;
pub mod record;
pub mod run;

pub use decoder::{Counters, Decoder, Reference, Settings};
pub use error::Error;
pub use model::{Message, Model, Role};
pub use prices::Prices;
pub use selfspec::step::{Finished, Reply, Stop};
pub use selfspec_conversations::argmax_gap;
