//! `Speculative::fork` / `Drafter::fork`: a fork drafts as its parent would,
//! for every strategy, the recommended configuration and a chain of all;
//! forking copies state instead of re-indexing; a recall fork publishes
//! only its branch's tokens; a chain with a drafter that cannot fork does
//! not fork.

mod common;

use common::{every_strategy, Rng};
use selfspec::strategies::Recall;
use selfspec::{Config, DraftLimits, Drafter, Shared, Speculative, Strategy, Token};

/// Tokens from a small alphabet with copies of earlier stretches.
fn stream(len: usize, seed: u64) -> Vec<Token> {
    Rng(seed | 1).with_copies(len, (32, 3, 40), |r| {
        Token::try_from(r.pick(50)).expect("small")
    })
}

fn configs() -> Vec<(String, Config)> {
    let mut out: Vec<(String, Config)> = every_strategy()
        .into_iter()
        .map(|s| {
            (
                s.name().to_string(),
                Config::new([s]).with_pool_size(1 << 16),
            )
        })
        .collect();
    out.push(("recommended".into(), Config::recommended()));
    out.push((
        "all".into(),
        Config::new(every_strategy()).with_pool_size(1 << 16),
    ));
    out
}

/// One engine sequence on the slice API, greedy against `truth`.
struct Seq {
    spec: Speculative,
    history: Vec<Token>,
}

impl Seq {
    /// One drafting step: the target samples `truth[len]`, verifies the
    /// draft against `truth`; returns the draft.
    fn step(&mut self, truth: &[Token]) -> Vec<Token> {
        let i = self.history.len();
        let last = truth[i];
        let draft = self.spec.draft(&self.history, last).to_vec();
        let n = draft
            .iter()
            .zip(&truth[i + 1..])
            .take_while(|(d, t)| d == t)
            .count();
        self.spec.accept(n);
        self.history.push(last);
        self.history.extend_from_slice(&draft[..n]);
        draft
    }

    /// Steps until the history reaches `len` tokens; the drafts.
    fn run(&mut self, truth: &[Token], len: usize) -> Vec<Vec<Token>> {
        let mut drafts = Vec::new();
        while self.history.len() + 1 < len.min(truth.len()) {
            drafts.push(self.step(truth));
        }
        drafts
    }

    fn fork(&self) -> Seq {
        Seq {
            spec: self.spec.fork().expect("selfspec's strategies fork"),
            history: self.history.clone(),
        }
    }
}

fn begin(config: &Config, shared: &Shared, prompt: &[Token]) -> Seq {
    let mut spec = Speculative::with_shared(config, shared).expect("a valid config");
    spec.begin(prompt);
    Seq {
        spec,
        history: prompt.to_vec(),
    }
}

/// A fork continues as its parent would have: compared with a twin of the
/// parent (built and driven the same way, on its own `Shared`), so that the
/// parent's own later calls cannot touch the shared state the fork reads.
#[test]
fn a_fork_drafts_as_its_parent_would() {
    for (name, config) in configs() {
        for seed in 1..=3u64 {
            let truth = stream(4000, seed * 7919);
            let (shared, twin_shared) =
                (Shared::new(&config).unwrap(), Shared::new(&config).unwrap());
            let mut parent = begin(&config, &shared, &truth[..500]);
            let mut twin = begin(&config, &twin_shared, &truth[..500]);
            assert_eq!(parent.run(&truth, 1500), twin.run(&truth, 1500), "{name}");
            // A new turn (the prefill of what the sequence holds), then the
            // fork: parallel sampling forks a prefilled prompt. (A recall
            // fork made later in a request drafts the same until its first
            // merge of learned selector steps: those its parent had not yet
            // merged are the parent's to merge.)
            parent.spec.begin(&parent.history);
            twin.spec.begin(&twin.history);
            let mut child = parent.fork();
            let (a, b) = (child.run(&truth, 4000), twin.run(&truth, 4000));
            assert!(
                a.iter().map(Vec::len).sum::<usize>() > 100,
                "{name}: drafts"
            );
            assert_eq!(a, b, "{name}, seed {seed}");
            assert_eq!(child.spec.misuse_count(), 0, "{name}");
        }
    }
}

/// Strategies without engine-wide state: parent and child interleaved,
/// forked with a draft pending.
#[test]
fn per_sequence_strategies_fork_side_by_side() {
    for strategy in every_strategy() {
        if matches!(
            strategy,
            Strategy::NgramMod { .. } | Strategy::Recall { .. }
        ) {
            continue;
        }
        let name = strategy.name();
        let config = Config::new([strategy]);
        let truth = stream(3000, 99);
        let shared = Shared::new(&config).unwrap();
        let mut parent = begin(&config, &shared, &truth[..800]);
        parent.run(&truth, 1000);
        // Fork with a draft pending (beam search forks after a step): the
        // child holds it and may accept it.
        let i = parent.history.len();
        let pending = parent.spec.draft(&parent.history, truth[i]).to_vec();
        let mut child = parent.fork();
        assert_eq!(child.spec.last_draft(), &pending[..], "{name}");
        for seq in [&mut parent, &mut child] {
            let n = pending
                .iter()
                .zip(&truth[i + 1..])
                .take_while(|(d, t)| d == t)
                .count();
            seq.spec.accept(n);
            seq.history.push(truth[i]);
            seq.history.extend_from_slice(&pending[..n]);
        }
        // The child's counters start at zero and count its own accept.
        let accepted = child.history.len() - i - 1;
        assert_eq!(child.spec.stats()[0].acc_tokens, accepted as u64, "{name}");
        while parent.history.len() + 1 < truth.len() {
            assert_eq!(parent.step(&truth), child.step(&truth), "{name}");
        }
    }
}

