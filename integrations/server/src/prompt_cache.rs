//! The prompt cache: finished requests' KV caches saved to host memory
//! when their slot is given to another prompt, so that a conversation's
//! next turn restores what its last turn left instead of evaluating it
//! again (llama-server's `--cache-ram`). Entries are kept per scope: a
//! request restores only what its own scope's requests left.

use selfspec_llama_cpp::SavedSeq;

/// What the cache holds: a saved sequence cache.
pub trait Saved {
    /// The tokens it holds, at positions 0.. .
    fn tokens(&self) -> &[u32];
    /// Host memory it takes.
    fn bytes(&self) -> usize;
}

impl Saved for SavedSeq {
    fn tokens(&self) -> &[u32] {
        SavedSeq::tokens(self)
    }
    fn bytes(&self) -> usize {
        SavedSeq::bytes(self)
    }
}

/// One saved cache.
struct Entry<S> {
    scope: String,
    saved: S,
    /// When it was saved or last matched (the cache's clock).
    used: u64,
}

/// A match: the entry and how many tokens of the prompt it holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hit {
    /// The entry's index (valid until the cache changes).
    pub entry: usize,
    /// Tokens of the prompt's start the entry holds.
    pub tokens: usize,
}

/// Saved caches within a byte limit, the least recently used dropped
/// first.
pub struct PromptCache<S> {
    entries: Vec<Entry<S>>,
    bytes: usize,
    limit: usize,
    clock: u64,
}

impl<S: Saved> PromptCache<S> {
    /// An empty cache of at most `limit` bytes (0: it keeps nothing).
    pub fn new(limit: usize) -> PromptCache<S> {
        PromptCache {
            entries: Vec::new(),
            bytes: 0,
            limit,
            clock: 0,
        }
    }

    /// Bytes held.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Entries held.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// The entry of `scope` that holds the longest start of `prompt`.
    pub fn best(&self, scope: &str, prompt: &[u32]) -> Option<Hit> {
        self.entries
            .iter()
            .enumerate()
            .filter(|(_, e)| e.scope == scope)
            .map(|(i, e)| Hit {
                entry: i,
                tokens: common(e.saved.tokens(), prompt),
            })
            .filter(|h| h.tokens > 0)
            .max_by_key(|h| (h.tokens, self.entries[h.entry].used))
    }

    /// Takes entry `i` out (it moves into a slot; saved again when the slot
    /// is given to another prompt).
    pub fn take(&mut self, i: usize) -> S {
        let e = self.entries.swap_remove(i);
        self.bytes -= e.saved.bytes();
        e.saved
    }

    /// Keeps `saved` for `scope`: entries of the scope whose tokens it
    /// starts with go (it holds all they hold), then the least recently
    /// used ones until it fits. Larger than the limit: not kept.
    pub fn insert(&mut self, scope: &str, saved: S) {
        let size = saved.bytes();
        if size > self.limit {
            return;
        }
        let mut i = 0;
        while i < self.entries.len() {
            let e = &self.entries[i];
            if e.scope == scope && saved.tokens().starts_with(e.saved.tokens()) {
                self.take(i);
            } else {
                i += 1;
            }
        }
        while self.bytes + size > self.limit {
            let oldest = self.entries.iter().enumerate().min_by_key(|(_, e)| e.used);
            let Some((i, _)) = oldest else { break };
            self.take(i);
        }
        self.clock += 1;
        self.bytes += size;
        self.entries.push(Entry {
            scope: scope.to_string(),
            saved,
            used: self.clock,
        });
    }
}

/// Tokens at the start of both.
pub fn common(a: &[u32], b: &[u32]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A saved cache of `tokens` taking `bytes`.
    #[derive(Debug, PartialEq)]
    struct Fake(Vec<u32>, usize);

    impl Saved for Fake {
        fn tokens(&self) -> &[u32] {
            &self.0
        }
        fn bytes(&self) -> usize {
            self.1
        }
    }

    #[test]
    fn the_longest_start_in_the_scope_only() {
        let mut c = PromptCache::new(100);
        c.insert("a", Fake(vec![1, 2, 3, 4], 10));
        c.insert("a", Fake(vec![1, 2, 9], 10));
        c.insert("b", Fake(vec![1, 2, 3, 4, 5, 6], 10));
        let cases: [(&str, &[u32], Option<usize>); 5] = [
            ("a", &[1, 2, 3, 4, 7], Some(4)),
            ("a", &[1, 2, 9, 9], Some(3)),
            ("a", &[5], None),
            // Scope b's longer entry is never offered to scope a, nor a's to c.
            ("b", &[1, 2, 3, 4, 5, 6, 7], Some(6)),
            ("c", &[1, 2, 3], None),
        ];
        for (scope, prompt, tokens) in cases {
            let hit = c.best(scope, prompt);
            assert_eq!(hit.map(|h| h.tokens), tokens, "{scope} {prompt:?}");
            if let Some(h) = hit {
                assert_eq!(c.entries[h.entry].scope, scope);
            }
        }
    }

    #[test]
    fn the_byte_limit_drops_the_least_recently_used() {
        let mut c = PromptCache::new(30);
        c.insert("a", Fake(vec![1], 10));
        c.insert("a", Fake(vec![2], 10));
        c.insert("a", Fake(vec![3], 10));
        c.insert("a", Fake(vec![4], 15));
        assert_eq!((c.len(), c.bytes()), (2, 25));
        assert_eq!(c.best("a", &[1]), None);
        assert_eq!(c.best("a", &[2]), None);
        assert!(c.best("a", &[3]).is_some() && c.best("a", &[4]).is_some());
        // Larger than the limit: not kept, nothing dropped.
        c.insert("a", Fake(vec![5], 31));
        assert_eq!((c.len(), c.bytes()), (2, 25));
    }

    #[test]
    fn a_longer_save_of_a_scope_replaces_its_starts() {
        let mut c = PromptCache::new(100);
        c.insert("a", Fake(vec![1, 2], 10));
        c.insert("b", Fake(vec![1, 2], 10));
        c.insert("a", Fake(vec![1, 2, 3], 12));
        assert_eq!((c.len(), c.bytes()), (2, 22));
        let hit = c.best("a", &[1, 2, 3]).unwrap();
        assert_eq!(c.take(hit.entry), Fake(vec![1, 2, 3], 12));
        assert_eq!((c.len(), c.bytes()), (1, 10));
        assert_eq!(c.best("a", &[1, 2]), None);
    }
}
