//! recall's unit tests.

use super::*;
use crate::index::low32;
use crate::int::{ix, wide};
use calibrate::Lean;
use index::{Chains, Hasher, SeqIndex};
use learner::SYNC_EVERY;
use memory::Span;

fn draft(r: &mut Recall, history: &[Token], last: Token, max: usize) -> Vec<Token> {
    let mut out = Vec::new();
    r.draft(history, last, DraftLimits { min: 0, max }, &mut out);
    out
}

#[test]
fn copies_long_repeats_and_stops_at_the_limit() {
    let text: Vec<Token> = (0u32..500).map(|i| i * 7919 % 1000).collect();
    let mut r = Recall::new(0.1);
    // The text, then its first 100 tokens again: the rest is a long copy.
    let history: Vec<Token> = text.iter().chain(&text[..100]).copied().collect();
    r.begin(&history);
    let d = draft(&mut r, &history, text[100], 64);
    assert_eq!(d, &text[101..101 + d.len()]);
    assert!(d.len() >= 16, "a long match drafts long: {}", d.len());
    assert!(draft(&mut r, &history, text[100], 5).len() <= 5);
}

/// Draft calls over a periodic history whose target never follows the
/// pattern (every draft is rejected at its first token, so the orchestrator
/// calls no accept); whether each call drafted.
fn rounds_rejected(r: &mut Recall, rounds: usize) -> Vec<bool> {
    let mut history: Vec<Token> = [1, 2, 3].repeat(30);
    (0..rounds)
        .map(|round| {
            let last = [1, 2, 3][round % 3];
            let drafted = !draft(r, &history, last, 16).is_empty();
            history.push(last);
            drafted
        })
        .collect()
}

#[test]
fn calibration_learns_from_rejections() {
    // The engine-wide cells alone (no lean): the calibrated probabilities
    // fall and the drafts stop.
    let mut cells_only = Recall::new(0.2);
    cells_only.learner.leans = false;
    let drafted = rounds_rejected(&mut cells_only, 300);
    assert!(
        drafted[..10].iter().all(|&d| d),
        "drafts at first: {:?}",
        &drafted[..10]
    );
    assert!(
        drafted[250..].iter().all(|&d| !d),
        "no drafts once calibrated"
    );
    // What the cells learned holds for every drafter on the memory: a new
    // session there does not draft the pattern, one on a new memory does.
    let history: Vec<Token> = [1, 2, 3].repeat(30);
    let mut on_it = Recall::with_memory(0.2, Arc::clone(cells_only.memory()), 1 << 20, false);
    on_it.begin(&history);
    assert!(draft(&mut on_it, &history, 1, 16).is_empty());
    let mut elsewhere = Recall::new(0.2);
    elsewhere.begin(&history);
    assert!(!draft(&mut elsewhere, &history, 1, 16).is_empty());
    // With its lean, a session stops sooner than its cells alone tell it.
    let leaning = rounds_rejected(&mut Recall::new(0.2), 300);
    let count = |d: &[bool]| d.iter().filter(|&&d| d).count();
    assert!(leaning[0] && leaning[250..].iter().all(|&d| !d));
    assert!(
        count(&leaning) < count(&drafted),
        "{} calls drafted with the lean, {} without",
        count(&leaning),
        count(&drafted)
    );
}

#[test]
fn odd_inputs_do_not_panic() {
    let mut r = Recall::new(f64::NAN);
    r.begin(&[]);
    assert!(draft(&mut r, &[], 0, 16).is_empty());
    r.accept(usize::MAX);
    let h: Vec<Token> = (0..300).map(|i| [u32::MAX, 0, 7][i % 3]).collect();
    r.begin(&h);
    for len in [300, 10, 0, 299, 1] {
        let d = draft(&mut r, &h[..len], u32::MAX, 16);
        r.accept(d.len());
    }
    assert!(r.stream_len() > 0);
}

