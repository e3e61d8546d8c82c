//! What the decoding step costs on top of the target's forward pass: a
//! `Stepper` over a target whose pass does no work (its greedy choice is a
//! lookup in a recorded text), per step, greedy, with and without drafting
//! (recall, its draft calls included) and with the budget. Compare with a
//! plain one-token pass of the real model (BENCHMARKS.md, "A real model
//! through llama.cpp": about 10 ms on 2 cores). `choice/V`: the greedy
//! choice of one row of V logits (SmolLM2's and Qwen3's vocabularies), which
//! every row a pass outputs costs a target that reads its logits.
//!
//! `cargo bench --bench step`

use std::convert::Infallible;

use criterion::{criterion_group, criterion_main, Criterion};
use selfspec::step::{Batch, Choice, Decode, Kept, PassTimes, SeqId, Shape, Stepper, Target};
use selfspec::{Config, Speculative, Token};

/// A target that "generates" `text` (a recorded sample's outputs, looped).
struct Recorded {
    text: Vec<Token>,
    rows: Vec<usize>,
}

impl Target for Recorded {
    type Error = Infallible;
    fn shape(&self) -> Shape {
        Shape {
            sequences: 1,
            context: 1 << 24,
            vocab: 1 << 20,
            batch: 256,
        }
    }
    fn forward(&mut self, batch: &Batch) -> Result<(), Infallible> {
        self.rows.clear();
        self.rows.extend(batch.rows().iter().map(|r| r.pos));
        Ok(())
    }
    fn logits(&mut self, _row: usize) -> Result<&[f32], Infallible> {
        Ok(&[])
    }
    fn greedy(&mut self, row: usize) -> Result<Option<Choice>, Infallible> {
        let token = self.text[(self.rows[row] + 1) % self.text.len()];
        Ok(Some(Choice { token, margin: 1.0 }))
    }
    fn truncate(&mut self, _seq: SeqId, _from: usize) -> Result<Kept, Infallible> {
        Ok(Kept::Exact)
    }
}

fn text() -> Vec<Token> {
    let sessions =
        selfspec_eval::parse_workload("chat", include_str!("../examples/data/sample-chat.jsonl"))
            .unwrap();
    sessions
        .iter()
        .flat_map(|s| &s.requests)
        .flat_map(|r| r.output.iter().copied())
        .take(200_000)
        .collect()
}

fn bench_step(c: &mut Criterion) {
    let text = text();
    let mut group = c.benchmark_group("step");
    for (name, drafts, budget) in [
        ("plain", false, false),
        ("recall", true, false),
        ("recall+budget", true, true),
    ] {
        let mut target = Recorded {
            text: text.clone(),
            rows: Vec::new(),
        };
        let mut stepper = Stepper::new(&target).unwrap();
        if budget {
            stepper = stepper.with_budget(PassTimes::new());
        }
        let mut spec = drafts.then(|| Speculative::new(&Config::recommended()).unwrap());
        group.bench_function(name, |b| {
            b.iter(|| {
                // A reply that filled the context starts again (once in
                // millions of steps), so that every step measured decodes.
                if !stepper.is_running() {
                    spec = stepper
                        .finished()
                        .next()
                        .and_then(|f| f.spec)
                        .or(spec.take());
                    stepper.forget(SeqId::new(0));
                    let d = Decode::greedy(usize::MAX / 2);
                    stepper
                        .start(SeqId::new(0), &text[..64], d, spec.take())
                        .unwrap();
                }
                stepper.step(&mut target).unwrap();
                stepper.events().len()
            });
        });
    }
    group.finish();
}

fn bench_choice(c: &mut Criterion) {
    let mut group = c.benchmark_group("choice");
    for vocab in [49_152usize, 151_936] {
        // Logits spread like a language model's: most low, a few high.
        let logits: Vec<f32> = (0..vocab)
            .map(|i| {
                let h = (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 40;
                (h % 4096) as f32 / 256.0 - 8.0
            })
            .collect();
        group.bench_function(vocab.to_string(), |b| {
            b.iter(|| Choice::of(std::hint::black_box(&logits)));
        });
    }
    group.finish();
}

criterion_group!(benches, bench_step, bench_choice);
criterion_main!(benches);
