//! The drafter: thresholds, the winner rule and learning the context.

use std::path::Path;

use super::followers::{PartRef, INDEXED_PART};
use super::table::{LookupCache, Recent};
use super::{key_of, Key, NGRAM_SIZES, NGRAM_STATIC, N_DRAFT, UNUSED};
use crate::drafter::{DraftLimits, Drafter};
use crate::index::mirror::Mirror;
use crate::limits::LIVE_BUDGET;
use crate::token::Token;
use crate::Error;

/// Minimum sample sizes and winner percentages per n-gram size 1..4.
struct Thresholds {
    sample: [i64; 4],
    pct: [i64; 4],
}

const LAX: Thresholds = Thresholds {
    sample: [2, 2, 1, 1],
    pct: [66, 50, 50, 50],
};
const STRICT: Thresholds = Thresholds {
    sample: [4, 3, 2, 2],
    pct: [75, 66, 66, 66],
};

/// The follower of `part` with the highest `count * weight` (weight `100 *
/// static count` for followers of the static part `ps`, else 1); ties go to
/// the newest.
pub(super) fn winner(part: PartRef<'_>, ps: Option<PartRef<'_>>) -> usize {
    let Some(ps) = ps.filter(|p| p.len() > 0) else {
        return part.best();
    };
    let weight = |t: Token| ps.find(t).map_or(1, |j| 100 * i64::from(ps.count(j)));
    let better = |(s, i): (i64, usize), (bs, bi): (i64, usize)| s > bs || (s == bs && i > bi);
    let scan = || {
        let mut best = (i64::MIN, 0);
        for (i, (t, c)) in part.iter().enumerate() {
            let cand = (i64::from(c) * weight(t), i);
            if better(cand, best) {
                best = cand;
            }
        }
        best.1
    };
    if part.len() <= INDEXED_PART || ps.len() > part.len() {
        return scan();
    }
    // Large part, smaller static part: the winner is either a follower the
    // static part weights, or the best-counted follower if it is unweighted.
    let top = part.best();
    if ps.find(part.token(top)).is_some() {
        return scan();
    }
    let mut best = (i64::from(part.count(top)), top);
    for (t, sc) in ps.iter() {
        if let Some(i) = part.find(t) {
            let cand = (i64::from(part.count(i)) * 100 * i64::from(sc), i);
            if better(cand, best) {
                best = cand;
            }
        }
    }
    best.1
}

/// llama.cpp's `ngram-cache` drafter (lookup decoding).
///
/// Each draft call first teaches the context cache the tokens added since the
/// last call, then drafts up to 8 tokens, each from the longest n-gram (4 down
/// to 1) of the context cache whose winner passes the lax thresholds, else of
/// the dynamic cache under the strict ones, else from the static cache's
/// 2-gram; static counts weight the followers' scores.
///
/// Reference quirks kept by default (see [`NgramCache::live`] for the fix): the
/// context cache learns n-grams only inside each newly added segment (the
/// accepted tokens plus the new `last`), and after a long history it ignores a
/// new, shorter prompt until the history passes the old length.
///
/// ```
/// use selfspec::{DraftLimits, Drafter, strategies::NgramCache};
///
/// let mut cache = NgramCache::new();
/// let prompt = [1, 2, 3, 4, 1, 2, 3, 4, 1, 2];
/// let mut draft = Vec::new();
/// cache.draft(&prompt, 3, DraftLimits::default(), &mut draft);
/// assert_eq!(draft, [4, 1, 2, 3, 4, 1, 2, 3]);
/// ```
#[derive(Clone, Debug, Default)]
pub struct NgramCache {
    /// The context cache (for `ngram-cache-live`, its current generation).
    pub(super) context: LookupCache,
    dynamic: LookupCache,
    statics: LookupCache,
    /// History tokens (plus `last`) already fed to the context cache.
    cache_size: usize,
    learning: Learning,
    /// The retired generation of ngram-cache-live's context cache.
    generations: Generations,
    /// The reference's buffer for the new segment.
    segment: Vec<Token>,
    tokens_from: TokensFrom,
}

