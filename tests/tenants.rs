//! Scopes keep tenants apart: a drafter on one scope never drafts another
//! scope's text (recall's memory and ngram-mod's pool alike), a file keeps
//! every scope, and the engine-wide budget forgets whole scopes.

mod common;

use common::Rng;
use selfspec::{Budget, Config, Shared, Speculative, Strategy, Token};

/// A token below `n` (plus `base`).
fn token(rng: &mut Rng, base: u64, n: u64) -> Token {
    Token::try_from(base + rng.below(n)).expect("a small id")
}

/// A request generating `output` after `prompt` under greedy verification
/// against it: the draft tokens accepted.
fn generate(spec: &mut Speculative, prompt: &[Token], output: &[Token]) -> usize {
    common::greedy_request(spec, prompt, output).0
}

/// Tenant A generates a random 300-token secret after a common prefix;
/// tenant B then "generates" the same secret after the same prefix, in A's
/// scope or in its own; then A again. Returns (B's accepted, A's second).
fn secret_accepted(config: &Config, same_scope: bool) -> (usize, usize) {
    let mut rng = Rng(97);
    let prefix: Vec<Token> = (0..200).map(|_| token(&mut rng, 0, 50_000)).collect();
    let secret: Vec<Token> = (0..300).map(|_| token(&mut rng, 60_000, 50_000)).collect();
    let shared = Shared::new(config).unwrap();
    let a = shared.scope("tenant-a");
    let b = if same_scope {
        a.clone()
    } else {
        shared.scope("tenant-b")
    };
    generate(
        &mut Speculative::with_shared(config, &a).unwrap(),
        &prefix,
        &secret,
    );
    let by_b = generate(
        &mut Speculative::with_shared(config, &b).unwrap(),
        &prefix,
        &secret,
    );
    let again = generate(
        &mut Speculative::with_shared(config, &a).unwrap(),
        &prefix,
        &secret,
    );
    (by_b, again)
}

#[test]
fn another_scope_never_drafts_a_tenants_secret() {
    let chains = [
        ("recall", Config::recommended()),
        (
            "ngram-mod",
            Config::new([Strategy::NgramMod { n: 8 }]).with_pool_size(1 << 16),
        ),
    ];
    for (name, config) in chains {
        let (one_scope, _) = secret_accepted(&config, true);
        let (two_scopes, a_again) = secret_accepted(&config, false);
        println!("{name}: B accepts {one_scope} of 299 in A's scope, {two_scopes} in its own; A again {a_again}");
        assert!(one_scope >= 150, "{name}: one scope {one_scope}");
        assert!(two_scopes <= 5, "{name}: two scopes {two_scopes}");
        assert!(a_again >= 150, "{name}: A's second request {a_again}");
    }
}

#[test]
fn a_file_keeps_every_scope_apart() {
    let config = Config::recommended();
    let shared = Shared::new(&config).unwrap();
    let mut rng = Rng(5);
    let text = |rng: &mut Rng, base: u64| -> Vec<Token> {
        (0..400).map(|_| token(rng, base, 1000)).collect()
    };
    let (ta, tb) = (text(&mut rng, 10_000), text(&mut rng, 20_000));
    generate(
        &mut Speculative::with_shared(&config, &shared.scope("a")).unwrap(),
        &ta[..10],
        &ta[10..],
    );
    generate(
        &mut Speculative::with_shared(&config, &shared.scope("b")).unwrap(),
        &tb[..10],
        &tb[10..],
    );
    let bytes = shared.to_bytes();
    let loaded = Shared::builder()
        .build_from_bytes(&config, "scopes", &bytes)
        .unwrap();
    assert_eq!(loaded.scope_names(), ["", "a", "b"]);
    assert_eq!(loaded.to_bytes(), bytes, "the same file again");
    let stats: Vec<u64> = loaded
        .scope_stats()
        .iter()
        .map(|(_, s)| s.memory_tokens)
        .collect();
    assert_eq!(stats, [0, 400, 400]);
    // Each scope drafts its own text and nothing of the other's.
    for (scope, own, other) in [("a", &ta, &tb), ("b", &tb, &ta)] {
        let handle = loaded.scope(scope);
        let mut spec = Speculative::with_shared(&config, &handle).unwrap();
        spec.begin(&own[..30]);
        assert_eq!(
            spec.draft(&own[..30], own[30]).first(),
            Some(&own[31]),
            "{scope}"
        );
        let mut spec = Speculative::with_shared(&config, &handle).unwrap();
        spec.begin(&other[..30]);
        assert!(
            spec.draft(&other[..30], other[30]).is_empty(),
            "{scope} drafts the other's text"
        );
    }
    // A corrupt scope file is a typed error (a flipped byte: the checksum).
    let mut bad = bytes.clone();
    bad[40] ^= 1;
    assert!(matches!(
        Shared::builder().build_from_bytes(&config, "bad", &bad),
        Err(selfspec::Error::MemoryFile { .. })
    ));
    // A single-scope engine still writes the single-scope format.
    assert!(Shared::new(&config)
        .unwrap()
        .to_bytes()
        .starts_with(b"SELFSPEC"));
}

