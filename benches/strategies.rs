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
use selfspec_eval::{replay, replay_engine, Engine, Request, Session, Slot};

/// A deterministic xorshift generator: benches must not depend on a seed crate.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    /// Below `n`, as an index.
    fn pick(&mut self, n: usize) -> usize {
        usize::try_from(self.below(n as u64)).expect("below n")
    }
    /// A token below `n`.
    fn token(&mut self, n: u32) -> Token {
        Token::try_from(self.below(u64::from(n))).expect("below n")
    }
}

/// Text-like: Zipf-ish words from a 5000-token vocabulary, with phrases and
/// whole sentences reused now and then (as chat histories repeat themselves).
fn text_stream(len: usize, seed: u64) -> Vec<Token> {
    let mut out: Vec<Token> = Vec::with_capacity(len + 64);
    grow_text(&mut out, len, &mut Rng(seed | 1));
    out
}

/// Appends text-like tokens to `out` up to `len` (its quotes may come from
/// anything before).
fn grow_text(out: &mut Vec<Token>, len: usize, rng: &mut Rng) {
    while out.len() < len {
        if out.len() > 256 && rng.below(10) == 0 {
            // Quote an earlier passage of 8..72 tokens.
            let n = 8 + rng.pick(64);
            let start = rng.pick(out.len() - n);
            out.extend_from_within(start..start + n);
        } else {
            // Zipf-like: small ids are much more frequent.
            let r = rng.below(1 << 20) as f64 / (1u64 << 20) as f64;
            // In 1..=5000: the float's integer part is the token.
            #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
            let t = 5000f64.powf(r) as Token;
            out.push(t.min(4999));
        }
    }
    out.truncate(len);
}

/// Code-edit-like: a file, then copies of it with sparse edits.
fn code_edit_stream(len: usize, seed: u64) -> Vec<Token> {
    let file: Vec<Token> = text_stream(2048, seed ^ 0x9e37);
    let mut out = file.clone();
    grow_edits(&mut out, file, len, &mut Rng(seed | 1));
    out
}

/// Appends copies of `file` to `out` up to `len`, each an edit of the one
/// before (a token in 200 replaced, dropped or followed by a new one).
fn grow_edits(out: &mut Vec<Token>, mut file: Vec<Token>, len: usize, rng: &mut Rng) {
    while out.len() < len {
        let mut next = Vec::with_capacity(file.len() + 16);
        for &t in &file {
            match rng.below(200) {
                0 => next.push(rng.token(5000)),
                1 => {}
                2 => next.extend([t, rng.token(5000)]),
                _ => next.push(t),
            }
        }
        out.extend_from_slice(&next);
        file = next;
    }
    out.truncate(len);
}

/// The kinds of synthetic history the draft benches run on.
#[derive(Clone, Copy)]
enum Kind {
    Text,
    Code,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Text => "text",
            Kind::Code => "code",
        }
    }

    fn stream(self, len: usize) -> Vec<Token> {
        match self {
            Kind::Text => text_stream(len, 7),
            Kind::Code => code_edit_stream(len, 11),
        }
    }

    /// `prompt` followed by `n` new tokens of this kind (a new edit of the
    /// prompt's last 2048 tokens, or new text quoting the prompt), different
    /// for every `seed`.
    fn continued(self, prompt: &[Token], n: usize, seed: u64) -> Vec<Token> {
        let mut out = prompt.to_vec();
        let mut rng = Rng((seed + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
        match self {
            Kind::Text => grow_text(&mut out, prompt.len() + n, &mut rng),
            Kind::Code => {
                let file = prompt[prompt.len().saturating_sub(2048)..].to_vec();
                grow_edits(&mut out, file, prompt.len() + n, &mut rng);
            }
        }
        out
    }
}

/// How a timed window starts over at the prompt.
enum Restart {
    /// `begin(prompt)`: the drafter keeps its state per request.
    Begin,
    /// From a copy of the drafter's state primed on the prompt, taken after
    /// `warmup` untimed windows (which train what it learns online). For
    /// drafters that remember across requests (ngram-cache's context cache,
    /// recall's memory of everything seen), re-beginning would time the next
    /// windows at an ever longer history (recall) or with the window's tokens
    /// already learned (ngram-cache's high-water mark).
    Snapshot {
        warmup: usize,
        copy: fn(&dyn Drafter) -> Box<dyn Drafter>,
        /// Each window after the snapshot continues the prompt with text
        /// of the stream's kind that no window had before. recall's copies
        /// share the engine-wide memory and publish to it: with the same
        /// continuation every window, the memory would hold every earlier
        /// window's copy of it, and the drafter would copy it back 16
        /// tokens a call (what this bench measured until 2026-12-01).
        new_text: bool,
    },
}

/// A boxed copy of a drafter of type `D`.
fn copy_of<D: Drafter + Clone + 'static>(drafter: &dyn Drafter) -> Box<dyn Drafter> {
    let d = drafter.as_any().and_then(|a| a.downcast_ref::<D>());
    Box::new(d.expect("the drafter's type").clone())
}