/// How the context cache learns the history: the reference, or with one or
/// both of its quirks fixed.
#[derive(Clone, Debug, Default)]
enum Learning {
    /// llama.cpp's: n-grams inside each added segment; a history shorter than
    /// the longest seen teaches nothing until it passes it.
    #[default]
    Reference,
    /// [`NgramCache::relearn_prompts`]: a new prompt is learned from where it
    /// departs from `fed` (history ++ [last] as last seen); n-grams still
    /// inside each segment.
    Relearn { fed: Mirror },
    /// [`NgramCache::live`]: every n-gram of history ++ [last], across
    /// segments, from where it departs from `fed`; the context cache holds
    /// at most `budget` tokens learned (see `Generations`).
    Live { fed: Mirror, budget: usize },
}

/// ngram-cache-live's memory budget: the context cache learns into its
/// current generation (`NgramCache::context`); once that holds half the
/// budget in learned tokens, the older generation is forgotten and the current
/// one becomes it. Drafts consult the current generation, then the older.
/// (Unused by the other variants: an empty cache.)
#[derive(Clone, Debug, Default)]
struct Generations {
    older: LookupCache,
    /// Tokens learned into the current generation.
    learned: usize,
}

impl Generations {
    /// Counts `new` tokens about to be learned into `current`, first
    /// retiring it when they would take it past half of `budget`.
    fn admit(&mut self, current: &mut LookupCache, new: usize, budget: usize) {
        if self.learned > 0 && self.learned + new > budget / 2 {
            std::mem::swap(current, &mut self.older);
            current.clear();
            self.learned = 0;
        }
        self.learned += new;
    }
}

/// Drafted tokens per cache they came from ([`NgramCache::sources`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct TokensFrom {
    /// From the context cache (learned from the history).
    pub context: u64,
    /// From the dynamic cache.
    pub dynamic: u64,
    /// From the static cache.
    pub statics: u64,
}

impl From<TokensFrom> for [u64; 3] {
    /// `[context, dynamic, static]`, llama.cpp's order.
    fn from(t: TokensFrom) -> [u64; 3] {
        [t.context, t.dynamic, t.statics]
    }
}

/// The cache a drafted token came from.
#[derive(Clone, Copy, Debug)]
enum Source {
    Context,
    Dynamic,
    Static,
}

impl NgramCache {
    /// A drafter with no static or dynamic cache.
    #[must_use]
    pub fn new() -> NgramCache {
        NgramCache::default()
    }

    /// A drafter with the given static and dynamic caches (already loaded).
    #[must_use]
    pub fn with_caches(static_cache: LookupCache, dynamic_cache: LookupCache) -> NgramCache {
        NgramCache {
            statics: static_cache,
            dynamic: dynamic_cache,
            ..NgramCache::default()
        }
    }

    /// A drafter reading llama.cpp's `--lookup-cache-static` and
    /// `--lookup-cache-dynamic` files; errors name the file and byte offset.
    ///
    /// # Errors
    ///
    /// [`Error::CacheFile`] when a file cannot be read or is not a valid cache.
    pub fn from_files(
        static_cache: Option<&Path>,
        dynamic_cache: Option<&Path>,
    ) -> Result<NgramCache, Error> {
        let load = |p: Option<&Path>| p.map_or_else(|| Ok(LookupCache::new()), LookupCache::load);
        Ok(NgramCache::with_caches(
            load(static_cache)?,
            load(dynamic_cache)?,
        ))
    }

    /// Fixes the second quirk: a prompt that departs from the history seen so
    /// far (a new conversation, a shorter prompt) is learned from where it
    /// departs, instead of being ignored until the history passes the old
    /// length. N-grams are still learned inside each added segment. (No
    /// budget: the context cache grows as the reference's.) On a live
    /// drafter, no change.
    #[must_use]
    pub fn relearn_prompts(mut self) -> NgramCache {
        if let Learning::Reference = self.learning {
            self.learning = Learning::Relearn {
                fed: Mirror::default(),
            };
        }
        self
    }

