//! Configuration: parsing, printing, validation errors (one table of bad cases).

use selfspec::limits::{DEFAULT_POOL_SIZE, MAX_DRAFT, MAX_NGRAM, MAX_POOL_SIZE};
use selfspec::{Config, Error, Speculative, Strategy};

#[test]
fn names_parse_with_llama_cpp_defaults() {
    let cases: &[(&str, Strategy)] = &[
        ("ngram-simple", Strategy::NgramSimple { n: 12, m: 48 }),
        ("ngram-map-k", Strategy::NgramMapK { n: 12, m: 48 }),
        (
            "ngram-map-k4v",
            Strategy::NgramMapK4v {
                n: 12,
                m: 48,
                min_hits: 1,
            },
        ),
        ("ngram-mod", Strategy::NgramMod { n: 12 }),
        ("ngram-mod:n=24", Strategy::NgramMod { n: 24 }),
        ("ngram-simple:n=3,m=8", Strategy::NgramSimple { n: 3, m: 8 }),
        (
            "ngram-map-k4v:min_hits=2, n=8",
            Strategy::NgramMapK4v {
                n: 8,
                m: 48,
                min_hits: 2,
            },
        ),
        (" ngram-map-k:m=16 ", Strategy::NgramMapK { n: 12, m: 16 }),
    ];
    for (input, want) in cases {
        let got: Strategy = input.parse().unwrap_or_else(|e| panic!("{input}: {e}"));
        assert_eq!(&got, want, "{input}");
        // Display round-trips.
        assert_eq!(got.to_string().parse::<Strategy>().unwrap(), got);
    }
    assert_eq!(Strategy::NgramMod { n: 24 }.to_string(), "ngram-mod:n=24");
    assert_eq!(
        Strategy::NgramMapK4v {
            n: 8,
            m: 8,
            min_hits: 2
        }
        .stats_name(),
        "ngram_map_k4v"
    );
}

#[test]
fn bad_strategy_strings() {
    let cases: &[(&str, Error)] = &[
        (
            "ngram-foo",
            Error::UnknownStrategy {
                name: "ngram-foo".into(),
            },
        ),
        ("", Error::UnknownStrategy { name: "".into() }),
        (
            "ngram-mod:m=4",
            Error::ParseStrategy {
                input: "ngram-mod:m=4".into(),
                reason: "unknown parameter `m`; ngram-mod takes n".into(),
            },
        ),
        (
            "ngram-simple:n=-1",
            Error::ParseStrategy {
                input: "ngram-simple:n=-1".into(),
                reason: "`n` = `-1` is not a non-negative integer".into(),
            },
        ),
        (
            "ngram-simple:n",
            Error::ParseStrategy {
                input: "ngram-simple:n".into(),
                reason: "`n` is not of the form key=value".into(),
            },
        ),
        (
            "ngram-simple:n=0",
            Error::OutOfRange {
                context: "ngram-simple",
                field: "n",
                value: 0,
                min: 1,
                max: MAX_NGRAM,
            },
        ),
    ];
    for (input, want) in cases {
        assert_eq!(
            format!("{:?}", input.parse::<Strategy>().unwrap_err()),
            format!("{want:?}"),
            "{input}"
        );
    }
}

#[test]
// A table of cases, read top to bottom.
#[allow(clippy::too_many_lines)]
fn bad_configurations_get_exact_errors() {
    let base = Config::default();
    let cases: Vec<(&str, Config, Error)> = vec![
        (
            "empty chain",
            Config {
                strategies: vec![],
                ..base.clone()
            },
            Error::EmptyChain,
        ),
        (
            "draft_max = 0",
            base.clone().with_draft_max(0),
            Error::OutOfRange {
                context: "config",
                field: "draft_max",
                value: 0,
                min: 1,
                max: MAX_DRAFT,
            },
        ),
        (
            "huge draft_max",
            base.clone().with_draft_max(usize::MAX),
            Error::OutOfRange {
                context: "config",
                field: "draft_max",
                value: usize::MAX,
                min: 1,
                max: MAX_DRAFT,
            },
        ),
        (
            "draft_min > draft_max",
            base.clone().with_draft_min(17),
            Error::DraftMinAboveMax {
                draft_min: 17,
                draft_max: 16,
            },
        ),
        (
            "pool of 0 cells",
            Config::new([Strategy::NgramMod { n: 24 }]).with_pool_size(0),
            Error::OutOfRange {
                context: "config",
                field: "pool_size",
                value: 0,
                min: 1,
                max: MAX_POOL_SIZE,
            },
        ),
        (
            "n = 0",
            Config::new([Strategy::NgramSimple { n: 0, m: 48 }]),
            Error::OutOfRange {
                context: "ngram-simple",
                field: "n",
                value: 0,
                min: 1,
                max: MAX_NGRAM,
            },
        ),
        (
            "m = 0",
            Config::new([Strategy::NgramMapK { n: 12, m: 0 }]),
            Error::OutOfRange {
                context: "ngram-map-k",
                field: "m",
                value: 0,
                min: 1,
                max: MAX_NGRAM,
            },
        ),
        (
            "huge n",
            Config::new([Strategy::NgramMod { n: 1 << 40 }]),
            Error::OutOfRange {
                context: "ngram-mod",
                field: "n",
                value: 1 << 40,
                min: 1,
                max: MAX_NGRAM,
            },
        ),
        (
            "min_hits beyond the counter's saturation",
            Config::new([Strategy::NgramMapK4v {
                n: 8,
                m: 8,
                min_hits: 20000,
            }]),
            Error::OutOfRange {
                context: "ngram-map-k4v",
                field: "min_hits",
                value: 20000,
                min: 0,
                max: 16380,
            },
        ),
    ];
    for (what, config, want) in cases {
        // Errors have no PartialEq: the kind and every field, as Debug shows them.
        let want = format!("{want:?}");
        assert_eq!(
            format!("{:?}", config.validate().unwrap_err()),
            want,
            "{what}"
        );
        assert_eq!(
            format!("{:?}", Speculative::new(&config).unwrap_err()),
            want,
            "{what}"
        );
    }
}