#[test]
fn memory_scan_finds_what_a_token_by_token_walk_finds() {
    // A ring of 1024 tokens (the smallest), filled past its end so that the
    // held positions wrap and a scan crosses the ring's seam.
    let memory = RecallMemory::new(1);
    let tokens: Vec<Token> = (0u32..2500)
        .map(|i| [5, 9, u32::MAX][(i * 7 % 11 % 3) as usize])
        .collect();
    for part in tokens.chunks(100) {
        memory.append(part);
    }
    let mut snapshot = memory.snapshot();
    let view = memory.view(&mut snapshot);
    let (floor, end) = (view.floor(), view.end());
    assert!(floor > 0 && end - floor == 1024, "{floor}..{end}");
    for (from, to) in [
        (floor, end),
        (floor + 1, floor + 300),
        (end - 700, end - 1),
        (end, end),
    ] {
        for token in [5, 9, u32::MAX, 0] {
            let naive: Vec<u64> = (from..to).filter(|&p| view.token(p) == token).collect();
            let mut found = Vec::new();
            view.each_position_of(from, to, token, |p| found.push(p));
            assert_eq!(found, naive, "{from}..{to} token {token}");
        }
    }
}

/// A drop never waits for the writer lock: with another writer at work it
/// publishes nothing; `end_request` publishes, and a private memory's
/// drafter publishes only at a request's end (nothing in flight).
#[test]
fn drop_never_waits_and_end_request_publishes() {
    let memory = Arc::new(RecallMemory::new(1 << 20));
    let text: Vec<Token> = (0u32..300).map(|i| i * 7919 % 1000).collect();
    let engine_wide =
        |memory: &Arc<RecallMemory>| Recall::with_memory(0.13, Arc::clone(memory), 1 << 20, true);
    // Held lock: the drop returns (same thread: a blocking lock would
    // deadlock) and the memory has nothing new.
    let mut r = engine_wide(&memory);
    r.begin(&text);
    let before = memory.appended();
    {
        let _held = memory.hold_writer();
        drop(r);
    }
    assert_eq!(memory.appended(), before);
    // Free lock: a drop publishes what is left.
    let mut r = engine_wide(&memory);
    r.begin(&text);
    drop(r);
    assert!(memory.appended() > before);
    // end_request publishes, once.
    let mut r = engine_wide(&memory);
    let more: Vec<Token> = (0u32..200).map(|i| i * 31 % 997 + 2000).collect();
    r.begin(&more);
    let before = memory.appended();
    r.end_request();
    let after = memory.appended();
    assert!(after > before);
    r.end_request();
    drop(r);
    assert_eq!(memory.appended(), after);
    // A private memory: nothing published in flight.
    let private = Arc::new(RecallMemory::new(1 << 20));
    let mut r = Recall::with_memory(0.13, Arc::clone(&private), 1 << 20, false);
    r.begin(&text[..10]);
    let mut history = text[..10].to_vec();
    let mut out = Vec::new();
    for &t in &text[10..200] {
        out.clear();
        r.draft(&history, t, DraftLimits::default(), &mut out);
        history.push(t);
    }
    assert_eq!(private.appended(), 0);
    r.end_request();
    assert!(private.appended() >= 190);
}

/// An append that finds the writer lock taken counts its wait; one that
/// finds it free counts nothing.
#[test]
fn writer_waits_are_counted_on_the_writers_side() {
    let memory = Arc::new(RecallMemory::new(1 << 20));
    memory.append_after(&[], &[1, 2, 3]);
    assert_eq!(memory.waits().count, 0);
    let waiter = {
        let held = memory.hold_writer();
        let memory = Arc::clone(&memory);
        let started = Arc::new(std::sync::Barrier::new(2));
        let waiter = {
            let started = Arc::clone(&started);
            std::thread::spawn(move || {
                started.wait();
                memory.append_after(&[], &[4, 5, 6]);
            })
        };
        // Once running, the waiter reaches the lock in microseconds: long
        // before this sleep ends, even on a loaded machine.
        started.wait();
        std::thread::sleep(std::time::Duration::from_millis(50));
        drop(held);
        waiter
    };
    waiter.join().unwrap();
    let waits = memory.waits();
    assert_eq!(waits.count, 1);
    assert!(waits.longest_ns > 0 && waits.total_ns == waits.longest_ns);
}