    /// Fixes both quirks (the `ngram-cache-live` strategy): the context cache
    /// learns every n-gram of the history, across the boundaries of what each
    /// call adds, and learns new prompts from where they depart. Earlier
    /// histories stay in the cache, up to [`LIVE_BUDGET`](crate::limits::LIVE_BUDGET) tokens learned
    /// (see [`with_budget`](NgramCache::with_budget)).
    #[must_use]
    pub fn live(self) -> NgramCache {
        self.with_budget(LIVE_BUDGET)
    }

    /// [`live`](NgramCache::live) with a budget of `tokens` learned: the
    /// context cache learns into a current generation, which is retired
    /// when it would pass `tokens / 2` tokens learned (what a single call
    /// teaches is never split, so a long prompt may take a generation past
    /// that); the generation retired before it is then forgotten. Drafts
    /// consult the current generation, then the retired one. Until the
    /// first retirement the drafts are those of an unbounded cache.
    #[must_use]
    pub fn with_budget(mut self, tokens: usize) -> NgramCache {
        let fed = match std::mem::take(&mut self.learning) {
            Learning::Reference => Mirror::default(),
            Learning::Relearn { fed } | Learning::Live { fed, .. } => fed,
        };
        self.learning = Learning::Live {
            fed,
            budget: tokens,
        };
        self
    }

    /// The context cache learned from the history (for `ngram-cache-live`,
    /// its current generation).
    #[must_use]
    pub fn context(&self) -> &LookupCache {
        &self.context
    }

    /// History tokens fed to the context cache so far (its high-water mark).
    #[must_use]
    pub fn cache_size(&self) -> usize {
        self.cache_size
    }

    /// Drafted tokens taken from the context, dynamic and static cache, by name.
    #[must_use]
    pub fn sources(&self) -> TokensFrom {
        self.tokens_from
    }

    fn learn(&mut self, history: &[Token], last: Token) {
        let len = history.len();
        match &mut self.learning {
            Learning::Reference => {}
            Learning::Relearn { fed } => {
                // Re-learn a new prompt from where it departs.
                let common = refresh(fed, history, last);
                self.cache_size = self.cache_size.min(common);
            }
            Learning::Live { fed, budget } => {
                let common = refresh(fed, history, last);
                let new = fed.len() - common;
                if new > 0 {
                    self.generations.admit(&mut self.context, new, *budget);
                    self.context.update(fed, NGRAM_SIZES, new);
                }
                self.cache_size = fed.len();
                return;
            }
        }
        // The reference: n-grams inside the new segment only.
        if self.cache_size < len + 1 {
            self.segment.clear();
            self.segment.extend_from_slice(&history[self.cache_size..]);
            self.segment.push(last);
            self.context
                .update(&self.segment, NGRAM_SIZES, self.segment.len());
            self.cache_size = len + 1;
        }
    }

    /// The first follower, from n-gram size 4 down to 1, whose winner in
    /// `cache` passes the thresholds `t`. `hints` holds the entries found per
    /// size at the previous draft step, and is left holding this step's: the
    /// next step's n-grams are most likely their successors.
    fn primary(
        &self,
        cache: &LookupCache,
        keys: &[Option<Key>; 4],
        ps: Option<PartRef<'_>>,
        t: &Thresholds,
        hints: &mut Recent,
    ) -> Option<Token> {
        let prev = std::mem::take(hints);
        // Most engines load no cache file: no lookups in an empty cache.
        if cache.is_empty() {
            return None;
        }
        for s in (1..=4).rev() {
            let Some(i) = keys[s - 1]
                .as_ref()
                .and_then(|k| cache.find_after(prev.0[s - 1], k))
            else {
                continue;
            };
            hints.0[s - 1] = i;
            let (token, count, sum) = match ps {
                // No static weights: the winner is the one the entry keeps.
                None => cache.top(i),
                Some(_) => {
                    let part = cache.view(i);
                    let w = winner(part, ps);
                    (part.token(w), part.count(w), part.sum)
                }
            };
            let (count, sum) = (i64::from(count), i64::from(sum));
            if sum < t.sample[s - 1] || 100 * count < t.pct[s - 1] * sum {
                continue;
            }
            return Some(token);
        }
        None
    }
}

