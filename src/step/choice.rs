//! [`Choice`]: the greedy choice of one row of logits, in a vectorized
//! scan.
//!
//! Every row a greedy pass outputs is scanned over the whole vocabulary
//! (49,152 logits for SmolLM2, 151,936 for Qwen3), so a drafted row costs a
//! scan as well as its share of the pass. A scan element by element carries
//! each comparison's result into the next and does not vectorize; this one
//! keeps the two highest logits in [`LANES`] independent lanes, which the
//! compiler turns into vector compares and selects, merges the lanes, then
//! finds the first index of the highest a chunk at a time (the bench
//! `choice`: BENCHMARKS.md, "The step's own cost").

use crate::token::Token;

/// The greedy choice of one row: its highest logit, and how far ahead of
/// the second it is.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Choice {
    /// The argmax (the lowest id among equal logits).
    pub token: Token,
    /// The top logit minus the second (infinite for a one-token vocabulary):
    /// a small margin is a near tie, which batched and one-token passes may
    /// break differently.
    pub margin: f32,
}

impl Choice {
    /// The argmax of `logits` (the lowest id on a tie) and its margin;
    /// `None` for an empty row, one with a NaN, or one longer than a
    /// [`Token`] can index.
    ///
    /// ```
    /// use selfspec::step::Choice;
    ///
    /// let c = Choice::of(&[0.5, 2.0, 1.5]).unwrap();
    /// assert_eq!((c.token, c.margin), (1, 0.5));
    /// assert!(Choice::of(&[]).is_none());
    /// assert!(Choice::of(&[1.0, f32::NAN]).is_none());
    /// ```
    #[must_use]
    pub fn of(logits: &[f32]) -> Option<Choice> {
        if logits.is_empty() || Token::try_from(logits.len()).is_err() {
            return None;
        }
        let best = top2(logits)?;
        Some(Choice {
            token: first_of(logits, best.top)?,
            margin: best.top - best.second,
        })
    }
}

/// Lanes of the scan: 32 `f32` are two AVX-512 registers an array, four
/// AVX, eight SSE: enough independent compares to hide their latency. 16
/// lanes measured 5% faster with SSE2 only, 5% slower with AVX2 and 30%
/// slower with AVX-512; 8 lanes 2.7 to 6 times slower (BENCHMARKS.md,
/// "The step's own cost").
const LANES: usize = 32;

/// The highest logit of a row and the second highest (equal to it when it
/// occurs twice).
#[derive(Clone, Copy, Debug)]
struct Top2 {
    top: f32,
    second: f32,
}

impl Top2 {
    /// `self` and `other`, two disjoint parts of one row, as one part.
    fn merge(self, other: Top2) -> Top2 {
        let (hi, lo) = if other.top > self.top {
            (other, self)
        } else {
            (self, other)
        };
        Top2 {
            top: hi.top,
            // A part's second never exceeds its top.
            second: max(hi.second, lo.top),
        }
    }
}

/// The row's two highest logits; `None` if it holds a NaN. Lane `j` scans
/// the elements `j`, `j + LANES`, ...; each array is a few registers and
/// each update a vector compare and select. A NaN never rises into a lane
/// (every comparison with it is false); each lane notes seeing one.
fn top2(logits: &[f32]) -> Option<Top2> {
    let mut top = [f32::NEG_INFINITY; LANES];
    let mut second = [f32::NEG_INFINITY; LANES];
    let mut nan = [0.0f32; LANES];
    let mut update = |j: usize, x: f32| {
        let low = if x > top[j] { top[j] } else { x };
        second[j] = max(low, second[j]);
        top[j] = max(x, top[j]);
        nan[j] = if x.is_nan() { 1.0 } else { nan[j] };
    };
    let chunks = logits.chunks_exact(LANES);
    let rest = chunks.remainder();
    for chunk in chunks {
        for (j, &x) in chunk.iter().enumerate() {
            update(j, x);
        }
    }
    for (j, &x) in rest.iter().enumerate() {
        update(j, x);
    }
    if nan.iter().any(|&n| n != 0.0) {
        return None;
    }
    (0..LANES)
        .map(|j| Top2 {
            top: top[j],
            second: second[j],
        })
        .reduce(Top2::merge)
}

