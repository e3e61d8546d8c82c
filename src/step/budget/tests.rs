//! The budget's choices as tables of cases, on pass times with a
//! fixed cost and a cost per row.

use super::*;

const WHOLE: Split = Split::Whole { ubatch: 512 };
const RUNS: Split = Split::EqualRuns { ubatch: 512 };

fn ms(x: f64) -> Duration {
    Duration::from_secs_f64(x / 1000.0)
}

/// A budget whose computations cost `fixed + per_row * rows` ms.
fn budget(fixed: f64, per_row: f64) -> Budget {
    let mut times = PassTimes::new();
    for rows in [1, 2, 4, 8, 16, 32, 64] {
        times.record(rows, 1, ms(fixed + per_row * float(rows)));
    }
    let mut b = Budget::new(times, 4, 64);
    for _ in 0..10 {
        for x in [
            [1.0, 1.0, 0.0, 0.0, 0.0],
            [1.0, 8.0, 0.0, 0.0, 0.0],
            [2.0, 9.0, 1.0, 0.0, 0.0],
            [1.0, 16.0, 8.0, 0.0, 0.0],
        ] {
            let t = ms(fixed * x[0] + per_row * x[1]).as_secs_f64();
            b.split_times.record(x, t);
        }
    }
    b
}

/// Adds decoding sequences with these drafts (room for 16 rows each).
fn drafts(b: &mut Budget, drafts: &[&[f64]]) {
    b.clear(16);
    for (s, p) in drafts.iter().enumerate() {
        b.slots.push(Slot {
            base: 1,
            room: Some(16),
            ..Slot::default()
        });
        b.add(crate::int::small(s), p);
    }
}

