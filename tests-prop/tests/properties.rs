//! Property tests over random token streams and configurations.
//!
//! 1. Oracle equivalence: under the engine's contract (`begin` with any prompt:
//!    the history extended, cut back, diverged or replaced; then draft / accept
//!    steps on a growing history; `accept` with any count), the crate's chain
//!    gives the same draft, from the same strategy, as the naive oracles of
//!    `tests/oracle` (whole-history scans, no indexes).
//! 2. Chaos: random `begin` / `draft` / `accept` sequences where the history
//!    also changes without `begin`, ids span the whole `u32` range, and several
//!    sequences share one pool. No panic, and every draft obeys the limits and
//!    its strategy's provenance rule.
//! 3. The owned-history API: random `begin_owned` / `draft_next` /
//!    `extend_history` / `truncate_history` / `fork` sequences with any `i32`
//!    ids draft as the slice API on the converted stream.

// The oracles live with the root package's tests (the fuzz smoke uses them too).
#[path = "../../tests/oracle/mod.rs"]
mod oracle;

use std::collections::HashSet;

use proptest::prelude::*;
use selfspec::Strategy as S;
use selfspec::{Budget, Config, IntoToken, Shared, Speculative, Token};

fn strategy() -> impl proptest::strategy::Strategy<Value = S> {
    prop_oneof![
        (1usize..6, 1usize..10).prop_map(|(n, m)| S::NgramSimple { n, m }),
        (1usize..6, 1usize..10).prop_map(|(n, m)| S::NgramMapK { n, m }),
        (1usize..6, 1usize..10, 0usize..4).prop_map(|(n, m, min_hits)| S::NgramMapK4v {
            n,
            m,
            min_hits
        }),
        (1usize..8).prop_map(|n| S::NgramMod { n }),
        Just(S::NgramCache {
            static_cache: None,
            dynamic_cache: None
        }),
    ]
}

fn config() -> impl proptest::strategy::Strategy<Value = Config> {
    config_of(strategy())
}

/// Every strategy, with ngram-cache-live and recall (no oracle for them: the
/// chaos test checks their contract).
fn any_strategy() -> impl proptest::strategy::Strategy<Value = S> {
    prop_oneof![
        4 => strategy(),
        1 => Just(S::NgramCacheLive { static_cache: None, dynamic_cache: None }),
        1 => (1usize..999).prop_map(|threshold_permille| S::Recall { threshold_permille }),
    ]
}

fn config_of(
    strategy: impl proptest::strategy::Strategy<Value = S>,
) -> impl proptest::strategy::Strategy<Value = Config> {
    (
        prop::collection::vec(strategy, 1..5),
        1usize..24,
        0usize..24,
        prop::sample::select(vec![1usize, 2, 7, 64, 4096, 65521]),
    )
        .prop_map(|(strategies, draft_max, draft_min, pool_size)| Config {
            strategies,
            draft_max,
            draft_min: draft_min % (draft_max + 1),
            pool_size,
        })
}

/// How a request's prompt relates to the history before it.
#[derive(Clone, Debug)]
enum Prompt {
    /// The previous history plus new tokens (a chat's next turn).
    Extend(Vec<Token>),
    /// The previous history cut back to a fraction (a dropped reasoning block).
    Cut(u8),
    /// A prefix of the previous history, then new tokens (a diverged prompt).
    Diverge(u8, Vec<Token>),
    /// Unrelated tokens (a new conversation in the same slot).
    Fresh(Vec<Token>),
}

#[derive(Clone, Debug)]
struct RequestScript {
    prompt: Prompt,
    /// The "target model": what it samples at each step, by step index.
    samples: Vec<Token>,
    /// Per step: how many draft tokens the engine accepts (clamped to the draft),
    /// or None for "verify against `samples`".
    accepts: Vec<Option<usize>>,
}

fn tokens(alphabet: u32, max: usize) -> impl proptest::strategy::Strategy<Value = Vec<Token>> {
    prop::collection::vec(
        prop_oneof![
            20 => 0..alphabet,
            1 => prop::sample::select(vec![u32::MAX, u32::MAX - 1, 1 << 31, (1 << 31) - 1]),
        ],
        0..max,
    )
}

fn request(alphabet: u32) -> impl proptest::strategy::Strategy<Value = RequestScript> {
    (
        prop_oneof![
            tokens(alphabet, 60).prop_map(Prompt::Extend),
            any::<u8>().prop_map(Prompt::Cut),
            (any::<u8>(), tokens(alphabet, 40)).prop_map(|(f, t)| Prompt::Diverge(f, t)),
            tokens(alphabet, 120).prop_map(Prompt::Fresh),
        ],
        tokens(alphabet, 160),
        prop::collection::vec(prop::option::weighted(0.3, 0usize..20), 160),
    )
        .prop_map(|(prompt, samples, accepts)| RequestScript {
            prompt,
            samples,
            accepts,
        })
}

