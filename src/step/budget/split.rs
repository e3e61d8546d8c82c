//! A pass's computations: the rows of each, as the target's [`Split`]
//! makes them, and the longest cache one of them reads, so that the budget
//! prices a pass as the sum of its computations' times.

use crate::step::Split;

/// One computation of a pass.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Part {
    /// Its rows.
    pub rows: usize,
    /// Rows a sequence, where it takes as many from each (1 for a whole
    /// computation of one-row sequences; its rows for a whole one of any
    /// other batch).
    pub each: usize,
    /// The positions its longest-cached sequence holds once the
    /// computation is in: what each of its rows reads (a target with one
    /// cache a sequence reads the longest one for all in a computation, as
    /// llama.cpp does).
    pub span: usize,
}

/// One sequence of a pass: its rows and the positions its cache held
/// before the pass.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Load {
    /// Rows it sends.
    pub rows: usize,
    /// Positions in its cache before the pass.
    pub cached: usize,
}

/// Writes to `out` the computations of a pass in which sequence `s` has
/// `loads[s]` (in sequence order, as the stepper's batch has them); `left`
/// is scratch.
pub(crate) fn computations(
    split: Split,
    loads: &[Load],
    left: &mut Vec<usize>,
    out: &mut Vec<Part>,
) {
    out.clear();
    match split {
        Split::Whole { ubatch } => {
            let ubatch = ubatch.max(1);
            let mut total: usize = loads.iter().map(|l| l.rows).sum();
            let each = if loads.iter().all(|l| l.rows <= 1) {
                1
            } else {
                total
            };
            let span = longest(loads);
            while total > 0 {
                let rows = total.min(ubatch);
                out.push(Part { rows, each, span });
                total -= rows;
            }
        }
        Split::PerSequence => out.extend(loads.iter().filter(|l| l.rows > 0).map(|l| Part {
            rows: l.rows,
            each: l.rows,
            span: l.cached + l.rows,
        })),
        Split::EqualRuns { ubatch } => equal_runs(loads, ubatch.max(1), left, out),
    }
}

/// The positions the longest cache of `loads`' sequences with rows holds
/// once they are in.
fn longest(loads: &[Load]) -> usize {
    loads
        .iter()
        .filter(|l| l.rows > 0)
        .map(|l| l.cached + l.rows)
        .max()
        .unwrap_or(0)
}