/// A branch of parallel sampling takes another token than its parent: the
/// fork drafts for its own continuation from the parent's index.
#[test]
fn branches_diverge_from_a_shared_prefix() {
    let config = Config::recommended();
    let shared = Shared::new(&config).unwrap();
    let text: Vec<Token> = (0..2000).collect();
    let mut parent = begin(&config, &shared, &text);
    let mut child = parent.fork();
    // The parent continues with the text's start (a copy it can draft), the
    // child with a stretch from the middle.
    let parent_draft = parent.spec.draft(&parent.history, text[0]).to_vec();
    let child_draft = child.spec.draft(&child.history, text[1000]).to_vec();
    assert_eq!(&parent_draft[..4], &text[1..5]);
    assert_eq!(&child_draft[..4], &text[1001..1005]);
}

/// Forking copies the indexes: no `begin`, the same tokens indexed, memory
/// of the same order as the parent's (not a fresh, empty drafter).
#[test]
fn forking_does_not_reindex() {
    for (name, config) in configs() {
        let shared = Shared::new(&config).unwrap();
        let prompt = stream(50_000, 11);
        let parent = begin(&config, &shared, &prompt);
        let child = parent.fork();
        for s in child.spec.stats() {
            assert_eq!(
                (s.calls_begin, s.calls_draft),
                (0, 0),
                "{name}: counters start at 0"
            );
        }
        let (p, c) = (parent.spec.heap_bytes(), child.spec.heap_bytes());
        assert!(
            c * 2 >= p && c <= p + 4096,
            "{name}: parent {p} B, fork {c} B"
        );
        for i in 0..config.strategies.len() {
            let recall = |s: &Seq| {
                s.spec
                    .drafter(i)
                    .and_then(Drafter::as_any)
                    .and_then(|a| a.downcast_ref::<Recall>())
                    .map(Recall::stream_len)
            };
            assert_eq!(recall(&parent), recall(&child), "{name}");
        }
        let fresh = Speculative::with_shared(&config, &shared)
            .unwrap()
            .heap_bytes();
        eprintln!("{name}: parent {p} B, fork {c} B, fresh {fresh} B");
        // ngram-mod keeps no per-sequence index (its state is the shared
        // pool), ngram-cache does not count its caches in `heap_bytes`.
        if p >= fresh + 50_000 {
            assert!(c >= fresh + 50_000, "{name}: the fork holds the index");
        }
    }
}

/// recall: the parent publishes the tokens it held at the fork (once), each
/// branch only what it added.
#[test]
fn a_recall_fork_publishes_only_its_branch() {
    let config = Config::recommended();
    let prompt = stream(3000, 17);
    let published = |fork: bool| {
        let shared = Shared::new(&config).unwrap();
        let parent = begin(&config, &shared, &prompt);
        if fork {
            let child = parent.fork();
            drop(child);
        }
        drop(parent);
        shared.stats().tokens_published
    };
    let alone = published(false);
    assert!(alone >= 3000, "the prompt is published: {alone}");
    assert_eq!(
        published(true),
        alone,
        "the fork published nothing of its own"
    );

    // A branch's own tokens are published.
    let shared = Shared::new(&config).unwrap();
    let parent = begin(&config, &shared, &prompt);
    let mut child = parent.fork();
    let more = stream(200, 23);
    let mut truth = prompt.clone();
    truth.extend_from_slice(&more);
    child.run(&truth, truth.len());
    let child_added = child.history.len() - prompt.len();
    drop(child);
    drop(parent);
    let appended = shared.stats().tokens_published;
    assert!(
        appended >= alone + u64::try_from(child_added).unwrap() && appended < 2 * alone,
        "prompt once ({alone}) and the branch's {child_added} tokens: {appended}"
    );
}

#[test]
fn a_chain_with_a_drafter_that_cannot_fork_does_not_fork() {
    #[derive(Debug)]
    struct Mine;
    impl Drafter for Mine {
        fn name(&self) -> &str {
            "mine"
        }
        fn begin(&mut self, _: &[Token]) {}
        fn draft(&mut self, _: &[Token], _: Token, _: DraftLimits, _: &mut Vec<Token>) {}
        fn accept(&mut self, _: usize) {}
    }
    let recall: Box<dyn Drafter> = Box::new(Recall::new(0.13));
    assert!(recall.fork().is_some());
    let spec =
        Speculative::from_drafters(vec![recall, Box::new(Mine)], DraftLimits::default()).unwrap();
    assert!(spec.fork().is_none());
    let spec =
        Speculative::from_drafters(vec![Box::new(Recall::new(0.13))], DraftLimits::default())
            .unwrap();
    assert!(spec.fork().is_some());
}
