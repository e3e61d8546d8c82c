//! llama.cpp cache files: byte-compatible reading and writing, round trips,
//! building from a corpus, merging, and typed errors for broken files.

#[path = "../../tests/common/mod.rs"]
mod common;

use selfspec::strategies::{LookupCache, NgramCache};
use selfspec::{Config, Error, Speculative, Strategy};

fn golden(name: &str) -> std::path::PathBuf {
    // The golden files stay with the root package's golden traces.
    common::manifest_path(&format!("../tests/golden/ngram-cache/{name}"))
}

#[test]
fn golden_files_load_save_and_load_again_equal() {
    for (name, ngrams) in [("static-mix.bin", 8712), ("dynamic-mix.bin", 7742)] {
        let bytes = std::fs::read(golden(name)).unwrap();
        let cache = LookupCache::load(golden(name)).unwrap();
        assert_eq!(
            cache.len(),
            ngrams,
            "{name}: the golden README's n-gram count"
        );
        let saved = cache.to_bytes();
        // Same records, in insertion (= file) order: the very same bytes.
        assert_eq!(saved.len(), bytes.len(), "{name}");
        assert_eq!(saved, bytes, "{name}: saved in file order");
        let dir = std::env::temp_dir().join(format!("selfspec-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(name);
        cache.save(&path).unwrap();
        assert_eq!(LookupCache::load(&path).unwrap(), cache);
        std::fs::remove_file(&path).ok();
    }
}

#[test]
fn build_save_load_round_trip_and_merge() {
    let corpus: Vec<u32> = (0..5000u32).map(|i| (i * 7919 % 97) ^ (i % 5)).collect();
    for (sizes, ngrams_counted) in [(2..=2, corpus.len() - 2), (1..=4, 4 * corpus.len() - 10)] {
        let cache = LookupCache::from_tokens(&corpus, sizes.clone());
        // Every n-gram with a follower is counted once.
        let total: usize = cache
            .iter()
            .flat_map(|(_, f)| f.map(|(_, c)| usize::try_from(c).unwrap()))
            .sum();
        assert_eq!(total, ngrams_counted, "{sizes:?}");
        let again = LookupCache::from_bytes(&cache.to_bytes(), "memory").unwrap();
        assert_eq!(again, cache, "{sizes:?}");
    }
    // Merging the caches of two halves gives the whole's counts, except the
    // two 2-grams whose follower lies just after the cut.
    let (a, b) = corpus.split_at(2500);
    let mut merged = LookupCache::from_tokens(a, 2..=2);
    merged.merge(&LookupCache::from_tokens(b, 2..=2));
    let whole = LookupCache::from_tokens(&corpus, 2..=2);
    let count = |c: &LookupCache, key: &[u32], t: u32| {
        c.followers(key)
            .and_then(|f| f.iter().find(|&&(x, _)| x == t).map(|&(_, n)| n))
            .unwrap_or(0)
    };
    let mut missing = 0;
    for i in 2..corpus.len() {
        let (key, t) = (&corpus[i - 2..i], corpus[i]);
        let gap = count(&whole, key, t) - count(&merged, key, t);
        if i == 2500 || i == 2501 {
            missing += gap;
        } else {
            // The same (2-gram, follower) pairs as the two at the cut lose one too.
            let at_cut = |j: usize| corpus[i - 2..i] == corpus[j - 2..j] && t == corpus[j];
            if at_cut(2500) || at_cut(2501) {
                continue;
            }
            assert_eq!(gap, 0, "2-gram at {i}");
        }
    }
    assert_eq!(missing, 2);
}

#[test]
fn broken_files_are_typed_errors_from_speculative_new() {
    let dir = std::env::temp_dir().join(format!("selfspec-broken-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let good = std::fs::read(golden("static-mix.bin")).unwrap();
    let truncated = dir.join("truncated.bin");
    std::fs::write(&truncated, &good[..good.len() - 3]).unwrap();
    let missing = dir.join("missing.bin");
    for (path, want_offset) in [(&truncated, None), (&missing, Some(0))] {
        let config = Config::new([Strategy::NgramCache {
            static_cache: Some(path.clone()),
            dynamic_cache: None,
        }]);
        match Speculative::new(&config) {
            Err(Error::CacheFile {
                path: p,
                offset,
                problem,
            }) => {
                assert_eq!(&p, path);
                if let Some(o) = want_offset {
                    assert_eq!(offset, o);
                } else {
                    assert!(
                        offset > 0 && problem.to_string().contains("truncated"),
                        "{offset} {problem}"
                    );
                }
                let msg = Error::CacheFile {
                    path: p,
                    offset,
                    problem,
                }
                .to_string();
                assert!(
                    msg.contains(&path.display().to_string()) && msg.contains("byte"),
                    "{msg}"
                );
            }
            other => panic!("{other:?}"),
        }
    }
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn strategy_strings_carry_cache_paths() {
    let s: Strategy = "ngram-cache:static=a.bin,dynamic=b.bin".parse().unwrap();
    assert_eq!(
        s,
        Strategy::NgramCache {
            static_cache: Some("a.bin".into()),
            dynamic_cache: Some("b.bin".into())
        }
    );
    assert_eq!(s.to_string(), "ngram-cache:static=a.bin,dynamic=b.bin");
    assert_eq!(
        "ngram-cache-live".parse::<Strategy>().unwrap().to_string(),
        "ngram-cache-live"
    );
    assert!("ngram-cache:n=3".parse::<Strategy>().is_err());
    // Found by the `parse` fuzz target: an empty path is a parse error.
    let e = "ngram-cache:static=".parse::<Strategy>().unwrap_err();
    assert!(e.to_string().contains("needs a file path"), "{e}");
}

#[test]
fn the_fixes_learn_new_prompts() {
    // After a long history, a new shorter prompt: the reference ignores it.
    let long: Vec<u32> = (0..400).map(|i| 1000 + i % 50).collect();
    let short: Vec<u32> = [7, 8, 9, 10].repeat(10);
    let mut drafts = Vec::new();
    for mut cache in [
        NgramCache::new(),
        NgramCache::new().relearn_prompts(),
        NgramCache::new().live(),
    ] {
        use selfspec::{DraftLimits, Drafter};
        let mut d = Vec::new();
        cache.draft(&long, 1000, DraftLimits::default(), &mut d);
        d.clear();
        cache.draft(&short, 7, DraftLimits::default(), &mut d);
        drafts.push(d);
    }
    assert!(drafts[0].is_empty(), "reference: {:?}", drafts[0]);
    assert_eq!(drafts[1], [8, 9, 10, 7, 8, 9, 10, 7]);
    assert_eq!(drafts[2], [8, 9, 10, 7, 8, 9, 10, 7]);
}

/// The naive cache: for each size, each n-gram's followers with their counts,
/// n-grams and followers in first-seen order, n-gram sizes one after another.
type NaiveCache = Vec<(Vec<u32>, Vec<(u32, i32)>)>;

fn naive_cache(corpus: &[u32], sizes: std::ops::RangeInclusive<usize>) -> NaiveCache {
    let mut out: NaiveCache = Vec::new();
    for size in sizes {
        for i in size..corpus.len() {
            let key = &corpus[i - size..i];
            let at = match out.iter().position(|(k, _)| k == key) {
                Some(at) => at,
                None => {
                    out.push((key.to_vec(), Vec::new()));
                    out.len() - 1
                }
            };
            let followers = &mut out[at].1;
            match followers.iter_mut().find(|(t, _)| *t == corpus[i]) {
                Some((_, c)) => *c += 1,
                None => followers.push((corpus[i], 1)),
            }
        }
    }
    out
}

proptest::proptest! {
    // The regressions file named outright: in a workspace member, proptest
    // cannot find it next to this file from `file!()`.
    #![proptest_config(proptest::test_runner::Config {
        cases: 64,
        failure_persistence: Some(Box::new(
            proptest::test_runner::FileFailurePersistence::Direct(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/tests/lookup_cache.proptest-regressions"
            )),
        )),
        ..proptest::test_runner::Config::default()
    })]

    /// Small alphabets give parts past the indexed size; larger ones mostly
    /// new n-grams. The cache equals the naive one, in the same order, built
    /// at once or in chunks (as the drafter learns a growing history).
    #[test]
    fn caches_equal_naive_counting(
        alphabet in proptest::sample::select(vec![3u32, 40, 300, 100_000]),
        len in 0usize..1500,
        chunk in 1usize..300,
        seed in proptest::prelude::any::<u64>(),
    ) {
        let mut rng = common::Rng(seed | 1);
        let corpus: Vec<u32> = (0..len).map(|_| rng.token(alphabet)).collect();
        let cache = LookupCache::from_tokens(&corpus, 1..=4);
        let naive = naive_cache(&corpus, 1..=4);
        let got: NaiveCache = cache.iter().map(|(k, f)| (k.to_vec(), f.collect())).collect();
        proptest::prop_assert_eq!(&got, &naive);
        for (key, followers) in &naive {
            let want: Vec<(u32, u32)> = followers.iter().map(|&(t, c)| (t, c.unsigned_abs())).collect();
            proptest::prop_assert_eq!(cache.followers(key), Some(want));
        }
        let mut chunked = LookupCache::new();
        let mut end = 0;
        while end < corpus.len() {
            let next = (end + chunk).min(corpus.len());
            chunked.update(&corpus[..next], 1..=4, next - end);
            end = next;
        }
        proptest::prop_assert_eq!(&chunked, &cache);
        let bytes = cache.to_bytes();
        proptest::prop_assert_eq!(&LookupCache::from_bytes(&bytes, "memory").unwrap(), &cache);
    }
}
