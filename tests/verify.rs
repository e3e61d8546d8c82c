//! `selfspec::verify` against naive reference implementations, and the
//! distribution of `sampled` against the exact one (chi-square).

// Synthetic test data: small ids and counts converted between integer
// widths and to probabilities; every value is far inside the target type.
#![allow(
    clippy::cast_possible_truncation,
    clippy::cast_sign_loss,
    clippy::cast_possible_wrap
)]

mod common;

use common::Rng;
use selfspec::verify::{greedy, greedy_next, Verdict};
use selfspec::Token;

/// `verify::sampled` on rows it can use (every row here has mass).
fn sampled<P: AsRef<[f32]>>(draft: &[Token], rows: &[P], uniform: impl FnMut() -> f64) -> Verdict {
    selfspec::verify::sampled(draft, rows, uniform).expect("rows with mass")
}

#[test]
fn greedy_matches_a_naive_loop() {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    for _ in 0..2000 {
        let k = rng.below(6) as usize;
        let draft: Vec<Token> = (0..k).map(|_| rng.below(3) as Token).collect();
        let rows = rng.below(8) as usize;
        let argmax: Vec<Token> = (0..rows).map(|_| rng.below(3) as Token).collect();
        let mut n = 0;
        while n < draft.len() && n < argmax.len() && draft[n] == argmax[n] {
            n += 1;
        }
        assert_eq!(greedy(&draft, &argmax), n, "{draft:?} {argmax:?}");
        let want = (n < argmax.len()).then(|| Verdict {
            n_accepted: n,
            next_token: argmax[n],
        });
        assert_eq!(greedy_next(&draft, &argmax), want, "{draft:?} {argmax:?}");
    }
}

/// The general speculative-sampling rule (Leviathan et al.; Chen et al.) with
/// an explicit draft distribution q per position, here one-hot on the draft
/// token: accept with min(1, p(d) / q(d)), else sample from norm(max(0, p - q));
/// all accepted: sample from the last row.
fn reference(draft: &[Token], p: &[Vec<f32>], mut uniform: impl FnMut() -> f64) -> Verdict {
    let vocab = p[0].len();
    let pick = |w: &[f64], u: f64| -> Token {
        let total: f64 = w.iter().sum();
        let mut c = 0.0;
        for (t, &x) in w.iter().enumerate() {
            c += x;
            if u * total < c {
                return t as Token;
            }
        }
        w.iter().rposition(|&x| x > 0.0).unwrap() as Token
    };
    for (i, &d) in draft.iter().enumerate() {
        let q: Vec<f64> = (0..vocab).map(|t| f64::from(t == d as usize)).collect();
        let pd = p[i][d as usize] as f64;
        if uniform() < (pd / q[d as usize]).min(1.0) {
            continue;
        }
        let residual: Vec<f64> = (0..vocab)
            .map(|t| (p[i][t] as f64 - q[t]).max(0.0))
            .collect();
        return Verdict {
            n_accepted: i,
            next_token: pick(&residual, uniform()),
        };
    }
    let last: Vec<f64> = p[draft.len()].iter().map(|&x| x as f64).collect();
    Verdict {
        n_accepted: draft.len(),
        next_token: pick(&last, uniform()),
    }
}

fn random_rows(rng: &mut Rng, rows: usize, vocab: usize) -> Vec<Vec<f32>> {
    (0..rows)
        .map(|_| {
            let w: Vec<f64> = (0..vocab)
                .map(|_| {
                    if rng.below(4) == 0 {
                        0.0
                    } else {
                        rng.uniform()
                    }
                })
                .collect();
            let total: f64 = w.iter().sum::<f64>().max(1e-9);
            w.iter().map(|x| (x / total) as f32).collect()
        })
        .collect()
}

