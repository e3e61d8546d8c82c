//! The decoding step: the [`Stepper`] drafts for every live sequence, puts
//! each one's `[last] + draft` into one batch, calls the engine's
//! [`Target`] once, verifies, commits, rolls the cache back, and hands
//! finished replies back.
//!
//! An engine implements [`Target`] (a batched forward pass, its output
//! rows, a cache removal); the stepper owns each sequence's history and
//! [`Speculative`], prefills joining sequences' prompts in the same batches
//! (in chunks), and verifies greedily or by speculative sampling
//! ([`Sampling`]). Engines that keep their own loop use [`Speculative`]
//! directly.
//!
//! ```
//! use selfspec::step::{Batch, Decode, Kept, SeqId, Shape, Stepper, Target};
//! use selfspec::{Config, Shared, Speculative, Token};
//!
//! /// A mock model over 64 tokens: after `t` it predicts `(t * 5 + 1) % 64`,
//! /// except every 7th position, where it predicts 0.
//! struct Mock { caches: Vec<Vec<Token>>, rows: Vec<Vec<f32>> }
//!
//! impl Target for Mock {
//!     type Error = std::convert::Infallible;
//!     fn shape(&self) -> Shape { Shape { sequences: 2, context: 4096, vocab: 64, batch: 256 } }
//!     fn forward(&mut self, batch: &Batch) -> Result<(), Self::Error> {
//!         self.rows.clear();
//!         for row in batch.rows() {
//!             let cache = &mut self.caches[row.seq.index()];
//!             assert_eq!(cache.len(), row.pos, "rows extend the cache");
//!             cache.push(row.token);
//!             let next = if row.pos % 7 == 6 { 0 } else { (row.token * 5 + 1) % 64 };
//!             let mut logits = vec![0.0; 64];
//!             logits[next as usize] = 1.0;
//!             self.rows.push(logits);
//!         }
//!         Ok(())
//!     }
//!     fn logits(&mut self, row: usize) -> Result<&[f32], Self::Error> { Ok(&self.rows[row]) }
//!     fn truncate(&mut self, seq: SeqId, from: usize) -> Result<Kept, Self::Error> {
//!         self.caches[seq.index()].truncate(from);
//!         Ok(Kept::Exact)
//!     }
//! }
//!
//! let config = Config::recommended();
//! let shared = Shared::new(&config)?;
//! let mut target = Mock { caches: vec![Vec::new(); 2], rows: Vec::new() };
//! let mut stepper = Stepper::new(&target)?;
//! for (i, prompt) in [[1, 2, 3, 4], [9, 8, 7, 6]].iter().enumerate() {
//!     let spec = Speculative::with_shared(&config, &shared)?;
//!     stepper.start(SeqId::new(i), prompt, Decode::greedy(200), Some(spec))?;
//! }
//! let mut replies = Vec::new();
//! while stepper.is_running() {
//!     stepper.step(&mut target)?;
//!     for event in stepper.events() {
//!         let _ = (event.seq, event.token); // stream it
//!     }
//!     replies.extend(stepper.finished());
//! }
//! assert_eq!(replies.len(), 2);
//! for done in &replies {
//!     assert_eq!(done.reply.tokens.len(), 200);
//!     assert!(done.reply.tau() > 1.5, "drafts were accepted");
//! }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::time::Duration;

use crate::token::Token;
use crate::{Error, Speculative};

mod budget;
mod build;
mod choice;
mod measure;
mod pass;
mod reply;
mod resume;
mod sampler;
mod sequence;
mod target;
mod verifying;

pub use budget::PassTimes;
pub use choice::Choice;
pub use measure::{LogitNoise, MeasureError, PassCost, PassCurve, RowNoise};
pub use reply::{Decode, Finished, Reply, Sampling, Stop, TokenEvent};
pub use sampler::Sampler;
pub use target::{Batch, Kept, Row, SeqId, Shape, Split, Target};

use sequence::{Live, Sequence};

/// The most sequences a stepper drives.
pub const MAX_SEQUENCES: usize = 4096;

/// Rows of a pass the step's buffers hold from the start (about 100 bytes
/// a row): a stepper over a larger batch grows them at its first passes of
/// more rows, which are prompt chunks, not drafts.
const RESERVED_ROWS: usize = 1 << 14;

