//! Replays every golden trace of llama.cpp's own code and compares drafts,
//! accepted counts, steps, counters and ngram-mod's pool figures exactly.

mod workload;

use std::path::Path;

use selfspec::strategies::NgramCache;
use selfspec::{Config, Speculative, Strategy};
use selfspec_eval::{replay_observed, Session};
use serde::Deserialize;

#[derive(Deserialize)]
struct GoldenStrategy {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    n: usize,
    #[serde(default)]
    m: usize,
    #[serde(default)]
    min_hits: usize,
}

#[derive(Deserialize)]
struct GoldenConfig {
    strategies: Vec<GoldenStrategy>,
    draft_max: usize,
    draft_min: usize,
    pool_size: usize,
    /// ngram-cache files, relative to the line's folder.
    #[serde(default)]
    static_cache: Option<String>,
    #[serde(default)]
    dynamic_cache: Option<String>,
}

#[derive(Deserialize)]
struct GoldenStats {
    #[serde(rename = "type")]
    kind: String,
    n_call_begin: u64,
    n_call_draft: u64,
    n_call_accept: u64,
    n_gen_drafts: u64,
    n_acc_drafts: u64,
    n_gen_tokens: u64,
    n_acc_tokens: u64,
}

#[derive(Deserialize, Debug, PartialEq)]
struct GoldenDraft {
    call: usize,
    #[serde(rename = "impl")]
    drafter: usize,
    at: [usize; 4],
    draft: Vec<u32>,
    n_used: usize,
    n_acc: usize,
}

#[derive(Deserialize)]
struct InfoMod {
    resets_occupancy: u64,
    resets_low_acc: u64,
    used_final: usize,
}

#[derive(Deserialize)]
struct InfoCache {
    context_ngrams: usize,
    cache_size: usize,
    tokens_from: [u64; 3],
}

#[derive(Deserialize)]
struct Expected {
    steps: u64,
    generated: u64,
    n_drafts_nonempty: u64,
    accepted: u64,
    stats: Vec<GoldenStats>,
    drafts: Vec<GoldenDraft>,
    info_ngram_mod: Option<InfoMod>,
    info_ngram_cache: Option<InfoCache>,
}

#[derive(Deserialize)]
struct Line {
    case: String,
    config: GoldenConfig,
    sessions: Vec<Session>,
    expected: Expected,
}

fn config_of(c: &GoldenConfig, dir: &Path) -> Config {
    let strategies = c
        .strategies
        .iter()
        .map(|s| match s.kind.as_str() {
            "ngram_simple" => Strategy::NgramSimple { n: s.n, m: s.m },
            "ngram_map_k" => Strategy::NgramMapK { n: s.n, m: s.m },
            "ngram_map_k4v" => Strategy::NgramMapK4v {
                n: s.n,
                m: s.m,
                min_hits: s.min_hits,
            },
            "ngram_mod" => Strategy::NgramMod { n: s.n },
            "ngram_cache" => Strategy::NgramCache {
                static_cache: c.static_cache.as_ref().map(|p| dir.join(p)),
                dynamic_cache: c.dynamic_cache.as_ref().map(|p| dir.join(p)),
            },
            other => panic!("unknown golden strategy {other}"),
        })
        .collect();
    Config {
        strategies,
        draft_max: c.draft_max,
        draft_min: c.draft_min,
        pool_size: c.pool_size,
    }
}

/// One observed non-empty draft, in the golden's shape (after truncation).
#[derive(Debug, PartialEq)]
struct Seen {
    call: usize,
    drafter: usize,
    at: [usize; 4],
    draft: Vec<u32>,
    n_acc: usize,
}

