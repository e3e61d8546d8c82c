//! The strategies' direct constructors do not validate (see their docs):
//! what `Strategy::validate` rejects, they accept, and sizes of 0 never draft.

use std::sync::Arc;

use selfspec::strategies::{NgramMap, NgramMod, NgramPool, NgramSimple, Recall};
use selfspec::{Config, DraftLimits, Drafter, Error, Speculative, Strategy, Token};

/// Drafts produced over a very repetitive stream (any working drafter drafts).
fn drafts(d: &mut dyn Drafter) -> usize {
    let text: Vec<Token> = [1, 2, 3, 4, 5, 6, 7, 8].repeat(40);
    let mut history = text[..64].to_vec();
    d.begin(&history);
    let mut out = Vec::new();
    let mut drafted = 0;
    for &last in &text[64..] {
        out.clear();
        d.draft(&history, last, DraftLimits::default(), &mut out);
        drafted += usize::from(!out.is_empty());
        if !out.is_empty() {
            d.accept(0);
        }
        history.push(last);
    }
    drafted
}

#[test]
fn validate_rejects_what_the_constructors_accept() {
    let pool = || Arc::new(NgramPool::new(1 << 16).unwrap());
    type Case = (Strategy, Box<dyn Drafter>, bool);
    let cases: Vec<Case> = vec![
        // (the strategy validate rejects, the drafter built directly, drafts?)
        (
            Strategy::NgramSimple { n: 0, m: 0 },
            Box::new(NgramSimple::new(0, 0)),
            false,
        ),
        (
            Strategy::NgramSimple { n: 0, m: 8 },
            Box::new(NgramSimple::new(0, 8)),
            false,
        ),
        (
            Strategy::NgramSimple { n: 4, m: 0 },
            Box::new(NgramSimple::new(4, 0)),
            false,
        ),
        (
            Strategy::NgramMapK { n: 0, m: 8 },
            Box::new(NgramMap::key_only(0, 8)),
            false,
        ),
        (
            Strategy::NgramMapK { n: 4, m: 0 },
            Box::new(NgramMap::key_only(4, 0)),
            false,
        ),
        (
            Strategy::NgramMapK4v {
                n: 0,
                m: 8,
                min_hits: 1,
            },
            Box::new(NgramMap::four_values(0, 8, 1)),
            false,
        ),
        (
            Strategy::NgramMod { n: 0 },
            Box::new(NgramMod::new(0, pool())),
            false,
        ),
        (
            Strategy::NgramSimple { n: 2000, m: 8 },
            Box::new(NgramSimple::new(2000, 8)),
            false,
        ),
    ];
    for (strategy, mut drafter, drafts_anyway) in cases {
        assert!(
            matches!(strategy.validate(), Err(Error::OutOfRange { .. })),
            "{strategy:?} must be rejected"
        );
        assert!(
            matches!(
                Speculative::new(&Config::new([strategy.clone()])),
                Err(Error::OutOfRange { .. })
            ),
            "{strategy:?}"
        );
        assert_eq!(drafts(&mut *drafter) > 0, drafts_anyway, "{strategy:?}");
    }
    // Valid values draft on the same stream.
    assert!(drafts(&mut NgramSimple::new(4, 8)) > 0);
    assert!(drafts(&mut NgramMap::key_only(4, 8)) > 0);
    assert!(drafts(&mut NgramMod::new(4, pool())) > 0);
    // recall's threshold: validate takes 1..=999 thousandths; `Recall::new`
    // clamps to 0.001..=0.999 and replaces a non-finite value (documented).
    for permille in [0, 1000] {
        assert!(Strategy::Recall {
            threshold_permille: permille
        }
        .validate()
        .is_err());
    }
    for threshold in [f64::NAN, f64::INFINITY, -1.0, 0.0, 0.5] {
        assert!(drafts(&mut Recall::new(threshold)) > 0, "{threshold}");
    }
}
