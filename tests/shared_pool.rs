//! One ngram-mod pool shared by many sequences on many threads.

mod common;

use std::collections::HashSet;
use std::sync::Arc;

use selfspec::replay::{replay, replay_observed, Session};
use selfspec::{Config, NgramPool, Speculative, Strategy};

fn config() -> Config {
    Config::new([
        Strategy::NgramSimple { n: 12, m: 48 },
        Strategy::NgramMod { n: 12 },
    ])
}

#[test]
fn eight_threads_replay_different_sessions_against_one_pool() {
    let sessions = common::load_workload(common::manifest_path("examples/data/sample-chat.jsonl"));
    let seen: HashSet<u32> = sessions
        .iter()
        .flat_map(|s| &s.requests)
        .flat_map(|r| r.prompt.iter().chain(&r.output))
        .copied()
        .collect();
    let pool = Arc::new(NgramPool::new(1 << 20).unwrap());
    let parts: Vec<Vec<Session>> = (0..8)
        .map(|t| sessions.iter().skip(t).step_by(8).cloned().collect())
        .collect();
    let reports = std::thread::scope(|scope| {
        let handles: Vec<_> = parts
            .iter()
            .map(|part| {
                let mut spec = Speculative::with_pool(&config(), pool.clone()).unwrap();
                let seen = &seen;
                scope.spawn(move || {
                    replay_observed(&mut spec, part, |step| {
                        // A draft only ever holds tokens some sequence has seen.
                        assert!(step.draft.iter().all(|t| seen.contains(t)));
                        assert!(step.draft.len() <= 16);
                    })
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap())
            .collect::<Vec<_>>()
    });
    let tokens: u64 = reports.iter().map(|r| r.tokens).sum();
    let want: usize = sessions
        .iter()
        .flat_map(|s| &s.requests)
        .map(|r| r.output.len())
        .sum();
    assert_eq!(tokens, want as u64);
    for r in &reports {
        assert!(r.tau() >= 1.0 && r.accepted <= r.drafted);
    }
    assert!(pool.used() > 0);
}

#[test]
fn one_thread_on_a_shared_pool_is_the_reference() {
    let sessions = common::load_workload(common::manifest_path(
        "examples/data/sample-code-edit.jsonl",
    ));
    let config = config().with_pool_size(1 << 16);
    let mut own = Speculative::new(&config).unwrap();
    let mut shared =
        Speculative::with_pool(&config, Arc::new(NgramPool::new(1 << 16).unwrap())).unwrap();
    let (a, b) = (replay(&mut own, &sessions), replay(&mut shared, &sessions));
    assert_eq!(
        (a.steps, a.drafted, a.accepted),
        (b.steps, b.drafted, b.accepted)
    );
    let counters = |s: &Speculative| {
        s.stats()
            .iter()
            .map(|s| (s.gen_tokens, s.acc_tokens))
            .collect::<Vec<_>>()
    };
    assert_eq!(counters(&own), counters(&shared));
    assert_eq!(own.pool().unwrap().used(), shared.pool().unwrap().used());
}
