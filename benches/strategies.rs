//! Criterion benchmarks: draft calls per strategy and history length in the
//! engine's real pattern (the history grows by 1 + accepted tokens between
//! calls), `begin` of long prompts, pool resets, and whole-replay throughput.
//!
//! `cargo bench` runs them all; `cargo bench -- draft/ngram-simple` one group
//! (`cargo bench -p selfspec-bench -- incremental`: the owned-history API).

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use selfspec::strategies::{NgramCache, NgramMap, NgramMod, NgramPool, NgramSimple, Recall};
use selfspec::{
    verify, Config, DraftLimits, Drafter, IntoToken, Shared, Speculative, Strategy, Token,
};
use selfspec_eval::replay;
mod common;
mod steady;

use common::{load, text_stream};
use steady::{copy_of, steady_state, Kind, Restart};

const LENGTHS: [usize; 3] = [1 << 10, 16 << 10, 128 << 10];

/// The whole orchestrator as one drafter, to time the chain like a strategy.
#[derive(Debug)]
struct Chain(Speculative);

impl Drafter for Chain {
    fn name(&self) -> &str {
        "chain"
    }
    fn begin(&mut self, prompt: &[Token]) {
        self.0.begin(prompt)
    }
    fn draft(&mut self, history: &[Token], last: Token, _: DraftLimits, draft: &mut Vec<Token>) {
        draft.extend_from_slice(self.0.draft(history, last))
    }
    fn accept(&mut self, n_accepted: usize) {
        self.0.accept(n_accepted)
    }
}

/// Builds a fresh drafter for one steady-state run.
type Make = Box<dyn Fn() -> Box<dyn Drafter>>;

fn strategies() -> Vec<(&'static str, Make, DraftLimits, Restart)> {
    let dflt = DraftLimits { min: 0, max: 16 };
    let pool = Arc::new(NgramPool::new(selfspec::limits::DEFAULT_POOL_SIZE).unwrap());
    vec![
        (
            "ngram-simple-12-48",
            Box::new(|| Box::new(NgramSimple::new(12, 48)) as Box<dyn Drafter>),
            dflt,
            Restart::Begin,
        ),
        (
            "ngram-map-k-12-48",
            Box::new(|| Box::new(NgramMap::key_only(12, 48)) as Box<dyn Drafter>),
            dflt,
            Restart::Begin,
        ),
        (
            "ngram-map-k4v-8-8-2",
            Box::new(|| Box::new(NgramMap::four_values(8, 8, 2)) as Box<dyn Drafter>),
            dflt,
            Restart::Begin,
        ),
        (
            "ngram-mod-24",
            Box::new(move || {
                pool.reset();
                Box::new(NgramMod::new(24, pool.clone())) as Box<dyn Drafter>
            }),
            DraftLimits { min: 48, max: 64 },
            Restart::Begin,
        ),
        (
            "recall",
            Box::new(|| Box::new(Recall::new(0.13)) as Box<dyn Drafter>),
            dflt,
            Restart::Snapshot {
                warmup: 1,
                copy: copy_of::<Recall>,
                new_text: true,
            },
        ),
        (
            "ngram-cache",
            Box::new(|| Box::new(NgramCache::new()) as Box<dyn Drafter>),
            dflt,
            Restart::Snapshot {
                warmup: 0,
                copy: copy_of::<NgramCache>,
                new_text: false,
            },
        ),
        (
            "llama-cpp-chain",
            Box::new(|| {
                Box::new(Chain(Speculative::new(&Config::llama_cpp_chain()).unwrap()))
                    as Box<dyn Drafter>
            }),
            dflt,
            Restart::Begin,
        ),
    ]
}

fn bench_draft(c: &mut Criterion) {
    let longest = LENGTHS[LENGTHS.len() - 1] + 16384;
    let streams = [Kind::Text, Kind::Code].map(|kind| (kind, kind.stream(longest)));
    for (name, make, limits, restart) in strategies() {
        let mut group = c.benchmark_group(format!("draft/{name}"));
        group.warm_up_time(Duration::from_millis(500));
        group.measurement_time(Duration::from_secs(2));
        group.sample_size(20);
        for (kind, stream) in &streams {
            for len in LENGTHS {
                group.bench_function(format!("{}/{}k", kind.name(), len >> 10), |b| {
                    b.iter_custom(|iters| {
                        steady_state(&*make, &restart, (*kind, stream), len, limits, iters)
                    })
                });
            }
        }
        group.finish();
    }
}

