//! `Choice::of`, the greedy choice of a row, against a scan element by
//! element in order: the same token and the same margin, bit for bit, on
//! rows of every length around the scan's lanes, with ties, infinities and
//! NaNs.

use proptest::prelude::*;
use selfspec::step::Choice;

/// The oracle: the argmax (the first of equal tops) and the top minus the
/// second highest; `None` for an empty row or one with a NaN.
fn naive(logits: &[f32]) -> Option<(u32, u32)> {
    if logits.iter().any(|x| x.is_nan()) || logits.is_empty() {
        return None;
    }
    let mut best = 0;
    for (i, &x) in logits.iter().enumerate() {
        if x > logits[best] {
            best = i;
        }
    }
    let second = logits
        .iter()
        .enumerate()
        .filter(|&(i, _)| i != best)
        .map(|(_, &x)| x)
        .fold(f32::NEG_INFINITY, |a, x| if x > a { x } else { a });
    let token = u32::try_from(best).ok()?;
    Some((token, (logits[best] - second).to_bits()))
}

/// Logits from a few values, so that ties are common, with infinities and
/// (rarely) a NaN.
fn logit() -> impl Strategy<Value = f32> {
    prop_oneof![
        20 => (-4i8..=4).prop_map(|v| f32::from(v) * 0.5),
        4 => -100.0f32..100.0,
        1 => Just(f32::INFINITY),
        2 => Just(f32::NEG_INFINITY),
        1 => Just(f32::NAN),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4096))]

    #[test]
    fn the_choice_is_the_scan_in_order(logits in prop::collection::vec(logit(), 0..80)) {
        let got = Choice::of(&logits).map(|c| (c.token, c.margin.to_bits()));
        prop_assert_eq!(got, naive(&logits), "{:?}", logits);
    }
}

proptest! {
    // Rows of up to a vocabulary: fewer cases, each long.
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn a_vocabulary_sized_row(seed in any::<u64>(), len in 1usize..70_000) {
        let logits: Vec<f32> = (0..len)
            .map(|i| {
                let h = (i as u64 ^ seed).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 44;
                f32::from(u16::try_from(h & 0xFFF).unwrap_or(0)) * 0.01
            })
            .collect();
        let got = Choice::of(&logits).map(|c| (c.token, c.margin.to_bits()));
        prop_assert_eq!(got, naive(&logits));
    }
}