fn next_prompt(history: &[Token], p: &Prompt) -> Vec<Token> {
    let frac = |f: u8| history.len() * f as usize / 255;
    match p {
        Prompt::Extend(t) => [history, t].concat(),
        Prompt::Cut(f) => history[..frac(*f)].to_vec(),
        Prompt::Diverge(f, t) => [&history[..frac(*f)], t].concat(),
        Prompt::Fresh(t) => t.clone(),
    }
}

/// Replays `requests` through the crate and the oracle, comparing every step.
fn equivalent(config: &Config, requests: &[RequestScript]) -> Result<(), TestCaseError> {
    let mut spec = Speculative::new(config).unwrap();
    let mut oracle = oracle::Chain::new(config);
    let mut history: Vec<Token> = Vec::new();
    for (r, req) in requests.iter().enumerate() {
        history = next_prompt(&history, &req.prompt);
        spec.begin(&history);
        oracle.begin(&history);
        let mut i = 0;
        for (step, &accept) in req.accepts.iter().enumerate() {
            let Some(&last) = req.samples.get(i) else {
                break;
            };
            let got = spec.draft(&history, last).to_vec();
            let (want, by) = oracle.draft(&history, last);
            prop_assert_eq!(&got, &want, "request {} step {}", r, step);
            prop_assert_eq!(spec.drafted_by(), by, "request {} step {}", r, step);
            let truth = &req.samples[i + 1..];
            let a = match accept {
                Some(a) => a.min(got.len()),
                None => got.iter().zip(truth).take_while(|(d, t)| d == t).count(),
            };
            spec.accept(a);
            oracle.accept(a);
            history.push(last);
            history.extend_from_slice(&got[..a]);
            i += 1 + a;
        }
    }
    if let (Some(pool), Some(o)) = (spec.pool(), &oracle.pool) {
        prop_assert_eq!(pool.used(), o.borrow().used);
        let resets =
            usize::try_from(pool.resets_occupancy() + pool.resets_low_acceptance()).unwrap();
        prop_assert_eq!(resets, o.borrow().resets);
    }
    Ok(())
}

/// The default configuration, with the regressions file named outright: in a
/// workspace member, proptest cannot find it next to this file from `file!()`.
fn regressions() -> ProptestConfig {
    ProptestConfig {
        failure_persistence: Some(Box::new(
            proptest::test_runner::FileFailurePersistence::Direct(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/tests/properties.proptest-regressions"
            )),
        )),
        ..ProptestConfig::default()
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 192, ..regressions() })]

    #[test]
    fn chain_equals_naive_oracle(
        config in config(),
        alphabet in 2u32..7,
        requests in prop::collection::vec(request(6), 1..5),
    ) {
        let requests: Vec<RequestScript> = requests
            .into_iter()
            .map(|mut r| {
                for t in r.samples.iter_mut() {
                    if *t < 6 { *t %= alphabet; }
                }
                r
            })
            .collect();
        equivalent(&config, &requests)?;
    }

    #[test]
    fn single_strategies_equal_naive_oracle(
        s in strategy(),
        requests in prop::collection::vec(request(3), 1..4),
    ) {
        equivalent(&Config::new([s]).with_pool_size(4096), &requests)?;
    }
}

/// One operation of the chaos state machine.
#[derive(Clone, Debug)]
enum Op {
    Begin(Prompt),
    /// Draft on the current history; the engine then accepts this many (any value).
    Step(Token, usize),
    /// The history changes without `begin`: cut back to a fraction.
    CutSilently(u8),
    /// The history changes without `begin`: one token rewritten.
    RewriteSilently(u8, Token),
    /// `accept` with no draft pending.
    StrayAccept(usize),
    /// The request ends and the engine builds a fresh drafter for the next
    /// (the old one is dropped: its tokens go to the engine-wide memory).
    Fresh,
    /// The engine restarts: the engine-wide state is saved and loaded, and
    /// every sequence gets a fresh drafter on the loaded state.
    SaveLoad,
}