fn bench_begin(c: &mut Criterion) {
    let stream = text_stream(128 << 10, 3);
    let mut group = c.benchmark_group("begin");
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(3));
    for len in [32 << 10, 128 << 10] {
        let prompt = &stream[..len];
        // ngram-map's index is built by the first draft after begin.
        group.bench_function(format!("ngram-map-k-first-draft/{}k", len >> 10), |b| {
            b.iter_batched_ref(
                || NgramMap::key_only(12, 48),
                |map| {
                    let mut draft = Vec::new();
                    map.begin(prompt);
                    map.draft(prompt, 1, DraftLimits::default(), &mut draft);
                    black_box(draft)
                },
                BatchSize::LargeInput,
            )
        });
        // ngram-cache learns the prompt in the first draft call.
        group.bench_function(format!("ngram-cache-first-draft/{}k", len >> 10), |b| {
            b.iter_batched_ref(
                NgramCache::new,
                |cache| {
                    let mut draft = Vec::new();
                    cache.draft(prompt, 1, DraftLimits::default(), &mut draft);
                    black_box(draft)
                },
                BatchSize::LargeInput,
            )
        });
        group.bench_function(format!("ngram-simple/{}k", len >> 10), |b| {
            b.iter_batched_ref(
                || NgramSimple::new(12, 48),
                |simple| simple.begin(prompt),
                BatchSize::LargeInput,
            )
        });
        let pool = Arc::new(NgramPool::new(selfspec::limits::DEFAULT_POOL_SIZE).unwrap());
        group.bench_function(format!("ngram-mod-24/{}k", len >> 10), |b| {
            b.iter_batched_ref(
                || {
                    pool.reset();
                    NgramMod::new(24, pool.clone())
                },
                |m| m.begin(prompt),
                BatchSize::LargeInput,
            )
        });
    }
    group.finish();

    let pool = NgramPool::new(selfspec::limits::DEFAULT_POOL_SIZE).unwrap();
    c.bench_function("pool-reset/4Mi", |b| b.iter(|| pool.reset()));

    // accept after a draft: ngram-map updates the drafting value, ngram-mod its streak.
    let history = text_stream(16 << 10, 5);
    let mut group = c.benchmark_group("accept");
    let mut map = NgramMap::four_values(8, 8, 1);
    map.begin(&history);
    group.bench_function("ngram-map-k4v", |b| b.iter(|| map.accept(black_box(3))));
    let mut ngram_mod = NgramMod::new(24, Arc::new(NgramPool::new(1 << 16).unwrap()));
    ngram_mod.begin(&history);
    group.bench_function("ngram-mod", |b| b.iter(|| ngram_mod.accept(black_box(40))));
    group.finish();
}

fn bench_replay(c: &mut Criterion) {
    let samples = [
        (
            "chat",
            load(include_str!("../examples/data/sample-chat.jsonl")),
        ),
        (
            "code-edit",
            load(include_str!("../examples/data/sample-code-edit.jsonl")),
        ),
    ];
    let mut configs: Vec<(String, Config)> = ["ngram-simple", "ngram-map-k", "ngram-map-k4v"]
        .iter()
        .map(|n| (n.to_string(), Config::new([n.parse::<Strategy>().unwrap()])))
        .collect();
    configs.push((
        "ngram-mod-24".into(),
        Config::new([Strategy::NgramMod { n: 24 }])
            .with_draft_max(64)
            .with_draft_min(48),
    ));
    configs.push(("llama-cpp-chain".into(), Config::llama_cpp_chain()));
    configs.push(("recommended".into(), Config::recommended()));
    let mut group = c.benchmark_group("replay");
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(4));
    for (kind, sessions) in &samples {
        let tokens: u64 = sessions
            .iter()
            .flat_map(|s| &s.requests)
            .map(|r| r.output.len() as u64)
            .sum();
        group.throughput(Throughput::Elements(tokens));
        for (name, config) in &configs {
            group.bench_function(format!("{name}/{kind}"), |b| {
                b.iter_batched_ref(
                    || Speculative::new(config).unwrap(),
                    |spec| black_box(replay(spec, sessions).unwrap().accepted),
                    BatchSize::LargeInput,
                )
            });
        }
    }
    group.finish();
}

/// Several sequences, one per thread, replaying the code-edit sample against one
/// shared ngram-mod pool (the engine's pattern).
fn bench_threads(c: &mut Criterion) {
    let sessions = load(include_str!("../examples/data/sample-code-edit.jsonl"));
    let tokens: u64 = sessions
        .iter()
        .flat_map(|s| &s.requests)
        .map(|r| r.output.len() as u64)
        .sum();
    let config = Config::new([
        Strategy::NgramSimple { n: 12, m: 48 },
        Strategy::NgramMod { n: 24 },
    ]);
    let shared = Shared::new(&config).unwrap();
    let mut group = c.benchmark_group("shared-pool");
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(4));
    for threads in [1u64, 2] {
        group.throughput(Throughput::Elements(tokens * threads));
        group.bench_function(format!("threads-{threads}"), |b| {
            b.iter(|| {
                std::thread::scope(|scope| {
                    for _ in 0..threads {
                        let mut spec = Speculative::with_shared(&config, &shared).unwrap();
                        let sessions = &sessions;
                        scope.spawn(move || {
                            black_box(replay(&mut spec, sessions).unwrap().accepted)
                        });
                    }
                })
            })
        });
    }
    group.finish();
}

