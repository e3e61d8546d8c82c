//! Which slot a request takes, and the prompt cache around it: the idle
//! slot whose cache holds the longest start of the prompt (its own scope's
//! caches only); before that slot's cache is given to the new prompt, what
//! it holds is saved to the prompt cache, and a saved cache that holds
//! more of the prompt than any slot is restored into it.

use std::borrow::BorrowMut;

use llama_cpp_2::context::LlamaContext;
use selfspec::step::{SeqId, Stepper, Target};
use selfspec_llama_cpp::{LlamaTarget, SavedSeq};

use crate::metrics::Metrics;
use crate::prompt_cache::{common, PromptCache};

/// A target whose sequences' caches can be saved to host memory and
/// restored.
pub trait Restore: Target {
    /// A copy of `seq`'s cache; `None` if it cannot be made.
    fn save(&mut self, seq: SeqId) -> Option<SavedSeq>;
    /// Replaces `seq`'s cache with `saved`; false (the cache then empty)
    /// if it cannot.
    fn restore(&mut self, seq: SeqId, saved: &SavedSeq) -> bool;
}

impl<'m, C: BorrowMut<LlamaContext<'m>>> Restore for LlamaTarget<'m, C> {
    fn save(&mut self, seq: SeqId) -> Option<SavedSeq> {
        LlamaTarget::save(self, seq).ok()
    }
    fn restore(&mut self, seq: SeqId, saved: &SavedSeq) -> bool {
        LlamaTarget::restore(self, seq, saved).is_ok()
    }
}

/// Tokens a save or a restore must spare evaluating to be made. Saving or
/// restoring copies the sequence's cache (23 KB a token on the
/// repository's model; milliseconds for a thousand tokens), while
/// evaluating a prompt token again takes several milliseconds on a 2-core
/// CPU (BENCHMARKS.md, "The server under load"): a few tokens would pay;
/// 32 keeps one-line prompts' template tokens out of the cache. Not
/// tuned: the load figures were measured at this value only.
const MIN_SPARED: usize = 32;

/// Where a request starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Placement {
    /// Its slot.
    pub seq: SeqId,
    /// Prompt tokens its slot's cache holds (not evaluated).
    pub reused: usize,
    /// Whether they came from the prompt cache.
    pub restored: bool,
}

/// The slots' scopes and the prompt cache.
pub struct Slots {
    /// The scope of the requests each slot's cache holds the tokens of.
    scopes: Vec<Option<String>>,
    cache: PromptCache<SavedSeq>,
}

impl Slots {
    /// `slots` slots with a prompt cache of at most `cache_bytes`.
    pub fn new(slots: usize, cache_bytes: usize) -> Slots {
        Slots {
            scopes: vec![None; slots],
            cache: PromptCache::new(cache_bytes),
        }
    }

    /// Picks the slot of a request of `scope` with `prompt` and readies its
    /// cache (see the module's docs); `None` when no slot is idle. Another
    /// scope's cache is never reused: the slot's cache is emptied.
    pub fn place<T: Restore>(
        &mut self,
        stepper: &mut Stepper,
        target: &mut T,
        prompt: &[u32],
        scope: &str,
        metrics: &Metrics,
    ) -> Option<Placement> {
        let seq = (0..self.scopes.len())
            .map(SeqId::new)
            .filter(|&s| !stepper.is_busy(s))
            .max_by_key(|&s| {
                (
                    self.reused(stepper, s, prompt, scope),
                    std::cmp::Reverse(s.index()),
                )
            })?;
        let mut placed = Placement {
            seq,
            reused: self.reused(stepper, seq, prompt, scope),
            restored: false,
        };
        if stepper.cached(seq).len() >= placed.reused + MIN_SPARED {
            self.save(stepper, target, seq, metrics);
        }
        let room = prompt.len().saturating_sub(1);
        let hit = self.cache.best(scope, prompt);
        let same_scope = self.scopes[seq.index()].as_deref() == Some(scope);
        match hit.filter(|h| h.tokens.min(room) >= placed.reused + MIN_SPARED) {
            Some(h) => {
                let saved = self.cache.take(h.entry);
                let restored = target.restore(seq, &saved);
                if restored && stepper.set_cached(seq, saved.tokens()).is_ok() {
                    placed.reused = h.tokens.min(room);
                    placed.restored = true;
                } else {
                    stepper.forget(seq);
                    placed.reused = 0;
                }
            }
            None if !same_scope => {
                stepper.forget(seq);
            }
            None => {}
        }
        self.scopes[seq.index()] = Some(scope.to_string());
        metrics.set_prompt_cache(self.cache.bytes(), self.cache.len());
        Some(placed)
    }

    /// Prompt tokens `seq`'s cache holds for a request of `scope`, as the
    /// stepper reuses them (all but the prompt's last token at most): none
    /// from another scope's requests.
    fn reused(&self, stepper: &Stepper, seq: SeqId, prompt: &[u32], scope: &str) -> usize {
        if self.scopes[seq.index()].as_deref() != Some(scope) {
            return 0;
        }
        common(stepper.cached(seq), prompt).min(prompt.len().saturating_sub(1))
    }

    /// Saves idle `seq`'s cache to the prompt cache under its scope.
    fn save<T: Restore>(
        &mut self,
        stepper: &Stepper,
        target: &mut T,
        seq: SeqId,
        metrics: &Metrics,
    ) {
        let Some(scope) = self.scopes[seq.index()].clone() else {
            return;
        };
        let held = stepper.cached(seq);
        // The last step may have left a filler row past what the stepper
        // holds (removed at its next step): cut to its view first.
        if target.truncate(seq, held.len()).is_err() {
            return;
        }
        match target.save(seq) {
            Some(saved) if saved.tokens() == held => {
                self.cache.insert(&scope, saved);
                metrics
                    .prompt_cache_saves
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
            _ => {
                metrics
                    .prompt_cache_failures
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
        }
    }
}