#[test]
fn sampled_matches_the_reference_draw_for_draw() {
    let mut rng = Rng(0x2545_f491_4f6c_dd1d);
    for case in 0..3000 {
        let vocab = 2 + rng.below(6) as usize;
        let k = rng.below(5) as usize;
        let mut p = random_rows(&mut rng, k + 1, vocab);
        // A row with no mass at all cannot be sampled; keep one token.
        for row in &mut p {
            if row.iter().all(|&x| x == 0.0) {
                row[0] = 1.0;
            }
        }
        // Draft tokens: often the likely ones, so drafts are partly accepted.
        let draft: Vec<Token> = (0..k).map(|_| rng.below(vocab as u64) as Token).collect();
        let seed = rng.next() | 1;
        let (mut a, mut b) = (Rng(seed), Rng(seed));
        let got = sampled(&draft, &p, || a.uniform());
        let want = reference(&draft, &p, || b.uniform());
        assert_eq!(got, want, "case {case}: draft {draft:?}, rows {p:?}");
    }
}

/// The exact probability of each (n_accepted, next_token).
fn exact(draft: &[Token], p: &[Vec<f32>]) -> Vec<((usize, Token), f64)> {
    let mut out = Vec::new();
    let mut reach = 1.0; // P(the first i draft tokens are kept)
    for (i, &d) in draft.iter().enumerate() {
        let row = &p[i];
        for (t, &x) in row.iter().enumerate() {
            if t != d as usize {
                out.push(((i, t as Token), reach * x as f64));
            }
        }
        reach *= row[d as usize] as f64;
    }
    for (t, &x) in p[draft.len()].iter().enumerate() {
        out.push(((draft.len(), t as Token), reach * x as f64));
    }
    out
}

/// Chi-square statistic of `n` draws of `verdict` against `exact`; returns
/// (statistic, critical value at p = 1e-4 for its degrees of freedom).
fn chi_square(
    draft: &[Token],
    p: &[Vec<f32>],
    n: usize,
    mut verdict: impl FnMut(&mut Rng) -> Verdict,
) -> (f64, f64) {
    let cells = exact(draft, p);
    let mut counts = vec![0u64; cells.len()];
    let mut rng = Rng(0xdead_beef_cafe_f00d);
    for _ in 0..n {
        let v = verdict(&mut rng);
        let key = (v.n_accepted, v.next_token);
        let i = cells.iter().position(|(k, _)| *k == key);
        match i {
            Some(i) => counts[i] += 1,
            None => return (f64::INFINITY, 0.0), // an impossible outcome
        }
    }
    let mut stat = 0.0;
    let mut df = 0usize;
    let (mut pooled_obs, mut pooled_exp) = (0.0, 0.0);
    for ((_, prob), &obs) in cells.iter().zip(&counts) {
        let expected = prob * n as f64;
        if expected == 0.0 {
            if obs > 0 {
                return (f64::INFINITY, 0.0);
            }
            continue;
        }
        if expected < 5.0 {
            pooled_obs += obs as f64;
            pooled_exp += expected;
            continue;
        }
        stat += (obs as f64 - expected).powi(2) / expected;
        df += 1;
    }
    if pooled_exp > 0.0 {
        stat += (pooled_obs - pooled_exp).powi(2) / pooled_exp;
        df += 1;
    }
    let df = (df - 1) as f64;
    // Wilson-Hilferty: the chi-square quantile from the normal one (z = 3.719 at 1e-4).
    let z = 3.719;
    let h = 2.0 / (9.0 * df);
    (stat, df * (1.0 - h + z * h.sqrt()).powi(3))
}

