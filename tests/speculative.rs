//! The orchestrator: chain order, engine limits, accept routing, counters,
//! statistics lines, and robustness against odd engine behaviour.

use std::sync::{Arc, Mutex};

use selfspec::{Config, DraftLimits, Drafter, DrafterStats, Shared, Speculative, Strategy, Token};

/// A drafter that returns a fixed draft and logs what it is told.
#[derive(Debug)]
struct Scripted {
    name: &'static str,
    draft: Vec<Token>,
    log: Arc<Mutex<Vec<String>>>,
}

impl Drafter for Scripted {
    fn name(&self) -> &str {
        self.name
    }
    fn begin(&mut self, prompt: &[Token]) {
        self.log
            .lock()
            .unwrap()
            .push(format!("{} begin {}", self.name, prompt.len()));
    }
    fn draft(&mut self, _h: &[Token], _last: Token, limits: DraftLimits, draft: &mut Vec<Token>) {
        self.log.lock().unwrap().push(format!(
            "{} draft {}..{}",
            self.name, limits.min, limits.max
        ));
        draft.extend_from_slice(&self.draft);
    }
    fn accept(&mut self, n: usize) {
        self.log
            .lock()
            .unwrap()
            .push(format!("{} accept {n}", self.name));
    }
}

fn chain(
    drafts: &[(&'static str, Vec<Token>)],
    limits: DraftLimits,
) -> (Speculative, Arc<Mutex<Vec<String>>>) {
    let log = Arc::new(Mutex::new(Vec::new()));
    let drafters = drafts
        .iter()
        .map(|(name, draft)| -> Box<dyn Drafter> {
            Box::new(Scripted {
                name,
                draft: draft.clone(),
                log: log.clone(),
            })
        })
        .collect();
    (Speculative::from_drafters(drafters, limits).unwrap(), log)
}

fn take(log: &Arc<Mutex<Vec<String>>>) -> Vec<String> {
    std::mem::take(&mut *log.lock().unwrap())
}

#[test]
fn first_non_empty_draft_wins_and_accept_goes_to_it() {
    let (mut spec, log) = chain(
        &[("a", vec![]), ("b", vec![5, 6, 7]), ("c", vec![9])],
        DraftLimits { min: 0, max: 16 },
    );
    spec.begin(&[1, 2]);
    assert_eq!(spec.draft(&[1, 2], 3), [5, 6, 7]);
    assert_eq!(spec.drafted_by(), Some(1));
    spec.accept(2);
    assert_eq!(
        take(&log),
        [
            "a begin 2",
            "b begin 2",
            "c begin 2",
            "a draft 0..16",
            "b draft 0..16",
            "b accept 2"
        ]
    );
    let s = spec.stats();
    assert_eq!((s[0].calls_draft, s[0].gen_drafts), (1, 0));
    assert_eq!(
        (
            s[1].calls_draft,
            s[1].gen_drafts,
            s[1].gen_tokens,
            s[1].acc_drafts,
            s[1].acc_tokens
        ),
        (1, 1, 3, 1, 2)
    );
    assert_eq!((s[2].calls_draft, s[2].calls_begin), (0, 1));
}

#[test]
fn draft_max_truncates_and_draft_min_falls_through() {
    let (mut spec, log) = chain(
        &[("short", vec![1, 2]), ("long", vec![1, 2, 3, 4, 5, 6])],
        DraftLimits { min: 3, max: 4 },
    );
    assert_eq!(spec.draft(&[], 0), [1, 2, 3, 4]);
    assert_eq!(spec.drafted_by(), Some(1));
    // accept counts above the draft's length are clamped to it.
    spec.accept(100);
    assert_eq!(
        take(&log),
        ["short draft 3..4", "long draft 3..4", "long accept 4"]
    );
    let s = spec.stats();
    assert_eq!(
        (s[0].gen_drafts, s[0].gen_tokens),
        (0, 0),
        "a dropped draft is not counted"
    );
    assert_eq!((s[1].gen_tokens, s[1].acc_tokens), (4, 4));
}

#[test]
fn accept_zero_or_without_draft_does_nothing() {
    let (mut spec, log) = chain(&[("a", vec![7, 7])], DraftLimits::default());
    spec.accept(3); // no draft yet
    spec.draft(&[], 0);
    spec.accept(0);
    assert_eq!(take(&log), ["a draft 0..16"]);
    assert_eq!(spec.stats()[0].calls_accept, 0);
    // A later non-zero accept of the same draft still reaches the drafter, once.
    spec.accept(1);
    spec.accept(1);
    assert_eq!(take(&log), ["a accept 1"]);
    // begin forgets the pending draft.
    spec.draft(&[], 0);
    spec.begin(&[]);
    spec.accept(2);
    assert_eq!(take(&log), ["a draft 0..16", "a begin 0"]);
}

#[test]
fn from_drafters_validates_limits() {
    let err = Speculative::from_drafters(vec![], DraftLimits::default()).unwrap_err();
    assert!(matches!(err, selfspec::Error::EmptyChain));
    let one = || -> Vec<Box<dyn Drafter>> {
        vec![Box::new(selfspec::strategies::NgramSimple::new(2, 2))]
    };
    assert!(Speculative::from_drafters(one(), DraftLimits { min: 0, max: 0 }).is_err());
    assert!(Speculative::from_drafters(one(), DraftLimits { min: 5, max: 4 }).is_err());
}

#[test]
fn statistics_line_has_llama_cpp_format() {
    let stats = DrafterStats {
        name: "ngram_mod".into(),
        calls_begin: 1,
        calls_draft: 810,
        calls_accept: 15,
        gen_drafts: 15,
        acc_drafts: 15,
        gen_tokens: 960,
        acc_tokens: 730,
        t_begin: std::time::Duration::from_micros(149),
        t_draft: std::time::Duration::from_micros(347),
        t_accept: std::time::Duration::from_micros(5),
    };
    assert_eq!(
        stats.to_string(),
        "statistics ngram_mod: #calls(b,g,a) = 1 810 15, #gen drafts = 15, #acc drafts = 15, \
         #gen tokens = 960, #acc tokens = 730, dur(b,g,a) = 0.149, 0.347, 0.005 ms"
    );
}

#[test]
fn chain_of_ours_and_an_engines_own() {
    // Our ngram-simple first, the engine's "draft model" as fallback.
    let log = Arc::new(Mutex::new(Vec::new()));
    let drafters: Vec<Box<dyn Drafter>> = vec![
        Box::new(selfspec::strategies::NgramSimple::new(2, 4)),
        Box::new(Scripted {
            name: "draft_model",
            draft: vec![42],
            log: log.clone(),
        }),
    ];
    let mut spec = Speculative::from_drafters(drafters, DraftLimits::default()).unwrap();
    let h: Vec<Token> = vec![0, 1, 2, 3, 4, 5, 6, 7, 8, 1];
    assert_eq!(spec.draft(&h, 2), [3, 4, 5, 6]);
    assert_eq!(spec.draft(&h, 9), [42]);
    let names: Vec<&str> = spec.stats().iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["ngram_simple", "draft_model"]);
}

#[test]
fn odd_engine_behaviour_never_panics() {
    let config = Config {
        strategies: vec![
            Strategy::NgramSimple { n: 2, m: 4 },
            Strategy::NgramMapK { n: 2, m: 4 },
            Strategy::NgramMapK4v {
                n: 2,
                m: 4,
                min_hits: 1,
            },
            Strategy::NgramMod { n: 2 },
        ],
        pool_size: 97,
        ..Config::default()
    };
    let mut spec = Speculative::new(&config).unwrap();
    let long: Vec<Token> = (0..3000u32).map(|i| (i * 7919) % 13).collect();
    let extreme: Vec<Token> = (0..300u32)
        .map(|i| [0, u32::MAX, u32::MAX - 1, 1 << 31][(i % 4) as usize])
        .collect();
    spec.begin(&[]);
    spec.draft(&[], 0);
    spec.accept(usize::MAX);
    spec.begin(&long);
    for len in [3000, 2999, 10, 0, 1, 2, 5, 2000, 3000, 100] {
        let d = spec.draft(&long[..len], 3).to_vec();
        assert!(d.len() <= 16);
        spec.accept(d.len());
    }
    // A history that changed content without begin, then extreme ids.
    spec.draft(&extreme, u32::MAX);
    spec.accept(7);
    spec.begin(&extreme);
    for len in (0..extreme.len()).step_by(7) {
        let d = spec.draft(&extreme[..len], u32::MAX).to_vec();
        spec.accept(d.len() / 2);
    }
}

#[test]
fn shared_pool_is_shared() {
    let config = Config::new([Strategy::NgramMod { n: 3 }]).with_pool_size(1 << 12);
    let shared = Shared::new(&config).unwrap();
    let mut a = Speculative::with_shared(&config, &shared).unwrap();
    let mut b = Speculative::with_shared(&config, &shared).unwrap();
    let text: Vec<Token> = (0..64).collect();
    a.begin(&text);
    // b never saw the text, but the pool did.
    b.begin(&[]);
    assert_eq!(b.draft(&[9, 10, 11], 12), (13..29).collect::<Vec<_>>());
    assert!(shared.stats().pool_cells_used > 0);
}

#[test]
fn send_and_sync() {
    fn send<T: Send>() {}
    fn sync<T: Send + Sync>() {}
    send::<Speculative>();
    sync::<selfspec::strategies::NgramPool>();
    sync::<Config>();
    sync::<selfspec::Error>();
}

#[test]
fn every_ngram_mod_of_a_chain_shares_one_pool() {
    use selfspec::strategies::NgramMod;
    let config =
        Config::new([Strategy::NgramMod { n: 3 }, Strategy::NgramMod { n: 4 }]).with_pool_size(64);
    let spec = Speculative::new(&config).unwrap();
    let pool_of = |i: usize| {
        spec.drafter(i)
            .and_then(|d| d.as_any())
            .and_then(|a| a.downcast_ref::<NgramMod>())
            .map(|m| m.pool().clone())
            .unwrap()
    };
    assert!(Arc::ptr_eq(&pool_of(0), &pool_of(1)));
    assert!(Arc::ptr_eq(&pool_of(0), spec.pool().unwrap()));
    assert!(Speculative::new(&Config::default())
        .unwrap()
        .pool()
        .is_none());
}

/// `accept(n)` with `n` above the draft's length is counted as the draft's
/// length and reported once per sequence.
#[test]
fn accepting_more_than_the_draft_is_a_misuse() {
    let mut spec = Speculative::new(&Config::default()).unwrap();
    let mut history: Vec<Token> = (0..100).map(|i| i % 20).collect();
    spec.begin(&history);
    let draft = spec.draft(&history, 0).to_vec();
    assert_eq!(draft.len(), 16);
    spec.accept(116);
    assert_eq!(spec.stats()[0].acc_tokens, 16);
    assert_eq!(spec.misuse_count(), 1);
    history.push(0);
    history.extend_from_slice(&draft);
    let next = spec.draft(&history, 17).len();
    spec.accept(next + 5);
    assert_eq!(spec.misuse_count(), 1, "once per sequence");
    spec.begin(&history);
    assert_eq!(spec.misuse_count(), 1);
}

/// `end_request` hands the request to the engine-wide memory; a later
/// request on another `Speculative` drafts from it.
#[test]
fn end_request_publishes_to_the_shared_memory() {
    let config = Config::recommended();
    let shared = Shared::new(&config).unwrap();
    let text: Vec<Token> = (0..300).map(|i| i * 7919 % 1000).collect();
    let mut first = Speculative::with_shared(&config, &shared).unwrap();
    first.begin(&text);
    first.end_request();
    assert_eq!(shared.stats().memory_tokens, 300);
    let mut second = Speculative::with_shared(&config, &shared).unwrap();
    second.begin(&text[..20]);
    assert_eq!(second.draft(&text[..20], text[20]).first(), Some(&text[21]));
    // A pending draft is dropped: accept after end_request does nothing.
    second.end_request();
    second.accept(3);
    assert_eq!(second.stats()[0].acc_tokens, 0);
}
