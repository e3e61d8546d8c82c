//! The decoding loop: S sequences in one llama.cpp context, each step one
//! `llama_decode` of every live sequence's `[last] + draft` in one batch.
//!
//! A slot without a [`Speculative`] decodes plainly (one token a step); a
//! slot with one drafts, and each step verifies its draft greedily
//! ([`selfspec::verify::greedy_next`]) and removes the rejected positions
//! from the KV cache. The engine hooks are marked `// prefill`,
//! `// propose`, `// verify`, `// commit`, `// rollback` and
//! `// end of request`.

use std::num::NonZeroU32;
use std::time::Instant;

use llama_cpp_2::context::params::LlamaContextParams;
use llama_cpp_2::context::LlamaContext;
use llama_cpp_2::llama_batch::LlamaBatch;
use llama_cpp_2::token::LlamaToken;
use selfspec::{verify, Speculative};

use selfspec_conversations::argmax_gap;

use crate::model::backend;

mod pacing;
mod probe;
mod reply;
mod settings;

use crate::{Error, Model};
pub use pacing::Pacing;
pub use reply::{Counters, Finished, Reply, Stop};
pub use settings::Settings;

struct Active {
    last: u32,
    reply: Reply,
    max_tokens: usize,
    /// The prompt's tokens: the cache held them when the reply began.
    prompt_len: usize,
    spec: Option<Speculative>,
    /// This step's draft and its rows in the batch.
    draft: Vec<u32>,
    offset: usize,
    done: bool,
}

#[derive(Default)]
struct Slot {
    /// The tokens the sequence's KV cache holds, at positions 0.. .
    cached: Vec<u32>,
    active: Option<Active>,
}

/// S sequences of one llama.cpp context, decoded in one batch a step.
pub struct Decoder<'m> {
    model: &'m Model,
    ctx: LlamaContext<'m>,
    batch: LlamaBatch<'static>,
    settings: Settings,
    slots: Vec<Slot>,
    counters: Counters,
    /// Each drafting sequence's stop threshold, when paced.
    pacing: Option<Pacing>,
    /// Scratch of a slot's verification: each row's argmax and gap.
    argmax: Vec<u32>,
    gaps: Vec<f32>,
}

impl std::fmt::Debug for Decoder<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Decoder")
            .field("settings", &self.settings)
            .field("counters", &self.counters)
            .finish_non_exhaustive()
    }
}

pub(crate) fn setting(
    what: &'static str,
    value: usize,
    ok: bool,
    allowed: &'static str,
) -> Result<(), Error> {
    if ok {
        Ok(())
    } else {
        Err(Error::Setting {
            what,
            value,
            allowed,
        })
    }
}