/// Text made of `phrases` phrases of 2 to 20 tokens, picked at random, so
/// that contexts repeat at every order; a seeded LCG.
fn phrase_text(seed: u64, phrases: usize, len: usize) -> Vec<Token> {
    let mut state = seed;
    let mut next = move |n: u64| {
        state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (state >> 33) % n
    };
    let book: Vec<Vec<Token>> = (0..phrases)
        .map(|_| (0..2 + next(19)).map(|_| low32(next(500))).collect())
        .collect();
    let mut text = Vec::with_capacity(len + 20);
    while text.len() < len {
        text.extend_from_slice(&book[ix(next(wide(phrases)))]);
    }
    text.truncate(len);
    text
}

/// Starting a call's order search from the bound the last call left skips
/// only orders that cannot match: with a memory that does not change
/// between calls, the drafts are the same as with a search from the
/// longest order, request after request.
#[test]
fn the_order_bound_across_calls_changes_no_draft() {
    for (seed, phrases) in [(1, 8), (2, 40), (3, 300)] {
        let text = phrase_text(seed, phrases, 6000);
        let mut drafters = [true, false].map(|carry| {
            let mut r = Recall::new(0.13);
            r.carry_top = carry;
            // The bound may find a lower order with the same token, whose
            // cell differs: the drafts are the same, the lean may not be.
            r.learner.leans = false;
            r
        });
        let mut drafted = 0;
        // Three requests: each prompt is the history so far plus new text.
        for (prompt_end, end) in [(300, 2000), (2500, 4000), (4200, 6000)] {
            for r in &mut drafters {
                r.begin(&text[..prompt_end]);
            }
            let mut len = prompt_end;
            while len < end {
                let (history, last) = (&text[..len - 1], text[len - 1]);
                let drafts = drafters.each_mut().map(|r| draft(r, history, last, 16));
                assert_eq!(drafts[0], drafts[1], "seed {seed}, at {len}");
                let n = drafts[0]
                    .iter()
                    .zip(&text[len..])
                    .take_while(|(d, t)| d == t)
                    .count();
                if n > 0 {
                    for r in &mut drafters {
                        r.accept(n);
                    }
                }
                drafted += drafts[0].len();
                len += n + 1;
            }
            for r in &mut drafters {
                r.end_request();
            }
        }
        assert!(drafted > 1000, "seed {seed}: {drafted} drafted");
    }
}

/// A publication copies the tags the own index stored: the memory it
/// builds is the one that hashing the same tokens after the same context
/// builds, position by position, for ranges at the own index's floor, in
/// its middle, longer than the memory and after the own index forgot its
/// oldest half.
#[test]
fn publishing_from_the_own_index_builds_the_hashed_memory() {
    let text = phrase_text(7, 30, 5000);
    let hasher = Hasher::new();
    // (own capacity, memory budget, ranges published, as offsets from the floor)
    type Case<'a> = (usize, usize, &'a [(u64, u64)]);
    let cases: [Case; 3] = [
        (
            1 << 20,
            1 << 20,
            &[(0, 5), (5, 700), (700, 716), (2000, 4999)],
        ),
        (1 << 20, 1, &[(0, 3000), (3000, 3001), (4000, 5000)]),
        (1200, 1 << 20, &[(0, 10), (10, 600), (900, 1199)]),
    ];
    for (case, &(capacity, budget, ranges)) in cases.iter().enumerate() {
        let mut own = SeqIndex::new(capacity);
        for part in text.chunks(512) {
            own.extend(&hasher, part);
        }
        let copied = RecallMemory::new(budget);
        let hashed = RecallMemory::new(budget);
        let floor = own.floor();
        for &(a, b) in ranges {
            let (from, to) = (floor + a, (floor + b).min(own.end()));
            let range = copied.append_own(&own, from, to, true).unwrap();
            // What the hashed path is given: the (newest) tokens that fit,
            // after up to 16 tokens before them.
            let from = from.max(to.saturating_sub(wide(hashed.capacity())));
            let before = from - (from - floor).min(16);
            let held = own.tokens_from(before);
            let (context, tokens) = held[..ix(to - before)].split_at(ix(from - before));
            assert_eq!(
                hashed.append_after(context, tokens),
                range.start,
                "case {case}"
            );
            assert_eq!(range.end - range.start, wide(tokens.len()), "case {case}");
        }
        let (mut sc, mut sh) = (copied.snapshot(), hashed.snapshot());
        let (vc, vh) = (copied.view(&mut sc), hashed.view(&mut sh));
        assert_eq!(
            (vc.floor(), vc.end()),
            (vh.floor(), vh.end()),
            "case {case}"
        );
        assert!(vc.end() > vc.floor());
        for p in vc.floor()..vc.end() {
            assert_eq!(vc.token(p), vh.token(p), "case {case}, token at {p}");
            for o in 0..K {
                let (tag, previous) = vh.link(p, o);
                assert_eq!(
                    vc.link(p, o),
                    (tag, previous),
                    "case {case}, link {o} at {p}"
                );
                assert_eq!(vc.first(o, tag), vh.first(o, tag), "case {case}, head {o}");
            }
        }
        assert_eq!(copied.runs(), hashed.runs(), "case {case}");
    }
}

