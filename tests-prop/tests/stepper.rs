//! The stepper against plain greedy decoding: for any drafts a drafter
//! proposes, greedy stepping over a mock target gives exactly the target's
//! plain greedy output, in fewer passes when the drafts are right; sequences
//! joining (prompts prefilled in chunks beside the others' steps) and
//! leaving mid-run change nothing; a cache that restores checkpoints instead
//! of removing positions gives the same tokens.

mod mock;

use mock::{plain_greedy, Mock};
use proptest::prelude::*;
use selfspec::step::{Decode, PassTimes, SeqId, Stepper, Stop};
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
) -> Vec<(usize, selfspec::step::Reply)> {
    let mut target = Mock::new(sequences, 256, VOCAB, batch);
    if checkpoints {
        target = target.with_checkpoints();
    }
    target.cost = cost;
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

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn greedy_stepping_is_plain_greedy(
        jobs in prop::collection::vec(job(), 1..6),
        plans in prop::collection::vec(plan(), 1..8),
        sequences in 1usize..4,
        checkpoints in any::<bool>(),
        cost in prop::option::of((0.0f64..1000.0, 0.0f64..1000.0)),
    ) {
        // With a cost, the draft budget cuts drafts by the simulated pass times.
        let replies = run(&jobs, &plans, sequences, 2 * sequences + 16, checkpoints, cost);
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
        let replies = run(&jobs, &[Plan::Right(len)], 1, 64, false, None);
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
    for &(fixed, per_row, plan, pays) in cases {
        let jobs: Vec<Job> = (0..6)
            .map(|i| Job {
                prompt: vec![i, 3, 5],
                max_tokens: 150,
                join_at: 0,
                drafts: true,
            })
            .collect();
        let replies = run(&jobs, &[plan], 2, 64, false, Some((fixed, per_row)));
        let (drafted, tokens, passes) = replies.iter().fold((0, 0, 0), |(d, t, p), (_, r)| {
            (d + r.drafted, t + r.tokens.len(), p + r.decode_passes + 1)
        });
        let sent_per_pass = drafted as f64 / passes as f64;
        assert_eq!(
            sent_per_pass > 1.0,
            pays,
            "{fixed} + {per_row}/row, {plan:?}: {sent_per_pass} drafted a pass"
        );
        assert_eq!(tokens as f64 / passes as f64 > 2.0, pays, "{plan:?}");
    }
}
