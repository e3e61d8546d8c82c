//! selfspec's evaluation harness: draft quality without a model, by replaying
//! recorded generations under greedy verification (the protocol of
//! `docs/replay.md` in the repository), and the tools built on it (`replay`,
//! `diagnose`, `tune`, `engine_loop`, `lookup_create`, `scaling`,
//! `replicas`). Engines do not need it: it is a workspace member, never
//! published, and the library does not depend on it.
//!
//! Each request is decoded by selfspec's [`Stepper`](selfspec::step::Stepper)
//! against a target that "generates" the recorded output ([`Slot`]): its
//! prompt is prefilled (`begin(prompt)`), then each step drafts
//! (`draft(history, last)`), verifies greedily (the accepted prefix is the
//! longest common prefix of draft and recorded continuation), `accept(a)`s,
//! and the history grows by `last` plus the accepted tokens. One step is one
//! target forward pass, so `tau = generated tokens / steps` is the speed-up
//! in forward passes.
//!
//! ```
//! use selfspec::{Config, Speculative};
//! use selfspec_eval::{replay, Request, Session};
//!
//! let text: Vec<u32> = (0..400).map(|i| (i * 7 % 50) as u32).collect();
//! let session = Session::new("demo", "synthetic", vec![Request::new(text[..200].to_vec(), text[200..].to_vec())]);
//! let mut spec = Speculative::new(&Config::default())?;
//! let report = replay(&mut spec, &[session])?;
//! assert_eq!(report.tokens, 200);
//! assert!(report.tau() > 5.0);
//! # Ok::<(), selfspec::Error>(())
//! ```

#![forbid(unsafe_code)]

pub mod cli;
mod engine;
mod replay;
mod report;
mod simulate;
mod target;
mod workload;

pub use engine::{replay_engine, Engine};
pub use replay::{replay, replay_observed, Step};
pub use report::{KindFigures, ReplayReport};
pub use simulate::{simulate, simulate_after, CostCurve, Policy, Simulation};
pub use target::{Slot, Verified, STOP};
pub use workload::{
    parse_workload, read_workload, Request, Session, WorkloadError, WorkloadProblem,
};