fn op(alphabet: u32) -> impl proptest::strategy::Strategy<Value = Op> {
    let token = prop_oneof![8 => 0..alphabet, 1 => any::<u32>(), 1 => Just(u32::MAX)];
    prop_oneof![
        1 => request(alphabet).prop_map(|r| Op::Begin(r.prompt)),
        12 => (token.clone(), 0usize..40).prop_map(|(t, a)| Op::Step(t, a)),
        1 => any::<u8>().prop_map(Op::CutSilently),
        1 => (any::<u8>(), token).prop_map(|(f, t)| Op::RewriteSilently(f, t)),
        1 => (0usize..1000).prop_map(Op::StrayAccept),
        1 => Just(Op::Fresh),
        1 => Just(Op::SaveLoad),
    ]
}

fn follows_key(history: &[Token], last: Token, n: usize, draft: &[Token]) -> bool {
    let mut key = history[history.len() + 1 - n..].to_vec();
    key.push(last);
    (0..history.len().saturating_sub(n - 1))
        .any(|j| history[j..j + n] == key[..] && history[j + n..].starts_with(draft))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..regressions() })]

    #[test]
    fn chaos_never_breaks_the_contract(
        config in config_of(any_strategy()),
        sequences in prop::collection::vec(prop::collection::vec(op(5), 1..200), 1..4),
    ) {
        // The smallest budget, so that the engine-wide memory wraps.
        let budget = Budget { memory: 64 << 10, sequence: 64 << 10, ..Budget::default() };
        let mut shared = Shared::builder().budget(budget).build(&config).unwrap();
        let mut specs: Vec<Speculative> = sequences
            .iter()
            .map(|_| Speculative::with_shared(&config, &shared).unwrap())
            .collect();
        // The pool, the memory's 1024 tokens at 96 bytes, the smallest bucket
        // arrays and the learned tables.
        let bound = 8 * config.pool_size + 1024 * 96 + 8 * 4096 * 4 + (16 << 10);
        let mut histories = vec![Vec::<Token>::new(); sequences.len()];
        // Every token any sequence has shown the pool: ngram-mod drafts only these.
        let mut seen: HashSet<Token> = HashSet::new();
        let longest = sequences.iter().map(Vec::len).max().unwrap_or(0);
        for k in 0..longest {
            for (s, ops) in sequences.iter().enumerate() {
                let Some(op) = ops.get(k) else { continue };
                let (spec, history) = (&mut specs[s], &mut histories[s]);
                match op {
                    Op::Begin(p) => {
                        *history = next_prompt(history, p);
                        seen.extend(history.iter().copied());
                        spec.begin(history);
                    }
                    Op::Step(last, accept) => {
                        seen.extend(history.iter().copied());
                        seen.insert(*last);
                        let draft = spec.draft(history, *last).to_vec();
                        prop_assert!(draft.len() <= config.draft_max);
                        prop_assert!(draft.is_empty() || draft.len() >= config.draft_min);
                        if let Some(i) = spec.drafted_by() {
                            match config.strategies[i] {
                                S::NgramSimple { n, .. }
                                | S::NgramMapK { n, .. }
                                | S::NgramMapK4v { n, .. } => {
                                    prop_assert!(follows_key(history, *last, n, &draft),
                                        "draft {:?} of {:?} does not follow the key", draft, config.strategies[i]);
                                }
                                S::NgramMod { .. } => {
                                    prop_assert!(draft.iter().all(|t| seen.contains(t) && *t != u32::MAX));
                                }
                                S::Recall { .. } => {
                                    prop_assert!(draft.iter().all(|t| seen.contains(t)));
                                }
                                S::NgramCache { .. } | S::NgramCacheLive { .. } => {
                                    prop_assert!(draft.len() <= 8 && draft.iter().all(|t| seen.contains(t)));
                                }
                                _ => {}
                            }
                        } else {
                            prop_assert!(draft.is_empty());
                        }
                        spec.accept(*accept);
                        let a = (*accept).min(draft.len());
                        history.push(*last);
                        history.extend_from_slice(&draft[..a]);
                    }
                    Op::CutSilently(f) => {
                        let keep = history.len() * *f as usize / 255;
                        history.truncate(keep);
                    }
                    Op::RewriteSilently(f, t) => {
                        if !history.is_empty() {
                            let at = (history.len() - 1) * *f as usize / 255;
                            history[at] = *t;
                        }
                    }
                    Op::StrayAccept(n) => spec.accept(*n),
                    Op::Fresh => *spec = Speculative::with_shared(&config, &shared).unwrap(),
                    Op::SaveLoad => {
                        let bytes = shared.to_bytes();
                        shared = Shared::builder().budget(budget).build_from_bytes(&config, "chaos", &bytes).unwrap();
                        prop_assert_eq!(shared.to_bytes(), bytes);
                        for spec in specs.iter_mut() {
                            *spec = Speculative::with_shared(&config, &shared).unwrap();
                        }
                    }
                }
                prop_assert!(shared.heap_bytes() <= bound, "{} > {}", shared.heap_bytes(), bound);
            }
        }
        for spec in &specs {
            let stats = spec.stats();
            for (i, st) in stats.iter().enumerate() {
                prop_assert!(st.acc_tokens <= st.gen_tokens);
                prop_assert!(st.acc_drafts <= st.gen_drafts);
                prop_assert_eq!(st.calls_accept, st.acc_drafts);
                prop_assert!(st.gen_tokens <= st.gen_drafts * config.draft_max as u64);
                if i > 0 {
                    // A strategy is asked exactly when every earlier one had nothing usable.
                    prop_assert!(st.calls_draft <= stats[i - 1].calls_draft - stats[i - 1].gen_drafts);
                    prop_assert_eq!(st.calls_begin, stats[0].calls_begin);
                }
            }
        }
    }
}

