//! Model check of a publication from a sequence's own index (the path that
//! copies the index's tags): a reader racing it never sees a published
//! position without its token and links, under every interleaving loom
//! explores. `tests/loom.rs` checks the hashing path the same way.
//!
//! `RUSTFLAGS="--cfg loom" cargo test --release --lib loom_tests`

use crate::sync::Arc;

use super::chains::{Chains, Hasher, SeqIndex};
use super::memory;
use super::RecallMemory;

#[test]
fn a_reader_sees_a_copied_publication_whole_or_nothing() {
    let mut model = loom::model::Builder::new();
    model.preemption_bound = Some(2);
    model.check(|| {
        // Under loom the memory holds 4 tokens in chunks of 2.
        let memory = Arc::new(RecallMemory::new(0));
        let mut own = SeqIndex::new(64);
        own.extend(&Hasher::new(), &[7, 8, 9]);
        let writer = {
            let memory = Arc::clone(&memory);
            loom::thread::spawn(move || {
                let range = memory.append_own(&own, 0, 3, true);
                assert_eq!(range, Some(memory::Span { start: 0, end: 3 }));
            })
        };
        // Context [7] is followed by 8 once the request is published:
        // never by a token the writer has not stored yet (0).
        let seen = memory.followers(&[7]);
        assert!(seen.is_empty() || seen == [8], "{seen:?}");
        // Every position below the published end holds its token (none is 0).
        let mut snapshot = memory.snapshot();
        let view = memory.view(&mut snapshot);
        for p in view.floor()..view.end() {
            assert_ne!(view.token(p), 0, "position {p} published before its token");
        }
        let len = memory.len();
        assert!(len == 0 || len == 3, "a request is published whole: {len}");
        writer.join().unwrap();
        assert_eq!(memory.followers(&[7]), [8]);
        assert_eq!(memory.followers(&[8]), [9]);
        assert_eq!(memory.followers(&[7, 8]), [9]);
    });
}