#[test]
fn error_messages_name_field_and_allowed_range() {
    let e = Config::default()
        .with_draft_max(0)
        .validate()
        .unwrap_err()
        .to_string();
    assert_eq!(
        e,
        format!("config: `draft_max` = 0 is out of range; allowed: 1..={MAX_DRAFT}")
    );
    let e = Config::default()
        .with_draft_min(20)
        .validate()
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("draft_min") && e.contains("draft_max") && e.contains("at most"),
        "{e}"
    );
    let e = "ngram-bogus".parse::<Strategy>().unwrap_err().to_string();
    assert!(
        e.contains("ngram-simple, ngram-map-k, ngram-map-k4v, ngram-mod"),
        "{e}"
    );
}

#[test]
fn defaults_are_llama_cpp_engine_defaults() {
    let c = Config::default();
    assert_eq!(c.strategies, vec![Strategy::NgramSimple { n: 12, m: 48 }]);
    assert_eq!(
        (c.draft_max, c.draft_min, c.pool_size),
        (16, 0, DEFAULT_POOL_SIZE)
    );
    assert_eq!(DEFAULT_POOL_SIZE, 4 * 1024 * 1024);
    let chain: Vec<&str> = Config::llama_cpp_chain()
        .strategies
        .iter()
        .map(Strategy::name)
        .collect();
    assert_eq!(
        chain,
        ["ngram-simple", "ngram-map-k", "ngram-map-k4v", "ngram-mod"]
    );
}

/// The one table of names: every name parses to its llama.cpp defaults,
/// prints and reads back, is listed by the unknown-name error, and names the
/// statistics line of the drafter it builds.
#[test]
fn every_name_comes_from_one_table() {
    let names: Vec<&str> = Strategy::names().collect();
    assert_eq!(
        names,
        [
            "ngram-simple",
            "ngram-map-k",
            "ngram-map-k4v",
            "ngram-mod",
            "ngram-cache",
            "ngram-cache-live",
            "recall"
        ]
    );
    let unknown = "ngram-bogus".parse::<Strategy>().unwrap_err().to_string();
    assert!(unknown.ends_with(&names.join(", ")), "{unknown}");
    let mut stats_names = Vec::new();
    for name in &names {
        let strategy = Strategy::from_name(name).unwrap();
        assert_eq!(strategy.name(), *name);
        assert_eq!(&name.parse::<Strategy>().unwrap(), &strategy, "{name}");
        assert_eq!(
            strategy.to_string().parse::<Strategy>().unwrap(),
            strategy,
            "{name}"
        );
        let spec = Speculative::new(&Config::new([strategy.clone()])).unwrap();
        assert_eq!(spec.stats()[0].name, strategy.stats_name(), "{name}");
        stats_names.push(strategy.stats_name());
    }
    stats_names.sort_unstable();
    stats_names.dedup();
    assert_eq!(stats_names.len(), names.len());
}

#[test]
fn config_limits_are_draft_limits() {
    use selfspec::DraftLimits;
    let c = Config::default();
    assert_eq!(c.limits(), DraftLimits::default());
    assert_eq!(
        Config::default()
            .with_draft_min(3)
            .with_draft_max(9)
            .limits(),
        DraftLimits { min: 3, max: 9 }
    );
    // One check of the limits: the config's and the chain's errors agree.
    for limits in [
        DraftLimits { min: 0, max: 0 },
        DraftLimits { min: 17, max: 16 },
        DraftLimits {
            min: 0,
            max: MAX_DRAFT + 1,
        },
    ] {
        let config = Config::default()
            .with_draft_min(limits.min)
            .with_draft_max(limits.max);
        let drafters: Vec<Box<dyn selfspec::Drafter>> =
            vec![Box::new(selfspec::strategies::NgramSimple::new(12, 48))];
        let want = format!("{:?}", limits.validate().unwrap_err());
        assert_eq!(format!("{:?}", config.validate().unwrap_err()), want);
        assert_eq!(
            format!(
                "{:?}",
                Speculative::from_drafters(drafters, limits).unwrap_err()
            ),
            want
        );
    }
}
