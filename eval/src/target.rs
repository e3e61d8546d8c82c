//! The replayed model: a [`Target`] that "generates" a recorded output, and
//! [`Slot`], one engine slot decoding recorded requests through selfspec's
//! [`Stepper`].
//!
//! The target's greedy choice at position `p` of a request is token `p + 1`
//! of its text (`prompt ++ output`), and [`STOP`] after the last one: the
//! stepper ends the reply there, so every draft is verified whole against
//! the recorded continuation, as the replay protocol does.

use std::convert::Infallible;

use selfspec::step::{Batch, Choice, Decode, Kept, SeqId, Shape, StepError, Stepper, Target};
use selfspec::{Error, Speculative, Token};

use crate::Request;

/// The token the replayed target chooses after a recorded output's last
/// one: the end of the reply. Workload ids are below it.
pub const STOP: Token = Token::MAX - 1;

/// The slot's sequence in its stepper.
fn seq() -> SeqId {
    SeqId::new(0)
}

/// What one decoding pass of a [`Slot`] verified.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Verified {
    /// Index in the output of `last`, the token the pass evaluated first.
    pub index: usize,
    /// The draft verified after it.
    pub draft: Vec<Token>,
    /// Its tokens the target kept (those that match the recorded output).
    pub accepted: usize,
    /// Index in the chain of the strategy that drafted (a non-empty draft).
    pub drafted_by: Option<usize>,
}

/// A recorded request as the stepper's model: one sequence, an unbounded
/// context, a batch that takes any prompt at once.
#[derive(Debug, Default)]
struct Recorded<'a> {
    prompt: &'a [Token],
    output: &'a [Token],
    /// The last pass's first position (its rows are consecutive).
    base: usize,
    /// Whether the last pass decoded (else it prefilled), and what it
    /// verified.
    decoded: bool,
    verified: Verified,
}

impl Recorded<'_> {
    /// Token `i` of the request's text, [`STOP`] past its end.
    fn text(&self, i: usize) -> Token {
        match i.checked_sub(self.prompt.len()) {
            None => self.prompt[i],
            Some(o) => self.output.get(o).copied().unwrap_or(STOP),
        }
    }
}

impl Target for Recorded<'_> {
    type Error = Infallible;

    fn shape(&self) -> Shape {
        Shape {
            sequences: 1,
            context: usize::MAX / 2,
            vocab: usize::try_from(Token::MAX).unwrap_or(usize::MAX),
            batch: usize::MAX / 4,
        }
    }

    /// Notes the pass's draft: the rows read after the first one read
    /// (`last`), when `last` is an output token (a prompt's last row ends
    /// its prefill).
    fn forward(&mut self, batch: &Batch) -> Result<(), Infallible> {
        let rows = batch.rows();
        self.base = rows.first().map_or(0, |r| r.pos);
        let read = rows.iter().rev().take_while(|r| r.output).count();
        let first = rows.len() - read;
        let index = rows
            .get(first)
            .and_then(|r| r.pos.checked_sub(self.prompt.len()));
        self.decoded = index.is_some();
        if let Some(index) = index {
            let v = &mut self.verified;
            v.index = index;
            v.draft.clear();
            v.draft.extend(rows[first + 1..].iter().map(|r| r.token));
            let truth = self.output.get(index + 1..).unwrap_or_default();
            v.accepted = selfspec::verify::greedy(&v.draft, truth);
            v.drafted_by = None;
        }
        Ok(())
    }

    fn logits(&mut self, _row: usize) -> Result<&[f32], Infallible> {
        Ok(&[])
    }

    fn greedy(&mut self, row: usize) -> Result<Option<Choice>, Infallible> {
        Ok(Some(Choice {
            token: self.text(self.base + row + 1),
            margin: f32::INFINITY,
        }))
    }

    fn truncate(&mut self, _seq: SeqId, _from: usize) -> Result<Kept, Infallible> {
        Ok(Kept::Exact)
    }
}

