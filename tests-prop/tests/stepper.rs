//! The stepper against plain greedy decoding: for any drafts a drafter
//! proposes, greedy stepping over a mock target gives exactly the target's
//! plain greedy output, in fewer passes when the drafts are right; sequences
//! joining (prompts prefilled in chunks beside the others' steps) and
//! leaving mid-run change nothing; a cache that restores checkpoints instead
//! of removing positions gives the same tokens.

mod mock;

use mock::{plain_greedy, Mock};
use proptest::prelude::*;
use selfspec::step::{Decode, PassTimes, SeqId, Split, Stepper, Stop};
use selfspec::{Config, DraftLimits, Drafter, Shared, Speculative, Token};

const V: u32 = 12;
const VOCAB: usize = V as usize;

/// One draft of the scripted drafter: `len` tokens, right (the target's own
/// continuation), wrong from `at` on, or noise.
#[derive(Clone, Copy, Debug)]
enum Plan {
    Right(usize),
    WrongFrom { len: usize, at: usize, noise: Token },
    Noise { len: usize, noise: Token },
}

#[derive(Debug)]
struct Scripted {
    plans: Vec<Plan>,
    i: usize,
}

impl Drafter for Scripted {
    fn name(&self) -> &str {
        "scripted"
    }
    fn begin(&mut self, _prompt: &[Token]) {}
    fn draft(
        &mut self,
        history: &[Token],
        last: Token,
        limits: DraftLimits,
        draft: &mut Vec<Token>,
    ) {
        let plan = self.plans[self.i % self.plans.len()];
        self.i += 1;
        let mut ctx = history.to_vec();
        ctx.push(last);
        let truth = |len: usize| plain_greedy(&ctx, len.min(limits.max), VOCAB);
        match plan {
            Plan::Right(len) => draft.extend(truth(len)),
            Plan::WrongFrom { len, at, noise } => {
                draft.extend(truth(len));
                if let Some(t) = draft.get_mut(at) {
                    *t = (*t + 1 + noise % (V - 1)) % V;
                }
            }
            Plan::Noise { len, noise } => {
                draft.extend(
                    (0..u32::try_from(len.min(limits.max)).unwrap()).map(|i| (noise + i * 7) % V),
                );
            }
        }
    }
    fn accept(&mut self, _n_accepted: usize) {}
}

fn plan() -> impl Strategy<Value = Plan> {
    prop_oneof![
        (0usize..10).prop_map(Plan::Right),
        (1usize..10, 0usize..10, any::<u32>()).prop_map(|(len, at, noise)| Plan::WrongFrom {
            len,
            at,
            noise
        }),
        (0usize..6, any::<u32>()).prop_map(|(len, noise)| Plan::Noise { len, noise }),
    ]
}

fn spec(plans: &[Plan]) -> Speculative {
    let d = Scripted {
        plans: plans.to_vec(),
        i: 0,
    };
    Speculative::from_drafters(vec![Box::new(d)], DraftLimits { min: 0, max: 8 }).unwrap()
}

/// A request: its prompt, its length, the step at which it joins, and
/// whether it drafts.
#[derive(Clone, Debug)]
struct Job {
    prompt: Vec<Token>,
    max_tokens: usize,
    join_at: usize,
    drafts: bool,
}

fn job() -> impl Strategy<Value = Job> {
    (
        prop::collection::vec(0..V, 1..40),
        1usize..60,
        0usize..30,
        any::<bool>(),
    )
        .prop_map(|(prompt, max_tokens, join_at, drafts)| Job {
            prompt,
            max_tokens,
            join_at,
            drafts,
        })
}

/// Runs `jobs` on `sequences` sequences (each job waits for a free one
/// once its step has come); every reply with its job's index.
fn run(
    jobs: &[Job],
    plans: &[Plan],
    sequences: usize,
    batch: usize,
    checkpoints: bool,
    cost: Option<(f64, f64)>,
    split: Split,
) -> Vec<(usize, selfspec::step::Reply)> {
    let mut target = Mock::new(sequences, 256, VOCAB, batch);
    if checkpoints {
        target = target.with_checkpoints();
    }
    target.cost = cost;
    target.split = split;
    let mut stepper = Stepper::new(&target).unwrap().with_prefill_chunk(7);
    if cost.is_some() {
        stepper = stepper.with_budget(PassTimes::new());
    }
    let mut waiting: Vec<usize> = (0..jobs.len()).collect();
    let mut owner = vec![usize::MAX; sequences];
    let mut replies = Vec::new();
    let mut step = 0;
    while !waiting.is_empty() || stepper.is_running() {
        while let Some(pos) = waiting.iter().position(|&j| jobs[j].join_at <= step) {
            let Some(seq) = stepper.idle() else { break };
            let j = waiting.remove(pos);
            let job = &jobs[j];
            let s = job.drafts.then(|| spec(plans));
            stepper
                .start(seq, &job.prompt, Decode::greedy(job.max_tokens), s)
                .unwrap();
            owner[seq.index()] = j;
        }
        stepper.step(&mut target).unwrap();
        for done in stepper.finished() {
            replies.push((owner[done.seq.index()], done.reply));
        }
        step += 1;
        assert!(step < 10_000, "the run ends");
    }
    replies
}

