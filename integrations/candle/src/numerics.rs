//! How far batched and one-token passes of the same model may differ, and
//! the near-tie bound that follows.
//!
//! Greedy verification keeps a draft token where the batched pass's argmax
//! is that token; plain decoding takes the one-token pass's argmax. With f32
//! weights the two agree to about 1e-4 in a logit; with quantized weights
//! candle rounds a batched pass differently (the activations are quantized
//! per row and different kernels run), so where the plain pass's top two
//! candidates are close, the argmax can flip. [`batch_drift`] measures it.

use candle_core::Tensor;

use crate::{Error, Model, Representation};

/// The top-1 / top-2 logit gap under which a speculative reply may
/// legitimately differ from the plain one in `repr` (a near tie).
#[must_use]
pub fn near_tie_bound(repr: Representation) -> f32 {
    match repr {
        Representation::F32 => 1e-3,
        Representation::Q8_0 | Representation::Native => 1.0,
    }
}

/// Batched against one-token logits over some positions.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Drift {
    /// Positions compared (counted once per batch that covered them).
    pub positions: usize,
    /// The largest absolute difference of one logit.
    pub max_logit_diff: f32,
    /// The largest change of `logit[top1] - logit[b]` for `b` among the
    /// one-token row's best 8: an argmax can flip only where the plain
    /// top-1 / top-2 gap is below it.
    pub max_gap_change: f32,
    /// Positions where the two argmaxes differ.
    pub flips: usize,
    /// The smallest one-token top-1 / top-2 gap at a flip (infinite if none).
    pub min_flip_gap: f32,
}

impl Default for Drift {
    fn default() -> Drift {
        Drift {
            positions: 0,
            max_logit_diff: 0.0,
            max_gap_change: 0.0,
            flips: 0,
            min_flip_gap: f32::INFINITY,
        }
    }
}

impl Drift {
    /// Adds another measurement.
    pub fn merge(&mut self, o: &Drift) {
        self.positions += o.positions;
        self.max_logit_diff = self.max_logit_diff.max(o.max_logit_diff);
        self.max_gap_change = self.max_gap_change.max(o.max_gap_change);
        self.flips += o.flips;
        self.min_flip_gap = self.min_flip_gap.min(o.min_flip_gap);
    }

    fn compare(&mut self, one: &[f32], batched: &[f32]) {
        self.positions += 1;
        let mut order: Vec<usize> = (0..one.len()).collect();
        let k = 8.min(order.len());
        order.select_nth_unstable_by(k.saturating_sub(1), |&a, &b| one[b].total_cmp(&one[a]));
        order.truncate(k);
        order.sort_by(|&a, &b| one[b].total_cmp(&one[a]));
        let top = order[0];
        for &b in &order[1..] {
            let change = ((one[top] - one[b]) - (batched[top] - batched[b])).abs();
            self.max_gap_change = self.max_gap_change.max(change);
        }
        for (x, y) in one.iter().zip(batched) {
            self.max_logit_diff = self.max_logit_diff.max((x - y).abs());
        }
        let argmax = |r: &[f32]| {
            r.iter()
                .enumerate()
                .fold(
                    (0, f32::NEG_INFINITY),
                    |m, (i, &x)| if x > m.1 { (i, x) } else { m },
                )
                .0
        };
        if argmax(batched) != top {
            self.flips += 1;
            let gap = order.get(1).map_or(f32::INFINITY, |&b| one[top] - one[b]);
            self.min_flip_gap = self.min_flip_gap.min(gap);
        }
    }
}

/// Decodes `steps` tokens after `prompt` one pass a token (keeping every
/// row), then for each size in `batches` evaluates the same tokens in passes
/// of that many from the same cache, and compares the rows.
///
/// # Errors
///
/// As [`Model::forward`].
pub fn batch_drift(
    model: &mut Model,
    prompt: &[u32],
    steps: usize,
    batches: &[usize],
) -> Result<Drift, Error> {
    let rows = |t: &Tensor| -> Result<Vec<Vec<f32>>, Error> { Ok(t.to_vec2::<f32>()?) };
    model.reset();
    let mut one = rows(&model.prefill(prompt, crate::decode::PREFILL_CHUNK)?)?;
    let mut inputs = Vec::with_capacity(steps);
    for _ in 0..steps {
        let last = one.last().map(|r| argmax(r)).unwrap_or(0);
        inputs.push(last);
        one.extend(rows(&model.forward(&[last])?)?);
    }
    // one[j + 1] is the row after inputs[j].
    let mut drift = Drift::default();
    for &b in batches {
        let mut start = 0;
        while start + b <= inputs.len() {
            model.truncate(prompt.len() + start);
            let batched = rows(&model.forward(&inputs[start..start + b])?)?;
            for (i, row) in batched.iter().enumerate() {
                drift.compare(&one[start + i + 1], row);
            }
            start += b;
        }
    }
    model.reset();
    Ok(drift)
}

fn argmax(row: &[f32]) -> u32 {
    let best = row
        .iter()
        .enumerate()
        .fold(
            (0, f32::NEG_INFINITY),
            |m, (i, &x)| if x > m.1 { (i, x) } else { m },
        )
        .0;
    u32::try_from(best).unwrap_or(0)
}
