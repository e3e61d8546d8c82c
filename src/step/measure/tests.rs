use std::time::Duration;

use super::{LogitNoise, MeasureError, PassCost, PassCurve, RowNoise};
use crate::step::target::{Batch, Kept, SeqId, Shape, Target};
use crate::token::Token;
use crate::Error;

#[derive(Debug, thiserror::Error)]
enum MockError {
    #[error("sequence {seq}: row at position {pos}, cache holds {held}")]
    Position { seq: usize, pos: usize, held: usize },
}

/// A mock model over 16 tokens whose rows depend on the last token and the
/// position: the top at 4.0, a runner-up 0.125 to 0.5 below it, the rest
/// at most 0.5. A pass of more than one row (a batched pass) adds `lift` to
/// every logit and `shift` more to the runner-up: its margins move by
/// exactly `shift`. Caches check every row's position; with `checkpoint`,
/// a removal keeps only whole blocks of 8 positions ([`Kept::Restored`]).
struct Mock {
    shape: Shape,
    caches: Vec<Vec<Token>>,
    rows: Vec<Vec<f32>>,
    lift: f32,
    shift: f32,
    checkpoint: bool,
    /// A pass sleeps `base + per_row * rows`.
    delay: Option<(Duration, Duration)>,
    passes: usize,
}

impl Mock {
    fn new(sequences: usize, lift: f32, shift: f32) -> Mock {
        Mock {
            shape: Shape {
                sequences,
                context: 1024,
                vocab: 16,
                batch: 64,
            },
            caches: vec![Vec::new(); sequences],
            rows: Vec::new(),
            lift,
            shift,
            checkpoint: false,
            delay: None,
            passes: 0,
        }
    }

    fn row(cache: &[Token], batched: bool, lift: f32, shift: f32) -> Vec<f32> {
        let last = cache.last().map_or(0, |&t| t as usize);
        let (top, runner) = ((last * 3 + 1) % 16, (last * 3 + 2) % 16);
        let gap = 0.125 * (cache.len() % 4 + 1) as f32;
        (0..16)
            .map(|j| {
                let base = match j {
                    _ if j == top => 4.0,
                    _ if j == runner => 4.0 - gap,
                    _ => 0.25 * (j % 3) as f32,
                };
                match (batched, j == runner) {
                    (false, _) => base,
                    (true, false) => base + lift,
                    (true, true) => base + lift + shift,
                }
            })
            .collect()
    }
}

impl Target for Mock {
    type Error = MockError;

    fn shape(&self) -> Shape {
        self.shape
    }

    fn forward(&mut self, batch: &Batch) -> Result<(), MockError> {
        assert!(
            batch.len() <= self.shape.batch,
            "a batch over the target's size"
        );
        self.passes += 1;
        if let Some((base, per_row)) = self.delay {
            std::thread::sleep(base + per_row * u32::try_from(batch.len()).unwrap());
        }
        self.rows.clear();
        for row in batch.rows() {
            let cache = &mut self.caches[row.seq.index()];
            if cache.len() != row.pos || row.pos >= self.shape.context {
                let (seq, held) = (row.seq.index(), cache.len());
                return Err(MockError::Position {
                    seq,
                    pos: row.pos,
                    held,
                });
            }
            cache.push(row.token);
            let out = Mock::row(cache, batch.len() > 1, self.lift, self.shift);
            self.rows.push(if row.output { out } else { Vec::new() });
        }
        Ok(())
    }

    fn logits(&mut self, row: usize) -> Result<&[f32], MockError> {
        Ok(&self.rows[row])
    }

    fn truncate(&mut self, seq: SeqId, from: usize) -> Result<Kept, MockError> {
        let cache = &mut self.caches[seq.index()];
        if !self.checkpoint || from >= cache.len() || from % 8 == 0 {
            cache.truncate(from);
            return Ok(Kept::Exact);
        }
        cache.truncate(from / 8 * 8);
        Ok(Kept::Restored { len: cache.len() })
    }
}

fn text(n: usize) -> Vec<Token> {
    (0..n)
        .map(|i| Token::try_from((i * 5 + i / 3) % 16).unwrap())
        .collect()
}

