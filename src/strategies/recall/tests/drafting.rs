//! Drafting: copies, calibration from rejections, odd inputs, the order
//! search across calls.

use super::*;

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

#[test]
fn calibration_learns_from_rejections() {
    // The engine-wide cells alone (no lean): the calibrated probabilities
    // fall and the drafts stop.
    let mut cells_only = Recall::new(0.2);
    let no_lean = Mode {
        lean: false,
        ..SHIPPED
    };
    let drafted = rounds_rejected(no_lean, &mut cells_only, 300);
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
    let leaning = rounds_rejected(SHIPPED, &mut Recall::new(0.2), 300);
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

/// Starting a call's order search from the bound the last call left skips
/// only orders that cannot match: with a memory that does not change
/// between calls, the drafts are the same as with a search from the
/// longest order, request after request.
#[test]
fn the_order_bound_across_calls_changes_no_draft() {
    for (seed, phrases) in [(1, 8), (2, 40), (3, 300)] {
        let text = phrase_text(seed, phrases, 6000);
        // The bound may find a lower order with the same token, whose
        // cell differs: the drafts are the same, the lean may not be.
        let modes = [true, false].map(|carry_top| Mode {
            lean: false,
            carry_top,
        });
        let mut drafters = modes.map(|_| Recall::new(0.13));
        let mut drafted = 0;
        // Three requests: each prompt is the history so far plus new text.
        for (prompt_end, end) in [(300, 2000), (2500, 4000), (4200, 6000)] {
            for r in &mut drafters {
                r.begin(&text[..prompt_end]);
            }
            let mut len = prompt_end;
            while len < end {
                let (history, last) = (&text[..len - 1], text[len - 1]);
                let drafts: Vec<Vec<Token>> = modes
                    .iter()
                    .zip(&mut drafters)
                    .map(|(&mode, r)| draft_in(mode, r, history, last, 16))
                    .collect();
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