/// [`Split::EqualRuns`]: from the first sequence with rows left, the run of
/// consecutive ones with rows left, each giving the fewest rows any of them
/// has left (at most `ubatch` rows in all, at least one each).
fn equal_runs(loads: &[Load], ubatch: usize, left: &mut Vec<usize>, out: &mut Vec<Part>) {
    left.clear();
    left.extend(loads.iter().map(|l| l.rows));
    let mut first = 0;
    loop {
        while left.get(first) == Some(&0) {
            first += 1;
        }
        if first >= left.len() {
            return;
        }
        let (mut end, mut fewest) = (first, usize::MAX);
        while end < left.len() && left[end] > 0 && end - first < ubatch {
            fewest = fewest.min(left[end]);
            end += 1;
        }
        let n = end - first;
        let each = fewest.min((ubatch / n).max(1));
        for r in &mut left[first..end] {
            *r -= each;
        }
        let done = loads[first..end].iter().zip(&left[first..end]);
        let span = done.map(|(l, left)| l.cached + l.rows - left).max();
        out.push(Part {
            rows: each * n,
            each,
            span: span.unwrap_or(0),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn loads(rows: &[usize]) -> Vec<Load> {
        rows.iter().map(|&rows| Load { rows, cached: 0 }).collect()
    }

    fn split(split: Split, rows: &[usize]) -> Vec<usize> {
        let (mut left, mut out) = (Vec::new(), Vec::new());
        computations(split, &loads(rows), &mut left, &mut out);
        out.iter().map(|p| p.rows).collect()
    }

    #[test]
    fn a_computation_reads_its_longest_cache() {
        let runs = Split::EqualRuns { ubatch: 512 };
        /// (split, (rows, cached) a sequence, spans of the computations)
        type Case<'a> = (Split, &'a [(usize, usize)], &'a [usize]);
        let cases: &[Case] = &[
            (runs, &[(1, 100), (1, 900), (1, 50)], &[901]),
            // The draft's computation reads the drafting sequence's cache.
            (runs, &[(1, 100), (4, 900), (1, 50)], &[901, 904]),
            (
                runs,
                &[(4, 100), (1, 900), (0, 5000), (1, 50)],
                &[901, 104, 51],
            ),
            (Split::PerSequence, &[(2, 10), (0, 90), (3, 20)], &[12, 23]),
            (Split::Whole { ubatch: 4 }, &[(3, 10), (3, 20)], &[23, 23]),
        ];
        for (i, &(s, seqs, want)) in cases.iter().enumerate() {
            let seqs: Vec<Load> = seqs
                .iter()
                .map(|&(rows, cached)| Load { rows, cached })
                .collect();
            let (mut left, mut out) = (Vec::new(), Vec::new());
            computations(s, &seqs, &mut left, &mut out);
            let spans: Vec<usize> = out.iter().map(|p| p.span).collect();
            assert_eq!(spans, want, "case {i}: {s:?} {seqs:?}");
        }
    }

    #[test]
    fn splits_as_a_table() {
        let whole = Split::Whole { ubatch: 512 };
        let runs = Split::EqualRuns { ubatch: 512 };
        // (split, rows a sequence, computations)
        let cases: &[(Split, &[usize], &[usize])] = &[
            (whole, &[1, 4, 1, 1], &[7]),
            (Split::Whole { ubatch: 4 }, &[3, 3, 3], &[4, 4, 1]),
            (Split::PerSequence, &[1, 0, 3], &[1, 3]),
            // Plain decoding: one computation over the run.
            (runs, &[1, 1, 1, 1], &[4]),
            // Equal drafts: still one.
            (runs, &[3, 3, 3, 3], &[12]),
            // One sequence drafts: a second computation for its rows.
            (runs, &[1, 4, 1, 1], &[4, 3]),
            // Drafts in two sequences apart: a computation each.
            (runs, &[1, 4, 1, 3], &[4, 3, 2]),
            // An idle sequence breaks the run.
            (runs, &[1, 0, 1, 1], &[1, 2]),
            // The cap on rows.
            (Split::EqualRuns { ubatch: 4 }, &[3, 3], &[4, 2]),
        ];
        for (i, &(s, rows, want)) in cases.iter().enumerate() {
            assert_eq!(split(s, rows), want, "case {i}: {s:?} {rows:?}");
        }
    }

    /// llama.cpp's `split_equal` with sequential ids, token by token: each
    /// computation takes the sequences of the first unused rows whose ids
    /// follow one another, then one row of each while all have one left
    /// and the rows fit.
    fn naive_split_equal(rows: &[usize], ubatch: usize) -> Vec<usize> {
        let mut tokens: Vec<(usize, bool)> = Vec::new();
        for (s, &r) in rows.iter().enumerate() {
            tokens.extend(std::iter::repeat((s, false)).take(r));
        }
        let mut out = Vec::new();
        loop {
            let mut set: Vec<usize> = Vec::new();
            for &(s, used) in &tokens {
                if used || set.contains(&s) {
                    continue;
                }
                if set.last().map_or(true, |&l| s == l + 1) {
                    set.push(s);
                    if set.len() >= ubatch {
                        break;
                    }
                }
            }
            if set.is_empty() {
                return out;
            }
            let mut taken = 0;
            loop {
                let all = set
                    .iter()
                    .all(|&s| tokens.iter().any(|&(t, u)| t == s && !u));
                if !all {
                    break;
                }
                for &s in &set {
                    let t = tokens.iter_mut().find(|(t, u)| *t == s && !*u).unwrap();
                    t.1 = true;
                }
                taken += 1;
                if (taken + 1) * set.len() > ubatch {
                    break;
                }
            }
            out.push(taken * set.len());
        }
    }

    #[test]
    fn equal_runs_is_llama_cpps_split_on_every_small_batch() {
        // Every batch of up to 4 sequences of 0 to 4 rows, at three caps.
        for ubatch in [3, 5, 512] {
            for code in 0..5usize.pow(4) {
                let rows: Vec<usize> = (0..4).map(|i| code / 5usize.pow(i) % 5).collect();
                assert_eq!(
                    split(Split::EqualRuns { ubatch }, &rows),
                    naive_split_equal(&rows, ubatch),
                    "{rows:?} at ubatch {ubatch}"
                );
            }
        }
    }
}
