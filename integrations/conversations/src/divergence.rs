//! Whether speculative output matches plain output, and where it does not,
//! whether the difference sits at a near tie of the plain pass.

/// Where the first difference between a plain and a speculative reply is.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Divergence {
    /// Token for token the same.
    Identical,
    /// The first difference is at `position`, where the plain pass's top-1 /
    /// top-2 logit gap (`gap`) is below the bound: batched and one-token
    /// passes may round the two candidates differently there.
    NearTie {
        /// The first differing position in the reply.
        position: usize,
        /// The plain pass's top-1 minus top-2 logit at that position.
        gap: f32,
    },
    /// The first difference is where the plain pass was not near a tie: a
    /// bug in the loop (drafting must never change greedy output).
    NotNearTie {
        /// The first differing position in the reply.
        position: usize,
        /// The plain pass's top-1 minus top-2 logit at that position.
        gap: f32,
    },
}

impl Divergence {
    /// Whether the replies differ at all.
    #[must_use]
    pub fn diverged(&self) -> bool {
        !matches!(self, Divergence::Identical)
    }
}

/// Compares a speculative reply with the plain one. `plain_gaps[i]` is the
/// top-1 minus top-2 logit of the plain pass that chose `plain[i]`; a
/// difference at `i` is a near tie when `plain_gaps[i] < bound`.
///
/// When one reply is a prefix of the other (one stopped earlier), the first
/// missing position is judged the same way: the shorter reply chose its end
/// where the longer one went on. A gap that is missing (`plain_gaps` shorter
/// than `plain`) counts as not near a tie.
#[must_use]
pub fn compare<T: PartialEq>(
    plain: &[T],
    plain_gaps: &[f32],
    spec: &[T],
    bound: f32,
) -> Divergence {
    let same = plain.iter().zip(spec).take_while(|(p, s)| p == s).count();
    if same == plain.len() && same == spec.len() {
        return Divergence::Identical;
    }
    // The plain pass's choice at `same` (or, if plain ended there, its last
    // choice, the end-of-turn token: the nearest gap it has).
    let at = same.min(plain.len().saturating_sub(1));
    let gap = plain_gaps.get(at).copied().unwrap_or(f32::INFINITY);
    if gap < bound {
        Divergence::NearTie {
            position: same,
            gap,
        }
    } else {
        Divergence::NotNearTie {
            position: same,
            gap,
        }
    }
}

/// A logit row's greedy choice and its top-1 minus top-2 logit gap, the gap
/// [`compare`] reads to tell a near tie. The first of equal logits wins
/// (gap 0); a row without a second logit has an infinite gap.
#[must_use]
pub fn argmax_gap(row: &[f32]) -> (u32, f32) {
    let (mut best, mut top, mut second) = (0usize, f32::NEG_INFINITY, f32::NEG_INFINITY);
    for (i, &x) in row.iter().enumerate() {
        if x > top {
            second = top;
            top = x;
            best = i;
        } else if x > second {
            second = x;
        }
    }
    let gap = if second == f32::NEG_INFINITY {
        f32::INFINITY
    } else {
        top - second
    };
    (u32::try_from(best).unwrap_or(u32::MAX), gap)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn differences_are_judged_by_the_plain_gap_at_the_first_one() {
        let gaps = [3.0, 0.1, 2.0, 0.05];
        let cases: &[(&[u32], &[u32], Divergence)] = &[
            (&[1, 2, 3, 4], &[1, 2, 3, 4], Divergence::Identical),
            (
                &[1, 2, 3, 4],
                &[1, 9, 3, 4],
                Divergence::NearTie {
                    position: 1,
                    gap: 0.1,
                },
            ),
            (
                &[1, 2, 3, 4],
                &[1, 2, 9],
                Divergence::NotNearTie {
                    position: 2,
                    gap: 2.0,
                },
            ),
            (
                &[1, 2, 3, 4],
                &[7],
                Divergence::NotNearTie {
                    position: 0,
                    gap: 3.0,
                },
            ),
            // spec stopped early: judged where plain went on
            (
                &[1, 2, 3, 4],
                &[1, 2, 3],
                Divergence::NearTie {
                    position: 3,
                    gap: 0.05,
                },
            ),
            // spec went on: judged at plain's last choice (its end)
            (
                &[1, 2, 3, 4],
                &[1, 2, 3, 4, 5],
                Divergence::NearTie {
                    position: 4,
                    gap: 0.05,
                },
            ),
            (&[], &[], Divergence::Identical),
        ];
        for (plain, spec, want) in cases {
            assert_eq!(
                compare(plain, &gaps, spec, 0.5),
                *want,
                "{plain:?} vs {spec:?}"
            );
        }
    }

    #[test]
    fn a_missing_gap_is_never_a_near_tie() {
        assert!(matches!(
            compare(&[1, 2], &[], &[1, 3], 1e9),
            Divergence::NotNearTie { .. }
        ));
        assert!(matches!(
            compare::<u32>(&[], &[], &[1], 1e9),
            Divergence::NotNearTie { .. }
        ));
    }

    #[test]
    fn argmax_gap_cases() {
        let cases: [(&[f32], u32, f32); 5] = [
            (&[0.5, 2.0, 1.25], 1, 0.75),
            (&[3.0, 3.0, 1.0], 0, 0.0),
            (&[-1.0, -4.0], 0, 3.0),
            (&[7.0], 0, f32::INFINITY),
            (&[], 0, f32::INFINITY),
        ];
        for (row, token, gap) in cases {
            assert_eq!(super::argmax_gap(row), (token, gap), "{row:?}");
        }
    }
}