#[test]
fn scopes_drop_and_the_engine_budget_forgets_the_least_recently_used() {
    let config = Config::recommended();
    let budget = Budget {
        memory: 1 << 20,
        engine: 3 << 20,
        ..Budget::default()
    };
    let shared = Shared::builder().budget(budget).build(&config).unwrap();
    let mut rng = Rng(11);
    for i in 0..8 {
        let scope = shared.scope(&format!("t{i}"));
        let text: Vec<Token> = (0..6000).map(|_| token(&mut rng, 0, 30_000)).collect();
        generate(
            &mut Speculative::with_shared(&config, &scope).unwrap(),
            &text[..100],
            &text[100..],
        );
        assert!(
            shared.engine_heap_bytes() <= budget.engine + (1 << 20) + (64 << 10),
            "{} bytes after scope {i}",
            shared.engine_heap_bytes()
        );
    }
    let names = shared.scope_names();
    assert!(names.len() < 9 && names[0].is_empty(), "{names:?}");
    assert!(
        names.contains(&"t7".to_string()),
        "the newest stays: {names:?}"
    );
    assert!(
        !names.contains(&"t0".to_string()),
        "the oldest went: {names:?}"
    );
    assert!(shared.drop_scope("t7"));
    assert!(!shared.drop_scope("t7"));
    assert!(!shared.drop_scope(""), "the default scope stays");
    assert!(!shared.scope_names().contains(&"t7".to_string()));
}

#[test]
fn stats_count_requests_and_saves() {
    let config = Config::recommended();
    let shared = Shared::new(&config).unwrap();
    let scope = shared.scope("a");
    let mut rng = Rng(3);
    let text: Vec<Token> = (0..300).map(|_| token(&mut rng, 0, 500)).collect();
    for _ in 0..3 {
        generate(
            &mut Speculative::with_shared(&config, &scope).unwrap(),
            &text[..20],
            &text[20..],
        );
    }
    assert_eq!(scope.stats().requests_published, 3);
    assert_eq!(
        shared.stats().requests_published,
        0,
        "the default scope served none"
    );
    let path = std::env::temp_dir().join(format!("selfspec-stats-{}.mem", std::process::id()));
    shared.save(&path).unwrap();
    shared.save(&path).unwrap();
    std::fs::remove_file(&path).ok();
    let stats = scope.stats();
    assert_eq!(stats.saves, 2);
    assert!(stats.save_ns >= stats.last_save_ns && stats.last_save_ns > 0);
}

