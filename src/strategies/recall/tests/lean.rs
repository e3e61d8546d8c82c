//! The session lean: its definition, its reset per session, its purpose.

use super::*;

/// The lean against its definition: the odds factor is `exp` of the
/// residual over the information plus the prior, clamped, and applying it
/// is a shift of the logit.
#[test]
fn a_lean_is_a_shrunk_logit_shift() {
    let logit = |p: f64| (p / (1.0 - p)).ln();
    let sigmoid = |z: f64| 1.0 / (1.0 + (-z).exp());
    // (probability the cells gave, accepted), per verification.
    let cases: &[&[(f64, bool)]] = &[
        &[],
        &[(0.5, true)],
        &[(0.5, false)],
        &[(0.9, true); 40],
        &[(0.9, false); 40],
        &[(0.2, true), (0.7, false), (0.95, true), (0.4, true)],
        &[(0.0, false), (1.0, true), (1.5, true), (-0.5, false)],
    ];
    for &case in cases {
        let mut lean = Lean::default();
        let (mut residual, mut information) = (0.0, 0.0);
        for &(p, accepted) in case {
            lean.record(p, accepted);
            let p = p.clamp(0.0, 1.0);
            residual += if accepted { 1.0 } else { 0.0 } - p;
            information += p * (1.0 - p);
        }
        let shift = (residual / (information + 2.0)).clamp(-3.0, 3.0);
        let odds = lean.odds();
        assert!((odds.ln() - shift).abs() < 1e-12, "{case:?}: {odds}");
        for p in [0.01, 0.2, 0.5, 0.8, 0.99] {
            let leaned = Lean::apply(p, odds);
            assert!(
                (leaned - sigmoid(logit(p) + shift)).abs() < 1e-12,
                "{case:?} at {p}"
            );
        }
        for p in [0.0, 1.0] {
            assert_eq!(Lean::apply(p, odds), p, "{case:?} at {p}");
        }
    }
    // Accepted beyond the cells' word leans up, rejected down, to the clamp.
    let lean_of = |accepted: bool, n: usize| {
        let mut lean = Lean::default();
        (0..n).for_each(|_| lean.record(0.9, accepted));
        lean.odds()
    };
    assert!(lean_of(true, 10) > 1.0 && lean_of(true, 40) > lean_of(true, 10));
    assert!(lean_of(false, 1) < 1.0 && lean_of(false, 40) == (-3.0f64).exp());
}

/// A new session starts with no lean: what one conversation's outcomes
/// taught does not carry into the next.
#[test]
fn a_new_session_starts_without_a_lean() {
    let mut r = Recall::new(0.2);
    let _ = rounds_rejected(SHIPPED, &mut r, 30);
    assert!(r.learner.lean.odds() < 1.0);
    // A prompt that keeps nothing of the history: a new session.
    let other: Vec<Token> = (100..400).collect();
    r.begin(&other);
    assert_eq!(r.learner.lean.odds(), 1.0);
}

/// The purpose of the lean: on a memory whose cells were trained by other
/// traffic, a session more predictable than that drafts longer than the
/// cells alone let it (fewer forward passes), and a less predictable one
/// shorter (fewer wasted tokens).
#[test]
fn a_session_leans_away_from_what_other_traffic_taught_the_cells() {
    // A session of text from a book of `phrases` phrases, after six sessions
    // from books of `other` phrases, with its lean or with it held at 0.
    let session = |phrases: usize, other: usize, lean: bool| {
        let memory = Arc::new(RecallMemory::new(1 << 24));
        let mut before = Recall::with_memory(0.13, Arc::clone(&memory), 1 << 22, false);
        for s in 0..6 {
            let text = phrase_text(100 + s, other, 3000);
            greedy_request(SHIPPED, &mut before, &text[..1000], &text[1000..]);
        }
        let mut r = Recall::with_memory(0.13, memory, 1 << 22, false);
        let mode = Mode { lean, ..SHIPPED };
        let text = phrase_text(1, phrases, 4000);
        let figures = greedy_request(mode, &mut r, &text[..1000], &text[1000..]);
        (figures, r.learner.lean.odds())
    };
    let acceptance =
        |(_, drafted, accepted): (usize, usize, usize)| float(accepted) / float(drafted);
    // More predictable than the traffic before it.
    let (with, odds) = session(6, 400, true);
    let (without, _) = session(6, 400, false);
    assert!(odds > 1.0, "leans up: {odds}");
    assert!(
        with.0 < without.0,
        "passes: {with:?} with the lean, {without:?} without"
    );
    // Less predictable.
    let (with, odds) = session(400, 6, true);
    let (without, _) = session(400, 6, false);
    assert!(odds < 1.0, "leans down: {odds}");
    assert!(
        acceptance(with) > acceptance(without) && with.1 < without.1,
        "drafted and accepted: {with:?} with the lean, {without:?} without"
    );
}
