//! Operation sequences decoded from raw bytes, shared by the `cargo fuzz`
//! targets (`fuzz/`) and `tests/fuzz_corpus.rs`, which replays the committed
//! corpus and every regression input on stable Rust.
#![allow(dead_code)]

#[path = "../oracle/mod.rs"]
mod oracle;

use std::collections::HashSet;

use selfspec::{Budget, Config, Shared, Speculative, Strategy, Token};

/// Reads bytes from the fuzzer's input; zeros once it is used up.
pub struct Bytes<'a>(&'a [u8]);

impl Bytes<'_> {
    fn byte(&mut self) -> u8 {
        match self.0.split_first() {
            Some((&b, rest)) => {
                self.0 = rest;
                b
            }
            None => 0,
        }
    }
    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
    fn u32(&mut self) -> u32 {
        u32::from_le_bytes([self.byte(), self.byte(), self.byte(), self.byte()])
    }
    fn token(&mut self, alphabet: u8) -> Token {
        match self.byte() {
            250 => u32::MAX,
            251 => u32::MAX - 1,
            252 => 1 << 31,
            253 => i32::MAX as u32,
            254 | 255 => self.u32(),
            b => (b % alphabet) as Token,
        }
    }
    fn tokens(&mut self, alphabet: u8, max: usize) -> Vec<Token> {
        let len = self.byte() as usize % (max + 1);
        (0..len).map(|_| self.token(alphabet)).collect()
    }
}

/// A configuration of 1 to 4 strategies with small sizes; `with_cache` adds
/// the strategies the naive oracles do not cover (ngram-cache in both modes, recall).
pub fn config(b: &mut Bytes, with_cache: bool) -> Config {
    let count = 1 + b.byte() % 4;
    let kinds = if with_cache { 7 } else { 4 };
    let strategies = (0..count)
        .map(|_| {
            let (kind, n, m) = (
                b.byte() % kinds,
                1 + b.byte() as usize % 8,
                1 + b.byte() as usize % 12,
            );
            match kind {
                0 => Strategy::NgramSimple { n, m },
                1 => Strategy::NgramMapK { n, m },
                2 => Strategy::NgramMapK4v {
                    n,
                    m,
                    min_hits: b.byte() as usize % 4,
                },
                3 => Strategy::NgramMod { n },
                4 => Strategy::NgramCache {
                    static_cache: None,
                    dynamic_cache: None,
                },
                5 => Strategy::NgramCacheLive {
                    static_cache: None,
                    dynamic_cache: None,
                },
                _ => Strategy::Recall {
                    threshold_permille: 1 + b.byte() as usize * 3,
                },
            }
        })
        .collect();
    let draft_max = 1 + b.byte() as usize % 32;
    let draft_min = b.byte() as usize % (draft_max + 1);
    let pool_size = [1, 2, 3, 64, 4096, 65521][b.byte() as usize % 6];
    Config {
        strategies,
        draft_max,
        draft_min,
        pool_size,
    }
}

fn follows_key(history: &[Token], last: Token, n: usize, draft: &[Token]) -> bool {
    let mut key = history[history.len() + 1 - n..].to_vec();
    key.push(last);
    (0..history.len().saturating_sub(n - 1))
        .any(|j| history[j..j + n] == key[..] && history[j + n..].starts_with(draft))
}

