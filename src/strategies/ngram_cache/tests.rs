//! Unit tests of the tables, followers, bulk learning, files and drafter.

use crate::int::{float, wide};
use std::path::PathBuf;

use super::drafter::{winner, NgramCache};
use super::followers::INDEXED_PART;
use super::table::{LookupCache, Recent};
use super::{hash_of, key_of, Key, NGRAM_SIZES};
use crate::drafter::{DraftLimits, Drafter};
use crate::index::Idx;
use crate::token::Token;
use crate::Error;

/// A one-key cache with `followers` added in order, and that key.
fn cache_of(followers: &[(Token, i32)]) -> (LookupCache, Key) {
    let key = key_of(&[1, 2]);
    let mut cache = LookupCache::new();
    for &(t, c) in followers {
        cache.add(&key, hash_of(&key), t, c);
    }
    (cache, key)
}

#[test]
fn ties_go_to_the_newest_follower() {
    let cases: &[(&[(Token, i32)], Token)] = &[
        (&[(5, 1)], 5),
        (&[(5, 1), (7, 1)], 7),
        (&[(5, 1), (7, 1), (5, 1)], 5),
        (&[(5, 1), (7, 1), (5, 1), (7, 1)], 7),
        (&[(5, 3), (7, 1), (9, 3)], 9),
    ];
    for &(followers, want) in cases {
        let (cache, key) = cache_of(followers);
        let part = cache.part(&key).unwrap();
        assert_eq!(part.token(winner(part, None)), want, "{followers:?}");
    }
}

#[test]
fn counts_survive_a_part_growing_past_the_indexed_size() {
    // Sixteen followers, the last counted up while it wins (its count in
    // the entry, its slot stale), then a seventeenth moves the part's
    // counts into the index, winning or not, and later winners change.
    let base: Vec<(Token, i32)> = (0..16).map(|t| (t, 1)).chain([(15, 3)]).collect();
    let cases: &[(&[(Token, i32)], Token)] = &[
        (&[(16, 10)], 16),
        (&[(16, 2)], 15),
        (&[(16, 10), (0, 20)], 0),
        (&[(16, 2), (16, 2), (3, 1)], 16),
    ];
    for &(more, want) in cases {
        let adds: Vec<(Token, i32)> = base.iter().chain(more).copied().collect();
        let (cache, key) = cache_of(&adds);
        let mut naive: Vec<(Token, i32)> = Vec::new();
        for &(t, c) in &adds {
            match naive.iter_mut().find(|f| f.0 == t) {
                Some(f) => f.1 += c,
                None => naive.push((t, c)),
            }
        }
        let part = cache.part(&key).unwrap();
        assert!(part.len() > INDEXED_PART);
        assert_eq!(part.iter().collect::<Vec<_>>(), naive, "{more:?}");
        assert_eq!(part.token(winner(part, None)), want, "{more:?}");
    }
}

#[test]
fn static_weights_decide_and_match_a_scan() {
    // Large parts take the indexed path; compare it with a plain scan.
    let many: Vec<(Token, i32)> = (0..40)
        .map(|t| (t, 1 + i32::try_from(t % 7).unwrap()))
        .collect();
    let (cache, key) = cache_of(&many);
    let part = cache.part(&key).unwrap();
    assert!(part.len() > INDEXED_PART);
    for weighted in [
        vec![(3u32, 1i32)],
        vec![(6, 1), (13, 1)],
        vec![(99, 4)],
        vec![(20, 1), (27, 2)],
    ] {
        let (statics, skey) = cache_of(&weighted);
        let ps = statics.part(&skey).unwrap();
        let scan = part
            .iter()
            .enumerate()
            .map(|(i, (t, c))| {
                (
                    i64::from(c) * ps.find(t).map_or(1, |j| 100 * i64::from(ps.count(j))),
                    i,
                )
            })
            .max()
            .unwrap()
            .1;
        assert_eq!(winner(part, Some(ps)), scan);
    }
}