#[test]
fn the_bound_is_the_margin_shift_batched_passes_add() {
    for (lift, shift) in [(0.5, 0.25), (0.0, 0.125), (-0.5, 0.375)] {
        let mut mock = Mock::new(1, lift, shift);
        let noise = LogitNoise::measure(&mut mock, &text(60), 20, &[2, 5, 9], 0).unwrap();
        assert_eq!(noise.near_tie_bound(), shift, "lift {lift}, shift {shift}");
        assert_eq!(
            noise.max_abs_diff,
            f32::max(lift.abs(), (lift + shift).abs())
        );
        assert_eq!(noise.rows, 3 * 40);
        assert!(mock.caches.iter().all(Vec::is_empty), "caches left empty");
    }
}

#[test]
fn a_shift_the_whole_row_shares_moves_no_margin() {
    let mut mock = Mock::new(1, 0.75, 0.0);
    let noise = LogitNoise::measure(&mut mock, &text(40), 10, &[3], 0).unwrap();
    assert_eq!((noise.max_abs_diff, noise.near_tie_bound()), (0.75, 0.0));
}

#[test]
fn other_sequences_share_the_passes_and_checkpoints_are_evaluated_again() {
    let want = LogitNoise::measure(&mut Mock::new(3, 0.5, 0.25), &text(90), 30, &[1, 4], 2);
    let mut checkpointed = Mock::new(3, 0.5, 0.25);
    checkpointed.checkpoint = true;
    let got = LogitNoise::measure(&mut checkpointed, &text(90), 30, &[1, 4], 2).unwrap();
    // One-row passes of sequence 0 are batched too: the others ride along.
    assert_eq!(got, want.unwrap());
    assert_eq!((got.near_tie_bound(), got.rows), (0.25, 2 * 60));
    assert!(checkpointed.caches.iter().all(Vec::is_empty));
}

#[test]
fn calibration_covers_the_reply_and_the_cache_windows() {
    let mut mock = Mock::new(2, 0.5, 0.125);
    mock.shape.context = 1200;
    mock.shape.batch = 256;
    let noise = LogitNoise::calibrate(&mut mock, &text(50), 30, 63, 1000).unwrap();
    assert_eq!(noise.near_tie_bound(), 0.125);
    // 20 reply rows, then windows at 460 and 1060; 6 pass lengths, alone
    // and beside the other sequence.
    assert_eq!(noise.rows, (20 + 120 + 120) * 6 * 2);
    let short = LogitNoise::calibrate(&mut Mock::new(1, 0.5, 0.125), &text(50), 30, 63, 300);
    assert_eq!(
        short.unwrap().rows,
        20 * 6,
        "no window starts below the reach"
    );
}

#[test]
fn rows_that_cannot_be_compared_are_errors() {
    assert_eq!(RowNoise::of(&[1.0], &[1.0, 2.0]), None);
    assert_eq!(RowNoise::of(&[], &[]), None);
    assert_eq!(RowNoise::of(&[1.0, 0.0], &[f32::NAN, 0.0]), None);
    let far = RowNoise::of(&[3.0, 1.0, -9.0], &[3.0, 1.0, -10.0]).unwrap();
    assert_eq!(
        (far.abs_diff, far.margin_shift),
        (1.0, 0.0),
        "too far below to count"
    );
}

#[test]
fn measurement_arguments_are_checked() {
    let mut mock = Mock::new(2, 0.0, 0.0);
    let t = text(30);
    type Case<'a> = (&'a [Token], usize, &'a [usize], usize, &'a str);
    let cases: [Case; 6] = [
        (&t, 0, &[2], 0, "start"),
        (&t, 30, &[2], 0, "start"),
        (&t[..1], 1, &[2], 0, "tokens"),
        (&t, 10, &[0], 0, "pass length"),
        (&t, 10, &[61], 1, "pass length"),
        (&t, 10, &[2], 2, "sequence 2 does not exist"),
    ];
    for (tokens, start, lens, others, want) in cases {
        let e = LogitNoise::measure(&mut mock, tokens, start, lens, others).unwrap_err();
        assert!(e.to_string().contains(want), "{e}");
    }
    let e = LogitNoise::measure(&mut mock, &[1, 99], 1, &[1], 0).unwrap_err();
    assert!(matches!(
        e,
        MeasureError::Selfspec(Error::TokenOutOfRange { token: 99, .. })
    ));
}

