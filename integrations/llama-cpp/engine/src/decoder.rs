//! The decoding loop: selfspec's [`Stepper`] driving a [`LlamaTarget`], S
//! sequences in one llama.cpp context, each step one `llama_decode` of
//! every live sequence's rows (`[last] + draft`, or a prompt chunk).
//!
//! The stepper drafts, verifies, commits, rolls the KV cache back and ends
//! requests, and (by default) sizes every step's drafts with its draft
//! budget; this adapter starts requests, counts passes and splits their
//! time between prefill and decoding.

use std::time::{Duration, Instant};

use selfspec::step::{Decode, Finished, Pass, PassTimes, Sampler, SeqId, Stepper};
use selfspec::Speculative;

mod pin;
mod probe;
mod settings;

use selfspec_llama_cpp::LlamaTarget;

use crate::{Error, Model, Prices};
pub use pin::Reference;
use settings::setting;
pub use settings::Settings;

/// Decode counters of a decoder since it was made (or
/// [`Decoder::reset_counters`]).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Counters {
    /// Decode steps: `llama_decode` calls of [`Decoder::step`] in which a
    /// sequence verified its draft or chose its next token (prompt rows of
    /// joining sequences may share them).
    pub steps: usize,
    /// `llama_decode` calls of [`Decoder::step`] with prompt rows only.
    pub prefill_steps: usize,
    /// Of [`steps`](Counters::steps), those that also carried prompt rows.
    pub shared_steps: usize,
    /// Time in [`Decoder::step`] decoding: drafting, the pass,
    /// verification, rollback; of a pass shared with prompt rows, the
    /// share of its decoding rows.
    pub decode_time: Duration,
    /// Time in [`Decoder::step`] evaluating prompts: passes of prompt rows
    /// only (each choosing its prompt's first reply token), and the prompt
    /// rows' share of shared passes.
    pub prefill_time: Duration,
    /// Of [`decode_time`](Counters::decode_time), the passes' own: the
    /// decoding rows' share of each `llama_decode`. The rest is the loop's
    /// work around the pass (drafting, reading logits, verification).
    pub pass_time: Duration,
    /// Greedy choices replaced by a [`Reference`]'s token at a near tie
    /// ([`Decoder::start_pinned`]).
    pub pinned: usize,
}

/// S sequences of one llama.cpp context, decoded in one batch a step by a
/// [`Stepper`].
pub struct Decoder<'m> {
    model: &'m Model,
    settings: Settings,
    target: LlamaTarget<'m>,
    stepper: Stepper,
    counters: Counters,
    /// The budget's prices of the decoding passes since the last
    /// [`take_prices`](Decoder::take_prices).
    prices: Prices,
    /// Whether each slot's request has its first token: its rows are
    /// decoding rows.
    decoding: Vec<bool>,
    /// Tokens each sequence got in the last step.
    got: Vec<usize>,
    /// Sampled decoding: the sampler of the next request (its seed is
    /// the next one's minus 1).
    sampling: Option<Sampler>,
    /// Each slot's reference reply, if it has one.
    pins: pin::Pins,
}

impl std::fmt::Debug for Decoder<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Decoder")
            .field("settings", &self.settings)
            .field("counters", &self.counters)
            .finish_non_exhaustive()
    }
}

