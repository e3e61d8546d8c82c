//! Criterion benchmarks of the engine-wide memory (`Shared`): threads on one
//! memory, appends as it fills, the draft call against concurrency, scopes,
//! files and replica deltas.
//!
//! `cargo bench --bench memory`; `cargo bench --bench memory -- scopes` one
//! group.

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use selfspec::{Config, Shared, Speculative, Token};
use selfspec_eval::{replay_engine, Engine, Request, Slot};
mod common;
use common::{load, stream, text_stream};

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
    bench_shared_memory
);
criterion_main!(benches);