/// One engine slot replaying recorded requests, one at a time, through a
/// [`Stepper`] of one sequence: greedy verification against the recorded
/// output, the request's prompt prefilled (`begin`) when it starts, its
/// `end_request` when its output is done.
///
/// ```
/// use selfspec::{Config, Speculative};
/// use selfspec_eval::{Request, Slot};
///
/// let text: Vec<u32> = (0..400).map(|i| i % 50).collect();
/// let request = Request::new(text[..200].to_vec(), text[200..].to_vec());
/// let mut slot = Slot::new()?;
/// slot.start(&request, Some(Speculative::new(&Config::recommended())?))?;
/// let mut passes = 0;
/// while let Some(pass) = slot.step()? {
///     passes += 1;
///     assert!(pass.accepted <= pass.draft.len());
/// }
/// assert!(passes < 50, "drafts were accepted");
/// assert!(slot.take_spec().is_some(), "the drafter comes back");
/// # Ok::<(), selfspec::Error>(())
/// ```
#[derive(Debug)]
pub struct Slot<'a> {
    stepper: Stepper,
    target: Recorded<'a>,
    /// The drafter of the last request, once it has ended.
    spec: Option<Speculative>,
}

impl<'a> Slot<'a> {
    /// An idle slot.
    ///
    /// # Errors
    ///
    /// None in practice (the stepper accepts the replayed target's shape).
    pub fn new() -> Result<Slot<'a>, Error> {
        let target = Recorded::default();
        let stepper = Stepper::new(&target)?.with_stop_tokens(&[STOP]);
        Ok(Slot {
            stepper,
            target,
            spec: None,
        })
    }

    /// Starts `request` with `spec`, or (`None`) with the slot's last
    /// drafter: its prompt is prefilled (`spec.begin(prompt)`); an empty
    /// prompt starts from its first output token. A request with an empty
    /// output ends here.
    ///
    /// # Errors
    ///
    /// [`Error::TokenOutOfRange`] for an id not below [`STOP`] (the slot
    /// keeps `spec`); [`Error::Sequence`] while a request is in flight.
    pub fn start(&mut self, request: &'a Request, spec: Option<Speculative>) -> Result<(), Error> {
        let spec = spec.or_else(|| self.spec.take());
        let text = request.prompt.iter().chain(&request.output);
        if let Some(&token) = text.into_iter().find(|&&t| t >= STOP) {
            self.spec = spec;
            let vocab = usize::try_from(STOP).unwrap_or(usize::MAX);
            return Err(Error::TokenOutOfRange { token, vocab });
        }
        let decode = Decode::greedy(usize::MAX);
        match request.prompt.first() {
            None => {
                let first = request.output.first().copied().unwrap_or(STOP);
                self.stepper.resume(seq(), &[], first, decode, spec)?;
            }
            Some(_) => self.stepper.start(seq(), &request.prompt, decode, spec)?,
        }
        self.target.prompt = &request.prompt;
        self.target.output = &request.output;
        if !request.prompt.is_empty() {
            self.pass()?;
        }
        self.collect();
        Ok(())
    }

    /// One decoding pass of the request in flight (draft, verification,
    /// `accept`, and `end_request` when the output is done): what it
    /// verified, `None` when no request is in flight.
    ///
    /// # Errors
    ///
    /// None in practice (the replayed target does not fail).
    pub fn step(&mut self) -> Result<Option<&Verified>, Error> {
        if !self.stepper.is_running() {
            return Ok(None);
        }
        let passed = self.pass();
        let running = self.stepper.is_running();
        self.collect();
        passed?;
        let spec = if running {
            self.stepper.speculative_mut(seq())
        } else {
            self.spec.as_mut()
        };
        let by = spec.and_then(|s| s.drafted_by());
        let v = &mut self.target.verified;
        v.drafted_by = by.filter(|_| !v.draft.is_empty());
        Ok(Some(&*v).filter(|_| self.target.decoded))
    }

    /// Whether a request is in flight.
    #[must_use]
    pub fn is_running(&self) -> bool {
        self.stepper.is_running()
    }

    /// The drafter of the request in flight, or of the last one.
    pub fn spec_mut(&mut self) -> Option<&mut Speculative> {
        match self.stepper.speculative_mut(seq()) {
            Some(spec) => Some(spec),
            None => self.spec.as_mut(),
        }
    }

    /// The last request's drafter, once it has ended (after its
    /// `end_request`), taken out of the slot.
    pub fn take_spec(&mut self) -> Option<Speculative> {
        self.spec.take()
    }

    fn pass(&mut self) -> Result<(), Error> {
        self.target.decoded = false;
        self.stepper.step(&mut self.target).map_err(|e| match e {
            StepError::Selfspec(e) => e,
            StepError::Target(never) => match never {},
            // (no other error today: a row the stepper could not use)
            _ => Error::Rows { seq: 0 },
        })
    }

    fn collect(&mut self) {
        // (one sequence: one reply at most)
        for done in self.stepper.finished() {
            self.spec = done.spec;
        }
    }
}