/// Every way a target may split its passes.
const SPLITS: &[Split] = &[
    Split::Whole { ubatch: usize::MAX },
    Split::PerSequence,
    Split::EqualRuns { ubatch: 512 },
];

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn greedy_stepping_is_plain_greedy(
        jobs in prop::collection::vec(job(), 1..6),
        plans in prop::collection::vec(plan(), 1..8),
        sequences in 1usize..4,
        checkpoints in any::<bool>(),
        cost in prop::option::of((0.0f64..1000.0, 0.0f64..1000.0)),
        split in prop::sample::select(SPLITS),
    ) {
        // With a cost, the draft budget cuts drafts by the simulated pass
        // times (and pads them, where passes split by sequence runs).
        let replies = run(&jobs, &plans, sequences, 2 * sequences + 16, checkpoints, cost, split);
        prop_assert_eq!(replies.len(), jobs.len());
        for (j, reply) in replies {
            let job = &jobs[j];
            let plain = plain_greedy(&job.prompt, job.max_tokens, VOCAB);
            prop_assert_eq!(&reply.tokens, &plain, "job {}", j);
            prop_assert_eq!(reply.stop, Stop::MaxTokens);
            prop_assert!(reply.decode_passes < job.max_tokens);
            prop_assert!(reply.accepted <= reply.drafted);
        }
    }

    #[test]
    fn right_drafts_save_passes(prompt in prop::collection::vec(0..V, 1..20), len in 2usize..9) {
        let jobs = [Job { prompt, max_tokens: 40, join_at: 0, drafts: true }];
        let replies = run(&jobs, &[Plan::Right(len)], 1, 64, false, None, SPLITS[0]);
        let reply = &replies[0].1;
        // Each pass yields the accepted draft and one more token.
        prop_assert!(reply.decode_passes <= 39usize.div_ceil(len + 1), "{} passes", reply.decode_passes);
        prop_assert_eq!(reply.accepted, reply.drafted);
    }
}

#[test]
fn shared_recall_through_the_stepper_is_plain_greedy() {
    // recall on one Shared, four sequences joining at different steps.
    let config = Config::recommended();
    let shared = Shared::new(&config).unwrap();
    let mut target = Mock::new(4, 512, VOCAB, 64);
    let mut stepper = Stepper::new(&target).unwrap().with_prefill_chunk(16);
    let prompts: Vec<Vec<Token>> = (0..8u32)
        .map(|i| (0..30).map(|j| (i * 3 + j * j) % V).collect())
        .collect();
    let (mut next, mut replies) = (0, Vec::new());
    let mut owner = [0usize; 4];
    while next < prompts.len() || stepper.is_running() {
        if let (Some(seq), true) = (stepper.idle(), next < prompts.len()) {
            let s = Speculative::with_shared(&config, &shared).unwrap();
            stepper
                .start(seq, &prompts[next], Decode::greedy(120), Some(s))
                .unwrap();
            owner[seq.index()] = next;
            next += 1;
        }
        stepper.step(&mut target).unwrap();
        replies.extend(stepper.finished().map(|f| (owner[f.seq.index()], f.reply)));
    }
    assert_eq!(replies.len(), prompts.len());
    let (mut tokens, mut passes) = (0, 0);
    for (i, reply) in &replies {
        assert_eq!(reply.tokens, plain_greedy(&prompts[*i], 120, VOCAB));
        tokens += reply.tokens.len();
        passes += reply.decode_passes + 1;
    }
    // The mock's greedy text cycles: recall must have found the cycles.
    assert!(
        tokens as f64 / passes as f64 > 1.5,
        "tau {}",
        tokens as f64 / passes as f64
    );
    for i in 0..4 {
        assert!(stepper.cached(SeqId::new(i)).len() <= 30 + 119);
    }
}