impl<'m> Decoder<'m> {
    /// A context of `settings.sequences` sequences of `settings.context`
    /// tokens each on `model`, and a stepper over it that ends replies at
    /// the model's end-of-generation tokens and sizes every step's drafts
    /// with selfspec's draft budget
    /// ([`Stepper::with_budget`], from [`PassTimes::new`]: pass times
    /// learned from the decoder's own passes; see
    /// [`with_budget`](Decoder::with_budget) to seed it or turn it off).
    ///
    /// # Errors
    ///
    /// [`Error::Setting`] for zero sequences (or over 64), a context under
    /// 16 tokens, zero threads, a batch smaller than two tokens a sequence
    /// or a step under two tokens a sequence; [`Error::Context`] when
    /// llama.cpp cannot make the context.
    pub fn new(model: &'m Model, settings: Settings) -> Result<Decoder<'m>, Error> {
        let target = settings.target(model)?;
        let stepper = stepper(model, &target, Some(PassTimes::new()))?;
        Ok(Decoder {
            model,
            settings,
            target,
            stepper,
            counters: Counters::default(),
            prices: Prices::default(),
            decoding: vec![false; settings.sequences],
            got: vec![0; settings.sequences],
            sampling: None,
            pins: pin::Pins::default(),
        })
    }

    /// The decoder with the draft budget on `times` (a [`PassTimes`],
    /// possibly seeded with a measured [`PassCurve`](selfspec::step::PassCurve)),
    /// or off (`None`: each request's drafter sizes its own drafts, with the
    /// token cost it was given). Requests in flight are dropped and every
    /// slot's cache is emptied.
    ///
    /// # Errors
    ///
    /// [`Error::KvCache`] if llama.cpp refuses to empty a cache.
    pub fn with_budget(mut self, times: Option<PassTimes>) -> Result<Decoder<'m>, Error> {
        for slot in 0..self.decoding.len() {
            self.target.clear(SeqId::new(slot))?;
        }
        self.stepper = stepper(self.model, &self.target, times)?;
        self.decoding.fill(false);
        Ok(self)
    }

