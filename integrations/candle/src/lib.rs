//! selfspec inside a candle decoder: a small Llama-family model on candle's
//! CPU device with a truncatable KV cache ([`Model`]), which is a
//! [`selfspec::step::Target`] (one sequence) driven by selfspec's
//! [`Stepper`](selfspec::step::Stepper) for plain and self-speculative
//! greedy decoding ([`decode`], drafts sized by selfspec's draft budget),
//! the near-tie bound measured on the model ([`numerics`]), and seeded
//! random test models ([`RandomModel`]).
//!
//! ```
//! use selfspec_candle::decode::{self, Sizing};
//! use selfspec_candle::{Model, RandomModel};
//!
//! let random = RandomModel::tiny(1);
//! let mut model = Model::from_tensors(random.tensors()?, &random.config)?;
//! let config = selfspec::Config::recommended();
//! let shared = selfspec::Shared::new(&config)?;
//! let prompt: Vec<u32> = (0..40).map(|i| i % 10).collect();
//! let plain = decode::plain(&mut model, &prompt, 32)?;
//! let spec = decode::speculative(&mut model, &config, &shared, &prompt, 32, Sizing::Budget)?;
//! assert_eq!(plain.tokens, spec.tokens);
//! # Ok::<(), selfspec_candle::Error>(())
//! ```
#![deny(missing_docs)]
#![forbid(unsafe_code)]

pub mod chat;
mod config;
pub mod decode;
mod error;
pub mod gguf;
mod kv;
mod model;
pub mod numerics;
pub mod prompts;
pub mod random;
mod target;
pub mod tokenizer;

pub use config::ModelConfig;
pub use error::Error;
pub use gguf::{GgufFile, Representation};
pub use model::{LayerCache, Model};
pub use random::RandomModel;
pub use tokenizer::TextTokenizer;