#[test]
fn an_export_from_any_position_is_every_local_run_after_it() {
    // Local and imported runs of varied lengths, interleaved, through a
    // memory that wraps: from every position, the export is each held
    // local run's part after it, with its context, and no imported token.
    for seed in 0..8u64 {
        let memory = RecallMemory::new(1);
        let text = phrase_text(seed, 20, 4000);
        // (start, end, imported, context) of every run appended.
        let mut runs: Vec<(u64, u64, bool, Vec<Token>)> = Vec::new();
        let (mut at, mut x) = (0usize, seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
        while at < text.len() {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let len = ix(1 + x % 150);
            let imported = x >> 40 & 3 == 0 || x >> 42 & 1 == 0;
            let tokens = &text[at..(at + len).min(text.len())];
            let context = text[at.saturating_sub(16)..at].to_vec();
            let start = memory.appended();
            if imported {
                memory.import_run(&context, tokens);
            } else {
                memory.append_after(&context, tokens);
            }
            runs.push((start, memory.appended(), imported, context));
            at += len;
        }
        let end = memory.appended();
        let floor = end - wide(memory.len());
        assert!(floor > 0, "seed {seed}: the memory wrapped");
        let mut froms: Vec<u64> = runs.iter().flat_map(|r| [r.0, r.0 + 1, r.1 - 1]).collect();
        froms.extend([0, floor, end, end + 5]);
        for from in froms {
            let mut expected = Vec::new();
            for (start, run_end, imported, context) in &runs {
                let s = (*start).max(floor).max(from);
                if *imported || s >= *run_end {
                    continue;
                }
                let context = if s == *start {
                    RunContext::new(context)
                } else {
                    let k = (s - floor.max(*start)).min(16);
                    RunContext::new(&text[ix(s - k)..ix(s)])
                };
                expected.push((context, text[ix(s)..ix(*run_end)].to_vec()));
            }
            assert_eq!(
                memory.runs_since(from),
                (expected, end),
                "seed {seed}, from {from}"
            );
        }
    }
}

#[test]
fn a_draft_call_leaves_a_large_growth_of_the_runs_to_a_request_end() {
    let memory = RecallMemory::new(96 << 20);
    let text = phrase_text(3, 20, 20_000);
    // Runs of one token each, until their deque is full at 4096 or more.
    for (i, &t) in text.iter().enumerate() {
        memory.append(&[t]);
        let (len, room) = memory.runs_room();
        if len == room && len >= 4096 {
            break;
        }
        assert!(i < 10_000, "the deque filled up");
    }
    let (len, room) = memory.runs_room();
    let hasher = Hasher::new();
    let mut own = SeqIndex::new(1 << 16);
    own.extend(&hasher, &text[..200]);
    // In flight: nothing appended, nothing moved.
    assert_eq!(memory.append_own(&own, 100, 150, false), None);
    assert_eq!(memory.runs_room(), (len, room));
    // At a request's end: appended, the deque grown.
    let end = memory.appended();
    assert_eq!(
        memory.append_own(&own, 100, 150, true),
        Some(Span {
            start: end,
            end: end + 50
        })
    );
    let (after, grown) = memory.runs_room();
    assert_eq!(after, len + 1);
    assert!(grown > room);
    // And in flight again, now that there is room.
    assert!(memory.append_own(&own, 150, 200, false).is_some());
}

#[test]
fn a_draft_call_never_waits_for_the_selector_weights() {
    let memory = Arc::new(RecallMemory::new(1 << 20));
    let text = phrase_text(5, 30, 3000);
    let mut r = Recall::with_memory(0.13, Arc::clone(&memory), 1 << 20, true);
    r.begin(&text[..100]);
    let mut at = 100;
    let mut step = |r: &mut Recall| {
        let (_, n) = greedy_step(r, &text[..at], text[at], &text[at + 1..]);
        at += 1 + n;
    };
    let before = memory.learned().lock().unwrap().weights;
    {
        // Same thread: a draft call that waited for the lock would deadlock.
        let _held = memory.hold_learned();
        for _ in 0..200 {
            step(&mut r);
        }
    }
    assert_eq!(memory.learned().lock().unwrap().weights, before);
    // What it learned meanwhile reaches the engine at the next sync.
    for _ in 0..SYNC_EVERY {
        step(&mut r);
    }
    assert_ne!(memory.learned().lock().unwrap().weights, before);
}

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
    let _ = rounds_rejected(&mut r, 30);
    assert!(r.learner.lean().odds() < 1.0);
    // A prompt that keeps nothing of the history: a new session.
    let other: Vec<Token> = (100..400).collect();
    r.begin(&other);
    assert_eq!(r.learner.lean().odds(), 1.0);
}

