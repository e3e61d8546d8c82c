//! Model check of the engine-wide memory's publication protocol: a reader
//! racing a writer never sees a published position without its token and
//! links, under every interleaving loom explores.
//!
//! `RUSTFLAGS="--cfg loom" cargo test --release --test loom`
#![cfg(loom)]

use loom::sync::Arc;
use selfspec::strategies::RecallMemory;

#[test]
fn a_reader_sees_whole_requests_or_nothing() {
    let mut model = loom::model::Builder::new();
    model.preemption_bound = Some(2);
    model.check(|| {
        // Under loom the memory holds 4 tokens in chunks of 2.
        let memory = Arc::new(RecallMemory::new(0));
        let writer = {
            let memory = Arc::clone(&memory);
            loom::thread::spawn(move || {
                memory.append(&[7, 8, 9]);
            })
        };
        // Context [7] is followed by 8 once the request is published:
        // never by a token the writer has not stored yet (0).
        let seen = memory.followers(&[7]);
        assert!(seen.is_empty() || seen == [8], "{seen:?}");
        let len = memory.len();
        assert!(len == 0 || len == 3, "a request is published whole: {len}");
        writer.join().unwrap();
        assert_eq!(memory.followers(&[7]), [8]);
        assert_eq!(memory.followers(&[8]), [9]);
    });
}
