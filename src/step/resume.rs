//! Starting a request whose first reply token is already chosen.

use std::time::Instant;

use super::reply::{Decode, Sampling};
use super::sequence::{Live, Phase};
use super::target::SeqId;
use super::Stepper;
use crate::token::Token;
use crate::{Error, Speculative};

impl Stepper {
    /// Starts a request on `seq` whose first reply token, `first`, is
    /// already chosen (by the engine's own prefill, or a recorded reply
    /// replayed); `history` is what it follows, and may be empty. Nothing
    /// is prefilled: the part of `history` the sequence's cache lacks is
    /// evaluated in its next pass, before `[first] + draft`.
    /// `spec.begin(history)` is called at once. `first` is the reply's
    /// first token (margin NaN); a stop token or `max_tokens` 1 ends the
    /// reply here (it is in [`finished`](Stepper::finished)).
    ///
    /// # Errors
    ///
    /// As [`start`](Stepper::start), an empty history aside;
    /// [`Error::TokenOutOfRange`] for `first`; [`Error::OutOfRange`]
    /// when the part of `history` the cache lacks, with `first`, is over a
    /// sequence's share of the batch, `(batch - prefill chunk) / sequences`
    /// rows (a longer new prompt goes through `start`, in chunks). The
    /// sequence stays idle on an error.
    pub fn resume(
        &mut self,
        seq: SeqId,
        history: &[Token],
        first: Token,
        decode: Decode,
        spec: Option<Speculative>,
    ) -> Result<(), Error> {
        let vocab = self.shape.vocab;
        if crate::int::ix32(first) >= vocab {
            return Err(Error::TokenOutOfRange {
                token: first,
                vocab,
            });
        }
        if history.is_empty() {
            self.check(seq, true)?;
            crate::limits::check_range("decode", "max_tokens", decode.max_tokens, 1, usize::MAX)?;
            if let Sampling::Random(s) = decode.sampling {
                s.validate()?;
            }
            let s = &mut self.seqs[seq.index()];
            s.tokens.clear();
            if s.cached > 0 {
                s.cut_to = Some(0);
                s.cached = 0;
            }
            let draft = std::mem::take(&mut s.spare);
            s.live = Some(Live::new(0, decode, spec, draft));
        } else {
            self.start(seq, history, decode, spec)?;
        }
        let share = (self.shape.batch - self.prefill_chunk) / self.shape.sequences;
        let s = &mut self.seqs[seq.index()];
        let lacking = s.tokens.len() - s.cached.min(s.tokens.len());
        let Some(live) = s.live.as_mut().filter(|_| lacking < share) else {
            s.live = None;
            return Err(Error::OutOfRange {
                context: "resume",
                field: "uncached history and first token",
                value: lacking + 1,
                min: 1,
                max: share,
            });
        };
        let now = Instant::now();
        live.phase = Phase::Decode { last: first };
        live.first_token = Some(now);
        live.reply.prefill_time = now - live.started;
        if let Some(spec) = &mut live.spec {
            spec.begin(&s.tokens);
        }
        if live.push(first, f32::NAN, &self.stop_tokens) {
            self.collect();
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use crate::step::{Batch, Decode, Kept, SeqId, Shape, Stepper, Stop, Target};
    use crate::{Config, Speculative, Token};

    /// After `t` at any position, `(t * 3 + 1) % 16`; the row's position
    /// is the cache's length, which must grow by the rows.
    #[derive(Default)]
    struct Mock {
        cache: Vec<Token>,
        rows: Vec<Vec<f32>>,
    }

    impl Target for Mock {
        type Error = std::convert::Infallible;
        fn shape(&self) -> Shape {
            Shape {
                sequences: 1,
                context: 4096,
                vocab: 16,
                batch: 64,
            }
        }
        fn forward(&mut self, batch: &Batch) -> Result<(), Self::Error> {
            self.rows.clear();
            for row in batch.rows() {
                assert_eq!(self.cache.len(), row.pos, "rows extend the cache");
                self.cache.push(row.token);
                let mut logits = vec![0.0; 16];
                logits[((row.token * 3 + 1) % 16) as usize] = 1.0;
                self.rows.push(logits);
            }
            Ok(())
        }
        fn logits(&mut self, row: usize) -> Result<&[f32], Self::Error> {
            Ok(&self.rows[row])
        }
        fn truncate(&mut self, _: SeqId, from: usize) -> Result<Kept, Self::Error> {
            self.cache.truncate(from);
            Ok(Kept::Exact)
        }
    }

    fn run(history: &[Token], first: Token, stop: &[Token]) -> (Vec<Token>, Stop, Vec<Token>) {
        let mut target = Mock::default();
        let mut stepper = Stepper::new(&target).unwrap().with_stop_tokens(stop);
        let spec = Speculative::new(&Config::recommended()).unwrap();
        let seq = SeqId::new(0);
        stepper
            .resume(seq, history, first, Decode::greedy(40), Some(spec))
            .unwrap();
        while stepper.is_running() {
            stepper.step(&mut target).unwrap();
        }
        let done = stepper.finished().next().unwrap();
        (done.reply.tokens, done.reply.stop, target.cache)
    }

    #[test]
    fn a_resumed_reply_continues_from_its_first_token() {
        let next = |t: Token| (t * 3 + 1) % 16;
        for history in [&[][..], &[5, 9, 2]] {
            let (tokens, stop, cache) = run(history, 7, &[]);
            assert_eq!(stop, Stop::MaxTokens);
            assert_eq!(tokens.len(), 40);
            assert_eq!(tokens[0], 7);
            for pair in tokens.windows(2) {
                assert_eq!(pair[1], next(pair[0]));
            }
            // The cache holds the history and the reply, its last token aside.
            assert_eq!(&cache[..history.len()], history);
            assert_eq!(&cache[history.len()..], &tokens[..39]);
        }
        // A stop token as the first one ends the reply before any pass.
        let (tokens, stop, cache) = run(&[1, 2], 7, &[7]);
        assert_eq!((tokens, stop, cache), (vec![7], Stop::StopToken, vec![]));
    }

    #[test]
    fn resume_refuses_what_start_refuses_and_a_long_uncached_history() {
        let target = Mock::default();
        let mut stepper = Stepper::new(&target).unwrap();
        let seq = SeqId::new(0);
        assert!(stepper
            .resume(seq, &[1], 16, Decode::greedy(4), None)
            .is_err());
        assert!(stepper
            .resume(seq, &[], 1, Decode::greedy(0), None)
            .is_err());
        assert!(stepper
            .resume(SeqId::new(1), &[], 1, Decode::greedy(4), None)
            .is_err());
        // (64 - 32) / 1 rows at most: 31 history tokens and the first.
        assert!(stepper
            .resume(seq, &[1; 32], 1, Decode::greedy(4), None)
            .is_err());
        assert!(!stepper.is_busy(seq));
        stepper
            .resume(seq, &[1; 31], 1, Decode::greedy(4), None)
            .unwrap();
        assert!(stepper.is_busy(seq));
    }
}