#[test]
fn bulk_learning_equals_token_by_token() {
    // Small alphabets (many ties, parts past INDEXED_PART) and a large one
    // (top-bit collisions between keys in the radix sort), every size.
    for (alphabet, len) in [(3u64, 3000), (40, 5000), (100_000, 4000)] {
        let mut rng = 0x2545_f491_4f6c_dd1du64;
        let corpus: Vec<Token> = (0..len)
            .map(|_| {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                Token::try_from(rng % alphabet).unwrap()
            })
            .collect();
        for size in NGRAM_SIZES {
            let mut bulk = LookupCache::new();
            bulk.update_bulk(&corpus, size, size);
            let mut single = LookupCache::new();
            for end in 1..=corpus.len() {
                single.update(&corpus[..end], size..=size, 1);
            }
            // Same n-grams, followers, counts and orders.
            assert!(
                bulk.to_bytes() == single.to_bytes(),
                "alphabet {alphabet}, size {size}"
            );
            for (key, _) in single.iter() {
                let (a, b) = (
                    bulk.part(&key_of(key)).unwrap(),
                    single.part(&key_of(key)).unwrap(),
                );
                assert_eq!(
                    (a.best, a.sum),
                    (b.best, b.sum),
                    "alphabet {alphabet}, key {key:?}"
                );
                // The winner is the newest of the highest counts.
                let counts: Vec<i32> = b.iter().map(|(_, c)| c).collect();
                let max = counts.iter().max().copied();
                let newest = counts.iter().rposition(|&c| Some(c) == max);
                assert_eq!(Some(b.best()), newest, "key {key:?}");
                // The entry keeps the winner in step with the part.
                let (t, c) = (a.token(a.best()), a.count(a.best()));
                let want = Some((t, c, a.sum));
                for cache in [&bulk, &single] {
                    let top = cache.find(&key_of(key)).map(|i| cache.top(i));
                    assert_eq!(top, want, "key {key:?}");
                }
            }
        }
    }
}

/// A text whose second half repeats passages of its first.
fn repetitive(len: usize) -> Vec<Token> {
    let mut rng = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = |n: usize| {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        usize::try_from(rng % wide(n)).unwrap()
    };
    let mut text: Vec<Token> = (0..len / 2)
        .map(|_| Token::try_from(next(50)).unwrap())
        .collect();
    while text.len() < len {
        let start = next(len / 2 - 40);
        text.extend_from_within(start..start + 5 + next(30));
    }
    text
}

#[test]
fn successor_guesses_find_repeated_passages() {
    let text = repetitive(4000);
    let mut cache = LookupCache::new();
    // Learned in call-sized steps, as a drafter does.
    for end in (8..=text.len()).step_by(8) {
        cache.update(&text[..end], NGRAM_SIZES, 8);
    }
    // Walking the text again, each n-gram's entry is mostly the guess of
    // the one before it, and a guess is never taken for a wrong key.
    for size in [2, 3, 4] {
        let (mut guessed, mut prev) = (0, Idx::NONE);
        for i in size..text.len() {
            let key = key_of(&text[i - size..i]);
            let i = cache.find(&key).expect("every n-gram is learned");
            match cache.find_next(prev, &key) {
                Some(j) => {
                    assert_eq!(j, i, "size {size}");
                    guessed += 1;
                }
                None => assert_ne!(cache.entries.get(prev.as_usize()).map(|e| e.next), Some(i)),
            }
            prev = i;
        }
        let share = float(guessed) / float(text.len() - size);
        assert!(share > 0.5, "size {size}: {share:.2} guessed");
    }
}

#[test]
fn wrong_guesses_change_no_draft() {
    let text = repetitive(3000);
    let learn = |cache: &mut NgramCache| {
        let mut draft = Vec::new();
        cache.draft(
            &text[..2000],
            text[2000],
            DraftLimits::default(),
            &mut draft,
        );
    };
    let (mut right, mut wrong) = (NgramCache::new(), NgramCache::new());
    learn(&mut right);
    learn(&mut wrong);
    // Every guess points at some other entry.
    let n = u32::try_from(wrong.context.entries.len()).unwrap();
    for (e, i) in wrong.context.entries.iter_mut().zip(0u32..) {
        e.next = Idx::from_u32((i * 7919 + 13) % n);
    }
    wrong.context.recent = Recent([0, 1, 2, 3].map(Idx::from_u32));
    let (mut a, mut b) = (Vec::new(), Vec::new());
    for pos in 2001..text.len() {
        a.clear();
        b.clear();
        right.draft(&text[..pos], text[pos], DraftLimits::default(), &mut a);
        wrong.draft(&text[..pos], text[pos], DraftLimits::default(), &mut b);
        assert_eq!(a, b, "at {pos}");
    }
}

#[test]
fn table_grows_and_finds_every_key() {
    // Keys that share their home slot's low bits, past several growths.
    let mut cache = LookupCache::new();
    let keys: Vec<Key> = (0..5000u32).map(|i| key_of(&[i % 7, i / 7, 3])).collect();
    for (key, n) in keys.iter().zip(0..) {
        cache.add(key, hash_of(key), n, 1);
        cache.add(key, hash_of(key), n + 1, 2);
    }
    assert_eq!(cache.len(), keys.len());
    for (key, n) in keys.iter().zip(0..) {
        let part = cache.part(key).unwrap();
        let followers: Vec<_> = part.iter().collect();
        assert_eq!(followers, [(n, 1), (n + 1, 2)]);
        assert_eq!(part.sum, 3);
    }
    assert!(cache.part(&key_of(&[9, 9, 9, 9])).is_none());
    assert!(LookupCache::new().part(&key_of(&[1])).is_none());
}