/// One operation of an `i32` engine, on both APIs at once.
#[derive(Clone, Debug)]
enum EngineOp {
    /// A new request; its prompt keeps this fraction of the history, then these tokens.
    Begin(u8, Vec<i32>),
    /// The target sampled this token; the engine then accepts this many (any value).
    Step(i32, usize),
    /// Tokens evaluated outside drafting.
    Extend(Vec<i32>),
    /// A rollback to this fraction of the history.
    Truncate(u8),
    /// The sequence forks; the branch goes on, the parent is dropped.
    Fork,
}

fn engine_op() -> impl proptest::strategy::Strategy<Value = EngineOp> {
    let token = prop_oneof![8 => 0i32..5, 1 => any::<i32>(), 1 => Just(-1i32)];
    let tokens = prop::collection::vec(token.clone(), 0..40);
    prop_oneof![
        1 => (any::<u8>(), tokens.clone()).prop_map(|(f, t)| EngineOp::Begin(f, t)),
        12 => (token, 0usize..40).prop_map(|(t, a)| EngineOp::Step(t, a)),
        1 => tokens.prop_map(EngineOp::Extend),
        1 => any::<u8>().prop_map(EngineOp::Truncate),
        1 => Just(EngineOp::Fork),
    ]
}

fn as_token(id: i32) -> Token {
    Token::from_ne_bytes(id.to_ne_bytes())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..regressions() })]

    /// `begin_owned` / `draft_next` / `extend_history` / `truncate_history`
    /// with `i32` ids draft exactly as `begin` / `draft` on the converted
    /// stream, through forks too, and the owned history is the engine's.
    #[test]
    fn owned_history_equals_the_slice_api(
        config in config_of(any_strategy()),
        ops in prop::collection::vec(engine_op(), 1..300),
    ) {
        let mut slice_api = Speculative::new(&config).unwrap();
        let mut owned_api = Speculative::new(&config).unwrap();
        let mut history: Vec<i32> = Vec::new();
        let cut = |len: usize, f: u8| len * usize::from(f) / 255;
        for op in ops {
            match op {
                EngineOp::Begin(f, tokens) => {
                    history.truncate(cut(history.len(), f));
                    history.extend_from_slice(&tokens);
                    let prompt: Vec<Token> = history.iter().map(|&id| as_token(id)).collect();
                    slice_api.begin(&prompt);
                    owned_api.begin_owned(&history);
                }
                EngineOp::Step(last, accepted) => {
                    let h: Vec<Token> = history.iter().map(|&id| as_token(id)).collect();
                    let a = slice_api.draft(&h, as_token(last)).to_vec();
                    let b = owned_api.draft_next(last).to_vec();
                    prop_assert_eq!(a.iter().map(|&t| i32::from_token(t)).collect::<Vec<i32>>(), b);
                    slice_api.accept(accepted);
                    owned_api.accept(accepted);
                    history.push(last);
                    // Without a draft, `accept` does nothing.
                    let n = if a.is_empty() { 0 } else { accepted.min(a.len()) };
                    history.extend(a[..n].iter().map(|&t| i32::from_ne_bytes(t.to_ne_bytes())));
                }
                EngineOp::Extend(tokens) => {
                    history.extend_from_slice(&tokens);
                    owned_api.extend_history(&tokens);
                }
                EngineOp::Truncate(f) => {
                    let len = cut(history.len(), f);
                    history.truncate(len);
                    owned_api.truncate_history(len);
                }
                EngineOp::Fork => {
                    slice_api = slice_api.fork().unwrap();
                    owned_api = owned_api.fork().unwrap();
                }
            }
            let h: Vec<Token> = history.iter().map(|&id| as_token(id)).collect();
            prop_assert_eq!(owned_api.history(), &h[..]);
        }
    }
}
