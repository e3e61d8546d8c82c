//! Nothing on the draft path allocates once warm: a counting allocator watches
//! `begin` / `draft` / `accept` while a workload is replayed a third time
//! through the same instance (the first passes size every buffer), and
//! `Stepper::step` (drafts, batch, verification, commit, rollback, the
//! budget) while the third to sixth requests are decoded on the same
//! stepper and drafter, greedy and sampled (the first two size the
//! drafter's own history; the budget's choices follow measured pass times,
//! so which drafts are sent differs from run to run).

#![allow(unsafe_code)] // a counting global allocator

mod workload;

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use std::convert::Infallible;

use selfspec::step::{Batch, Decode, Kept, PassTimes, Sampler, SeqId, Shape, Stepper, Target};
use selfspec::{Config, Speculative, Strategy, Token};

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

const VOCAB: usize = 64;

/// A model whose greedy text cycles with a surprise every 13 positions; its
/// cache and rows are allocated up front (a later request's longer pass
/// must not count the target's own growth as the stepper's).
struct Cycle {
    cache: Vec<Token>,
    rows: Vec<[f32; VOCAB]>,
    n: usize,
}

impl Target for Cycle {
    type Error = Infallible;
    fn shape(&self) -> Shape {
        Shape {
            sequences: 1,
            context: 1 << 16,
            vocab: VOCAB,
            batch: 128,
        }
    }
    fn forward(&mut self, batch: &Batch) -> Result<(), Infallible> {
        self.n = 0;
        for row in batch.rows() {
            self.cache.push(row.token);
            let next = if row.pos % 13 == 12 {
                0
            } else {
                (row.token + 1) % 60
            };
            let mut logits = [0.0f32; VOCAB];
            logits[usize::try_from(next).unwrap()] = 3.0;
            logits[usize::try_from((next + 7) % 60).unwrap()] = 2.0;
            if self.n == self.rows.len() {
                self.rows.push(logits);
            } else {
                self.rows[self.n] = logits;
            }
            self.n += 1;
        }
        Ok(())
    }
    fn logits(&mut self, row: usize) -> Result<&[f32], Infallible> {
        Ok(&self.rows[row])
    }
    fn truncate(&mut self, _seq: SeqId, from: usize) -> Result<Kept, Infallible> {
        self.cache.truncate(from);
        Ok(Kept::Exact)
    }
}

/// Allocations inside `step` calls while decoding one request of `n`
/// tokens (the step that ends it, which publishes the request, left out).
fn request(
    stepper: &mut Stepper,
    target: &mut Cycle,
    spec: Speculative,
    decode: Decode,
) -> (u64, Speculative) {
    let prompt: Vec<Token> = (0..200).map(|i| i % 60).collect();
    stepper.forget(SeqId::new(0));
    stepper
        .start(SeqId::new(0), &prompt, decode, Some(spec))
        .unwrap();
    let mut inside = 0;
    loop {
        let before = allocations();
        stepper.step(target).unwrap();
        let step = allocations() - before;
        if let Some(done) = stepper.finished().next() {
            return (inside, done.spec.unwrap());
        }
        inside += step;
    }
}

#[test]
fn a_warm_step_does_not_allocate() {
    let sampled = Sampler {
        temperature: 0.8,
        seed: 3,
        ..Sampler::default()
    };
    for (decode, budget) in [
        (Decode::greedy(400), false),
        (Decode::greedy(400), true),
        (Decode::sampled(400, sampled), true),
    ] {
        let mut target = Cycle {
            cache: Vec::with_capacity(1 << 16),
            rows: Vec::with_capacity(128),
            n: 0,
        };
        let mut stepper = Stepper::new(&target).unwrap();
        if budget {
            stepper = stepper.with_budget(PassTimes::new());
        }
        let mut spec = Speculative::new(&Config::recommended()).unwrap();
        let mut counts = Vec::new();
        for _ in 0..6 {
            let (n, s) = request(&mut stepper, &mut target, spec, decode);
            counts.push(n);
            spec = s;
        }
        assert!(spec.stats()[0].acc_tokens > 0, "drafts were accepted");
        assert!(
            counts[2..].iter().all(|&n| n == 0),
            "{decode:?}, budget {budget}: allocations per request {counts:?}"
        );
    }
}
