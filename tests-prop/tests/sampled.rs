//! Sampled decoding through the stepper is exact in distribution: over many
//! seeds on a small-vocabulary mock target, the tokens generated with drafts
//! follow the target's own distribution (a chi-square test at significance
//! 0.001 against the exact probabilities, and against plain sampling with
//! the sampler's filters on). The same test rejects a deliberately biased
//! verifier, so it can fail.

mod mock;

use mock::{logits, plain_greedy, Mock};
use selfspec::step::{Decode, Sampler, SeqId, Stepper};
use selfspec::{DraftLimits, Drafter, Speculative, Token};

const V: u32 = 5;
const VOCAB: usize = V as usize;
const LEN: usize = 3;
/// Sequences of `LEN` tokens.
const CELLS: usize = VOCAB * VOCAB * VOCAB;
const PROMPT: [Token; 4] = [1, 4, 2, 0];
const RUNS: usize = 20_000;

/// Drafts the target's greedy continuation (often accepted) or, every third
/// call, tokens it rarely chooses.
#[derive(Debug)]
struct Guess(usize);

impl Drafter for Guess {
    fn name(&self) -> &str {
        "guess"
    }
    fn begin(&mut self, _prompt: &[Token]) {}
    fn draft(
        &mut self,
        history: &[Token],
        last: Token,
        _limits: DraftLimits,
        draft: &mut Vec<Token>,
    ) {
        self.0 += 1;
        let mut ctx = history.to_vec();
        ctx.push(last);
        if self.0 % 3 == 0 {
            draft.extend([(last + 1) % V, (last + 3) % V]);
        } else {
            draft.extend(plain_greedy(&ctx, 2, VOCAB));
        }
    }
    fn accept(&mut self, _n: usize) {}
}

fn cell(tokens: &[Token]) -> usize {
    tokens.iter().fold(0, |c, &t| c * VOCAB + t as usize)
}

/// Counts of each sequence of `LEN` tokens over `RUNS` seeds through the
/// stepper (four sequences at a time).
fn stepper_counts(sampler: Sampler, drafts: bool, seed0: u64) -> Vec<f64> {
    let mut accepted = 0;
    let mut target = Mock::new(4, 64, VOCAB, 32);
    let mut stepper = Stepper::new(&target).unwrap();
    let mut counts = vec![0.0; CELLS];
    let mut started = 0;
    while started < RUNS || stepper.is_running() {
        while let (Some(seq), true) = (stepper.idle(), started < RUNS) {
            let spec = drafts.then(|| {
                Speculative::from_drafters(vec![Box::new(Guess(started))], DraftLimits::default())
                    .unwrap()
            });
            let s = Sampler {
                seed: seed0 + started as u64,
                ..sampler
            };
            stepper
                .start(seq, &PROMPT, Decode::sampled(LEN, s), spec)
                .unwrap();
            started += 1;
        }
        stepper.step(&mut target).unwrap();
        for f in stepper.finished() {
            assert_eq!(f.reply.tokens.len(), LEN);
            counts[cell(&f.reply.tokens)] += 1.0;
            accepted += f.reply.accepted;
        }
    }
    // With drafts, a good share of the tokens came from accepted drafts.
    assert_eq!(drafts, accepted > RUNS / 4, "{accepted} accepted");
    assert!(stepper.cached(SeqId::new(0)).len() <= PROMPT.len() + LEN);
    counts
}

/// The target's distribution after `ctx` at temperature 1, no filters.
fn softmax(ctx: &[Token]) -> Vec<f64> {
    let l = logits(ctx, VOCAB);
    let e: Vec<f64> = l.iter().map(|&x| f64::from(x).exp()).collect();
    let t: f64 = e.iter().sum();
    e.iter().map(|x| x / t).collect()
}

/// The exact probability of each sequence of `LEN` tokens.
fn exact() -> Vec<f64> {
    (0..CELLS)
        .map(|c| {
            let mut ctx = PROMPT.to_vec();
            let mut p = 1.0;
            for i in (0..LEN).rev() {
                let t = (c / VOCAB.pow(u32::try_from(i).unwrap())) % VOCAB;
                p *= softmax(&ctx)[t];
                ctx.push(Token::try_from(t).unwrap());
            }
            p
        })
        .collect()
}