#[test]
fn chooses_as_a_table() {
    /// (fixed ms, per-row ms, split, each sequence's acceptance,
    /// expected rows, expected level)
    type Case<'a> = (f64, f64, Split, &'a [&'a [f64]], usize, usize);
    let eight: &[&[f64]] = &[&[0.95, 0.95], &[0.2], &[], &[], &[], &[], &[], &[]];
    let cases: &[Case] = &[
        // Rows almost free (a GPU at batch 1): take every likely token.
        (10.0, 0.01, WHOLE, &[&[0.9, 0.9, 0.9, 0.9]], 4, 0),
        // Rows as dear as a pass: nothing pays.
        (0.0, 1.0, WHOLE, &[&[0.9, 0.9]], 0, 0),
        // Middle: the sure tokens only.
        (10.0, 2.0, WHOLE, &[&[0.99, 0.99, 0.3, 0.3]], 2, 0),
        // A full batch: rows cost more per sequence; the best draft wins.
        (10.0, 1.0, WHOLE, eight, 2, 0),
        // The same batch split by sequence runs: one sequence's draft
        // is a computation of its own, and does not pay.
        (10.0, 1.0, RUNS, eight, 0, 0),
        // Every sequence with a sure draft: all at one length, whole.
        (
            10.0,
            1.0,
            RUNS,
            &[&[0.99, 0.99], &[0.99, 0.99], &[0.99]],
            0,
            2,
        ),
        // Split by sequence, each alone: a draft pays for itself.
        (10.0, 1.0, Split::PerSequence, &[&[0.99], &[]], 1, 0),
    ];
    for (i, &(fixed, per_row, split, d, rows, level)) in cases.iter().enumerate() {
        let mut b = budget(fixed, per_row);
        drafts(&mut b, d);
        let c = b.choose(split).unwrap();
        assert_eq!((c.rows, c.level), (rows, level), "case {i}: {c:?}");
        let want = expected_tokens(d, rows, level);
        assert!((c.tokens - want).abs() < 1e-9, "case {i}: {c:?}, {want}");
    }
}

/// The tokens a plan gives by the naive rule: one a sequence, and each
/// draft row's chance that its draft is accepted up to it: the `rows`
/// likeliest of all, or the first `level` of each draft.
fn expected_tokens(drafts: &[&[f64]], rows: usize, level: usize) -> f64 {
    let prefixes = |p: &[f64]| {
        p.iter()
            .scan(1.0, |q, &x| {
                *q *= x;
                Some(*q)
            })
            .collect::<Vec<f64>>()
    };
    let sent: f64 = if level > 0 {
        drafts
            .iter()
            .flat_map(|p| prefixes(p).into_iter().take(level))
            .sum()
    } else {
        let mut all: Vec<f64> = drafts.iter().flat_map(|p| prefixes(p)).collect();
        all.sort_by(|a, b| b.total_cmp(a));
        all[..rows].iter().sum()
    };
    float(drafts.len()) + sent
}

#[test]
fn a_prompt_chunk_does_not_make_drafts_cheap() {
    // Rows cost 2 ms beside a 10 ms pass: a drafted token pays at an
    // acceptance of 1/6 beside one decoding row, at 1/38 beside a
    // 32-row prompt chunk too if the chunk's time counted.
    let cases: [(usize, &[f64], usize); 4] = [
        (0, &[0.1], 0),
        (32, &[0.1], 0),
        (0, &[0.99, 0.99], 2),
        (32, &[0.99, 0.99], 2),
    ];
    for (chunk, draft, rows) in cases {
        let mut b = budget(10.0, 2.0);
        drafts(&mut b, &[draft]);
        b.slots.push(Slot {
            base: chunk,
            ..Slot::default()
        });
        let c = b.choose(WHOLE).unwrap();
        assert_eq!(c.rows, rows, "chunk {chunk}, draft {draft:?}: {c:?}");
    }
}

#[test]
fn a_dear_second_row_does_not_price_out_longer_drafts() {
    // A CPU at one sequence: the second row of a pass costs 90% of a
    // pass, the next few little; only passes of 1 and 2 rows measured.
    let mut times = PassTimes::new();
    times.record(1, 1, ms(28.0));
    times.record(2, 1, ms(53.0));
    let mut b = Budget::new(times, 4, 64);
    drafts(&mut b, &[&[0.95; 8]]);
    let c = b.choose(WHOLE).unwrap();
    assert!(c.rows > 2, "{c:?}");
}

#[test]
fn nothing_measured_sends_no_draft() {
    let mut b = Budget::new(PassTimes::new(), 4, 64);
    drafts(&mut b, &[&[0.9]]);
    assert_eq!(b.choose(WHOLE).map(|c| c.rows), Some(0));
}

#[test]
fn the_break_even_follows_the_row_cost() {
    let mut cheap = budget(10.0, 0.1);
    let mut dear = budget(10.0, 2.0);
    drafts(&mut cheap, &[&[]]);
    drafts(&mut dear, &[&[]]);
    let (cheap, dear) = (cheap.choose(WHOLE).unwrap(), dear.choose(WHOLE).unwrap());
    assert!(cheap.break_even < dear.break_even, "{cheap:?} vs {dear:?}");
}

#[test]
fn the_drafters_stop_where_a_row_of_a_sent_draft_stops_paying() {
    // Computations of 10 ms and 1 ms a row. Where a pass splits by
    // sequence, a draft's first row opens a computation (11 ms): priced
    // into the drafters' stopping point, it would stop every draft
    // before the rows that pay for it. Its next rows cost 1 ms each,
    // beside four sequences' 4 tokens in 14 ms: break-even 4/14 (each
    // sequence a computation: 4 tokens in 44 ms).
    // (split, each sequence's draft, expected break-even)
    let four: &[&[f64]] = &[&[0.05], &[], &[], &[]];
    let cases: &[(Split, &[&[f64]], f64)] = &[
        (RUNS, four, 4.0 / 14.0),
        (WHOLE, four, 4.0 / 14.0),
        (Split::PerSequence, four, 4.0 / 44.0),
    ];
    for (i, &(split, d, want)) in cases.iter().enumerate() {
        let mut b = budget(10.0, 1.0);
        drafts(&mut b, d);
        let c = b.choose(split).unwrap();
        assert_eq!(c.rows, 0, "case {i}: {c:?}");
        assert!(
            (c.break_even - want).abs() < 0.02,
            "case {i}: {c:?}, {want}"
        );
    }
}

#[test]
fn a_gap_is_weighed_filled() {
    // Computations of 10 ms and 1 ms a row, split by sequence runs, an
    // idle sequence between decoding ones. The pass without drafts is sent
    // with a filler row there: one computation, 3 tokens in 14 ms. A
    // draft of two likely tokens (two computations, 4.71 tokens in 25 ms)
    // pays only beside the gap left open (two computations, 3 in 23 ms).
    // (the idle sequence is fillable, each decoding sequence's draft,
    // expected rows, fillers)
    let likely: &[&[f64]] = &[&[0.9, 0.9], &[], &[]];
    let sure: &[&[f64]] = &[&[0.99; 8], &[0.99; 8], &[0.99; 8]];
    let cases: &[(bool, &[&[f64]], usize, usize)] = &[
        (true, likely, 0, 1),
        (false, likely, 2, 0),
        (true, &[&[], &[], &[]], 0, 1),
        (true, sure, 0, 0),
    ];
    for (i, &(fillable, d, rows, fillers)) in cases.iter().enumerate() {
        let mut b = budget(10.0, 1.0);
        drafts(&mut b, d);
        let idle = Slot {
            fillable,
            ..Slot::default()
        };
        b.slots.insert(1, idle);
        for c in &mut b.candidates {
            c.seq += u32::from(c.seq >= 1);
        }
        let c = b.choose(RUNS).unwrap();
        b.fill_gaps(RUNS, c);
        let filled = b.fill.iter().filter(|&&f| f).count();
        assert_eq!((c.rows, filled), (rows, fillers), "case {i}: {c:?}");
    }
}
