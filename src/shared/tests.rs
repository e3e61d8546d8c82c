//! The engine's byte count across scopes.
use super::*;
use crate::{Speculative, Strategy, Token};

/// The engine's count against every attached scope's heap, added up.
fn counted_and_held(shared: &Shared) -> (usize, usize) {
    let scopes = shared.inner.scopes.lock().unwrap();
    let held =
        shared.inner.root.heap_bytes() + scopes.values().map(|s| s.heap_bytes()).sum::<usize>();
    (shared.engine_heap_bytes(), held)
}

#[test]
fn the_engine_count_is_every_scope_s_heap_through_forgetting_and_drops() {
    // Both kinds of engine-wide state: a pool and a memory per scope.
    let config = Config::new([
        Strategy::NgramMod { n: 8 },
        Strategy::Recall {
            threshold_permille: 130,
        },
    ])
    .with_pool_size(1 << 12);
    let budget = Budget {
        memory: 1 << 20,
        engine: 4 << 20,
        ..Budget::default()
    };
    let shared = Shared::builder().budget(budget).build(&config).unwrap();
    let mut x = 7u64;
    for i in 0..60u64 {
        let scope = shared.scope(&format!("tenant-{}", i % 23));
        let text: Vec<Token> = (0..400 + 300 * (i % 5))
            .map(|_| {
                x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
                Token::try_from(x >> 50).unwrap()
            })
            .collect();
        let mut spec = Speculative::with_shared(&config, &scope).unwrap();
        spec.begin(&text);
        spec.end_request();
        if i % 7 == 3 {
            assert!(shared.drop_scope(&format!("tenant-{}", i % 23)));
        }
        let (counted, held) = counted_and_held(&shared);
        assert_eq!(counted, held, "after request {i}");
    }
    // It had to forget, and stays within the engine's budget (plus the
    // one scope a request may grow between checks).
    assert!(
        shared.scope_names().len() < 24,
        "{:?}",
        shared.scope_names()
    );
    let (counted, _) = counted_and_held(&shared);
    assert!(
        counted <= budget.engine + budget.memory + (1 << 16),
        "{counted}"
    );
    // A dropped scope's handle still drafts, outside the count.
    let gone = shared.scope("gone");
    let mut spec = Speculative::with_shared(&config, &gone).unwrap();
    spec.begin(&[1, 2, 3, 1, 2]);
    assert!(shared.drop_scope("gone"));
    spec.end_request();
    let (counted, held) = counted_and_held(&shared);
    assert_eq!(counted, held);
}