/// The chi-square statistic of `counts` against `expected` counts (cells
/// expected under 5 merged) and its critical value at significance 0.001
/// (Wilson-Hilferty).
fn chi_square(counts: &[f64], expected: &[f64]) -> (f64, f64) {
    let (mut stat, mut df, mut small_o, mut small_e) = (0.0, 0usize, 0.0, 0.0);
    for (o, e) in counts.iter().zip(expected) {
        if *e < 5.0 {
            small_o += o;
            small_e += e;
        } else {
            stat += (o - e).powi(2) / e;
            df += 1;
        }
    }
    if small_e > 0.0 {
        stat += (small_o - small_e).powi(2) / small_e;
        df += 1;
    }
    let k = (df - 1) as f64;
    let z = 3.090; // the 0.999 quantile of the normal distribution
    (
        stat,
        k * (1.0 - 2.0 / (9.0 * k) + z * (2.0 / (9.0 * k)).sqrt()).powi(3),
    )
}

/// Speculative sampling with a biased acceptance (`u < sqrt(p)`: too many
/// drafted tokens kept), otherwise the rule of `verify::sampled`.
fn biased_counts() -> Vec<f64> {
    let mut counts = vec![0.0; CELLS];
    let mut rng = 7u64;
    let mut uniform = move || {
        rng = rng
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (rng >> 11) as f64 / (1u64 << 53) as f64
    };
    let pick = |p: &[f64], skip: Option<usize>, u: f64| {
        let w = |t: usize| if Some(t) == skip { 0.0 } else { p[t] };
        let total: f64 = (0..VOCAB).map(w).sum();
        let mut acc = 0.0;
        (0..VOCAB)
            .find(|&t| {
                acc += w(t);
                u * total < acc
            })
            .unwrap_or(VOCAB - 1)
    };
    for run in 0..RUNS {
        let mut ctx = PROMPT.to_vec();
        let first = pick(&softmax(&ctx), None, uniform());
        let mut out = vec![Token::try_from(first).unwrap()];
        let mut drafter = Guess(run);
        while out.len() < LEN {
            let mut draft = Vec::new();
            drafter.draft(
                &ctx,
                *out.last().unwrap(),
                DraftLimits::default(),
                &mut draft,
            );
            ctx.push(*out.last().unwrap());
            let mut next = None;
            for &d in &draft {
                let p = softmax(&ctx);
                if uniform() < p[d as usize].sqrt() {
                    out.push(d);
                    ctx.push(d);
                    continue;
                }
                next = Some(pick(&p, Some(d as usize), uniform()));
                break;
            }
            let next = next.unwrap_or_else(|| pick(&softmax(&ctx), None, uniform()));
            out.push(Token::try_from(next).unwrap());
        }
        counts[cell(&out[..LEN])] += 1.0;
    }
    counts
}

fn unfiltered() -> Sampler {
    Sampler {
        temperature: 1.0,
        top_k: 0,
        top_p: 1.0,
        min_p: 0.0,
        seed: 0,
    }
}

#[test]
fn sampled_stepping_has_the_targets_distribution() {
    let expected: Vec<f64> = exact().iter().map(|p| p * RUNS as f64).collect();
    for drafts in [false, true] {
        let (stat, critical) = chi_square(&stepper_counts(unfiltered(), drafts, 1), &expected);
        eprintln!("drafts {drafts}: chi-square {stat:.1}, critical {critical:.1}");
        assert!(
            stat < critical,
            "drafts {drafts}: chi-square {stat:.1} >= {critical:.1}"
        );
    }
    let (stat, critical) = chi_square(&biased_counts(), &expected);
    eprintln!("biased verifier: chi-square {stat:.1}, critical {critical:.1}");
    assert!(
        stat > critical,
        "the biased verifier passed: {stat:.1} < {critical:.1}"
    );
}

#[test]
fn sampled_stepping_with_filters_matches_plain_sampling() {
    let sampler = Sampler {
        temperature: 0.7,
        top_k: 3,
        top_p: 0.9,
        min_p: 0.05,
        seed: 0,
    };
    let plain = stepper_counts(sampler, false, 1_000_000);
    let spec = stepper_counts(sampler, true, 2_000_000);
    // Two samples of equal size: chi-square of one against the other's
    // counts halved with its own (the pooled estimate).
    let pooled: Vec<f64> = plain
        .iter()
        .zip(&spec)
        .map(|(a, b)| (a + b) / 2.0)
        .collect();
    let (s1, critical) = chi_square(&spec, &pooled);
    let (s2, _) = chi_square(&plain, &pooled);
    eprintln!(
        "filters, drafts against plain: chi-square {:.1}, critical {critical:.1}",
        s1 + s2
    );
    assert!(
        s1 + s2 < critical,
        "chi-square {:.1} >= {critical:.1}",
        s1 + s2
    );
    // The filters cut some sequences out entirely, in both.
    let zero = |c: &[f64]| c.iter().filter(|&&x| x == 0.0).count();
    assert!(zero(&plain) > 0 && zero(&plain) == zero(&spec));
}