/// How the engine hands its history over, in `bench_incremental`.
#[derive(Clone, Copy)]
enum Api {
    /// A `u32` engine: its history is the `&[u32]` of `draft`.
    SliceU32,
    /// An `i32` engine (llama.cpp bindings) keeping a parallel `Vec<u32>`
    /// for `draft` besides its own `Vec<i32>`.
    SliceI32Copy,
    /// An `i32` engine on the owned-history API (`draft_next`): only its own
    /// `Vec<i32>`.
    OwnedI32,
}

/// Draft calls from a prompt of `len` tokens, each window started from a
/// fork of `primed` (untimed), the engine's history vectors included.
fn incremental_windows(
    primed: &Speculative,
    api: Api,
    ids: &[i32],
    len: usize,
    iters: u64,
) -> Duration {
    const WINDOW: usize = 2048;
    let tokens: Vec<Token> = ids.iter().map(|&id| id.into_token()).collect();
    let max = primed.limits().max;
    let mut total = Duration::ZERO;
    let mut done = 0;
    while done < iters {
        let mut spec = primed.fork().expect("selfspec's strategies fork");
        let mut engine: Vec<i32> = ids[..len].to_vec();
        let mut copy: Vec<Token> = tokens[..len].to_vec();
        let mut pos = len;
        let t = Instant::now();
        while done < iters && pos + max + 1 < len + WINDOW {
            let n = match api {
                Api::SliceU32 => verify::greedy(spec.draft(&copy, tokens[pos]), &tokens[pos + 1..]),
                Api::SliceI32Copy => {
                    verify::greedy(spec.draft(&copy, ids[pos].into_token()), &tokens[pos + 1..])
                }
                Api::OwnedI32 => verify::greedy(spec.draft_next(ids[pos]), &ids[pos + 1..]),
            };
            match api {
                Api::SliceU32 => copy.extend_from_slice(&tokens[pos..pos + 1 + n]),
                Api::SliceI32Copy => {
                    engine.extend_from_slice(&ids[pos..pos + 1 + n]);
                    copy.extend(ids[pos..pos + 1 + n].iter().map(IntoToken::into_token));
                }
                Api::OwnedI32 => engine.extend_from_slice(&ids[pos..pos + 1 + n]),
            }
            spec.accept(n);
            pos += 1 + n;
            done += 1;
        }
        total += t.elapsed();
        black_box((&engine, &copy));
    }
    total
}

/// The owned-history API (`begin_owned` / `draft_next`, `i32` ids) against
/// the slice API, per draft call at 16k tokens of history.
fn bench_incremental(c: &mut Criterion) {
    let len = 16 << 10;
    let ids: Vec<i32> = text_stream(len + 4096, 13)
        .iter()
        .map(|&t| i32::try_from(t).expect("below 5000"))
        .collect();
    let configs = [
        (
            "ngram-simple-12-48",
            Config::new([Strategy::NgramSimple { n: 12, m: 48 }]),
        ),
        ("recommended", Config::recommended()),
    ];
    let mut group = c.benchmark_group("incremental");
    group.warm_up_time(Duration::from_millis(500));
    group.measurement_time(Duration::from_secs(2));
    group.sample_size(20);
    let prompt: Vec<Token> = ids[..len].iter().map(|&id| id.into_token()).collect();
    for (name, config) in &configs {
        for (api, label) in [
            (Api::SliceU32, "slice-u32"),
            (Api::SliceI32Copy, "slice-i32-copy"),
            (Api::OwnedI32, "owned-i32"),
        ] {
            // A primed instance (and engine-wide memory) per variant: recall's
            // forks publish their windows to it.
            let mut primed = Speculative::new(config).unwrap();
            match api {
                Api::OwnedI32 => primed.begin_owned(&ids[..len]),
                Api::SliceU32 | Api::SliceI32Copy => primed.begin(&prompt),
            }
            group.bench_function(format!("{name}/{label}"), |b| {
                b.iter_custom(|iters| incremental_windows(&primed, api, &ids, len, iters))
            });
        }
    }
    group.finish();
}

/// recall's first draft after a long prompt: a fresh drafter on an empty
/// engine-wide memory indexes the prompt in `begin`, then drafts.
fn bench_recall_prompt(c: &mut Criterion) {
    let mut group = c.benchmark_group("begin");
    group.sample_size(10);
    for len in [1usize << 10, 16 << 10, 128 << 10] {
        let prompt = text_stream(len, 5);
        let config = Config::recommended();
        group.bench_function(format!("recall-first-draft/{}k", len >> 10), |b| {
            b.iter_batched_ref(
                || {
                    let shared = Shared::new(&config).unwrap();
                    (Speculative::with_shared(&config, &shared).unwrap(), shared)
                },
                |(spec, _)| {
                    spec.begin(&prompt[..len - 1]);
                    black_box(spec.draft(&prompt[..len - 1], prompt[len - 1]).len())
                },
                BatchSize::LargeInput,
            )
        });
    }
    group.finish();
}

criterion_group!(
    benches,
    bench_draft,
    bench_begin,
    bench_recall_prompt,
    bench_replay,
    bench_threads,
    bench_incremental
);
criterion_main!(benches);
