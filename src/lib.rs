//! Self-speculative decoding for LLM inference engines: draft tokens from the
//! token history, no draft model.
//!
//! On every decoding step the engine asks a [`Speculative`] for a *draft*: tokens
//! that likely follow, found by matching the last few tokens (an n-gram) against
//! what the target model has already seen. The engine verifies the draft in one
//! batched forward pass and keeps the longest accepted prefix; every accepted
//! token is a forward pass saved. Code rewrites, summaries, RAG answers, agent
//! loops and reasoning models that repeat themselves gain the most.
//!
//! The llama.cpp strategies are exact ports of its draftless ones
//! (`--spec-type ngram-simple | ngram-map-k | ngram-map-k4v | ngram-mod |
//! ngram-cache`), checked draft for draft against traces of llama.cpp's own
//! code, and of its orchestrator, which chains them and keeps its statistics;
//! they cost the same at any history length. [`Config::recommended()`] uses
//! selfspec's own drafter, `recall`, which drafts more and better than any of
//! them (see the README's figures).
//!
//! | strategy | wins when | state |
//! |---|---|---|
//! | [`ngram-simple`](strategies::NgramSimple) | long verbatim repeats (code edits, quoting) | position index of the history |
//! | [`ngram-map-k`](strategies::NgramMap) | the same, adapting the draft length to past acceptance | hash index + key records |
//! | [`ngram-map-k4v`](strategies::NgramMap) | keys with one dominant continuation; high acceptance | same, 4 values per key |
//! | [`ngram-mod`](strategies::NgramMod) | text seen in *other* sequences (shared pool) | one pool per engine |
//! | [`ngram-cache`](strategies::NgramCache) | llama.cpp's lookup decoding, with its cache files | n-gram follower counts |
//! | [`recall`](strategies::Recall) | selfspec's own: chat and code edits alike (`Config::recommended()`) | everything seen, bounded |
//!
//! # Example: an engine loop
//!
//! ```
//! use selfspec::{Config, Speculative, Strategy, Token};
//!
//! // What the target model will generate (a mock: greedy verification against it).
//! let target: Vec<Token> = [10, 11, 12, 13, 14, 15, 16, 17].repeat(8);
//! let prompt = &target[..24];
//!
//! let config = Config::new([Strategy::NgramSimple { n: 3, m: 8 }]);
//! let mut spec = Speculative::new(&config)?;
//! spec.begin(prompt);
//!
//! let mut history = prompt.to_vec();
//! let mut forward_passes = 0;
//! while history.len() < target.len() {
//!     let last = target[history.len()]; // the token the target just sampled
//!     let draft = spec.draft(&history, last);
//!     // Verify: keep the draft's longest prefix that matches the target.
//!     let truth = &target[history.len() + 1..];
//!     let n_accepted = draft.iter().zip(truth).take_while(|(d, t)| d == t).count();
//!     spec.accept(n_accepted);
//!     history.push(last);
//!     history.extend_from_slice(&truth[..n_accepted]);
//!     forward_passes += 1;
//! }
//! assert!(forward_passes < (target.len() - prompt.len()) / 2);
//! for stats in spec.stats() {
//!     println!("{stats}"); // statistics ngram_simple: #calls(b,g,a) = ...
//! }
//! # Ok::<(), selfspec::Error>(())
//! ```
//!
//! [`verify`] turns the target's output over `[last] + draft` into the number
//! of accepted tokens and the next token, for greedy decoding and for
//! sampling (speculative sampling, exact in distribution).
//!
//! # Sharing
//!
//! Build one [`Shared`] per engine (`Clone + Send + Sync`): it holds what is
//! learned across sequences (ngram-mod's pool, recall's memory of earlier
//! requests and its calibration). Build one [`Speculative`] per sequence or
//! per request on it with [`Speculative::with_shared`], on any thread;
//! [`Speculative::new`] makes a private one. [`Shared::save`] and
//! [`Shared::load`] carry it across restarts.
//!
//! # Token ids
//!
//! [`Token`] is `u32`. Engines with `i32` ids convert with `as u32`: hashes
//! treat ids as llama.cpp treats its `i32` tokens. Or they keep no `u32` copy
//! of the history: [`Speculative::begin_owned`] and
//! [`Speculative::draft_next`] take `i32` ids as they are ([`IntoToken`]) and
//! the `Speculative` keeps the history. The id `u32::MAX` (`-1`) is
//! ngram-mod's empty-cell marker and is never stored in its pool.

#![forbid(unsafe_code)]

pub mod config;
mod drafter;
mod error;
mod index;
#[cfg(feature = "replay")]
pub mod replay;
mod shared;
mod speculative;
mod stats;
pub mod strategies;
mod sync;
pub mod verify;

pub use config::{Config, Strategy};
pub use drafter::{DraftLimits, Drafter, IntoToken, Token};
pub use error::{CacheFileProblem, Error, MemoryFileProblem};
pub use shared::{Budget, Shared, SharedBuilder, SharedStats};
pub use speculative::Speculative;
pub use stats::DrafterStats;
pub use strategies::NgramPool;

/// The README's Rust blocks, compiled and run as doc tests (`cargo test --doc`).
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