impl<'m> Decoder<'m> {
    /// A context of `settings.sequences` sequences of `settings.context`
    /// tokens each on `model`.
    ///
    /// # Errors
    ///
    /// [`Error::Setting`] for zero sequences (or over 64), a context under 16
    /// tokens, zero threads or a batch smaller than two tokens a sequence;
    /// [`Error::Context`] when llama.cpp cannot make the context.
    pub fn new(model: &'m Model, settings: Settings) -> Result<Decoder<'m>, Error> {
        let s = settings;
        setting(
            "sequences",
            s.sequences,
            (1..=64).contains(&s.sequences),
            "1 to 64",
        )?;
        setting("context", s.context, s.context >= 16, "at least 16 tokens")?;
        setting(
            "threads",
            s.threads,
            (1..=1024).contains(&s.threads),
            "1 to 1024",
        )?;
        let ok = s.batch >= 2 * s.sequences && s.batch <= 1 << 20;
        setting("batch", s.batch, ok, "at least 2 tokens a sequence")?;
        let ok = s.step_tokens >= s.sequences && s.step_tokens <= s.batch;
        setting(
            "step_tokens",
            s.step_tokens,
            ok,
            "from one a sequence to the batch size",
        )?;
        let n_ctx = s.context.saturating_mul(s.sequences);
        let err = || Error::Context {
            n_ctx,
            sequences: s.sequences,
        };
        let as_u32 = |v: usize| u32::try_from(v).map_err(|_| err());
        let threads = i32::try_from(s.threads).map_err(|_| err())?;
        let params = LlamaContextParams::default()
            .with_n_ctx(NonZeroU32::new(as_u32(n_ctx)?))
            .with_n_batch(as_u32(s.batch)?)
            .with_n_seq_max(as_u32(s.sequences)?)
            .with_n_threads(threads)
            .with_n_threads_batch(threads)
            .with_flash_attention_policy(if s.flash_attention {
                llama_cpp_sys_2::LLAMA_FLASH_ATTN_TYPE_ENABLED
            } else {
                llama_cpp_sys_2::LLAMA_FLASH_ATTN_TYPE_DISABLED
            });
        let ctx = model
            .inner
            .new_context(backend()?, params)
            .map_err(|_| err())?;
        Ok(Decoder {
            model,
            ctx,
            batch: LlamaBatch::new(s.batch, 1),
            settings: s,
            slots: (0..s.sequences).map(|_| Slot::default()).collect(),
            counters: Counters::default(),
            pacing: None,
            argmax: Vec::new(),
            gaps: Vec::new(),
        })
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

    /// Paces every drafting sequence's drafts from the next step on
    /// (`None`: each keeps the token cost its [`Speculative`] was given).
    /// With pacing, each draft's stop threshold is set before it is drafted
    /// ([`Speculative::set_token_cost`]) to what [`Pacing::threshold`] says
    /// after the steps so far.
    pub fn set_pacing(&mut self, pacing: Option<Pacing>) {
        self.pacing = pacing;
    }

    /// Sets the counters to zero.
    pub fn reset_counters(&mut self) {
        self.counters = Counters::default();
    }

    /// Empties the KV cache of every idle slot.
    ///
    /// # Errors
    ///
    /// [`Error::KvCache`] if llama.cpp refuses a removal.
    pub fn clear(&mut self) -> Result<(), Error> {
        for slot in 0..self.slots.len() {
            if self.slots[slot].active.is_none() {
                self.truncate(slot, 0)?;
            }
        }
        Ok(())
    }

    /// Whether `slot` is decoding a reply.
    #[must_use]
    pub fn is_busy(&self, slot: usize) -> bool {
        self.slots.get(slot).is_some_and(|s| s.active.is_some())
    }

    /// Whether any slot is decoding.
    #[must_use]
    pub fn any_busy(&self) -> bool {
        self.slots.iter().any(|s| s.active.is_some())
    }

    /// The tokens `slot`'s KV cache holds (empty for a slot that does not exist).
    #[must_use]
    pub fn cached(&self, slot: usize) -> &[u32] {
        self.slots.get(slot).map_or(&[], |s| &s.cached)
    }

    /// The highest position llama.cpp's KV cache holds for `slot` (-1 when
    /// empty): `cached(slot).len() - 1` after every call.
    #[must_use]
    pub fn kv_pos_max(&self, slot: usize) -> i64 {
        i32::try_from(slot).map_or(-1, |s| i64::from(self.ctx.kv_cache_seq_pos_max(s)))
    }

    /// The logit row `i` of the last decode (a row that pass computed).
    pub(crate) fn row(&self, i: usize) -> &[f32] {
        self.ctx
            .get_logits_ith(i32::try_from(i).unwrap_or(i32::MAX))
    }

    fn check_slot(&self, slot: usize, want_idle: bool) -> Result<(), Error> {
        let slots = self.slots.len();
        match self.slots.get(slot) {
            None => Err(Error::Slot {
                slot,
                slots,
                problem: "does not exist",
            }),
            Some(s) if want_idle && s.active.is_some() => Err(Error::Slot {
                slot,
                slots,
                problem: "is busy",
            }),
            Some(_) => Ok(()),
        }
    }

    /// Removes `slot`'s KV positions from `from` on.
    pub(crate) fn truncate(&mut self, slot: usize, from: usize) -> Result<(), Error> {
        let err = || Error::KvCache { seq: slot, from };
        let seq = i32::try_from(slot).map_err(|_| err())?;
        let p0 = u32::try_from(from).map_err(|_| err())?;
        self.ctx
            .kv_cache_seq_rm(seq, Some(p0), None)
            .map_err(|_| err())?;
        self.slots[slot].cached.truncate(from);
        Ok(())
    }

    /// Decodes `tokens` into `slot`'s cache after what it holds, in chunks
    /// of the batch size; logits for every token of the last chunk when
    /// `all_logits`, else for the last token only. On an error the slot's
    /// cache is as before.
    pub(crate) fn extend(
        &mut self,
        slot: usize,
        tokens: &[u32],
        all_logits: bool,
    ) -> Result<(), Error> {
        let start = self.slots[slot].cached.len();
        let seq = [i32::try_from(slot).unwrap_or(0)];
        let n_chunks = tokens.len().div_ceil(self.settings.batch);
        for (c, chunk) in tokens.chunks(self.settings.batch).enumerate() {
            let last_chunk = c + 1 == n_chunks;
            self.batch.clear();
            let pos0 = self.slots[slot].cached.len();
            for (i, &t) in chunk.iter().enumerate() {
                let logits = last_chunk && (all_logits || i + 1 == chunk.len());
                self.add(t, pos0 + i, &seq, logits)?;
            }
            if let Err(e) = self.ctx.decode(&mut self.batch) {
                self.truncate(slot, start)?;
                return Err(e.into());
            }
            self.slots[slot].cached.extend_from_slice(chunk);
        }
        Ok(())
    }

    fn add(&mut self, token: u32, pos: usize, seq: &[i32], logits: bool) -> Result<(), Error> {
        push(
            &mut self.batch,
            self.model.n_vocab(),
            token,
            pos,
            seq,
            logits,
        )
    }

    /// Starts a reply of at most `max_tokens` tokens in `slot` after
    /// `prompt`: the common prefix with what the slot's cache holds is kept,
    /// the rest of the prompt is prefilled, and the first token chosen.
    /// With `spec`, the reply is decoded speculatively (`spec.begin(prompt)`
    /// is called here). Other slots are not touched.
    ///
    /// # Errors
    ///
    /// [`Error::Slot`] for a slot that does not exist or is busy,
    /// [`Error::EmptyPrompt`], [`Error::PromptTooLong`] when the prompt
    /// leaves no room in the sequence's context, [`Error::TokenOutOfRange`],
    /// [`Error::Setting`] for `max_tokens` 0, [`Error::Decode`] /
    /// [`Error::KvCache`] from llama.cpp. The slot stays idle on an error.
    pub fn start(
        &mut self,
        slot: usize,
        prompt: &[u32],
        max_tokens: usize,
        spec: Option<Speculative>,
    ) -> Result<(), Error> {
        self.check_slot(slot, true)?;
        setting("max_tokens", max_tokens, max_tokens > 0, "at least 1")?;
        if prompt.is_empty() {
            return Err(Error::EmptyPrompt);
        }
        if prompt.len() >= self.settings.context {
            return Err(Error::PromptTooLong {
                tokens: prompt.len(),
                context: self.settings.context,
            });
        }
        let vocab = self.model.n_vocab();
        if let Some(&token) = prompt.iter().find(|&&t| t as usize >= vocab) {
            return Err(Error::TokenOutOfRange { token, vocab });
        }
        // prefill: keep the cached common prefix (at least one token is
        // evaluated, for the logits of the first reply token).
        let t = Instant::now();
        let cached = &self.slots[slot].cached;
        let keep = cached
            .iter()
            .zip(prompt)
            .take_while(|(a, b)| a == b)
            .count();
        self.truncate(slot, keep.min(prompt.len() - 1))?;
        let from = self.slots[slot].cached.len();
        self.extend(slot, &prompt[from..], false)?;
        // The last chunk's last row: the only one with logits.
        let last_chunk = (prompt.len() - from - 1) % self.settings.batch + 1;
        let (first, gap) = argmax_gap(self.row(last_chunk - 1));
        self.counters.prefill_time += t.elapsed();

        let mut spec = spec;
        if let Some(s) = &mut spec {
            s.begin(prompt);
        }
        let mut active = Active {
            last: first,
            reply: Reply {
                tokens: vec![first],
                gaps: vec![gap],
                passes: 0,
                drafted: 0,
                accepted: 0,
                stop: Stop::MaxTokens,
            },
            max_tokens,
            prompt_len: prompt.len(),
            spec,
            draft: Vec::new(),
            offset: 0,
            done: false,
        };
        self.check_end(&mut active, prompt.len());
        self.slots[slot].active = Some(active);
        Ok(())
    }

    /// Marks `a` done when its last token ends the turn, it has
    /// `max_tokens` tokens, or `cached` positions leave no room for `last`.
    fn check_end(&self, a: &mut Active, cached: usize) {
        if let Some(end) = a.reply.tokens.iter().position(|&t| self.model.is_end(t)) {
            a.reply.tokens.truncate(end + 1);
            a.reply.gaps.truncate(end + 1);
            a.reply.stop = Stop::EndOfTurn;
            a.done = true;
        } else if a.reply.tokens.len() >= a.max_tokens {
            a.reply.tokens.truncate(a.max_tokens);
            a.reply.gaps.truncate(a.max_tokens);
            a.reply.stop = Stop::MaxTokens;
            a.done = true;
        } else if cached + 1 > self.settings.context {
            a.reply.stop = Stop::ContextFull;
            a.done = true;
        }
    }

    /// One step: every live slot's `[last] + draft` in one batch, one
    /// `llama_decode`, then each slot verified, committed and rolled back.
    /// Replies that ended (in this step or at their start) are appended to
    /// `finished`; their slots are free again, their caches kept for the
    /// next prompt's common prefix.
    ///
    /// # Errors
    ///
    /// [`Error::Decode`] / [`Error::KvCache`] from llama.cpp: every live
    /// reply is then abandoned (its slot freed, its cache emptied).
    pub fn step(&mut self, finished: &mut Vec<Finished>) -> Result<(), Error> {
        let t = Instant::now();
        let result = self.step_inner();
        if result.is_err() {
            for slot in 0..self.slots.len() {
                if self.slots[slot].active.take().is_some() {
                    let _ = self.truncate(slot, 0);
                }
            }
        }
        self.counters.decode_time += t.elapsed();
        result?;
        for (slot, s) in self.slots.iter_mut().enumerate() {
            if s.active.as_ref().is_some_and(|a| a.done) {
                if let Some(mut a) = s.active.take() {
                    // end of request: the tokens join the shared memory.
                    if let Some(spec) = &mut a.spec {
                        spec.end_request();
                    }
                    finished.push(Finished {
                        slot,
                        reply: a.reply,
                    });
                }
            }
        }
        Ok(())
    }

    fn step_inner(&mut self) -> Result<(), Error> {
        // propose: each live slot's draft, cut to the reply's, the
        // context's and the batch's room; `[last] + draft` into the batch
        // with logits for every position.
        self.batch.clear();
        let live = self
            .slots
            .iter()
            .filter(|s| s.active.as_ref().is_some_and(|a| !a.done))
            .count();
        let share = self.settings.step_tokens / live.max(1);
        let pacing = self.pacing;
        let (context, vocab) = (self.settings.context, self.model.n_vocab());
        let mut n_rows = 0;
        for (s, slot) in self.slots.iter_mut().enumerate() {
            let Some(a) = slot.active.as_mut().filter(|a| !a.done) else {
                continue;
            };
            let room = (a.max_tokens - a.reply.tokens.len() - 1)
                .min(context - slot.cached.len() - 1)
                .min(share - 1);
            a.draft.clear();
            if let Some(spec) = &mut a.spec {
                if let Some(p) = pacing {
                    spec.set_token_cost(p.threshold())?;
                }
                let d = spec.draft(&slot.cached, a.last);
                a.draft.extend_from_slice(&d[..d.len().min(room)]);
            }
            a.offset = n_rows;
            n_rows += 1 + a.draft.len();
            let seq = [i32::try_from(s).unwrap_or(0)];
            let pos = slot.cached.len();
            push(&mut self.batch, vocab, a.last, pos, &seq, true)?;
            for (i, &d) in a.draft.iter().enumerate() {
                push(&mut self.batch, vocab, d, pos + 1 + i, &seq, true)?;
            }
        }
        if n_rows == 0 {
            return Ok(());
        }
        self.ctx.decode(&mut self.batch)?;
        self.counters.steps += 1;
        for s in 0..self.slots.len() {
            self.verify_slot(s)?;
        }
        Ok(())
    }

    /// verify, commit and rollback of slot `s` after the step's pass.
    fn verify_slot(&mut self, s: usize) -> Result<(), Error> {
        let Some(mut a) = self.slots[s].active.take() else {
            return Ok(());
        };
        if a.done {
            self.slots[s].active = Some(a);
            return Ok(());
        }
        // verify: rows until the first disagreement; row i predicts the
        // token after [last] + draft[..i].
        let k = a.draft.len();
        self.argmax.clear();
        self.gaps.clear();
        for i in 0..=k {
            let (t, g) = argmax_gap(self.row(a.offset + i));
            self.argmax.push(t);
            self.gaps.push(g);
            if i < k && t != a.draft[i] {
                break;
            }
        }
        let v = verify::greedy_next(&a.draft, &self.argmax)
            .ok_or(Error::Decode(llama_cpp_2::DecodeError::NTokensZero))?;
        let (n, next) = (v.n_accepted, v.next_token);
        a.reply.gaps.extend_from_slice(&self.gaps[..=n]);
        // commit: the cache keeps `last` and the kept draft tokens; the
        // correction (or bonus) token is the next `last`.
        let slot = &mut self.slots[s];
        slot.cached.push(a.last);
        slot.cached.extend_from_slice(&a.draft[..n]);
        a.reply.tokens.extend_from_slice(&a.draft[..n]);
        a.reply.tokens.push(next);
        a.reply.passes += 1;
        a.reply.drafted += k;
        a.reply.accepted += n;
        a.last = next;
        if let Some(spec) = &mut a.spec {
            spec.accept(n);
            if let Some(p) = &mut self.pacing {
                p.record(k, n);
            }
        }
        // rollback: the rejected draft positions leave the KV cache.
        let len = slot.cached.len();
        if n < k {
            self.truncate(s, len)?;
        }
        self.check_end(&mut a, len);
        if a.done {
            // A reply that ended inside an accepted draft (its end-of-turn
            // token, or tokens after it, were drafted and kept) leaves more
            // in the cache than plain decoding would: the cache keeps the
            // prompt and the reply less its last token, as plain decoding's
            // does, so the next turn's prefill is the same pass in both.
            let keep = a.prompt_len + a.reply.tokens.len() - 1;
            if self.slots[s].cached.len() > keep {
                self.truncate(s, keep)?;
            }
        }
        self.slots[s].active = Some(a);
        Ok(())
    }
}

/// Adds `token` at `pos` of the sequences `seq` to `batch`.
fn push(
    batch: &mut LlamaBatch<'static>,
    vocab: usize,
    token: u32,
    pos: usize,
    seq: &[i32],
    logits: bool,
) -> Result<(), Error> {
    let id = i32::try_from(token)
        .ok()
        .filter(|&t| (t as usize) < vocab)
        .ok_or(Error::TokenOutOfRange { token, vocab })?;
    let pos = i32::try_from(pos).unwrap_or(i32::MAX);
    // Callers keep within the batch's size; a full batch is a typed error.
    batch
        .add(LlamaToken(id), pos, seq, logits)
        .map_err(|_| Error::Setting {
            what: "batch",
            value: 0,
            allowed: "room for every token of a step",
        })
}
