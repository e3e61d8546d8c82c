//! Bounded memory under long engine lives, 1M-token histories, and the type
//! guarantees an engine relies on.

#[path = "../../tests/common/mod.rs"]
mod common;
mod workload;

use std::sync::Arc;

use common::Rng;
use workload::drive;

use selfspec::limits::KEY_MAP_SIZE;
use selfspec::strategies::{NgramMap, NgramMod, NgramPool, NgramSimple};
use selfspec::{Config, DraftLimits, Drafter, DrafterStats, Error, Speculative, Strategy};
use selfspec_eval::{replay, ReplayReport, Request, Session, Step};

fn all_four() -> Config {
    Config::new([
        Strategy::NgramSimple { n: 4, m: 16 },
        Strategy::NgramMapK { n: 4, m: 16 },
        Strategy::NgramMapK4v {
            n: 4,
            m: 8,
            min_hits: 1,
        },
        Strategy::NgramMod { n: 4 },
    ])
    .with_pool_size(1 << 16)
}

#[test]
fn ten_thousand_unrelated_sessions_stay_bounded() {
    let mut rng = Rng(0x5eed);
    let sessions: Vec<Session> = (0..10_000)
        .map(|i| {
            let (p, o) = (20 + rng.pick(300), 20 + rng.pick(150));
            let (prompt, output) = (rng.text(p, 12), rng.text(o, 12));
            Session::new(
                format!("s{i}"),
                "synthetic",
                vec![Request::new(prompt, output)],
            )
        })
        .collect();
    let longest = sessions
        .iter()
        .flat_map(|s| &s.requests)
        .map(|r| r.prompt.len() + r.output.len())
        .max()
        .unwrap();

    // Through one Speculative: memory stays within the documented budget.
    let mut spec = Speculative::new(&all_four()).unwrap();
    let report = replay(&mut spec, &sessions).unwrap();
    assert!(report.accepted > 10_000, "the workload drafts: {report:?}");
    let budget = 2 * (KEY_MAP_SIZE * 4) + 2 * 128 * longest + 32 * longest + (256 << 10);
    assert!(
        spec.heap_bytes() <= budget,
        "{} B held, budget {budget} B",
        spec.heap_bytes()
    );

    // ngram-map's key records: at most one per history position (a record whose
    // text matches the key is reused), so their number is bounded by the longest
    // history, however many sessions an engine slot serves.
    for mut map in [NgramMap::key_only(4, 16), NgramMap::four_values(4, 8, 1)] {
        let max_history = drive(&mut map, &sessions);
        assert!(
            map.record_count() <= max_history,
            "{} records",
            map.record_count()
        );
        assert!(map.record_count() > 0);
    }
}

#[test]
fn million_token_histories() {
    let mut rng = Rng(42);
    let history = rng.text(1 << 20, 50);
    let tail = rng.text(2000, 50);
    let pool = Arc::new(NgramPool::new(1 << 22).unwrap());
    let drafters: Vec<(Box<dyn Drafter>, usize)> = vec![
        // The history index: 16 bytes a token, up to 32 with the vectors'
        // doubling slack; the maps' key records add a few bytes a token here.
        (Box::new(NgramSimple::new(12, 48)), 32),
        (Box::new(NgramMap::key_only(12, 48)), 48),
        (Box::new(NgramMap::four_values(8, 8, 1)), 48),
        (Box::new(NgramMod::new(24, pool.clone())), 0),
    ];
    for (mut d, bytes_per_token) in drafters {
        let mut h = history.clone();
        d.begin(&h);
        let mut drafts = 0;
        let mut draft = Vec::new();
        for &t in &tail {
            draft.clear();
            d.draft(&h, t, DraftLimits { min: 0, max: 64 }, &mut draft);
            drafts += usize::from(!draft.is_empty());
            d.accept(draft.len() / 2);
            h.push(t);
        }
        // Cut back to half without begin, then begin with a quarter.
        draft.clear();
        d.draft(&h[..h.len() / 2], 1, DraftLimits::default(), &mut draft);
        d.begin(&h[..h.len() / 4]);
        let held = d.heap_bytes();
        let bound = bytes_per_token * h.len() + 4 * KEY_MAP_SIZE + (1 << 20);
        assert!(
            held <= bound,
            "{}: {held} B for {} tokens",
            d.name(),
            h.len()
        );
        assert!(
            drafts > 0 || d.name() == "ngram_map_k4v",
            "{} never drafted",
            d.name()
        );
    }
    assert!(pool.used() <= pool.size());
}

#[test]
fn type_guarantees() {
    fn send<T: Send>() {}
    fn send_sync<T: Send + Sync>() {}
    fn debug<T: std::fmt::Debug>() {}
    send::<Speculative>();
    send_sync::<NgramPool>();
    send_sync::<Arc<NgramPool>>();
    send_sync::<Config>();
    send_sync::<Error>();
    send::<NgramSimple>();
    send::<NgramMap>();
    send::<NgramMod>();
    send::<Box<dyn Drafter>>();
    debug::<Speculative>();
    debug::<NgramPool>();
    debug::<Config>();
    debug::<Strategy>();
    debug::<Error>();
    debug::<DrafterStats>();
    debug::<DraftLimits>();
    debug::<NgramSimple>();
    debug::<NgramMap>();
    debug::<NgramMod>();
    debug::<Session>();
    debug::<Request>();
    debug::<ReplayReport>();
    debug::<Step<'static>>();
    debug::<Box<dyn Drafter>>();
    // std::error::Error, so engines can `?` it into their own errors.
    let e: Box<dyn std::error::Error + Send + Sync> = Box::new(Error::EmptyChain);
    assert!(e.to_string().contains("strategies"));
}