/// Many threads over several scopes, with saves, exports, imports and scope
/// drops interleaved: no panic, no draft from another scope (each scope's
/// text uses its own range of ids), memory within the engine budget.
#[test]
fn threads_over_scopes_with_saves_imports_and_drops() {
    let config = Config::recommended();
    let budget = Budget {
        memory: 1 << 20,
        engine: 6 << 20,
        ..Budget::default()
    };
    let shared = Shared::builder().budget(budget).build(&config).unwrap();
    let other = Shared::builder().budget(budget).build(&config).unwrap();
    let path = std::env::temp_dir().join(format!("selfspec-abuse-{}.mem", std::process::id()));
    const SCOPES: u64 = 4;
    std::thread::scope(|s| {
        for t in 0..6u64 {
            let (shared, other, path, config) = (&shared, &other, &path, &config);
            s.spawn(move || {
                let mut rng = Rng(1000 + t);
                let mut cursor = selfspec::Cursor::default();
                for i in 0..40u64 {
                    let k = rng.below(SCOPES);
                    let scope = shared.scope(&format!("s{k}"));
                    let base = 100_000 * (k + 1);
                    let text: Vec<Token> = (0..400).map(|_| token(&mut rng, base, 300)).collect();
                    let mut spec = Speculative::with_shared(config, &scope).unwrap();
                    let mut history = text[..50].to_vec();
                    spec.begin(&history);
                    for &last in &text[50..] {
                        let draft = spec.draft(&history, last);
                        assert!(
                            draft
                                .iter()
                                .all(|&d| u64::from(d) >= base && u64::from(d) < base + 300),
                            "scope s{k} drafted another scope's token"
                        );
                        spec.accept(0);
                        history.push(last);
                    }
                    spec.end_request();
                    match (t + i) % 7 {
                        0 => shared.save(path).unwrap(),
                        1 => {
                            let (delta, next) = shared.export_since(&cursor);
                            cursor = next;
                            other.import(&delta).unwrap();
                        }
                        2 => {
                            let (delta, _) = other.export_since(&selfspec::Cursor::default());
                            let _ = delta;
                        }
                        3 => {
                            let _ = shared.drop_scope(&format!("s{}", rng.below(SCOPES)));
                        }
                        _ => {}
                    }
                }
            });
        }
    });
    let loaded = Shared::load(&config, &path).unwrap();
    std::fs::remove_file(&path).ok();
    for engine in [&shared, &other, &loaded] {
        assert!(
            engine.engine_heap_bytes() <= budget.engine + budget.memory + (256 << 10),
            "{} bytes",
            engine.engine_heap_bytes()
        );
        // The count the budget check reads is every scope's heap, after
        // six threads grew, forgot and dropped scopes at once.
        let held: u64 = engine.scope_stats().iter().map(|(_, s)| s.heap_bytes).sum();
        assert_eq!(engine.engine_heap_bytes() as u64, held);
    }
}

#[test]
fn scopes_asked_for_and_never_drafted_on_are_forgotten_too() {
    // A configuration that keeps no engine-wide state: its scopes hold
    // nothing but themselves, and still count against the engine's budget.
    let config = Config::new([Strategy::NgramSimple { n: 12, m: 48 }]);
    let budget = Budget {
        engine: 1 << 20,
        ..Budget::default()
    };
    let shared = Shared::builder().budget(budget).build(&config).unwrap();
    for i in 0..100_000 {
        let scope = shared.scope(&format!("user-{i}"));
        let mut spec = Speculative::with_shared(&config, &scope).unwrap();
        spec.begin(&[1, 2, 3]);
        spec.end_request();
    }
    let held = shared.scope_names().len();
    assert!((1000..20_000).contains(&held), "{held} scopes held");
    assert!(
        shared.engine_heap_bytes() <= budget.engine,
        "{}",
        shared.engine_heap_bytes()
    );
    // The most recent ones are the ones kept.
    assert!(shared.scope_names().contains(&"user-99999".to_string()));
    assert!(!shared.scope_names().contains(&"user-0".to_string()));
}

/// The stepper's draft budget corrects a drafter's acceptance estimates
/// per source: recall on each scope is a source of its own, so what one
/// tenant's drafts taught the budget does not size another's.
#[test]
fn each_scope_is_a_source_of_estimates_of_its_own() {
    let config = Config::recommended();
    let shared = Shared::new(&config).unwrap();
    let source = |scope: &Shared| {
        let spec = Speculative::with_shared(&config, scope).unwrap();
        spec.drafter(0).and_then(|d| d.estimates_source())
    };
    let (a, b) = (shared.scope("tenant-a"), shared.scope("tenant-b"));
    let of_a = source(&a);
    assert!(of_a.is_some(), "recall names its source");
    // (case, scope, whether it is A's source)
    let cases = [
        ("A again", &a, true),
        ("A's scope asked for again", &shared.scope("tenant-a"), true),
        ("B", &b, false),
        ("the root scope", &shared, false),
    ];
    for (case, scope, same) in cases {
        assert_eq!(source(scope) == of_a, same, "{case}");
    }
    // Without an engine-wide memory there is nothing to tell apart.
    let ngram = Config::new([Strategy::NgramMod { n: 8 }]);
    let spec = Speculative::new(&ngram).unwrap();
    assert_eq!(spec.drafter(0).and_then(|d| d.estimates_source()), None);
}