/// Makes `fed` history ++ [last], noting where it departs from what was fed
/// before (a new prompt): returns the length of the prefix kept.
fn refresh(fed: &mut Mirror, history: &[Token], last: Token) -> usize {
    let common = fed.change(history, Some(last)).common();
    fed.truncate(common);
    // `common` is `history.len() + 1` when `fed` already holds all of
    // `history ++ [last]` (the same call again): nothing to add.
    if let Some(rest) = history.get(common..) {
        fed.extend_from_slice(rest);
        fed.push(last);
    }
    common
}

impl Drafter for NgramCache {
    fn name(&self) -> &str {
        match self.learning {
            Learning::Live { .. } => "ngram_cache_live",
            Learning::Relearn { .. } => "ngram_cache_relearn",
            Learning::Reference => "ngram_cache",
        }
    }

    fn begin(&mut self, _prompt: &[Token]) {}

    fn draft(
        &mut self,
        history: &[Token],
        last: Token,
        _limits: DraftLimits,
        draft: &mut Vec<Token>,
    ) {
        self.learn(history, last);
        let len = history.len() + 1;
        if len < NGRAM_STATIC {
            return;
        }
        // The last four tokens of history ++ [last] ++ draft, oldest first.
        let mut tail = [UNUSED; 4];
        let known = len.min(4);
        for (j, slot) in tail[4 - known..].iter_mut().enumerate() {
            let at = len - known + j;
            *slot = if at < history.len() {
                history[at]
            } else {
                last
            };
        }
        let mut seq_len = len;
        let base = draft.len();
        let mut hints = self.context.recent;
        while draft.len() - base < N_DRAFT {
            let mut keys = [None; 4];
            for s in 1..=4 {
                if s <= seq_len {
                    keys[s - 1] = Some(key_of(&tail[4 - s..]));
                }
            }
            let ps = keys[NGRAM_STATIC - 1]
                .as_ref()
                .and_then(|k| self.statics.part(k));
            let (token, source) = if let Some(t) = self
                .primary(&self.context, &keys, ps, &LAX, &mut hints)
                .or_else(|| {
                    let older = &self.generations.older;
                    self.primary(older, &keys, ps, &LAX, &mut Recent::default())
                }) {
                (t, Source::Context)
            } else if let Some(t) =
                self.primary(&self.dynamic, &keys, ps, &STRICT, &mut Recent::default())
            {
                (t, Source::Dynamic)
            } else {
                match ps {
                    Some(p)
                        if p.sum >= 2
                            && 100 * i64::from(p.count(p.best())) >= 50 * i64::from(p.sum) =>
                    {
                        (p.token(p.best()), Source::Static)
                    }
                    _ => break,
                }
            };
            match source {
                Source::Context => self.tokens_from.context += 1,
                Source::Dynamic => self.tokens_from.dynamic += 1,
                Source::Static => self.tokens_from.statics += 1,
            }
            draft.push(token);
            tail.copy_within(1.., 0);
            tail[3] = token;
            seq_len += 1;
        }
    }

    fn accept(&mut self, _n_accepted: usize) {}

    /// The three caches (the static and dynamic ones as loaded) and buffers.
    fn heap_bytes(&self) -> usize {
        let fed = match &self.learning {
            Learning::Reference => 0,
            Learning::Relearn { fed } | Learning::Live { fed, .. } => fed.capacity(),
        };
        self.context.heap_bytes()
            + self.generations.older.heap_bytes()
            + self.dynamic.heap_bytes()
            + self.statics.heap_bytes()
            + (self.segment.capacity() + fed) * 4
    }

    fn as_any(&self) -> Option<&dyn std::any::Any> {
        Some(self)
    }

    fn fork(&self) -> Option<Box<dyn Drafter>> {
        Some(Box::new(self.clone()))
    }
}