#[test]
fn the_budget_sends_drafts_only_where_they_pay() {
    // (fixed us, per-row us, plan, expect drafts sent, expect fewer passes than plain)
    let cases: &[(f64, f64, Plan, bool)] = &[
        // Rows nearly free: right drafts go in whole.
        (1000.0, 1.0, Plan::Right(8), true),
        // A row costs as much as a pass: no draft pays.
        (0.0, 1000.0, Plan::Right(8), false),
        // Cheap rows but drafts always wrong: the measured acceptance stops them.
        (1000.0, 100.0, Plan::Noise { len: 6, noise: 1 }, false),
    ];
    for (&(fixed, per_row, plan, pays), &split) in cases
        .iter()
        .flat_map(|c| SPLITS.iter().map(move |s| (c, s)))
    {
        let jobs: Vec<Job> = (0..6)
            .map(|i| Job {
                prompt: vec![i, 3, 5],
                max_tokens: 150,
                join_at: 0,
                drafts: true,
            })
            .collect();
        let replies = run(&jobs, &[plan], 2, 64, false, Some((fixed, per_row)), split);
        let (drafted, tokens, passes) = replies.iter().fold((0, 0, 0), |(d, t, p), (_, r)| {
            (d + r.drafted, t + r.tokens.len(), p + r.decode_passes + 1)
        });
        let sent_per_pass = drafted as f64 / passes as f64;
        assert_eq!(
            sent_per_pass > 1.0,
            pays,
            "{fixed} + {per_row}/row, {plan:?}, {split:?}: {sent_per_pass} drafted a pass"
        );
        assert_eq!(
            tokens as f64 / passes as f64 > 2.0,
            pays,
            "{plan:?} {split:?}"
        );
    }
}

#[test]
fn passes_split_by_sequence_runs_are_padded_whole() {
    // Four sequences, one drafting right; a computation costs 1000 us, a
    // row 1 us. Split by runs, the drafting sequence's rows alone would be
    // a second computation: the budget pads the others' drafts instead.
    // Whole, the draft joins the others' computation as it is.
    let jobs: Vec<Job> = (0..4)
        .map(|i| Job {
            prompt: vec![i, 3, 5],
            max_tokens: 100,
            join_at: 0,
            drafts: i == 0,
        })
        .collect();
    for (split, padded) in [
        (Split::EqualRuns { ubatch: 512 }, true),
        (Split::Whole { ubatch: 512 }, false),
    ] {
        let replies = run(
            &jobs,
            &[Plan::Right(8)],
            4,
            64,
            false,
            Some((1000.0, 1.0)),
            split,
        );
        let drafted_by_plain: usize = replies
            .iter()
            .filter(|(j, _)| *j != 0)
            .map(|(_, r)| r.drafted)
            .sum();
        assert_eq!(
            drafted_by_plain > 0,
            padded,
            "{split:?}: {drafted_by_plain}"
        );
        for (j, reply) in &replies {
            assert_eq!(reply.tokens, plain_greedy(&jobs[*j].prompt, 100, VOCAB));
        }
        let first = replies.iter().find(|(j, _)| *j == 0).unwrap();
        assert!(
            first.1.decode_passes < 30,
            "{split:?}: {}",
            first.1.decode_passes
        );
    }
}

#[test]
fn a_gap_in_a_run_gets_a_filler_row_and_leaves_no_trace() {
    // Three sequences, the middle one done early; plain requests. Split by
    // runs, the idle middle sequence would split every pass in two: it
    // gets a filler row instead (removed at the next step). Whole, no
    // filler.
    let prompts: [Vec<Token>; 3] = [vec![1, 2, 3], vec![4, 5], vec![6, 7, 8]];
    let lens = [60, 3, 60];
    let mut rows = Vec::new();
    for split in [
        Split::EqualRuns { ubatch: 512 },
        Split::Whole { ubatch: 512 },
    ] {
        let mut target = Mock::new(3, 256, VOCAB, 32);
        target.cost = Some((1000.0, 1.0));
        target.split = split;
        let mut stepper = Stepper::new(&target).unwrap().with_budget(PassTimes::new());
        for (i, p) in prompts.iter().enumerate() {
            let d = Decode::greedy(lens[i]);
            stepper.start(SeqId::new(i), p, d, None).unwrap();
        }
        let mut replies = Vec::new();
        while stepper.is_running() {
            stepper.step(&mut target).unwrap();
            replies.extend(stepper.finished().map(|f| (f.seq.index(), f.reply)));
            for s in 0..3 {
                let held = stepper.cached(SeqId::new(s));
                assert!(target.caches[s].starts_with(held), "{split:?} sequence {s}");
                assert!(target.caches[s].len() <= held.len() + 1);
            }
        }
        for (s, reply) in &replies {
            assert_eq!(reply.tokens, plain_greedy(&prompts[*s], lens[*s], VOCAB));
        }
        rows.push(target.rows_evaluated);
    }
    assert!(rows[0] > rows[1] + 40, "fillers: {rows:?}");
}
