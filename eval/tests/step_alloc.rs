//! Nothing in a warm step allocates: a counting allocator watches
//! `Stepper::step` (drafts, batch, verification, commit, rollback, the
//! budget) while a request is decoded a third time on the same stepper and
//! drafter, greedy and sampled (the first requests size every buffer).

#![allow(unsafe_code)] // a counting global allocator

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::convert::Infallible;

use selfspec::step::{Batch, Decode, Kept, PassTimes, Sampler, SeqId, Shape, Stepper, Target};
use selfspec::{Config, Speculative, Token};

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

const VOCAB: usize = 64;

/// A model whose greedy text cycles with a surprise every 13 positions, with
/// preallocated rows (it allocates nothing itself once warm).
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
            cache: Vec::new(),
            rows: Vec::new(),
            n: 0,
        };
        let mut stepper = Stepper::new(&target).unwrap();
        if budget {
            stepper = stepper.with_budget(PassTimes::new());
        }
        let mut spec = Speculative::new(&Config::recommended()).unwrap();
        let mut counts = Vec::new();
        for _ in 0..3 {
            let (n, s) = request(&mut stepper, &mut target, spec, decode);
            counts.push(n);
            spec = s;
        }
        assert!(spec.stats()[0].acc_tokens > 0, "drafts were accepted");
        assert_eq!(
            counts[2], 0,
            "{decode:?}, budget {budget}: allocations per request {counts:?}"
        );
    }
}