/// Times `draft` calls the way an engine makes them: from a prompt of `len`
/// tokens, the history grows by the sampled token plus the accepted draft
/// tokens; after `window` tokens the drafter starts over (untimed).
fn steady_state(
    make: &dyn Fn() -> Box<dyn Drafter>,
    restart: &Restart,
    (kind, stream): (Kind, &[Token]),
    len: usize,
    limits: DraftLimits,
    iters: u64,
) -> Duration {
    let window = (len / 8).clamp(256, 8192);
    let prompt = &stream[..len];
    let mut drafter = make();
    drafter.begin(prompt);
    let mut snapshot: Option<Box<dyn Drafter>> = None;
    let mut draft = Vec::with_capacity(64);
    let mut windows = 0;
    let mut total = Duration::ZERO;
    let mut done = 0;
    while done < iters {
        let mut stream = stream;
        let continued;
        if let Restart::Snapshot {
            warmup,
            copy,
            new_text,
        } = restart
        {
            if *new_text && snapshot.is_some() {
                continued = kind.continued(prompt, window + limits.max + 1, windows as u64);
                stream = &continued;
            }
            if snapshot.is_none() && windows == *warmup {
                // What the first draft call after `begin` learns (untimed).
                drafter.draft(&prompt[..len - 1], prompt[len - 1], limits, &mut draft);
                draft.clear();
                snapshot = Some(copy(&*drafter));
            }
            if let Some(primed) = &snapshot {
                drafter = copy(&**primed);
            }
        }
        let mut pos = len;
        let t = Instant::now();
        while done < iters && pos + limits.max + 1 < len + window {
            draft.clear();
            drafter.draft(&stream[..pos], stream[pos], limits, &mut draft);
            draft.truncate(limits.max);
            let truth = &stream[pos + 1..];
            let n = draft.iter().zip(truth).take_while(|(d, t)| d == t).count();
            if n > 0 {
                drafter.accept(n);
            }
            pos += 1 + n;
            done += 1;
        }
        total += t.elapsed();
        windows += 1;
        drafter.begin(prompt);
    }
    black_box(&draft);
    total
}

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

fn load(text: &str) -> Vec<Session> {
    selfspec_eval::parse_workload("sample", text).unwrap()
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

/// Two threads on one `Shared`, each replaying half of a workload (by
/// output tokens) with a fresh drafter per request, against one thread
/// replaying all of it: the same work (the same instructions within 0.1%,
/// callgrind), so the time ratio is the speed-up.
/// The two are timed apart; the `scaling` tool pairs them round by round,
/// which holds up better on a noisy machine.
fn bench_shared_memory(c: &mut Criterion) {
    let sessions = load(include_str!("../examples/data/sample-chat.jsonl"));
    let tokens: u64 = sessions
        .iter()
        .flat_map(|s| &s.requests)
        .map(|r| r.output.len() as u64)
        .sum();
    let config = Config::recommended();
    // Halves of the work: the first sessions up to half the output tokens
    // (10 sessions of 20 are 11,545 of 24,791 tokens; 11 are 13,421).
    let mut so_far = 0;
    let half = sessions
        .iter()
        .position(|s| {
            so_far += s
                .requests
                .iter()
                .map(|r| r.output.len() as u64)
                .sum::<u64>();
            2 * so_far >= tokens
        })
        .map_or(sessions.len(), |i| i + 1);
    let (first, second) = sessions.split_at(half);
    let mut group = c.benchmark_group("shared-memory");
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(8));
    group.throughput(Throughput::Elements(tokens));
    for threads in [1usize, 2] {
        group.bench_function(format!("threads-{threads}"), |b| {
            b.iter(|| {
                let shared = Shared::new(&config).unwrap();
                if threads == 1 {
                    black_box(
                        replay_engine(&config, &shared, &sessions, Engine::fresh(1))
                            .unwrap()
                            .accepted,
                    );
                    return;
                }
                std::thread::scope(|scope| {
                    for half in [first, second] {
                        let (config, shared) = (&config, &shared);
                        scope.spawn(move || {
                            black_box(
                                replay_engine(config, shared, half, Engine::fresh(1))
                                    .unwrap()
                                    .accepted,
                            )
                        });
                    }
                })
            })
        });
    }
    group.finish();
}