    /// The decoder with every request sampled by `sampler` (the first
    /// request with its seed, the next ones with the seeds after it), or
    /// greedy (`None`, the default).
    #[must_use]
    pub fn with_sampling(mut self, sampler: Option<Sampler>) -> Decoder<'m> {
        self.sampling = sampler;
        self
    }

    /// The draft budget's pass-time model, when the budget is on.
    #[must_use]
    pub fn pass_times(&self) -> Option<&PassTimes> {
        self.stepper.pass_times()
    }

    /// The settings it was made with.
    #[must_use]
    pub fn settings(&self) -> Settings {
        self.settings
    }

    /// The model.
    #[must_use]
    pub fn model(&self) -> &'m Model {
        self.model
    }

    /// Decode counters since creation or the last reset.
    #[must_use]
    pub fn counters(&self) -> Counters {
        self.counters
    }

    /// Sets the counters to zero.
    pub fn reset_counters(&mut self) {
        self.counters = Counters::default();
    }

    /// Empties the KV cache of every idle slot now.
    ///
    /// # Errors
    ///
    /// [`Error::KvCache`] if llama.cpp refuses a removal.
    pub fn clear(&mut self) -> Result<(), Error> {
        for slot in 0..self.decoding.len() {
            if !self.is_busy(slot) {
                self.truncate(slot, 0)?;
            }
        }
        Ok(())
    }

    /// Empties idle `slot`'s cache before its next request (the next
    /// prompt is evaluated whole). Whether it was idle.
    pub fn forget(&mut self, slot: usize) -> bool {
        self.stepper.forget(SeqId::new(slot))
    }

    /// Whether `slot` is decoding a reply.
    #[must_use]
    pub fn is_busy(&self, slot: usize) -> bool {
        self.stepper.is_busy(SeqId::new(slot))
    }

    /// Whether any slot is decoding.
    #[must_use]
    pub fn any_busy(&self) -> bool {
        self.stepper.is_running()
    }

    /// The tokens `slot`'s KV cache holds (empty for a slot that does not exist).
    #[must_use]
    pub fn cached(&self, slot: usize) -> &[u32] {
        self.target.cached(SeqId::new(slot))
    }

    /// The highest position llama.cpp's KV cache holds for `slot` (-1 when
    /// empty): `cached(slot).len() - 1` after every call.
    #[must_use]
    pub fn kv_pos_max(&self, slot: usize) -> i64 {
        self.target.kv_pos_max(SeqId::new(slot))
    }

    /// Starts a reply of at most `max_tokens` tokens in `slot` after
    /// `prompt`, greedy (or sampled: [`with_sampling`](Decoder::with_sampling)): the common prefix with what the slot's cache holds
    /// is kept, the rest of the prompt is prefilled by the next steps, in
    /// chunks beside the other slots' rows, and the first token chosen.
    /// With `spec`, the reply is decoded speculatively. Other slots are not
    /// touched.
    ///
    /// # Errors
    ///
    /// [`Error::Slot`] for a slot that does not exist or is busy,
    /// [`Error::EmptyPrompt`], [`Error::PromptTooLong`] when the prompt
    /// leaves no room in the sequence's context, [`Error::TokenOutOfRange`],
    /// [`Error::Setting`] for `max_tokens` 0. The slot stays idle on an
    /// error.
    pub fn start(
        &mut self,
        slot: usize,
        prompt: &[u32],
        max_tokens: usize,
        spec: Option<Speculative>,
    ) -> Result<(), Error> {
        self.start_pinned(slot, prompt, max_tokens, spec, None)
    }

    /// [`start`](Decoder::start), the reply's greedy choices pinned to
    /// `reference`'s tokens at its near ties: where a pass prefers another
    /// token than the reference's, and the reference chose its own with a
    /// margin under [`Reference::bound`], the reference's is kept (counted
    /// in [`Counters::pinned`]). For measurements that compare decodings of
    /// the same tokens; a difference anywhere else is kept.
    ///
    /// # Errors
    ///
    /// As [`start`](Decoder::start)'s.
    pub fn start_pinned(
        &mut self,
        slot: usize,
        prompt: &[u32],
        max_tokens: usize,
        spec: Option<Speculative>,
        reference: Option<Reference<'_>>,
    ) -> Result<(), Error> {
        setting("max_tokens", max_tokens, max_tokens > 0, "at least 1")?;
        let decode = match &mut self.sampling {
            Some(s) => {
                let d = Decode::sampled(max_tokens, *s);
                s.seed = s.seed.wrapping_add(1);
                d
            }
            None => Decode::greedy(max_tokens),
        };
        self.stepper.start(SeqId::new(slot), prompt, decode, spec)?;
        self.pins.start(slot, prompt.len(), reference);
        self.decoding[slot] = false;
        Ok(())
    }

    /// One step: every live slot's rows (`[last] + draft`, or its prompt's
    /// next chunk) in one batch, one `llama_decode`, then each slot
    /// verified, committed and rolled back by the stepper. Replies that
    /// ended are appended to `finished`; their slots are free again, their
    /// caches kept for the next prompt's common prefix.
    ///
    /// # Errors
    ///
    /// [`Error::Decode`] / [`Error::KvCache`] from llama.cpp: every reply
    /// with rows in the pass ends ([`selfspec::step::Stop::Failed`], in
    /// `finished`) and its cache is emptied; the others go on.
    pub fn step(&mut self, finished: &mut Vec<Finished>) -> Result<(), Error> {
        let t = Instant::now();
        let pinned = self.pins.pinned;
        let result = self.stepper.step(&mut pin::PinnedTarget {
            target: &mut self.target,
            pins: &mut self.pins,
        });
        self.counters.pinned += self.pins.pinned - pinned;
        let elapsed = t.elapsed();
        self.got.fill(0);
        for e in self.stepper.events() {
            self.got[e.seq.index()] += 1;
        }
        self.account(elapsed);
        for f in self.stepper.finished() {
            self.decoding[f.seq.index()] = false;
            finished.push(f);
        }
        result.map_err(Error::from)
    }

    /// The draft budget's prices of the decoding passes since the last
    /// call, beside their measured times (none with the budget off).
    pub fn take_prices(&mut self) -> Prices {
        std::mem::take(&mut self.prices)
    }

    /// Counts the last step and splits its time.
    fn account(&mut self, elapsed: Duration) {
        for (decoding, &got) in self.decoding.iter_mut().zip(&self.got) {
            // The prompt's last chunk chose the first token.
            *decoding |= got > 0;
        }
        let Some(pass) = self.stepper.last_pass() else {
            return;
        };
        self.prices.record(&pass);
        let c = &mut self.counters;
        let prefill = prefill_part(&pass, elapsed);
        if prompt_only(&pass) {
            c.prefill_steps += 1;
        } else {
            c.steps += 1;
            c.shared_steps += usize::from(pass.prompt_rows > 0);
        }
        c.prefill_time += prefill;
        c.decode_time += elapsed - prefill;
        c.pass_time += pass.duration.saturating_sub(prefill);
    }

    /// The target, for measurements over every sequence
    /// ([`cost`](crate::cost)): every slot must be idle, and each one's
    /// cache is emptied in the stepper's view (its next request starts
    /// from an empty cache).
    pub(crate) fn idle_target(&mut self) -> Result<&mut LlamaTarget<'m>, Error> {
        let slots = self.decoding.len();
        if let Some(slot) = (0..slots).find(|&s| self.is_busy(s)) {
            return Err(Error::Slot {
                slot,
                slots,
                problem: "is busy",
            });
        }
        for slot in 0..slots {
            self.stepper.forget(SeqId::new(slot));
        }
        Ok(&mut self.target)
    }

    /// The target, for measurements that bypass the stepper: each use
    /// empties `slot`'s cache in the stepper's view (see [`probe`]).
    pub(crate) fn target_for(&mut self, slot: usize) -> Result<&mut LlamaTarget<'m>, Error> {
        let slots = self.decoding.len();
        if slot >= slots || self.is_busy(slot) {
            return Err(Error::Slot {
                slot,
                slots,
                problem: if slot >= slots {
                    "does not exist"
                } else {
                    "is busy"
                },
            });
        }
        // The stepper's view of the cache no longer holds: its next request
        // starts from an empty cache.
        self.stepper.forget(SeqId::new(slot));
        Ok(&mut self.target)
    }
}

