//! Text conversations for selfspec's engine packages (`selfspec-candle`,
//! `selfspec-llama-cpp`): one reader for the conversation files, one way to
//! tell whether speculative output matches plain output, one per-kind report
//! and one JSON format, so a script reads both engines' figures alike.
//!
//! ```
//! use selfspec::step::{Reply, Stop};
//! use selfspec_conversations::{compare, Decoded, Divergence, Tally};
//! use std::time::Duration;
//!
//! // Two replies of 4 tokens: plain in 4 passes, speculative in 2.
//! let reply = |decode_passes, drafted, accepted, ms| Reply {
//!     tokens: vec![1, 2, 3, 4],
//!     margins: vec![5.0; 4],
//!     prefill_passes: 1,
//!     decode_passes,
//!     drafted,
//!     accepted,
//!     stop: Stop::MaxTokens,
//!     prefill_time: Duration::from_millis(10),
//!     decode_time: Duration::from_millis(ms),
//! };
//! let (plain, spec) = (reply(3, 0, 0, 40), reply(1, 3, 2, 20));
//! let divergence = compare(&plain.tokens, &plain.margins, &spec.tokens, 0.5);
//! assert_eq!(divergence, Divergence::Identical);
//!
//! let mut tally = Tally::new();
//! tally.add_turn("chat", &Decoded::from(&plain), &Decoded::from(&spec), &divergence);
//! let rows = tally.summaries("recall", None);
//! assert_eq!(rows.len(), 2); // "chat" and "all"
//! assert!((rows[1].speedup - 2.0).abs() < 1e-9);
//! assert_eq!(rows[1].tau, spec.tau());
//! ```
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod cli;
mod config;
mod conversation;
mod divergence;
mod error;
mod progress;
mod report;
mod set;

pub use config::{config, strategy_label};
pub use conversation::{
    default_data_dir, figure_set, load, model_path, read, Conversation, Role, Source, MODEL_FILE,
};
pub use divergence::{argmax_gap, compare, Divergence};
pub use error::Error;
pub use progress::Progress;
pub use report::{print_table, write_json, Decoded, Summary, Tally};
pub use set::{Cost, DraftSet};
