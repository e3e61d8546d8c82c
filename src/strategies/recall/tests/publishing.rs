//! The engine-wide memory seen from a drafter: scans, publishing (when,
//! from where, without waiting), exports and the runs kept for them.

use super::*;

#[test]
fn memory_scan_finds_what_a_token_by_token_walk_finds() {
    // A ring of 1024 tokens (the smallest), filled past its end so that the
    // held positions wrap and a scan crosses the ring's seam.
    let memory = RecallMemory::new(1);
    let tokens: Vec<Token> = (0usize..2500)
        .map(|i| [5, 9, u32::MAX][i * 7 % 11 % 3])
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
        let (_, n) = greedy_step(SHIPPED, r, &text[..at], text[at], &text[at + 1..]);
        at += 1 + n;
    };
    let before = memory.learned().lock().unwrap().weights;
    {
        // Same thread: a draft call that waited for the lock would deadlock.
        let _held = memory.learned().lock().unwrap();
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