/// The part of a step's `elapsed` time that was prefill: all of it for a
/// pass of prompt rows only, none for a pass without (a filler row that
/// keeps a split pass in one computation, an idle slot's between busy
/// ones, is decoding's cost), the prompt rows' share by rows of a shared
/// pass (on the CPU a pass's cost grows about linearly with its rows).
fn prefill_part(pass: &Pass, elapsed: Duration) -> Duration {
    if prompt_only(pass) {
        elapsed
    } else if pass.prompt_rows == 0 {
        Duration::ZERO
    } else {
        let share = pass.prompt_rows as f64 / pass.rows as f64;
        pass.duration.mul_f64(share).min(elapsed)
    }
}

/// Whether every row of `pass` was a prompt's.
fn prompt_only(pass: &Pass) -> bool {
    pass.prompt_rows > 0 && pass.prompt_rows >= pass.rows
}

/// A stepper over `target` that ends replies at the model's
/// end-of-generation tokens, with the draft budget on `times` when given.
fn stepper(
    model: &Model,
    target: &LlamaTarget<'_>,
    times: Option<PassTimes>,
) -> Result<Stepper, Error> {
    let stepper = Stepper::new(target)?.with_stop_tokens(&model.end_tokens());
    Ok(match times {
        Some(times) => stepper.with_budget(times),
        None => stepper,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_steps_prefill_part_as_a_table() {
        let ms = Duration::from_millis;
        // (rows, prompt rows, pass duration, step time, prefill part)
        let cases = [
            // plain decoding, and a filler row between busy slots
            (4, 0, 30, 31, 0),
            (3, 0, 29, 30, 0),
            // prompt rows only
            (63, 63, 300, 302, 302),
            // shared: the prompt rows' share of the pass
            (64, 48, 200, 210, 150),
            // never more than the step took
            (2, 1, 40, 10, 10),
        ];
        for (i, &(rows, prompt_rows, took, elapsed, want)) in cases.iter().enumerate() {
            let mut pass = Pass::default();
            pass.rows = rows;
            pass.prompt_rows = prompt_rows;
            pass.duration = ms(took);
            assert_eq!(prefill_part(&pass, ms(elapsed)), ms(want), "case {i}");
        }
    }
}
