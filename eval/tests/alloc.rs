//! Nothing on the draft path allocates once warm: a counting allocator watches
//! `begin` / `draft` / `accept` while a workload is replayed a third time
//! through the same instance (the first passes size every buffer).

#![allow(unsafe_code)] // a counting global allocator

mod workload;

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use selfspec::{Config, Speculative, Strategy};

struct Counting;

thread_local! {
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.with(|c| c.set(c.get() + 1));
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.with(|c| c.set(c.get() + 1));
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn allocations() -> u64 {
    ALLOCATIONS.with(|c| c.get())
}

/// Replays `sessions` and returns the allocations made inside the crate's calls.
fn replay_counting(
    spec: &mut Speculative,
    sessions: &[selfspec_eval::Session],
    history: &mut Vec<u32>,
) -> (u64, u64) {
    let (mut inside, mut calls) = (0, 0);
    for request in sessions.iter().flat_map(|s| &s.requests) {
        history.clear();
        history.extend_from_slice(&request.prompt);
        let before = allocations();
        spec.begin(history);
        inside += allocations() - before;
        let mut i = 0;
        while i < request.output.len() {
            let last = request.output[i];
            let before = allocations();
            let draft = spec.draft(history, last);
            let n = draft
                .iter()
                .zip(&request.output[i + 1..])
                .take_while(|(d, o)| d == o)
                .count();
            spec.accept(n);
            inside += allocations() - before;
            calls += 1;
            history.extend_from_slice(&request.output[i..i + n + 1]);
            i += n + 1;
        }
    }
    (inside, calls)
}

/// The samples the warm tests replay.
const FILES: [&str; 2] = [
    "examples/data/sample-code-edit.jsonl",
    "examples/data/sample-chat.jsonl",
];

/// Replays `file` three times through `spec` and asserts that the third
/// pass allocates nothing inside the crate's calls (the first must: it
/// sizes the buffers, which shows the counter works); `between` runs after
/// the first pass.
fn assert_third_pass_does_not_allocate(spec: &mut Speculative, file: &str, between: impl FnOnce()) {
    let sessions = workload::load(workload::repo_path(file));
    let mut history = Vec::with_capacity(1 << 16);
    let (first, _) = replay_counting(spec, &sessions, &mut history);
    assert!(
        first > 0,
        "the first pass sizes the buffers (the counter works)"
    );
    between();
    replay_counting(spec, &sessions, &mut history);
    let (third, calls) = replay_counting(spec, &sessions, &mut history);
    assert!(calls > 1000);
    assert_eq!(
        third, 0,
        "{file}: {third} allocations in {calls} warm calls"
    );
}

#[test]
fn warm_draft_path_does_not_allocate() {
    for file in FILES {
        let config = Config::new([
            Strategy::NgramSimple { n: 12, m: 48 },
            Strategy::NgramMapK { n: 12, m: 48 },
            Strategy::NgramMapK4v {
                n: 8,
                m: 8,
                min_hits: 1,
            },
            Strategy::NgramMod { n: 24 },
        ]);
        let mut spec = Speculative::new(&config).unwrap();
        assert_third_pass_does_not_allocate(&mut spec, file, || {});
    }
}

/// recall on an engine-wide memory (the recommended config, publishing in
/// flight): once the memory holds its capacity, nothing in `begin`, `draft`
/// or `accept` allocates. (While it fills, publishing adds one chunk of
/// 1024 positions at a time, in whichever call publishes; a 4 MiB budget,
/// 32 Ki tokens, is full after the first pass here.)
#[test]
fn warm_recall_on_a_full_memory_does_not_allocate() {
    use selfspec::{Budget, Shared};
    for file in FILES {
        let config = Config::recommended();
        let budget = Budget {
            memory: 4 << 20,
            sequence: 4 << 20,
            ..Budget::default()
        };
        let shared = Shared::builder().budget(budget).build(&config).unwrap();
        let mut spec = Speculative::with_shared(&config, &shared).unwrap();
        let held = std::cell::Cell::new(0);
        assert_third_pass_does_not_allocate(&mut spec, file, || held.set(shared.heap_bytes()));
        assert_eq!(
            shared.heap_bytes(),
            held.get(),
            "{file}: the full memory does not grow"
        );
    }
}
