//! The memory's bounds: forgetting and the bookkeeping of its runs.

use super::*;

/// Tokens below 2^30 from a xorshift generator seeded with `seed`.
fn tokens(seed: u64, n: usize) -> Vec<Token> {
    let mut x = seed;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            crate::int::low32(x) >> 2
        })
        .collect()
}

#[test]
fn forgetting_is_oldest_first_and_never_a_wipe() {
    let memory = RecallMemory::new(0); // the minimum: 1024 tokens
    let cap = memory.capacity();
    let mut requests = Vec::new();
    for i in 0..40 {
        let r = tokens(19 + i, 100);
        memory.append(&r);
        requests.push(r);
        assert!(memory.len() <= cap);
    }
    assert_eq!(memory.len(), cap);
    // The newest request is fully held, the oldest is gone.
    let newest = &requests[39];
    assert_eq!(memory.followers(&newest[50..58]), [newest[58]]);
    let oldest = &requests[0];
    assert!(memory.followers(&oldest[50..58]).is_empty());
    // What survives is the most recent `cap` tokens, in their runs.
    let held: Vec<Token> = requests.concat();
    assert_eq!(memory.runs().0, held[held.len() - cap..]);
    assert_eq!(memory.runs().1.iter().map(|r| r.0).sum::<u64>(), wide(cap));
}

#[test]
fn appends_of_a_few_tokens_at_a_time_stay_within_the_budget() {
    // Every append is a run; a run costs 80 bytes of bookkeeping, more than
    // a token's index. The memory joins its oldest runs beyond one per 8
    // tokens, so its heap stays within the budget whatever the pieces.
    // (budget, tokens an append)
    for (budget, piece) in [
        (1usize << 20, 1usize),
        (1 << 20, 3),
        (4 << 20, 1),
        (4 << 20, 7),
    ] {
        let memory = RecallMemory::new(budget);
        let cap = memory.capacity();
        let text = tokens(23, 3 * cap);
        for part in text.chunks(piece) {
            memory.append(part);
        }
        // Fixed: the smallest bucket arrays and the learned tables.
        let fixed = 8 * 4096 * 4 + (16 << 10);
        assert!(
            memory.heap_bytes() <= budget + fixed,
            "budget {budget}, pieces of {piece}: {} bytes",
            memory.heap_bytes()
        );
        // Joined runs still hold every token, in order.
        let (held, runs) = memory.runs();
        assert_eq!(
            held,
            text[text.len() - cap..],
            "budget {budget}, pieces of {piece}"
        );
        assert_eq!(runs.iter().map(|r| r.0).sum::<u64>(), wide(cap));
        assert!(runs.len() <= cap / 8, "{} runs", runs.len());
    }
}