/// Appending a request to the engine-wide memory, per token, as the
/// memory fills (its buckets outgrow the caches).
fn bench_memory_append(c: &mut Criterion) {
    let mut group = c.benchmark_group("memory-append");
    group.sample_size(10);
    let request = text_stream(1024, 9);
    group.throughput(Throughput::Elements(request.len() as u64));
    for held in [16usize << 10, 256 << 10, 2 << 20] {
        let memory = selfspec::strategies::RecallMemory::new(held * 96);
        let fill = text_stream(held, 13);
        for part in fill.chunks(4096) {
            memory.append(part);
        }
        group.bench_function(format!("{}k", held >> 10), |b| {
            b.iter(|| black_box(memory.append(&request)))
        });
    }
    group.finish();
}

/// The draft call's cost as a function of concurrency: sample-code (180
/// single-request sessions) on an engine of 1, 8, 32 and 128 slots on one
/// `Shared`, a new drafter per request, decoded in rounds as an engine steps
/// its batch. Throughput is in draft calls (one per step), so criterion's
/// time per element is the replay's time per draft call (its `begin`,
/// `accept` and `end_request` calls and each slot's stepper included) with
/// N sequences in flight.
fn bench_concurrency(c: &mut Criterion) {
    let sessions = load(include_str!("../examples/data/sample-code.jsonl"));
    let config = Config::recommended();
    let mut group = c.benchmark_group("concurrency/recall");
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(6));
    for slots in [1usize, 8, 32, 128] {
        let engine = Engine::fresh(slots);
        let calls = replay_engine(&config, &Shared::new(&config).unwrap(), &sessions, engine)
            .unwrap()
            .steps;
        group.throughput(Throughput::Elements(calls));
        group.bench_function(format!("slots-{slots}"), |b| {
            b.iter(|| {
                let shared = Shared::new(&config).unwrap();
                black_box(
                    replay_engine(&config, &shared, &sessions, engine)
                        .unwrap()
                        .steps,
                )
            })
        });
    }
    group.finish();
}

/// A text-like stream of `len` tokens from `seed` (copies of earlier spans).
fn stream(len: usize, seed: u64) -> Vec<Token> {
    let mut x = seed | 1;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let mut out: Vec<Token> = Vec::with_capacity(len);
    while out.len() < len {
        if out.len() > 1000 && next() % 4 == 0 {
            let from = usize::try_from(next()).unwrap_or(0) % (out.len() - 100);
            let n = 8 + usize::try_from(next()).unwrap_or(0) % 40;
            for i in 0..n {
                out.push(out[from + i]);
            }
        } else {
            out.push(Token::try_from(next() % 5000).unwrap_or(0));
        }
    }
    out.truncate(len);
    out
}

/// A request's cost (its 500-token prompt prefilled, 100 tokens decoded
/// through a `Slot`, its end) on an engine of 1 or 64 scopes, each holding
/// 20k tokens, the requests going round the scopes. Throughput in decoded
/// tokens (the requests' text is new: nearly every draft is rejected, a
/// draft call a token).
fn bench_scopes(c: &mut Criterion) {
    let config = Config::recommended();
    let mut group = c.benchmark_group("scopes");
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(5));
    let requests: Vec<Request> = (0..32)
        .map(|i| {
            let text = stream(600, 1000 + i);
            Request::new(text[..500].to_vec(), text[500..].to_vec())
        })
        .collect();
    for n in [1usize, 64] {
        let shared = Shared::new(&config).unwrap();
        let scopes: Vec<Shared> = (0..n).map(|i| shared.scope(&format!("s{i}"))).collect();
        for (i, scope) in scopes.iter().enumerate() {
            let text = stream(20_000, 7 + i as u64);
            let mut spec = Speculative::with_shared(&config, scope).unwrap();
            spec.begin(&text);
            spec.end_request();
        }
        let mut slot = Slot::new().unwrap();
        let mut k = 0;
        group.throughput(Throughput::Elements(100));
        group.bench_function(format!("request/{n}"), |b| {
            b.iter(|| {
                let scope = &scopes[k % n];
                let request = &requests[k % requests.len()];
                k += 1;
                let spec = Speculative::with_shared(&config, scope).unwrap();
                slot.start(request, Some(spec)).unwrap();
                while slot.step().unwrap().is_some() {}
            })
        });
    }
    group.finish();
}