#[test]
fn sampled_follows_the_target_distribution() {
    // Four tokens, a draft of three; rows chosen so every outcome has mass.
    let p: Vec<Vec<f32>> = vec![
        vec![0.1, 0.6, 0.2, 0.1],
        vec![0.3, 0.1, 0.5, 0.1],
        vec![0.25, 0.25, 0.25, 0.25],
        vec![0.7, 0.1, 0.1, 0.1],
    ];
    let draft: [Token; 3] = [1, 2, 0];
    let n = 200_000;
    let (stat, critical) = chi_square(&draft, &p, n, |rng| sampled(&draft, &p, || rng.uniform()));
    assert!(stat < critical, "chi-square {stat:.1} >= {critical:.1}");

    // The test can fail: the two classic mistakes are caught at this size (and
    // so is accepting with 0.95 p(d): 1096 against a critical value of 39.5).
    // (1) On a rejection, sampling from p itself (d not removed).
    let (stat, critical) = chi_square(&draft, &p, n, |rng| {
        let v = sampled(&draft, &p, || rng.uniform());
        if v.n_accepted < draft.len() {
            let u = rng.uniform();
            let row = &p[v.n_accepted];
            let mut c = 0.0;
            let t = row.iter().position(|&x| {
                c += x as f64;
                u < c
            });
            let t = t.unwrap_or(row.len() - 1) as Token;
            // Re-sampled d counts as a rejection with token d (never possible).
            Verdict {
                n_accepted: v.n_accepted,
                next_token: t,
            }
        } else {
            v
        }
    });
    assert!(
        stat >= critical,
        "a biased rule passed: {stat:.1} < {critical:.1}"
    );
    // (2) Accepting with probability sqrt(p(d)) (any wrong acceptance rule).
    let (stat, critical) = chi_square(&draft, &p, n, |rng| {
        let biased: Vec<Vec<f32>> = p
            .iter()
            .zip(draft.iter().map(Some).chain([None]))
            .map(|(row, d)| {
                let mut row = row.clone();
                if let Some(&d) = d {
                    row[d as usize] = row[d as usize].sqrt();
                }
                row
            })
            .collect();
        sampled(&draft, &biased, || rng.uniform())
    });
    assert!(
        stat >= critical,
        "a biased rule passed: {stat:.1} < {critical:.1}"
    );
}

#[test]
fn sampled_edge_cases() {
    // No draft: one draw from the only row.
    let mut draws = [0.99].into_iter();
    let rows: [&[f32]; 1] = [&[0.5, 0.5]];
    assert_eq!(
        sampled(&[], &rows, || draws.next().unwrap()),
        Verdict {
            n_accepted: 0,
            next_token: 1
        }
    );
    // Fewer rows than draft.len() + 1: only what they cover is verified.
    let rows: [&[f32]; 2] = [&[0.0, 1.0], &[1.0, 0.0]];
    let v = sampled(&[1, 1, 1], &rows, || 0.0);
    assert_eq!(
        v,
        Verdict {
            n_accepted: 1,
            next_token: 0
        }
    );
    // A token id beyond the row has probability 0: rejected.
    let rows: [&[f32]; 2] = [&[0.0, 1.0], &[1.0, 0.0]];
    assert_eq!(
        sampled(&[7], &rows, || 0.0),
        Verdict {
            n_accepted: 0,
            next_token: 1
        }
    );
    // Rows as Vecs (e.g. chunks of the engine's flat buffer).
    let flat = [0.0f32, 1.0, 1.0, 0.0];
    let rows: Vec<&[f32]> = flat.chunks(2).collect();
    assert_eq!(
        sampled(&[1], &rows, || 0.5),
        Verdict {
            n_accepted: 1,
            next_token: 0
        }
    );
}

/// Rows that are not distributions give `None` rather than a token: the
/// just-rejected one, or one of no probability, would not be distributed as
/// the target's.
#[test]
fn sampled_refuses_rows_it_cannot_use() {
    let none = |draft: &[Token], rows: &[&[f32]], u: f64| {
        selfspec::verify::sampled(draft, rows, || u).is_none()
    };
    type Case = (&'static str, &'static [Token], &'static [&'static [f32]]);
    let cases: [Case; 6] = [
        ("no rows", &[1], &[]),
        ("an empty row", &[], &[&[]]),
        ("an all-zero row", &[], &[&[0.0, 0.0]]),
        (
            "mass only on the rejected token",
            &[1],
            &[&[0.0, 1e-9], &[0.5, 0.5]],
        ),
        ("a NaN row", &[], &[&[f32::NAN, 1.0]]),
        ("negative mass only", &[], &[&[-1.0, -0.5]]),
    ];
    for (what, draft, rows) in cases {
        // u = 0.99: the rejected token of the fourth case is rejected.
        assert!(none(draft, rows, 0.99), "{what}");
    }
    // i32 ids as they are.
    let rows: [&[f32]; 2] = [&[0.0, 1.0], &[1.0, 0.0]];
    assert_eq!(
        selfspec::verify::sampled(&[1i32], &rows, || 0.5),
        Some(Verdict {
            n_accepted: 1,
            next_token: 0i32
        })
    );
}