/// One draft call verified greedily against `truth` (the tokens after
/// `last`), its accepted prefix reported: (drafted, accepted).
fn greedy_step(r: &mut Recall, history: &[Token], last: Token, truth: &[Token]) -> (usize, usize) {
    let d = draft(r, history, last, 16);
    let n = d.iter().zip(truth).take_while(|(a, b)| a == b).count();
    if n > 0 {
        r.accept(n);
    }
    (d.len(), n)
}

/// (forward passes, drafted tokens, accepted tokens) of one request under
/// greedy verification.
fn greedy_request(r: &mut Recall, prompt: &[Token], output: &[Token]) -> (usize, usize, usize) {
    let mut history = prompt.to_vec();
    r.begin(&history);
    let (mut i, mut passes, mut drafted, mut accepted) = (0, 0, 0, 0);
    while i < output.len() {
        let last = output[i];
        let (d, n) = greedy_step(r, &history, last, &output[i + 1..]);
        history.push(last);
        history.extend_from_slice(&output[i + 1..i + 1 + n]);
        (drafted, accepted) = (drafted + d, accepted + n);
        i += n + 1;
        passes += 1;
    }
    r.end_request();
    (passes, drafted, accepted)
}

/// The purpose of the lean: on a memory whose cells were trained by other
/// traffic, a session more predictable than that drafts longer than the
/// cells alone let it (fewer forward passes), and a less predictable one
/// shorter (fewer wasted tokens).
#[test]
fn a_session_leans_away_from_what_other_traffic_taught_the_cells() {
    // A session of text from a book of `phrases` phrases, after six sessions
    // from books of `other` phrases, with its lean or with it held at 0.
    let session = |phrases: usize, other: usize, leans: bool| {
        let memory = Arc::new(RecallMemory::new(1 << 24));
        let mut before = Recall::with_memory(0.13, Arc::clone(&memory), 1 << 22, false);
        for s in 0..6 {
            let text = phrase_text(100 + s, other, 3000);
            greedy_request(&mut before, &text[..1000], &text[1000..]);
        }
        let mut r = Recall::with_memory(0.13, memory, 1 << 22, false);
        r.learner.leans = leans;
        let text = phrase_text(1, phrases, 4000);
        let figures = greedy_request(&mut r, &text[..1000], &text[1000..]);
        (figures, r.learner.lean().odds())
    };
    let acceptance =
        |(_, drafted, accepted): (usize, usize, usize)| accepted as f64 / drafted as f64;
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
