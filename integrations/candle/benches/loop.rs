//! (a) Forward-pass cost against the number of tokens in the pass (1, 2, 4,
//! 8, 16, 17) after a 256-token cache; (b) wall-clock per generated token,
//! plain vs speculative (the draft budget on), on a repetitive and a
//! non-repetitive prompt. The random model (`RandomModel::bench`: 4 layers,
//! hidden 256, vocabulary 2048) says nothing about real acceptance: only
//! about the loop's costs.

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use selfspec_candle::decode::{self, Sizing};
use selfspec_candle::{random, Model, RandomModel};

const CONTEXT: usize = 256;
const GENERATE: usize = 128;

fn model(successor: f32) -> Model {
    let mut r = RandomModel::bench(1);
    r.successor = successor;
    Model::from_tensors(r.tensors().expect("random weights"), &r.config).expect("model")
}

fn pass_cost(c: &mut Criterion) {
    let mut m = model(15.0);
    let ctx = random::random_tokens(3, CONTEXT, 2048);
    m.forward(&ctx).expect("prefill");
    let mut g = c.benchmark_group("pass_tokens");
    g.sample_size(30)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    for n in [1usize, 2, 4, 8, 16, 17] {
        let pass = random::random_tokens(4, n, 2048);
        g.bench_with_input(BenchmarkId::from_parameter(n), &pass, |b, pass| {
            b.iter(|| {
                let logits = m.forward(black_box(pass)).expect("pass");
                let rows = decode::argmax_rows(&logits).expect("argmax");
                m.truncate(CONTEXT);
                rows
            });
        });
    }
    g.finish();
}

fn per_token(c: &mut Criterion) {
    let cycle_model = RandomModel::bench(1);
    let cases = [
        // Four turns of a successor cycle, which the model goes on repeating.
        ("repetitive", 15.0, cycle_model.cycle(5, CONTEXT)),
        // Random tokens: the model's output falls into a cycle after a lap.
        (
            "non-repetitive",
            15.0,
            random::random_tokens(2, CONTEXT, 2048),
        ),
        // A weaker successor term: output that does not repeat either.
        (
            "non-repetitive-output",
            10.0,
            random::random_tokens(2, CONTEXT, 2048),
        ),
    ];
    let config = selfspec::Config::recommended();
    let mut g = c.benchmark_group("per_token");
    g.sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3))
        .throughput(Throughput::Elements(GENERATE as u64));
    for (name, successor, prompt) in cases {
        let mut m = model(successor);
        g.bench_function(BenchmarkId::new("plain", name), |b| {
            b.iter(|| decode::plain(&mut m, black_box(&prompt), GENERATE).expect("plain"));
        });
        let shared = selfspec::Shared::new(&config).expect("shared");
        let tau = decode::speculative(&mut m, &config, &shared, &prompt, GENERATE, Sizing::Budget)
            .expect("speculative")
            .tau();
        eprintln!("per_token/{name}: speculative tau {tau:.2}");
        g.bench_function(BenchmarkId::new("speculative", name), |b| {
            b.iter(|| {
                // A fresh Shared each time: no learning across iterations.
                let shared = selfspec::Shared::new(&config).expect("shared");
                let prompt = black_box(&prompt);
                decode::speculative(&mut m, &config, &shared, prompt, GENERATE, Sizing::Budget)
                    .expect("speculative")
            });
        });
    }
    g.finish();
}

criterion_group!(benches, pass_cost, per_token);
criterion_main!(benches);