#[test]
fn bad_files_are_typed_errors() {
    let mut good = Vec::new();
    for w in [1i32, 2, -1, -1, 1, 9, 3] {
        good.extend_from_slice(&w.to_le_bytes());
    }
    assert_eq!(
        LookupCache::from_bytes(&good, "f")
            .unwrap()
            .followers(&[1, 2])
            .unwrap(),
        [(9, 3)]
    );
    // A trailing fragment shorter than a key is ignored.
    let mut tail = good.clone();
    tail.extend_from_slice(&[1, 2, 3]);
    assert!(LookupCache::from_bytes(&tail, "f").is_ok());
    let cases: &[(usize, &[u8], u64)] = &[
        (16, &0i32.to_le_bytes(), 16), // n = 0
        (24, &0i32.to_le_bytes(), 24), // count = 0
        (24, &(-3i32).to_le_bytes(), 24),
    ];
    for &(at, bytes, offset) in cases {
        let mut bad = good.clone();
        bad[at..at + 4].copy_from_slice(bytes);
        match LookupCache::from_bytes(&bad, "f") {
            Err(Error::CacheFile {
                offset: o, path, ..
            }) => {
                assert_eq!((o, path), (offset, PathBuf::from("f")));
            }
            other => panic!("{other:?}"),
        }
    }
    // Truncated: the key and count are there, a follower is cut short.
    match LookupCache::from_bytes(&good[..good.len() - 2], "f") {
        Err(Error::CacheFile {
            offset, problem, ..
        }) => {
            assert_eq!(offset, 20);
            assert!(problem.to_string().contains("truncated"), "{problem}");
            assert!(
                matches!(problem, crate::CacheFileProblem::Truncated { .. }),
                "{problem:?}"
            );
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn the_live_budget_changes_no_draft_before_the_first_retirement() {
    // Unrelated sessions through a small budget and an unbounded one: the
    // same drafts until the bounded one retires its first generation, and
    // memory that stops growing after.
    let budget = 20_000;
    let (mut bounded, mut unbounded) = (
        NgramCache::new().with_budget(budget),
        NgramCache::new().with_budget(usize::MAX),
    );
    let mut rng = 0x2545_f491_4f6c_dd1du64;
    let mut next = move || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    let (mut learned, mut peak_late, mut peak_early, mut drafted) = (0, 0, 0, 0);
    let (mut a, mut b) = (Vec::new(), Vec::new());
    for session in 0..600 {
        // Random text with repeats inside the session, so that some drafts
        // are non-empty.
        let mut text: Vec<Token> = (0..100).map(|_| (next() % 500) as Token).collect();
        text.extend_from_within(20..80);
        for pos in 50..text.len() {
            a.clear();
            b.clear();
            bounded.draft(&text[..pos], text[pos], DraftLimits::default(), &mut a);
            unbounded.draft(&text[..pos], text[pos], DraftLimits::default(), &mut b);
            if learned + pos < budget / 2 {
                assert_eq!(a, b, "session {session} at {pos}");
                drafted += a.len();
            }
        }
        learned += text.len();
        let bytes = bounded.heap_bytes();
        if session < 300 {
            peak_early = peak_early.max(bytes);
        } else {
            peak_late = peak_late.max(bytes);
        }
    }
    assert!(learned > 4 * budget && drafted > 1000, "{drafted}");
    assert!(
        peak_late <= peak_early * 5 / 4,
        "{peak_early} -> {peak_late}"
    );
    assert!(unbounded.heap_bytes() > 2 * peak_late);
}

#[test]
fn learning_drafters_take_the_same_call_twice_as_once() {
    // An engine may ask again for the same position (a retried step): the
    // learning modes must not count `last` twice.
    let text: Vec<Token> = (0u32..400).map(|i| i * 7919 % 61).collect();
    let limits = DraftLimits { min: 0, max: 8 };
    for make in [
        || NgramCache::new().live(),
        || NgramCache::new().relearn_prompts(),
    ] {
        let (mut once, mut twice) = (make(), make());
        for len in [100, 101, 150, 151, 300] {
            let (history, last) = (&text[..len], text[len]);
            let mut a = Vec::new();
            let mut b = Vec::new();
            once.draft(history, last, limits, &mut a);
            twice.draft(history, last, limits, &mut b);
            b.clear();
            twice.draft(history, last, limits, &mut b);
            assert_eq!(a, b, "{} at {len}", once.name());
            assert_eq!(
                once.cache_size(),
                twice.cache_size(),
                "{} at {len}",
                once.name()
            );
            assert_eq!(once.context().heap_bytes(), twice.context().heap_bytes());
        }
    }
}
