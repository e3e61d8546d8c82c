//! Configuration files (feature `serde`): the strict tagged form, the string
//! form, defaults, errors for unknown keys and a missing chain, and durations
//! in seconds.

#![cfg(feature = "serde")]

use std::time::Duration;

use selfspec::limits::DEFAULT_POOL_SIZE;
use selfspec::limits::DEFAULT_THRESHOLD_PERMILLE;
use selfspec::{Config, DrafterStats, Strategy};

fn config(json: &str) -> Result<Config, String> {
    serde_json::from_str(json).map_err(|e| e.to_string())
}

#[test]
fn strategies_parse_from_strings_and_tagged_objects() {
    let cases: &[(&str, Strategy)] = &[
        (
            r#""recall""#,
            Strategy::Recall {
                threshold_permille: DEFAULT_THRESHOLD_PERMILLE,
            },
        ),
        (
            r#"{"type": "recall"}"#,
            Strategy::Recall {
                threshold_permille: 130,
            },
        ),
        (
            r#"{"type": "recall", "threshold_permille": 200}"#,
            Strategy::Recall {
                threshold_permille: 200,
            },
        ),
        (r#""ngram-mod:n=24""#, Strategy::NgramMod { n: 24 }),
        (
            r#"{"type": "ngram-mod", "n": 24}"#,
            Strategy::NgramMod { n: 24 },
        ),
        (r#"{"type": "ngram-mod"}"#, Strategy::NgramMod { n: 12 }),
        (
            r#"{"type": "ngram-simple", "m": 8}"#,
            Strategy::NgramSimple { n: 12, m: 8 },
        ),
        (
            r#"{"type": "ngram-map-k4v", "n": 8}"#,
            Strategy::NgramMapK4v {
                n: 8,
                m: 48,
                min_hits: 1,
            },
        ),
        (
            r#"{"type": "ngram-cache", "static": "a.bin"}"#,
            Strategy::NgramCache {
                static_cache: Some("a.bin".into()),
                dynamic_cache: None,
            },
        ),
    ];
    for (json, want) in cases {
        let got: Strategy = serde_json::from_str(json).unwrap_or_else(|e| panic!("{json}: {e}"));
        assert_eq!(&got, want, "{json}");
        // The written (tagged) form reads back.
        let text = serde_json::to_string(&got).unwrap();
        assert_eq!(
            &serde_json::from_str::<Strategy>(&text).unwrap(),
            want,
            "{text}"
        );
    }
    // Strings and objects in one chain.
    let c =
        config(r#"{"strategies": ["ngram-simple:n=4,m=16", {"type": "recall"}], "draft_max": 32}"#)
            .unwrap();
    assert_eq!(
        c.strategies,
        [
            Strategy::NgramSimple { n: 4, m: 16 },
            Strategy::Recall {
                threshold_permille: 130
            }
        ]
    );
    assert_eq!(
        (c.draft_max, c.draft_min, c.pool_size),
        (32, 0, DEFAULT_POOL_SIZE)
    );
}

#[test]
fn loose_files_are_errors() {
    let cases: &[(&str, &str)] = &[
        // A missing chain is not a silent default.
        (r#"{"draft_max": 64}"#, "missing field `strategies`"),
        (
            r#"{"strategies": ["recall"], "draftmax": 64}"#,
            "unknown field `draftmax`",
        ),
        (
            r#"{"strategies": [{"type": "ngram-mod", "m": 4}]}"#,
            "unknown field `m`",
        ),
        (
            r#"{"strategies": [{"type": "recall", "treshold_permille": 4}]}"#,
            "unknown field `treshold_permille`",
        ),
        (
            r#"{"strategies": [{"type": "ngram-foo"}]}"#,
            "unknown variant `ngram-foo`",
        ),
        (
            r#"{"strategies": ["ngram-foo"]}"#,
            "unknown strategy `ngram-foo`",
        ),
        (
            r#"{"strategies": ["ngram-mod:m=4"]}"#,
            "unknown parameter `m`",
        ),
        (
            r#"{"strategies": [{"type": "ngram-mod", "n": 0}]}"#,
            "`n` = 0 is out of range",
        ),
        (
            r#"{"strategies": [{"type": "recall", "threshold_permille": 1000}]}"#,
            "out of range",
        ),
        (r#"{"strategies": [42]}"#, "a strategy: a string"),
        (
            r#"{"strategies": [{"type": "ngram-mod", "n": 4, "n": 8}]}"#,
            "duplicate field `n`",
        ),
        (
            r#"{"strategies": [{"type": "ngram-cache", "static": "a", "static_cache": "b"}]}"#,
            "duplicate field `static_cache`",
        ),
        (
            r#"{"strategies": [{"type": "ngram-mod", "n": -1}]}"#,
            "invalid value: integer `-1`",
        ),
        (
            r#"{"strategies": [{"type": "ngram-mod", "n": "24"}]}"#,
            "expected a non-negative integer",
        ),
        (
            r#"{"strategies": [{"type": "ngram-cache", "static": 3}]}"#,
            "expected a file path",
        ),
        (r#"{"strategies": [{"n": 24}]}"#, "missing field `type`"),
    ];
    for (json, want) in cases {
        let err = config(json).expect_err(json);
        assert!(err.contains(want), "{json}: `{err}` does not say `{want}`");
    }
}

#[test]
fn strategies_are_written_in_the_tagged_form() {
    let cases = [
        (
            Strategy::NgramMapK4v {
                n: 8,
                m: 48,
                min_hits: 1,
            },
            r#"{"type":"ngram-map-k4v","n":8,"m":48,"min_hits":1}"#,
        ),
        (
            Strategy::from_name("ngram-cache-live").unwrap(),
            r#"{"type":"ngram-cache-live","static_cache":null,"dynamic_cache":null}"#,
        ),
        (
            Strategy::NgramCache {
                static_cache: Some("a.bin".into()),
                dynamic_cache: None,
            },
            r#"{"type":"ngram-cache","static_cache":"a.bin","dynamic_cache":null}"#,
        ),
        (
            Strategy::Recall {
                threshold_permille: 200,
            },
            r#"{"type":"recall","threshold_permille":200}"#,
        ),
    ];
    for (strategy, want) in cases {
        assert_eq!(serde_json::to_string(&strategy).unwrap(), want);
        assert_eq!(
            serde_json::from_str::<Strategy>(want).unwrap(),
            strategy,
            "{want}"
        );
    }
}

#[test]
fn config_round_trips() {
    for c in [
        Config::default(),
        Config::recommended(),
        Config::llama_cpp_chain().with_draft_max(64),
    ] {
        let text = serde_json::to_string(&c).unwrap();
        assert_eq!(config(&text).unwrap(), c, "{text}");
    }
}

#[test]
fn durations_are_seconds() {
    let stats = DrafterStats {
        t_draft: Duration::from_micros(347),
        t_begin: Duration::from_millis(2),
        ..DrafterStats::new("recall")
    };
    let v = serde_json::to_value(&stats).unwrap();
    assert_eq!(v["t_draft"], serde_json::json!(0.000347));
    assert_eq!(v["t_begin"], serde_json::json!(0.002));
    assert_eq!(v["t_accept"], serde_json::json!(0.0));
    let back: DrafterStats = serde_json::from_value(v).unwrap();
    assert_eq!(back, stats);
    let mut bad = serde_json::to_value(&stats).unwrap();
    bad["t_draft"] = serde_json::json!(-1.0);
    let err = serde_json::from_value::<DrafterStats>(bad)
        .unwrap_err()
        .to_string();
    assert!(err.contains("not a duration in seconds"), "{err}");
}
