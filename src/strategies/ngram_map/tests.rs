use super::*;

fn draft(map: &mut NgramMap, h: &[Token], last: Token) -> Vec<Token> {
    let mut out = Vec::new();
    map.draft(h, last, DraftLimits::default(), &mut out);
    out
}

#[test]
fn hash_matches_reference_arithmetic() {
    // h = h * 2654435761 + t in u32, computed here in u64 and truncated.
    let tokens = [1u32, 2, 0x7fff_ffff, 65536];
    let mut h: u64 = 0;
    for &t in &tokens {
        h = (h.wrapping_mul(2_654_435_761).wrapping_add(u64::from(t))) & 0xffff_ffff;
    }
    let lcg = Poly::new(LCG_FACTOR, tokens.len());
    assert_eq!(low32(lcg.hash(tokens)), low32(h));
    assert_eq!(slot(lcg.hash(tokens)), ix32(low32(h)) % KEY_MAP_SIZE);
}

#[test]
fn key_only_caps_draft_by_last_acceptance() {
    let mut map = NgramMap::key_only(2, 4);
    let mut h: Vec<Token> = vec![9, 1, 2, 3, 4, 5, 6, 7, 8, 0, 0, 0, 0, 1];
    map.begin(&h);
    assert_eq!(draft(&mut map, &h, 2), [3, 4, 5, 6]);
    map.accept(2);
    h.extend_from_slice(&[2, 7, 7, 1]);
    assert_eq!(draft(&mut map, &h, 2), [3, 4]);
}

#[test]
fn k4v_needs_dominant_value() {
    // key [1, 2] followed by [3, 3] twice and [4, 4] once: 2 >= 2 * 1 drafts.
    let mut map = NgramMap::four_values(2, 2, 1);
    let h: Vec<Token> = vec![0, 1, 2, 3, 3, 1, 2, 4, 4, 1, 2, 3, 3, 8, 8, 8, 1];
    map.begin(&h);
    let d = draft(&mut map, &h, 2);
    // counts: positions 1 ([3,3]), 5 ([4,4]), 9 ([3,3]) -> max 2, others 1: draft.
    assert_eq!(d, [3, 3]);
}

#[test]
fn shrunk_history_without_begin_is_recovered() {
    let mut map = NgramMap::four_values(2, 2, 1);
    let long: Vec<Token> = (0..200).map(|i| i % 7).collect();
    map.begin(&long[..50]);
    for l in 50..200 {
        draft(&mut map, &long[..l], long[l]);
        map.accept(1);
    }
    // A shorter, different history without begin: no panic, drafts stay in range.
    let short: Vec<Token> = (0..30).map(|i| i % 5).collect();
    let d = draft(&mut map, &short, 0);
    assert!(d.iter().all(|t| *t < 5));
    map.accept(1000);
    assert!(draft(&mut map, &[], 0).is_empty());
}
