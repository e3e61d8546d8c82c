//! The engine's token cost (`Speculative::set_token_cost`) and the per-token
//! acceptance probabilities of a draft (`Speculative::draft_probabilities`).

mod workload;

use selfspec::{Config, Error, Speculative, Strategy};
use selfspec_eval::{Session, Slot};

/// Replays `sessions` with `cost` set before every step (as an engine sets
/// it before each pass): (drafted, accepted, steps), and checks the
/// probabilities of every draft.
fn replay_at(config: &Config, cost: Option<f64>, sessions: &[Session]) -> (u64, u64, u64) {
    let recall = config
        .strategies
        .iter()
        .all(|s| matches!(s, Strategy::Recall { .. }));
    let mut slot = Slot::new().unwrap();
    let mut spec = Some(Speculative::new(config).unwrap());
    let (mut drafted, mut accepted, mut steps) = (0, 0, 0);
    for request in sessions.iter().flat_map(|s| &s.requests) {
        slot.start(request, spec.take()).unwrap();
        loop {
            if let (Some(cost), Some(spec)) = (cost, slot.spec_mut()) {
                spec.set_token_cost(cost).unwrap();
            }
            let Some(v) = slot.step().unwrap() else {
                break;
            };
            let (draft, n) = (v.draft.clone(), v.accepted);
            let p = slot.spec_mut().unwrap().draft_probabilities();
            if recall {
                assert_eq!(p.len(), draft.len());
                assert!(p.iter().all(|&x| x > 0.0 && x <= 1.0), "{p:?}");
                // The stop rule: every drafted prefix's probability of being
                // accepted whole is at least the cost.
                let whole: f64 = p.iter().product();
                assert!(draft.is_empty() || whole >= cost.unwrap_or(0.13).max(0.001) - 1e-12);
            } else {
                assert!(p.is_empty());
            }
            drafted += draft.len() as u64;
            accepted += n as u64;
            steps += 1;
        }
    }
    (drafted, accepted, steps)
}

fn sample(name: &str) -> Vec<Session> {
    workload::load(workload::repo_path(&format!("examples/data/{name}.jsonl")))
}

#[test]
fn costs_outside_zero_to_one_are_errors() {
    let mut spec = Speculative::new(&Config::recommended()).unwrap();
    for bad in [-0.01, 1.0, 2.0, f64::NAN, f64::INFINITY] {
        let e = spec.set_token_cost(bad).unwrap_err();
        assert!(matches!(e, Error::TokenCost { .. }), "{e}");
        assert!(e.to_string().contains("0 <= cost < 1"), "{e}");
    }
    for good in [0.0, 0.13, 0.999] {
        spec.set_token_cost(good).unwrap();
    }
    // The cost stays a float, printed short.
    for (bad, shown) in [
        (-1e-300, "token cost -1e-300 is"),
        (1.5, "token cost 1.5 is"),
        (-0.123456789, "token cost -0.123457 is"),
        (123456789.0, "token cost 1.23457e8 is"),
        (f64::NAN, "token cost NaN is"),
    ] {
        let e = spec.set_token_cost(bad).unwrap_err();
        assert!(e.to_string().starts_with(shown), "{e}");
        assert!(matches!(e, Error::TokenCost { cost } if cost.to_bits() == bad.to_bits()));
    }
}

#[test]
fn the_default_cost_is_recalls_threshold() {
    let sessions = &sample("sample-chat")[..6];
    let config = Config::recommended();
    assert_eq!(
        replay_at(&config, None, sessions),
        replay_at(&config, Some(0.13), sessions)
    );
}

#[test]
fn a_higher_cost_drafts_less_and_more_safely() {
    let sessions = &sample("sample-chat")[..10];
    let config = Config::recommended();
    let figures: Vec<(u64, u64, u64)> = [0.03, 0.13, 0.4]
        .iter()
        .map(|&c| replay_at(&config, Some(c), sessions))
        .collect();
    for pair in figures.windows(2) {
        let ((d0, a0, _), (d1, a1, _)) = (pair[0], pair[1]);
        assert!(d1 < d0, "drafted {figures:?}");
        assert!(
            a1 as f64 / d1 as f64 > a0 as f64 / d0 as f64,
            "acceptance {figures:?}"
        );
    }
}

#[test]
fn the_reference_strategies_ignore_the_cost() {
    let sessions = &sample("sample-code-edit")[..2];
    let config = Config::llama_cpp_chain();
    assert_eq!(
        replay_at(&config, None, sessions),
        replay_at(&config, Some(0.9), sessions)
    );
}