/// Two sequences on one engine-wide `Shared` (the smallest budget, so its
/// memory wraps), driven by arbitrary operations: histories that change
/// without `begin`, stray `accept`s, fresh drafters for new requests, and
/// saving and loading the shared state between them. Panics when a draft
/// breaks the limits or its strategy's provenance rule, or the shared state
/// its bound.
pub fn chaos(data: &[u8]) {
    let mut b = Bytes(data);
    let config = config(&mut b, true);
    let alphabet = 2 + b.byte() % 7;
    let budget = Budget {
        memory: 64 << 10,
        sequence: 64 << 10,
        ..Budget::default()
    };
    let mut shared = Shared::builder().budget(budget).build(&config).unwrap();
    let bound = 8 * config.pool_size + 1024 * 96 + 8 * 4096 * 4 + (16 << 10);
    let mut specs = [
        Speculative::with_shared(&config, &shared).unwrap(),
        Speculative::with_shared(&config, &shared).unwrap(),
    ];
    let mut histories: [Vec<Token>; 2] = Default::default();
    let mut seen: HashSet<Token> = HashSet::new();
    while !b.is_empty() {
        let op = b.byte();
        let s = (op >> 7) as usize;
        let (spec, history) = (&mut specs[s], &mut histories[s]);
        match op % 10 {
            0 => {
                let keep = history.len() * b.byte() as usize / 255;
                history.truncate(keep);
                history.extend(b.tokens(alphabet, 64));
                seen.extend(history.iter().copied());
                spec.begin(history);
            }
            1..=4 => {
                let last = b.token(alphabet);
                seen.extend(history.iter().copied());
                seen.insert(last);
                let draft = spec.draft(history, last).to_vec();
                assert!(draft.len() <= config.draft_max);
                assert!(draft.is_empty() || draft.len() >= config.draft_min);
                match spec.drafted_by().map(|i| &config.strategies[i]) {
                    Some(
                        Strategy::NgramSimple { n, .. }
                        | Strategy::NgramMapK { n, .. }
                        | Strategy::NgramMapK4v { n, .. },
                    ) => assert!(follows_key(history, last, *n, &draft), "{draft:?}"),
                    Some(Strategy::NgramMod { .. }) => {
                        assert!(draft.iter().all(|t| seen.contains(t) && *t != u32::MAX))
                    }
                    // Without cache files, lookup decoding drafts what it has seen.
                    Some(Strategy::Recall { .. }) => {
                        assert!(draft.iter().all(|t| seen.contains(t)))
                    }
                    Some(Strategy::NgramCache { .. } | Strategy::NgramCacheLive { .. }) => {
                        assert!(draft.len() <= 8 && draft.iter().all(|t| seen.contains(t)))
                    }
                    Some(_) => {}
                    None => assert!(draft.is_empty()),
                }
                let accept = b.byte() as usize;
                spec.accept(accept);
                history.push(last);
                history.extend_from_slice(&draft[..accept.min(draft.len())]);
            }
            5 => {
                let keep = history.len() * b.byte() as usize / 255;
                history.truncate(keep);
            }
            6 => {
                if !history.is_empty() {
                    let at = (history.len() - 1) * b.byte() as usize / 255;
                    history[at] = b.token(alphabet);
                }
            }
            7 => spec.accept(b.byte() as usize * 1000),
            8 => *spec = Speculative::with_shared(&config, &shared).unwrap(),
            _ => {
                let bytes = shared.to_bytes();
                shared = Shared::builder()
                    .budget(budget)
                    .build_from_bytes(&config, "chaos", &bytes)
                    .unwrap();
                assert_eq!(shared.to_bytes(), bytes);
                for spec in specs.iter_mut() {
                    *spec = Speculative::with_shared(&config, &shared).unwrap();
                }
            }
        }
        assert!(
            shared.heap_bytes() <= bound,
            "{} > {bound}",
            shared.heap_bytes()
        );
    }
    for spec in &specs {
        for st in spec.stats() {
            assert!(st.acc_tokens <= st.gen_tokens && st.calls_accept == st.acc_drafts);
        }
    }
}

/// One sequence under the engine's contract, compared draft for draft with
/// the naive oracles of `tests/oracle`.
pub fn differential(data: &[u8]) {
    let mut b = Bytes(data);
    let config = config(&mut b, false);
    let alphabet = 2 + b.byte() % 5;
    let mut spec = Speculative::new(&config).unwrap();
    let mut naive = oracle::Chain::new(&config);
    let mut history: Vec<Token> = Vec::new();
    while !b.is_empty() {
        let op = b.byte();
        if op % 8 == 0 {
            let keep = history.len() * b.byte() as usize / 255;
            history.truncate(keep);
            history.extend(b.tokens(alphabet, 64));
            spec.begin(&history);
            naive.begin(&history);
            continue;
        }
        let last = b.token(alphabet);
        let got = spec.draft(&history, last).to_vec();
        let (want, by) = naive.draft(&history, last);
        assert_eq!(got, want, "history {history:?} last {last}");
        assert_eq!(spec.drafted_by(), by);
        let accept = (b.byte() as usize % 20).min(got.len());
        spec.accept(accept);
        naive.accept(accept);
        history.push(last);
        history.extend_from_slice(&got[..accept]);
    }
}

/// Strategy strings and configurations: parse, validate, build; never panic.
pub fn parse(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    for part in text.split('|') {
        if let Ok(s) = part.parse::<Strategy>() {
            assert_eq!(s.to_string().parse::<Strategy>().unwrap(), s);
            let config = Config::new([s]).with_pool_size(64);
            // A valid strategy builds, except that cache files may not exist.
            match Speculative::new(&config) {
                Ok(_) | Err(selfspec::Error::CacheFile { .. }) => {}
                Err(e) => panic!("{part}: {e}"),
            }
        }
    }
    let mut b = Bytes(data);
    let mut config = config(&mut b, true);
    config.draft_max = b.u32() as usize % 5000;
    config.draft_min = b.u32() as usize % 5000;
    config.pool_size = b.u32() as usize % 100_000;
    match Speculative::new(&config) {
        Ok(_) => config.validate().unwrap(),
        Err(e) => assert!(!e.to_string().is_empty()),
    }
}

