//! A mixed workload's per-kind figures add up to the replay's, in every
//! engine mode, and match the kinds' sessions.

#[path = "../../tests/common/mod.rs"]
mod common;

use selfspec::{Config, Shared, Speculative};
use selfspec_eval::{replay, replay_engine, Engine, Request, Session};

fn mixed() -> Vec<Session> {
    let mut rng = common::Rng(41);
    (0..24)
        .map(|i| {
            let kind = ["chat", "code", "edit"][i % 3];
            let text = rng.text(600, 400);
            let (prompt, output) = text.split_at(200 + (i % 5) * 30);
            Session::new(
                format!("s{i}"),
                kind,
                vec![Request::new(prompt.to_vec(), output.to_vec())],
            )
        })
        .collect()
}

#[test]
fn kinds_add_up_to_the_whole() {
    let sessions = mixed();
    let config = Config::recommended();
    let seq = replay(&mut Speculative::new(&config).unwrap(), &sessions).unwrap();
    let engines = [Engine::slots(8), Engine::fresh(8)];
    let mut reports = vec![seq];
    for engine in engines {
        reports.push(
            replay_engine(&config, &Shared::new(&config).unwrap(), &sessions, engine).unwrap(),
        );
    }
    for r in &reports {
        let kinds: Vec<&str> = r.kinds.iter().map(|k| k.kind.as_str()).collect();
        assert_eq!(kinds, ["chat", "code", "edit"]);
        let sum = |f: fn(&selfspec_eval::KindFigures) -> u64| r.kinds.iter().map(f).sum::<u64>();
        assert_eq!(sum(|k| k.tokens), r.tokens);
        assert_eq!(sum(|k| k.steps), r.steps);
        assert_eq!(sum(|k| k.drafted), r.drafted);
        assert_eq!(sum(|k| k.accepted), r.accepted);
        for k in &r.kinds {
            let want: u64 = sessions
                .iter()
                .filter(|s| s.kind == k.kind)
                .flat_map(|s| &s.requests)
                .map(|q| q.output.len() as u64)
                .sum();
            assert_eq!(k.tokens, want, "{}", k.kind);
            assert!(k.tau() >= 1.0 && k.acceptance() <= 1.0);
        }
    }
}

/// A scope per session is as if every session ran on an engine of its own.
#[test]
fn a_scope_per_session_is_an_engine_per_session() {
    let sessions = mixed();
    let config = Config::recommended();
    let scoped = replay_engine(
        &config,
        &Shared::new(&config).unwrap(),
        &sessions,
        Engine::scoped(8),
    )
    .unwrap();
    let (mut steps, mut accepted) = (0, 0);
    for s in &sessions {
        let alone = replay_engine(
            &config,
            &Shared::new(&config).unwrap(),
            std::slice::from_ref(s),
            Engine::fresh(1),
        )
        .unwrap();
        steps += alone.steps;
        accepted += alone.accepted;
    }
    assert_eq!((scoped.steps, scoped.accepted), (steps, accepted));
    // Not vacuous: one shared scope drafts from the other sessions.
    let shared = replay_engine(
        &config,
        &Shared::new(&config).unwrap(),
        &sessions,
        Engine::fresh(8),
    )
    .unwrap();
    assert_ne!(shared.accepted, scoped.accepted);
}
