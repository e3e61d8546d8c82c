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
//! # Example: an engine loop
//!
//! One [`Shared`] per engine, one [`Speculative`] per sequence or request on
//! it (any thread), and four calls per request:
//!
//! ```
//! use selfspec::{verify, Config, Shared, Speculative, Token};
//!
//! // A mock target model: its greedy choice after `t` (a real engine runs
//! // one batched forward pass over `[last] + draft` instead).
//! let argmax_after = |t: Token| (t * 7 + 3) % 50;
//!
//! let config = Config::recommended();
//! let shared = Shared::new(&config)?; // once per engine
//! for request in 0..3 {
//!     let mut spec = Speculative::with_shared(&config, &shared)?; // per request
//!     let mut history: Vec<Token> = vec![request, 1, 2, 3];       // the prompt, evaluated
//!     spec.begin(&history);
//!     let mut last = argmax_after(*history.last().unwrap());      // sampled after prefill
//!     let mut forward_passes = 0;
//!     while history.len() < 200 {
//!         let draft = spec.draft(&history, last);
//!         // One forward pass over [last] + draft: the target's choice per position.
//!         let rows: Vec<Token> = std::iter::once(last).chain(draft.iter().copied()).map(argmax_after).collect();
//!         let v = verify::greedy_next(draft, &rows).expect("one row more than the draft");
//!         history.push(last);
//!         history.extend_from_slice(&draft[..v.n_accepted]);
//!         spec.accept(v.n_accepted);
//!         last = v.next_token;
//!         forward_passes += 1;
//!     }
//!     spec.end_request(); // its tokens join the engine-wide memory
//!     assert!(forward_passes < 100, "drafts were accepted");
//! }
//! # Ok::<(), selfspec::Error>(())
//! ```
//!
//! # Engine hooks
//!
//! | engine hook | selfspec call |
//! |---|---|
//! | engine starts | `Shared::new(&config)?`, or [`Shared::builder()`](Shared::builder) `.budget(..).load_or_create(path).build(&config)?` |
//! | request created | [`Speculative::with_shared(&config, &shared)?`](Speculative::with_shared) (any thread) |
//! | prefill | [`spec.begin(&prompt)`](Speculative::begin): the whole history the target holds |
//! | propose, after sampling `last` | [`spec.draft(&history, last)`](Speculative::draft): `history` without `last` |
//! | verify (one batched pass over `[last] + draft`) | [`verify::greedy_next`] or [`verify::sampled`] |
//! | commit | `history += [last] + draft[..n]`, then [`spec.accept(n)`](Speculative::accept) |
//! | sequence forks (`n > 1`, beam search) | [`spec.fork()`](Speculative::fork) |
//! | request ends | [`spec.end_request()`](Speculative::end_request) |
//! | monitoring, shutdown | [`spec.stats()`](Speculative::stats), [`shared.stats()`](Shared::stats), [`shared.save(path)?`](Shared::save) |
//!
//! # Strategies
//!
//! [`Config::recommended()`] uses selfspec's own drafter, `recall`. The
//! llama.cpp strategies are exact ports of its draftless ones
//! (`--spec-type ngram-simple | ngram-map-k | ngram-map-k4v | ngram-mod |
//! ngram-cache`), checked draft for draft against traces of llama.cpp's own
//! code, and of its orchestrator, which chains them and keeps its
//! statistics; they cost the same at any history length.
//!
//! | strategy | wins when | state |
//! |---|---|---|
//! | [`recall`](strategies::Recall) | chat, code, code edits, agents (`Config::recommended()`) | everything seen, bounded ([`Budget`]) |
//! | [`ngram-simple`](strategies::NgramSimple) | long verbatim repeats (code edits, quoting) | position index of the history |
//! | [`ngram-map-k`](strategies::NgramMap) | the same, adapting the draft length to past acceptance | hash index + key records |
//! | [`ngram-map-k4v`](strategies::NgramMap) | keys with one dominant continuation; high acceptance | same, 4 values per key |
//! | [`ngram-mod`](strategies::NgramMod) | text seen in *other* sequences (shared pool) | one pool per engine |
//! | [`ngram-cache`](strategies::NgramCache) | llama.cpp's lookup decoding, with its cache files | n-gram follower counts |
//!
//! Engines chain their own drafters (a draft model included) with these
//! through the object-safe [`Drafter`] trait and [`Speculative::from_drafters`].
//!
//! # Token ids
//!
//! [`Token`] is `u32`. The [`step`] module is the recommended way to drive
//! an engine: it implements [`step::Target`] and a [`step::Stepper`]
//! drafts, verifies, commits and rolls back for every sequence. The
//! stepper takes and returns `u32` ids (prompts, the batch's rows, the
//! replies); an engine with `i32` ids (llama.cpp bindings) converts at its
//! `Target` with [`IntoToken`] (`id.into_token()`, `i32::from_token(t)`:
//! the same bits, so the hashes see an id as llama.cpp does and the drafts
//! are the same). An engine that keeps its own loop can let a
//! [`Speculative`] keep the history instead: the owned-history API
//! ([`Speculative::begin_owned`], [`Speculative::draft_next`]) and
//! [`verify`] take and return its ids as they are.
//!
//! # Features
//!
//! - `serde`: `Serialize` / `Deserialize` for configurations and statistics.
//!
//! The evaluation harness (the workload format, the replay protocol and the
//! tools that print tau per strategy) is the repository's `selfspec-eval`
//! package, not part of this crate.

#![forbid(unsafe_code)]

mod config;
mod drafter;
mod error;
mod index;
mod int;
pub mod limits;
mod shared;
mod speculative;
mod stats;
pub mod step;
pub mod strategies;
mod sync;
mod token;
pub mod verify;

pub use config::{Config, Strategy};
pub use drafter::{DraftLimits, Drafter};
pub use error::{CacheFileProblem, Error, MemoryFileProblem};
pub use shared::{Budget, Cursor, Shared, SharedBuilder, SharedStats};
pub use speculative::Speculative;
pub use stats::DrafterStats;
pub use token::{IntoToken, Token};

/// The README's Rust blocks, compiled and run as doc tests (`cargo test --doc`).
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

/// The Rust blocks of `docs/security.md`, compiled and run as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../docs/security.md")]
pub struct SecurityDoctests;

/// The Rust blocks of `docs/engine-guide.md`, compiled and run as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../docs/engine-guide.md")]
pub struct EngineGuideDoctests;