/// FNV-1a, the memory file's checksum (over everything before its last 8
/// bytes), so that mutated files reach the parser behind the checksum.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// `Shared::import` of a valid delta (requests in two scopes) with up to
/// three mutations and its checksum recomputed: a typed error that adds
/// nothing, or an import after which the engine drafts and exports.
fn import(config: &Config, b: &mut Bytes<'_>) {
    let source = Shared::new(config).unwrap();
    for r in 0..3u32 {
        let scope = source.scope(if r == 0 { "" } else { "t" });
        let mut spec = Speculative::with_shared(config, &scope).unwrap();
        let prompt: Vec<Token> = (0..40).map(|i| (i * 5 + r) % 17).collect();
        spec.begin(&prompt);
        spec.end_request();
    }
    let (mut delta, _) = source.export_since(&selfspec::Cursor::default());
    let body = delta.len() - 8;
    for _ in 0..b.byte() % 4 {
        let at = (b.u32() as usize) % body;
        delta[at] ^= b.byte() | 1;
    }
    let checksum = fnv1a(&delta[..body]);
    delta[body..].copy_from_slice(&checksum.to_le_bytes());
    let target = Shared::new(config).unwrap();
    match target.import(&delta) {
        Ok(()) => {
            let mut spec = Speculative::with_shared(config, &target.scope("t")).unwrap();
            spec.begin(&[1, 2, 3]);
            let _ = spec.draft(&[1, 2, 3], 1);
            let _ = target.export_since(&selfspec::Cursor::default());
            let _ = target.to_bytes();
        }
        Err(e) => {
            assert!(!e.to_string().is_empty());
            let fresh = Shared::new(config).unwrap().engine_heap_bytes();
            assert_eq!(
                target.engine_heap_bytes(),
                fresh,
                "a bad delta added something"
            );
        }
    }
}

/// `Shared::from_bytes` (what `Shared::load` reads) on arbitrary bytes: a
/// typed error or a memory that drafts and saves again, never a panic. The
/// first byte picks the input: the raw bytes; a valid header followed by
/// the bytes; or a valid file of a few requests (in one scope or in three)
/// with up to three (offset, xor) mutations from the bytes and its checksum
/// recomputed, so that the body's checks are reached.
pub fn load(data: &[u8]) {
    let config = Config::new([
        Strategy::NgramMod { n: 4 },
        Strategy::Recall {
            threshold_permille: 130,
        },
    ])
    .with_pool_size(64);
    let mut b = Bytes(data);
    let pick = b.byte() % 4;
    if pick == 3 {
        return import(&config, &mut b);
    }
    let bytes = match pick {
        0 => data.to_vec(),
        1 => {
            let mut valid = Shared::new(&config).unwrap().to_bytes();
            valid.truncate(112);
            valid.extend_from_slice(&data[1..]);
            valid
        }
        _ => {
            let shared = Shared::new(&config).unwrap();
            // Half of them a file of several scopes.
            let scoped = b.byte() % 2 == 1;
            for r in 0..3u32 {
                let scope = if scoped && r > 0 {
                    shared.scope(&format!("t{r}"))
                } else {
                    shared.clone()
                };
                let mut spec = Speculative::with_shared(&config, &scope).unwrap();
                let prompt: Vec<Token> = (0..40).map(|i| (i * 7 + r) % 13).collect();
                spec.begin(&prompt);
                let _ = spec.draft(&prompt, 1);
            }
            let mut file = shared.to_bytes();
            let body = file.len() - 8;
            // Up to three mutations: a file with one bad field reaches that
            // field's check; one with a changed token still loads.
            for _ in 0..b.byte() % 4 {
                let at = (b.u32() as usize) % body;
                file[at] ^= b.byte() | 1;
            }
            let checksum = fnv1a(&file[..body]);
            file[body..].copy_from_slice(&checksum.to_le_bytes());
            file
        }
    };
    match Shared::builder().build_from_bytes(&config, "fuzz", &bytes) {
        Ok(shared) => {
            let mut spec = Speculative::with_shared(&config, &shared).unwrap();
            spec.begin(&[1, 2, 3]);
            let _ = spec.draft(&[1, 2, 3], 1);
            let _ = shared.heap_bytes();
            // What loads saves and loads again.
            let again = shared.to_bytes();
            if let Err(e) = Shared::builder().build_from_bytes(&config, "again", &again) {
                panic!("a loaded memory's own file does not load: {e}");
            }
        }
        Err(e) => assert!(!e.to_string().is_empty()),
    }
}