/// What a request's start costs on an engine of many scopes (one per
/// tenant): `Shared::scope` and `Speculative::with_shared`, each of which
/// checks the engine's budget, on scopes that each hold a request.
fn bench_scope_start(c: &mut Criterion) {
    let config = Config::recommended();
    let mut group = c.benchmark_group("scope-start");
    for n in [16usize, 1024] {
        let shared = Shared::new(&config).unwrap();
        let names: Vec<String> = (0..n).map(|i| format!("tenant-{i}")).collect();
        for (i, name) in names.iter().enumerate() {
            let mut spec = Speculative::with_shared(&config, &shared.scope(name)).unwrap();
            spec.begin(&stream(200, 7 + i as u64));
            spec.end_request();
        }
        let mut k = 0;
        group.bench_function(format!("{n}"), |b| {
            b.iter(|| {
                let scope = shared.scope(&names[k % n]);
                k += 1;
                black_box(Speculative::with_shared(&config, &scope).unwrap())
            })
        });
    }
    // A new scope per request on an engine at its budget (about 8k scopes
    // that hold nothing but themselves): each start forgets the least
    // recently used one.
    let simple = Config::new([selfspec::Strategy::NgramSimple { n: 12, m: 48 }]);
    let budget = selfspec::Budget {
        engine: 2 << 20,
        ..selfspec::Budget::default()
    };
    let shared = Shared::builder().budget(budget).build(&simple).unwrap();
    let mut k = 0u64;
    let mut new_request = || {
        k += 1;
        let scope = shared.scope(&format!("user-{k}"));
        Speculative::with_shared(&simple, &scope).unwrap()
    };
    for _ in 0..20_000 {
        new_request();
    }
    assert!(
        shared.scope_names().len() > 4096,
        "the engine holds many scopes"
    );
    group.bench_function("new-scope-at-budget", |b| {
        b.iter(|| black_box(new_request()))
    });
    group.finish();
}

/// Save, load, export and import of a memory filled to its default budget
/// (256 MiB: 2 Mi tokens).
fn bench_memory_file(c: &mut Criterion) {
    let config = Config::recommended();
    let shared = Shared::new(&config).unwrap();
    // Requests of random tokens: none repeats another, so all are held
    // (a request whose text the memory holds already is not published again).
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let text: Vec<Token> = (0..1usize << 21)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            Token::try_from(x % 150_000).unwrap_or(0)
        })
        .collect();
    for part in text.chunks(1 << 16) {
        let mut spec = Speculative::with_shared(&config, &shared).unwrap();
        spec.begin(part);
        spec.end_request();
    }
    let path = std::env::temp_dir().join(format!("selfspec-bench-{}.mem", std::process::id()));
    shared.save(&path).unwrap();
    assert_eq!(shared.stats().memory_tokens, 1 << 21, "the memory is full");
    let (delta, _) = shared.export_since(&selfspec::Cursor::default());
    let mut group = c.benchmark_group("memory-file-256MiB");
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(10));
    group.throughput(Throughput::Bytes(
        std::fs::metadata(&path).map_or(0, |m| m.len()),
    ));
    group.bench_function("save", |b| b.iter(|| shared.save(&path).unwrap()));
    group.bench_function("load", |b| {
        b.iter(|| black_box(Shared::load(&config, &path).unwrap()))
    });
    group.bench_function("export", |b| {
        b.iter(|| black_box(shared.export_since(&selfspec::Cursor::default()).0.len()))
    });
    group.bench_function("import", |b| {
        b.iter_batched(
            || Shared::new(&config).unwrap(),
            |fresh| fresh.import(&delta).unwrap(),
            BatchSize::PerIteration,
        )
    });
    group.finish();
    std::fs::remove_file(&path).ok();
}

/// A replica's export after one more request, when its memory holds 4,096
/// runs of its own interleaved with 4,096 imported from another replica (as
/// after a day of exchanging deltas): what an export reads under the writer
/// lock should be the new request, not every run and imported range held.
fn bench_replica_export(c: &mut Criterion) {
    let config = Config::recommended();
    let mut x = 0x2545_f491_4f6c_dd1du64;
    let mut request = || -> Vec<Token> {
        (0..256)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                Token::try_from(x % 150_000).unwrap_or(0)
            })
            .collect()
    };
    let publish = |shared: &Shared, tokens: &[Token]| {
        let mut spec = Speculative::with_shared(&config, shared).unwrap();
        spec.begin(tokens);
        spec.end_request();
    };
    let (a, b) = (Shared::new(&config).unwrap(), Shared::new(&config).unwrap());
    let (mut at_a, mut at_b) = (selfspec::Cursor::default(), selfspec::Cursor::default());
    for _ in 0..4096 {
        publish(&a, &request());
        publish(&b, &request());
        let (delta, next) = b.export_since(&at_b);
        at_b = next;
        a.import(&delta).unwrap();
        let (_, next) = a.export_since(&at_a);
        at_a = next;
    }
    publish(&a, &request());
    let mut group = c.benchmark_group("replica-export");
    group.bench_function("one-request-after-8192-runs", |bench| {
        bench.iter(|| black_box(a.export_since(&at_a).0.len()))
    });
    group.finish();
}

criterion_group!(
    benches,
    bench_scopes,
    bench_scope_start,
    bench_memory_file,
    bench_replica_export,
    bench_concurrency,
    bench_memory_append,
    bench_draft,
    bench_begin,
    bench_recall_prompt,
    bench_replay,
    bench_threads,
    bench_shared_memory,
    bench_incremental
);
criterion_main!(benches);