/// An error of [`Stepper::step`]: the engine's, or selfspec's.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StepError<E: std::error::Error + 'static> {
    /// The target failed (a forward pass, a row, a cache removal): every
    /// sequence in the step's batch has ended ([`Stop::Failed`]).
    #[error("the target failed: {0}")]
    Target(#[source] E),
    /// selfspec's: a row the verification could not use.
    #[error(transparent)]
    Selfspec(#[from] Error),
}

/// One forward pass, as the stepper timed it.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
#[non_exhaustive]
pub struct Pass {
    /// Rows in the batch.
    pub rows: usize,
    /// Of them, rows of prompts being prefilled.
    pub prompt_rows: usize,
    /// Sequences with rows in it.
    pub sequences: usize,
    /// Wall-clock time of [`Target::forward`] (or the target's own
    /// [`pass_time`](Target::pass_time)).
    pub duration: Duration,
    /// What the draft budget's pass-time model priced the pass at before
    /// it ran (the price it weighed drafts by), to set beside
    /// [`duration`](Pass::duration): `None` without a budget
    /// ([`with_budget`](Stepper::with_budget)) and before it has timed a
    /// pass.
    pub predicted: Option<Duration>,
    /// Tokens the pass gave: each decoding sequence's accepted draft
    /// tokens and next token, each joining sequence's first token (as in
    /// [`events`](Stepper::events); fewer where a reply ended inside an
    /// accepted draft). 0 when the step failed.
    pub tokens: usize,
    /// The tokens the draft budget expected the pass to give its decoding
    /// sequences (one each, and each draft row's estimated chance that its
    /// draft is accepted up to it), to set beside
    /// [`tokens`](Pass::tokens): `None` without a budget.
    pub expected_tokens: Option<f64>,
}

/// Drives a [`Target`]: sequences join ([`start`](Stepper::start)) and
/// leave between steps, each [`step`](Stepper::step) is one forward pass
/// for all of them. See the [module docs](self) for a whole loop.
#[derive(Debug)]
pub struct Stepper {
    shape: Shape,
    split: Split,
    prefill_chunk: usize,
    stop_tokens: Vec<Token>,
    seqs: Vec<Sequence>,
    batch: Batch,
    events: Vec<TokenEvent>,
    finished: Vec<Finished>,
    work: verifying::Work,
    last_pass: Option<Pass>,
    /// The draft budget, when on.
    budget: Option<budget::Budget>,
}

impl Stepper {
    /// A stepper for `target`'s [`Shape`], with no stop tokens and prompts
    /// prefilled in chunks of up to half the batch. Its first step empties
    /// every sequence's cache ([`Target::truncate`] from 0): the target may
    /// come from earlier work, another stepper's or the engine's own.
    ///
    /// # Errors
    ///
    /// [`Error::Shape`] for a shape it cannot drive: no sequence or more
    /// than [`MAX_SEQUENCES`], a context under 2 positions, an empty
    /// vocabulary, a batch under two rows a sequence.
    pub fn new<T: Target + ?Sized>(target: &T) -> Result<Stepper, Error> {
        let shape = target.shape();
        let bad = |field, value, allowed| {
            Err(Error::Shape {
                field,
                value,
                allowed,
            })
        };
        if !(1..=MAX_SEQUENCES).contains(&shape.sequences) {
            return bad("sequences", shape.sequences, "1..=4096");
        }
        if shape.context < 2 {
            return bad("context", shape.context, "at least 2 positions");
        }
        if shape.vocab == 0 || u32::try_from(shape.vocab).is_err() {
            return bad("vocab", shape.vocab, "1..=2^32 - 1 tokens");
        }
        if shape.batch < 2 * shape.sequences {
            return bad("batch", shape.batch, "at least 2 rows a sequence");
        }
        Ok(Stepper {
            shape,
            split: target.split(),
            prefill_chunk: shape.batch / 2,
            stop_tokens: Vec::new(),
            seqs: (0..shape.sequences)
                .map(|_| Sequence {
                    cut_to: Some(0),
                    ..Sequence::default()
                })
                .collect(),
            // Sized for the largest pass up front: how long a step's drafts
            // are depends on what was accepted before, so a buffer grown
            // on demand would allocate in a warm step.
            batch: Batch::with_capacity(reserved_rows(shape)),
            events: Vec::with_capacity(reserved_rows(shape)),
            finished: Vec::with_capacity(shape.sequences),
            work: verifying::Work::with_capacity(reserved_rows(shape), shape.vocab),
            last_pass: None,
            budget: None,
        })
    }

    /// Tokens that end a reply (kept as its last token): the model's end of
    /// turn and end of text.
    #[must_use]
    pub fn with_stop_tokens(mut self, stop: &[Token]) -> Stepper {
        self.stop_tokens = stop.to_vec();
        self
    }

    /// Prompt rows of one sequence in one pass at most (clamped to
    /// `1..=batch / 2`): a long prompt takes several passes, sharing each
    /// with the other sequences' steps.
    #[must_use]
    pub fn with_prefill_chunk(mut self, rows: usize) -> Stepper {
        self.prefill_chunk = rows.clamp(1, self.shape.batch / 2);
        self
    }

    /// Sizes every step's drafts for the whole batch: of all the drafted
    /// tokens (each with its estimated chance of acceptance: the drafter's
    /// own, recall's, or the acceptance measured by position for the
    /// others), the pass takes those that give the most expected tokens
    /// per unit of pass time, and none when no draft pays. A pass is
    /// priced as the target computes it ([`Target::split`]): for a target
    /// that computes it whole, from `times`, which learns from every pass
    /// the stepper makes (start with [`PassTimes::new`], or one seeded with
    /// a measured [`PassCurve`]); for one that splits it by sequence, from
    /// a cost per computation, row and sequence of several rows learned
    /// the same way. Where passes split by runs of sequences, the budget
    /// may pad every decoding sequence's draft to one length and give an
    /// idle sequence between busy ones a filler row (removed at the next
    /// step). Until a decoding pass is timed, no draft is sent: the first
    /// pass is timed plain.
    #[must_use]
    pub fn with_budget(mut self, times: PassTimes) -> Stepper {
        self.budget = Some(budget::Budget::new(
            times,
            self.shape.sequences,
            reserved_rows(self.shape),
        ));
        self
    }

    /// The pass-time model of the draft budget, when on.
    #[must_use]
    pub fn pass_times(&self) -> Option<&PassTimes> {
        self.budget.as_ref().map(|b| &b.times)
    }

    /// The target's shape.
    #[must_use]
    pub fn shape(&self) -> Shape {
        self.shape
    }

    /// Starts a request on `seq`: its `prompt` (the whole history the
    /// reply follows) is prefilled in the next steps, reusing what the
    /// sequence's cache holds of it; `spec` drafts for it (`None`: plain
    /// decoding, one token a pass). `spec.begin(prompt)` is called once the
    /// prompt is evaluated.
    ///
    /// # Errors
    ///
    /// [`Error::Sequence`] for a sequence that does not exist or is busy,
    /// [`Error::EmptyPrompt`], [`Error::PromptTooLong`] when the prompt
    /// leaves no room in the context, [`Error::TokenOutOfRange`],
    /// [`Error::OutOfRange`] for `max_tokens` 0, [`Error::Sampler`]. The
    /// sequence stays idle on an error.
    pub fn start(
        &mut self,
        seq: SeqId,
        prompt: &[Token],
        decode: Decode,
        spec: Option<Speculative>,
    ) -> Result<(), Error> {
        self.check(seq, true)?;
        crate::limits::check_range("decode", "max_tokens", decode.max_tokens, 1, usize::MAX)?;
        if let Sampling::Random(s) = decode.sampling {
            s.validate()?;
        }
        if prompt.is_empty() {
            return Err(Error::EmptyPrompt);
        }
        self.check_tokens(prompt)?;
        let s = &mut self.seqs[seq.index()];
        // Keep the cached common prefix, less at least the prompt's last
        // token (its row chooses the first reply token).
        let held = s.cached.min(s.tokens.len());
        let keep = s.tokens[..held]
            .iter()
            .zip(prompt)
            .take_while(|(a, b)| a == b)
            .count()
            .min(prompt.len() - 1);
        s.tokens.clear();
        s.tokens.extend_from_slice(prompt);
        if s.cached > keep {
            // Removed at the next step, before the sequence's rows.
            s.cut_to = Some(keep.min(s.cut_to.unwrap_or(keep)));
            s.cached = keep;
        }
        if let (Some(budget), Some(spec)) = (&mut self.budget, &spec) {
            budget.register(spec);
        }
        let draft = std::mem::take(&mut s.spare);
        s.live = Some(Live::new(prompt.len(), decode, spec, draft));
        Ok(())
    }

    /// Whether a cache can hold `tokens`: fewer than the context, each in
    /// the vocabulary.
    fn check_tokens(&self, tokens: &[Token]) -> Result<(), Error> {
        if tokens.len() >= self.shape.context {
            return Err(Error::PromptTooLong {
                tokens: tokens.len(),
                context: self.shape.context,
            });
        }
        let vocab = self.shape.vocab;
        match tokens.iter().find(|&&t| crate::int::ix32(t) >= vocab) {
            Some(&token) => Err(Error::TokenOutOfRange { token, vocab }),
            None => Ok(()),
        }
    }

    fn check(&self, seq: SeqId, want_idle: bool) -> Result<(), Error> {
        let sequences = self.seqs.len();
        let bad = |problem| {
            Err(Error::Sequence {
                seq: seq.index(),
                sequences,
                problem,
            })
        };
        match self.seqs.get(seq.index()) {
            None => bad("does not exist"),
            Some(s) if want_idle && s.live.is_some() => bad("is busy"),
            Some(_) => Ok(()),
        }
    }

    /// The tokens the last [`step`](Stepper::step) generated, in order:
    /// each reply's new tokens as they were accepted (for streaming).
    #[must_use]
    pub fn events(&self) -> &[TokenEvent] {
        &self.events
    }

    /// The replies that ended (in a step, or by [`cancel`](Stepper::cancel)),
    /// taken out; their sequences are free for [`start`](Stepper::start).
    pub fn finished(&mut self) -> std::vec::Drain<'_, Finished> {
        self.finished.drain(..)
    }

    /// Ends `seq`'s request now ([`Stop::Cancelled`]: a client went away);
    /// its reply so far joins [`finished`](Stepper::finished). Whether it
    /// had one.
    pub fn cancel(&mut self, seq: SeqId) -> bool {
        let Some(live) = self.seqs.get_mut(seq.index()).and_then(|s| s.live.as_mut()) else {
            return false;
        };
        if !live.done {
            live.end(Stop::Cancelled);
        }
        self.collect();
        true
    }

    /// Whether any request is in flight.
    #[must_use]
    pub fn is_running(&self) -> bool {
        self.seqs.iter().any(|s| s.live.is_some())
    }

    /// Whether `seq` decodes a request.
    #[must_use]
    pub fn is_busy(&self, seq: SeqId) -> bool {
        self.seqs.get(seq.index()).is_some_and(|s| s.live.is_some())
    }

    /// The first idle sequence, if any.
    #[must_use]
    pub fn idle(&self) -> Option<SeqId> {
        self.seqs
            .iter()
            .position(|s| s.live.is_none())
            .map(SeqId::new)
    }

    /// `seq`'s drafter while it decodes a request (to set its token cost,
    /// read its statistics).
    pub fn speculative_mut(&mut self, seq: SeqId) -> Option<&mut Speculative> {
        self.seqs.get_mut(seq.index())?.live.as_mut()?.spec.as_mut()
    }

    /// The tokens `seq`'s cache holds (empty for a sequence that does not
    /// exist).
    #[must_use]
    pub fn cached(&self, seq: SeqId) -> &[Token] {
        self.seqs
            .get(seq.index())
            .map_or(&[], |s| &s.tokens[..s.cached.min(s.tokens.len())])
    }

    /// Empties an idle sequence's cache at the next step (its next prompt
    /// is evaluated whole, as after a fresh start). Whether it was idle.
    pub fn forget(&mut self, seq: SeqId) -> bool {
        match self.seqs.get_mut(seq.index()) {
            Some(s) if s.live.is_none() => {
                s.tokens.clear();
                s.cached = 0;
                s.cut_to = Some(0);
                true
            }
            _ => false,
        }
    }

    /// Records that idle `seq`'s cache now holds exactly `tokens` at
    /// positions `0..`: the engine replaced it outside the stepper (a
    /// prompt cache restoring a saved state, such as llama.cpp's
    /// `llama_state_seq_set_data`). The next [`start`](Stepper::start) on
    /// `seq` reuses its longest common prefix with the prompt, as after a
    /// request. A change the target's cache did not make leaves the two
    /// apart: the target then refuses the next rows, or computes them on
    /// other tokens.
    ///
    /// # Errors
    ///
    /// [`Error::Sequence`] for a sequence that does not exist or is busy,
    /// [`Error::PromptTooLong`] for `tokens` the context cannot hold,
    /// [`Error::TokenOutOfRange`] for a token outside the vocabulary.
    pub fn set_cached(&mut self, seq: SeqId, tokens: &[Token]) -> Result<(), Error> {
        self.check(seq, true)?;
        self.check_tokens(tokens)?;
        let s = &mut self.seqs[seq.index()];
        s.tokens.clear();
        s.tokens.extend_from_slice(tokens);
        s.cached = tokens.len();
        s.cut_to = None;
        Ok(())
    }

    /// The last step's forward pass: its rows, sequences and duration
    /// (`None` when the last step ran none: nothing to decode, or a pass
    /// that failed).
    #[must_use]
    pub fn last_pass(&self) -> Option<Pass> {
        self.last_pass
    }
}

/// Rows the step's buffers are made for: the batch, up to [`RESERVED_ROWS`].
fn reserved_rows(shape: Shape) -> usize {
    shape.batch.min(RESERVED_ROWS)
}