fn check_line(line: Line, dir: &Path) -> Result<(), String> {
    let case = &line.case;
    let config = config_of(&line.config, dir);
    let mut spec = Speculative::new(&config).map_err(|e| format!("{case}: {e}"))?;
    let sessions = line.sessions;
    let mut seen = Vec::new();
    let report = replay_observed(&mut spec, &sessions, |step| {
        if !step.draft.is_empty() {
            seen.push(Seen {
                call: step.call,
                drafter: step.drafted_by.expect("a non-empty draft has a source"),
                at: [step.session, step.request, step.index, step.history_len],
                draft: step.draft.to_vec(),
                n_acc: step.n_accepted,
            });
        }
    })
    .map_err(|e| format!("{case}: {e}"))?;
    let exp = &line.expected;
    let want: Vec<Seen> = exp
        .drafts
        .iter()
        .filter(|d| d.n_used > 0)
        .map(|d| Seen {
            call: d.call,
            drafter: d.drafter,
            at: d.at,
            draft: d.draft[..d.n_used].to_vec(),
            n_acc: d.n_acc,
        })
        .collect();
    if let Some((k, (a, b))) = seen
        .iter()
        .zip(&want)
        .enumerate()
        .find(|(_, (a, b))| a != b)
    {
        return Err(format!(
            "{case}: draft #{k} differs:\n  got  {a:?}\n  want {b:?}"
        ));
    }
    if seen.len() != want.len() {
        return Err(format!(
            "{case}: {} drafts, want {}",
            seen.len(),
            want.len()
        ));
    }
    let totals = (report.steps, report.tokens, report.drafts, report.accepted);
    let want_totals = (
        exp.steps,
        exp.generated,
        exp.n_drafts_nonempty,
        exp.accepted,
    );
    if totals != want_totals {
        return Err(format!(
            "{case}: (steps, generated, drafts, accepted) = {totals:?}, want {want_totals:?}"
        ));
    }
    for (i, (got, want)) in spec.stats().iter().zip(&exp.stats).enumerate() {
        let used: u64 = exp
            .drafts
            .iter()
            .filter(|d| d.drafter == i)
            .map(|d| d.n_used as u64)
            .sum();
        let got_counts = [
            got.calls_begin,
            got.calls_draft,
            got.calls_accept,
            got.gen_drafts,
            got.acc_drafts,
            got.gen_tokens,
            got.acc_tokens,
        ];
        // llama.cpp's #gen tokens counts before draft_max; ours is the sum of n_used.
        let want_counts = [
            want.n_call_begin,
            want.n_call_draft,
            want.n_call_accept,
            want.n_gen_drafts,
            want.n_acc_drafts,
            used,
            want.n_acc_tokens,
        ];
        if got_counts != want_counts || got.name != want.kind {
            return Err(format!(
                "{case}: stats of {} = {got_counts:?}, want {} {want_counts:?} (raw #gen tokens {})",
                got.name, want.kind, want.n_gen_tokens
            ));
        }
    }
    if spec.stats().len() != exp.stats.len() {
        return Err(format!(
            "{case}: {} stats lines, want {}",
            spec.stats().len(),
            exp.stats.len()
        ));
    }
    match (&exp.info_ngram_mod, spec.pool()) {
        (Some(info), Some(pool)) => {
            let got = (
                pool.resets_occupancy(),
                pool.resets_low_acceptance(),
                pool.used(),
            );
            let want = (info.resets_occupancy, info.resets_low_acc, info.used_final);
            if got != want {
                return Err(format!("{case}: pool (resets_occupancy, resets_low_acc, used) = {got:?}, want {want:?}"));
            }
        }
        (None, None) => {}
        _ => return Err(format!("{case}: ngram-mod pool presence differs")),
    }
    let cache = (0..config.strategies.len())
        .filter_map(|i| spec.drafter(i)?.as_any()?.downcast_ref::<NgramCache>())
        .next();
    match (&exp.info_ngram_cache, cache) {
        (Some(info), Some(cache)) => {
            let got = (
                cache.context().len(),
                cache.cache_size(),
                <[u64; 3]>::from(cache.sources()),
            );
            let want = (info.context_ngrams, info.cache_size, info.tokens_from);
            if got != want {
                return Err(format!(
                    "{case}: ngram-cache (context n-grams, cache_size, tokens_from) = {got:?}, want {want:?}"
                ));
            }
        }
        (None, None) => {}
        _ => return Err(format!("{case}: ngram-cache presence differs")),
    }
    Ok(())
}

fn check_file(name: &str) -> usize {
    let path = workload::repo_path(&format!("tests/golden/{name}"));
    let dir = path.parent().expect("a folder").to_path_buf();
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut failures = Vec::new();
    let mut cases = 0;
    for raw in text.lines().filter(|l| !l.trim().is_empty()) {
        let line: Line = serde_json::from_str(raw).expect("a golden line");
        cases += 1;
        if let Err(e) = check_line(line, &dir) {
            failures.push(e);
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {cases} cases differ:\n{}",
        failures.len(),
        failures.join("\n")
    );
    cases
}

#[test]
fn golden_ngram_simple() {
    assert_eq!(check_file("ngram-simple.jsonl"), 25);
}

#[test]
fn golden_ngram_map_k() {
    assert_eq!(check_file("ngram-map-k.jsonl"), 25);
}

#[test]
fn golden_ngram_map_k4v() {
    assert_eq!(check_file("ngram-map-k4v.jsonl"), 25);
}

#[test]
fn golden_ngram_mod() {
    assert_eq!(check_file("ngram-mod.jsonl"), 41);
}

#[test]
fn golden_chain() {
    assert_eq!(check_file("chain.jsonl"), 14);
}

#[test]
fn golden_ngram_cache() {
    assert_eq!(check_file("ngram-cache/ngram-cache.jsonl"), 46);
}
