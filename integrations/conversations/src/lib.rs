//! Text conversations for selfspec's engine packages (`selfspec-candle`,
//! `selfspec-llama-cpp`): one reader for the conversation files, one way to
//! tell whether speculative output matches plain output, one per-kind report
//! and one JSON format, so a script reads both engines' figures alike.
//!
//! ```
//! use selfspec_conversations::{compare, Decoded, Divergence, Tally};
//! use std::time::Duration;
//!
//! let plain = Decoded { generated: 4, decode_time: Duration::from_millis(40), forward_passes: 4, ..Decoded::default() };
//! let spec = Decoded { generated: 4, decode_time: Duration::from_millis(20), forward_passes: 2, drafted: 3, accepted: 2 };
//! let divergence = compare(&[1, 2, 3, 4], &[5.0; 4], &[1, 2, 3, 4], 0.5);
//! assert_eq!(divergence, Divergence::Identical);
//!
//! let mut tally = Tally::new();
//! tally.add_turn("chat", &plain, &spec, &divergence);
//! let rows = tally.summaries("recall", None);
//! assert_eq!(rows.len(), 2); // "chat" and "all"
//! assert!((rows[1].speedup - 2.0).abs() < 1e-9);
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