/// The first index of `value` in `logits`, one chunk of [`LANES`] compared
/// at a time (a vector compare, not a branch an element).
fn first_of(logits: &[f32], value: f32) -> Option<Token> {
    let chunks = logits.chunks_exact(LANES);
    let rest = chunks.remainder();
    let rest_start = logits.len() - rest.len();
    for (k, chunk) in chunks.enumerate() {
        if chunk.iter().fold(false, |any, &x| any | (x == value)) {
            let j = chunk.iter().position(|&x| x == value)?;
            return Token::try_from(k * LANES + j).ok();
        }
    }
    let j = rest.iter().position(|&x| x == value)?;
    Token::try_from(rest_start + j).ok()
}

/// `a` if it is above `b`, else `b` (a NaN `a` never is): one `maxps`.
#[inline(always)]
fn max(a: f32, b: f32) -> f32 {
    if a > b {
        a
    } else {
        b
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The scan element by element, in order: the oracle.
    fn naive(logits: &[f32]) -> Option<Choice> {
        let (mut best, mut top, mut second) = (0usize, f32::NEG_INFINITY, f32::NEG_INFINITY);
        for (i, &l) in logits.iter().enumerate() {
            if l.is_nan() {
                return None;
            }
            if l > top {
                second = top;
                top = l;
                best = i;
            } else if l > second {
                second = l;
            }
        }
        let token = Token::try_from(best).ok().filter(|_| !logits.is_empty())?;
        Some(Choice {
            token,
            margin: top - second,
        })
    }

    /// A row of `len` logits, each `f(i)`.
    fn row(len: usize, f: impl Fn(usize) -> f32) -> Vec<f32> {
        (0..len).map(f).collect()
    }

    #[test]
    fn the_choice_of_a_row_is_the_naive_scans() {
        let inf = f32::INFINITY;
        let cases: Vec<(&str, Vec<f32>)> = vec![
            ("one", vec![7.0]),
            ("a tie for the top", vec![3.0, 3.0, 1.0]),
            ("negative", vec![-1.0, -4.0]),
            ("all -inf", vec![-inf; 20]),
            (
                "-inf then one finite",
                row(40, |i| if i == 37 { -5.0 } else { -inf }),
            ),
            (
                "two +inf",
                row(33, |i| if i == 3 || i == 30 { inf } else { 0.0 }),
            ),
            (
                "top in the remainder",
                row(35, |i| if i == 33 { 9.0 } else { 1.0 }),
            ),
            (
                "ties across lanes",
                row(64, |i| if i % 5 == 2 { 4.0 } else { 0.5 }),
            ),
            (
                "second in another lane",
                row(48, |i| [1.0, 8.0, 7.5][i % 3] - i as f32 * 0.01),
            ),
            (
                "a NaN in the chunks",
                row(40, |i| if i == 17 { f32::NAN } else { 1.0 }),
            ),
            (
                "a NaN in the remainder",
                row(40, |i| if i == 39 { f32::NAN } else { 1.0 }),
            ),
            ("empty", vec![]),
            (
                "a vocabulary",
                row(49_152, |i| ((i * 7919) % 10_007) as f32 * 0.001),
            ),
        ];
        for (name, logits) in cases {
            let (got, want) = (Choice::of(&logits), naive(&logits));
            let same = match (got, want) {
                (Some(g), Some(w)) => {
                    g.token == w.token && g.margin.to_bits() == w.margin.to_bits()
                }
                (g, w) => g == w,
            };
            assert!(same, "{name}: {got:?} against {want:?}");
        }
    }
}
