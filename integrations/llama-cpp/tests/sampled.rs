//! Sampled speculative decoding on the real model, through the user's own
//! context, is exact in distribution: over many seeds, the replies decoded
//! with recall's drafts follow the same distribution as plain sampled
//! decoding (a two-sample chi-square test at significance 0.001, llama.cpp's
//! sampler settings). The same test rejects a deliberately biased verifier
//! (one that reads each drafted token's logit raised by `BIAS`), so it can
//! fail.

mod common;

use std::collections::HashMap;

use selfspec::step::{Batch, Decode, Kept, Row, Sampler, SeqId, Shape, Stepper, Target};
use selfspec::{Config, Shared, Speculative};
use selfspec_llama_cpp::{end_tokens, LlamaTarget, Options};

/// Tokens of each reply: the first comes from the prompt's pass, the
/// others from verified drafts or one-token steps.
const LEN: usize = 4;
const RUNS: usize = 600;
/// The biased verifier's raise of a drafted token's logit.
const BIAS: f32 = 2.0;

/// A target whose verification favours drafted tokens: each row's logit
/// of the token the next row (of the same sequence) drafted is raised.
struct Biased<T> {
    inner: T,
    rows: Vec<Row>,
    logits: Vec<f32>,
}

impl<T: Target> Target for Biased<T> {
    type Error = T::Error;
    fn shape(&self) -> Shape {
        self.inner.shape()
    }
    fn forward(&mut self, batch: &Batch) -> Result<(), T::Error> {
        self.rows.clear();
        self.rows.extend_from_slice(batch.rows());
        self.inner.forward(batch)
    }
    fn logits(&mut self, row: usize) -> Result<&[f32], T::Error> {
        self.logits.clear();
        self.logits.extend_from_slice(self.inner.logits(row)?);
        let this = self.rows[row];
        if let Some(next) = self.rows.get(row + 1).filter(|n| n.seq == this.seq) {
            self.logits[next.token as usize] += BIAS;
        }
        Ok(&self.logits)
    }
    fn truncate(&mut self, seq: SeqId, from: usize) -> Result<Kept, T::Error> {
        self.inner.truncate(seq, from)
    }
}

struct Counts {
    replies: HashMap<Vec<u32>, f64>,
    drafted: usize,
    accepted: usize,
}

/// `RUNS` replies of `LEN` tokens to `prompt` (seeds from `seed0`), four
/// sequences at a time, with recall's drafts when `spec`.
fn sample<T: Target>(
    target: &mut T,
    prompt: &[u32],
    stop: &[u32],
    spec: bool,
    seed0: u64,
) -> Counts {
    let mut stepper = Stepper::new(&*target).unwrap_or_else(|e| panic!("{e}"));
    stepper = stepper.with_stop_tokens(stop);
    let config = Config::recommended();
    let shared = Shared::new(&config).unwrap();
    let mut counts = Counts {
        replies: HashMap::new(),
        drafted: 0,
        accepted: 0,
    };
    let mut started = 0;
    while started < RUNS || stepper.is_running() {
        while let (Some(seq), true) = (stepper.idle(), started < RUNS) {
            let s = spec.then(|| Speculative::with_shared(&config, &shared).unwrap());
            let sampler = Sampler {
                temperature: 1.0,
                seed: seed0 + started as u64,
                ..Sampler::default()
            };
            stepper
                .start(seq, prompt, Decode::sampled(LEN, sampler), s)
                .unwrap();
            started += 1;
        }
        stepper.step(target).unwrap_or_else(|e| panic!("{e}"));
        for f in stepper.finished() {
            counts.drafted += f.reply.drafted;
            counts.accepted += f.reply.accepted;
            *counts.replies.entry(f.reply.tokens).or_default() += 1.0;
        }
    }
    counts
}

/// The two-sample chi-square statistic of equal-sized samples (replies
/// seen under 10 times in both together pooled into one cell) and its
/// critical value at significance 0.001 (Wilson-Hilferty).
fn chi_square(a: &Counts, b: &Counts) -> (f64, f64) {
    let mut keys: Vec<&Vec<u32>> = a.replies.keys().chain(b.replies.keys()).collect();
    keys.sort();
    keys.dedup();
    let (mut stat, mut df, mut rest_a, mut rest_b) = (0.0, 0usize, 0.0, 0.0);
    for k in keys {
        let (x, y) = (
            a.replies.get(k).copied().unwrap_or(0.0),
            b.replies.get(k).copied().unwrap_or(0.0),
        );
        if x + y < 10.0 {
            rest_a += x;
            rest_b += y;
        } else {
            stat += (x - y).powi(2) / (x + y);
            df += 1;
        }
    }
    if rest_a + rest_b > 0.0 {
        stat += (rest_a - rest_b).powi(2) / (rest_a + rest_b);
        df += 1;
    }
    let k = (df - 1) as f64;
    let z = 3.090; // the 0.999 quantile of the normal distribution
    let critical = k * (1.0 - 2.0 / (9.0 * k) + z * (2.0 / (9.0 * k)).sqrt()).powi(3);
    (stat, critical)
}

#[test]
fn sampled_speculative_decoding_has_plain_sampling_distribution() {
    let model = common::model();
    let (mut ctx, params) = common::context(&model, 4 * 512, 4);
    let stop = end_tokens(&model);
    let prompt = common::chat(
        &model,
        "Repeat this list exactly: red, green, blue, red, green, blue, red, green, blue.",
    );
    let mut target = LlamaTarget::new(&model, &mut ctx, Options::new(&params)).unwrap();

    let plain = sample(&mut target, &prompt, &stop, false, 0);
    let spec = sample(&mut target, &prompt, &stop, true, 1 << 32);
    let (stat, critical) = chi_square(&plain, &spec);
    eprintln!(
        "plain vs speculative: chi-square {stat:.1} (critical {critical:.1}), {} distinct replies \
         plain, {} speculative; {} drafted, {} accepted",
        plain.replies.len(),
        spec.replies.len(),
        spec.drafted,
        spec.accepted
    );
    // Drafts were verified, kept and refused: the test exercised both
    // sides of the rule.
    assert!(
        spec.drafted > RUNS && spec.accepted > RUNS / 4,
        "{} / {}",
        spec.accepted,
        spec.drafted
    );
    assert!(spec.accepted < spec.drafted);
    // Several replies are likely: the test compares distributions.
    assert!(plain.replies.len() >= 10, "{} replies", plain.replies.len());
    assert!(stat < critical, "chi-square {stat:.1} >= {critical:.1}");

    let mut biased = Biased {
        inner: target,
        rows: Vec::new(),
        logits: Vec::new(),
    };
    let bad = sample(&mut biased, &prompt, &stop, true, 2 << 32);
    let (stat, critical) = chi_square(&plain, &bad);
    eprintln!("plain vs biased verifier: chi-square {stat:.1} (critical {critical:.1})");
    assert!(
        stat > critical,
        "the biased verifier passed: {stat:.1} < {critical:.1}"
    );
}
