//! One ngram-mod pool shared by many sequences on many threads.

mod workload;

use selfspec::{Config, Shared, Speculative, Strategy};
use selfspec_eval::{replay, replay_observed, Session};
use std::collections::HashSet;

fn config() -> Config {
    Config::new([
        Strategy::NgramSimple { n: 12, m: 48 },
        Strategy::NgramMod { n: 12 },
    ])
}

#[test]
fn eight_threads_replay_different_sessions_against_one_pool() {
    let sessions = workload::load(workload::repo_path("examples/data/sample-chat.jsonl"));
    let seen: HashSet<u32> = sessions
        .iter()
        .flat_map(|s| &s.requests)
        .flat_map(|r| r.prompt.iter().chain(&r.output))
        .copied()
        .collect();
    let config = config().with_pool_size(1 << 20);
    let shared = Shared::new(&config).unwrap();
    let parts: Vec<Vec<Session>> = (0..8)
        .map(|t| sessions.iter().skip(t).step_by(8).cloned().collect())
        .collect();
    let reports = std::thread::scope(|scope| {
        let handles: Vec<_> = parts
            .iter()
            .map(|part| {
                let mut spec = Speculative::with_shared(&config, &shared).unwrap();
                let seen = &seen;
                scope.spawn(move || {
                    replay_observed(&mut spec, part, |step| {
                        // A draft only ever holds tokens some sequence has seen.
                        assert!(step.draft.iter().all(|t| seen.contains(t)));
                        assert!(step.draft.len() <= 16);
                    })
                    .unwrap()
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
    assert!(shared.stats().pool_cells_used > 0);
    assert_eq!(shared.stats().pool_cells, 1 << 20);
}

#[test]
fn one_thread_on_a_shared_pool_is_the_reference() {
    let sessions = workload::load(workload::repo_path("examples/data/sample-code-edit.jsonl"));
    let config = config().with_pool_size(1 << 16);
    let mut own = Speculative::new(&config).unwrap();
    let mut shared = Speculative::with_shared(&config, &Shared::new(&config).unwrap()).unwrap();
    let (a, b) = (
        replay(&mut own, &sessions).unwrap(),
        replay(&mut shared, &sessions).unwrap(),
    );
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

#[test]
fn a_config_with_another_pool_size_is_refused_by_a_shared() {
    let shared = Shared::new(&config().with_pool_size(1 << 16)).unwrap();
    let err = Speculative::with_shared(&config().with_pool_size(1 << 20), &shared).unwrap_err();
    assert!(matches!(
        err,
        selfspec::Error::PoolSizeMismatch {
            config: 1_048_576,
            shared: 65_536
        }
    ));
    // A chain without ngram-mod does not use the pool: any size is fine.
    let recall = Config::recommended().with_pool_size(1 << 20);
    assert!(Speculative::with_shared(&recall, &shared).is_ok());
}