#[test]
fn a_curve_interpolates_between_its_points() {
    let ms = Duration::from_millis;
    let point = |rows, t| PassCost {
        rows,
        median: ms(t),
    };
    let curve = PassCurve::new(
        64,
        vec![point(9, 30), point(1, 10), point(17, 40), point(9, 1)],
    )
    .unwrap();
    assert_eq!(
        curve.points().iter().map(|p| p.rows).collect::<Vec<_>>(),
        [1, 9, 17]
    );
    assert_eq!(curve.cache(), 64);
    let cases = [
        (0, 0),
        (1, 10),
        (5, 20),
        (9, 30),
        (13, 35),
        (17, 40),
        (21, 45),
    ];
    for (rows, t) in cases {
        let got = curve.time(rows).as_secs_f64() * 1e3;
        assert!((got - f64::from(t)).abs() < 1e-9, "t({rows}) = {got} ms");
    }
    // S = 1: (40 - 10) / 16 / 10; S = 4: t(4) = 17.5, t(20) = 43.75 ms.
    assert!((curve.token_cost(1) - 0.1875).abs() < 1e-9);
    assert!((curve.token_cost(4) - 26.25 / 16.0 / (17.5 / 4.0)).abs() < 1e-9);
    let steep = PassCurve::new(0, vec![point(1, 1), point(17, 100)]).unwrap();
    assert_eq!(steep.token_cost(1), 0.99, "clamped");
    let falling = PassCurve::new(0, vec![point(1, 10), point(17, 5)]).unwrap();
    assert_eq!(falling.token_cost(1), 0.0, "clamped");
    assert_eq!(falling.time(40), Duration::ZERO, "never below zero");
    let flat = PassCurve::new(0, vec![point(4, 7)]).unwrap();
    assert_eq!((flat.time(100), flat.token_cost(1)), (ms(7), 0.0));
    assert!(PassCurve::new(0, vec![]).is_err());
    assert!(PassCurve::new(0, vec![point(0, 1)]).is_err());
}

#[test]
fn pass_costs_are_timed_after_the_cache_and_rolled_back() {
    let mut mock = Mock::new(2, 0.0, 0.0);
    mock.checkpoint = true;
    let curve = PassCurve::measure(&mut mock, SeqId::new(1), 100, &[3, 1, 7], 4).unwrap();
    assert_eq!(
        curve.points().iter().map(|p| p.rows).collect::<Vec<_>>(),
        [1, 3, 7]
    );
    // 100 cache tokens in 2 passes; each size a warm-up and 4 timed passes,
    // each followed by a checkpoint's refill (100 is not a multiple of 8).
    assert_eq!(mock.passes, 2 + 3 * 5 * 2);
    assert!(mock.caches.iter().all(Vec::is_empty));
}

#[test]
fn the_token_cost_follows_the_pass_times() {
    let ms = Duration::from_micros;
    let mut mock = Mock::new(1, 0.0, 0.0);
    mock.delay = Some((ms(4000), ms(500)));
    let curve = PassCurve::measure_for_token_cost(&mut mock, SeqId::new(0), 1).unwrap();
    assert_eq!(curve.cache(), PassCurve::TOKEN_COST_CACHE);
    // t(1) = 4.5 ms, t(17) = 12.5 ms: (12.5 - 4.5) / 16 / 4.5 = 0.111
    let cost = curve.token_cost(1);
    assert!((0.07..0.16).contains(&cost), "{cost}");
    mock.delay = Some((ms(4000), ms(0)));
    let flat = PassCurve::measure_for_token_cost(&mut mock, SeqId::new(0), 1).unwrap();
    assert!(flat.token_cost(1) < 0.05, "{}", flat.token_cost(1));
}

#[test]
fn pass_cost_arguments_are_checked() {
    let mut mock = Mock::new(1, 0.0, 0.0);
    let cases: [(usize, usize, &[usize], usize, &str); 7] = [
        (1, 0, &[1], 1, "sequence 1 does not exist"),
        (0, 0, &[], 1, "`sizes` = 0"),
        (0, 0, &[0], 1, "`rows` = 0"),
        (0, 0, &[65], 1, "`rows` = 65"),
        (0, 0, &[1], 0, "`reps` = 0"),
        (
            0,
            1000,
            &[30],
            1,
            "`cache` = 1000 is out of range; allowed: 0..=994",
        ),
        (0, 0, &[1], 10_001, "`reps`"),
    ];
    for (seq, cache, sizes, reps, want) in cases {
        let e = PassCurve::measure(&mut mock, SeqId::new(seq), cache, sizes, reps).unwrap_err();
        assert!(e.to_string().contains(want), "{e}");
    }
    mock.shape.vocab = 0;
    let e = PassCurve::measure(&mut mock, SeqId::new(0), 0, &[1], 1).unwrap_err();
    assert!(matches!(
        e,
        MeasureError::Selfspec(Error::Shape { field: "vocab", .. })
    ));
}
