//! `Speculative::draft`'s history contract: right usage is quiet, each of the
//! two engine mistakes is reported once per sequence, rewrites stay quiet.

use std::sync::{Arc, Mutex};

use selfspec::{Config, Speculative, Strategy, Token};

/// Held by every test of this file: they run one at a time. A test that
/// reaches a `warn!` callsite with no subscriber, on another thread while
/// `run` installs its own, can leave the callsite's cached interest at
/// "never" for the duration (a race in `tracing`'s callsite registration),
/// and `run` then records no warning.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A minimal `tracing` subscriber that keeps the messages of `warn!` events.
struct Warnings(Arc<Mutex<Vec<String>>>);

struct Message<'a>(&'a mut String);

impl tracing::field::Visit for Message<'_> {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            *self.0 = format!("{value:?}");
        }
    }
}

impl tracing::Subscriber for Warnings {
    fn enabled(&self, meta: &tracing::Metadata<'_>) -> bool {
        *meta.level() <= tracing::Level::WARN
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, event: &tracing::Event<'_>) {
        let mut text = String::new();
        event.record(&mut Message(&mut text));
        self.0.lock().unwrap().push(text);
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

/// How the engine keeps (or mis-keeps) its history.
#[derive(Clone, Copy, Debug)]
enum Mode {
    /// history += [last] + draft[..n] after each step.
    Right,
    /// Right, but `accept` is never called (the history still grows).
    RightNoAccept,
    /// Pushes `last` before drafting, every step.
    LastIncluded,
    /// Pushes `last` before drafting once, at step 5 only.
    LastIncludedOnce,
    /// Appends `last` but never the accepted tokens.
    LastOnly,
    /// Appends nothing.
    Nothing,
    /// Right, except a rollback of 7 tokens at step 6.
    Rollback,
    /// Right, except the history is replaced by another conversation at step 6.
    Depart,
    /// Right, with a new turn (`begin` with a longer prompt) at step 6.
    NewTurn,
    /// `LastIncluded` in two requests (a `begin` between them).
    LastIncludedTwoRequests,
    /// `LastIncluded`, never calling `begin` (built with `new` and used directly).
    LastIncludedNoBegin,
}

/// Runs 20 decoding steps over `target`; returns (misuse_count, warnings).
fn run(mode: Mode, target: &[Token]) -> (u64, Vec<String>) {
    let warnings = Arc::new(Mutex::new(Vec::new()));
    let subscriber = Warnings(warnings.clone());
    let count = tracing::subscriber::with_default(subscriber, || {
        let config = Config::new([Strategy::NgramSimple { n: 2, m: 8 }]);
        let mut spec = Speculative::new(&config).unwrap();
        let prompt = &target[..40];
        if !matches!(mode, Mode::LastIncludedNoBegin) {
            spec.begin(prompt);
        }
        let mut history = prompt.to_vec(); // the engine's
        let mut pos = prompt.len(); // where the target really is
        for step in 0..20 {
            match (mode, step) {
                (Mode::Rollback, 6) => {
                    history.truncate(history.len() - 7);
                    pos = history.len();
                }
                (Mode::Depart, 6) => {
                    history = target[3..pos - 2].iter().map(|t| t + 1000).collect();
                    pos = history.len() + 3;
                }
                (Mode::NewTurn, 6) => {
                    history.extend_from_slice(&[7, 7, 7]);
                    spec.begin(&history);
                }
                (Mode::LastIncludedTwoRequests, 10) => spec.begin(&history),
                _ => {}
            }
            let last = target[pos % target.len()];
            let include = match mode {
                Mode::LastIncluded | Mode::LastIncludedTwoRequests | Mode::LastIncludedNoBegin => {
                    true
                }
                Mode::LastIncludedOnce => step == 5,
                _ => false,
            };
            let mut passed = history.clone();
            if include {
                passed.push(last);
            }
            let draft = spec.draft(&passed, last).to_vec();
            let n = draft
                .iter()
                .zip(target.iter().cycle().skip(pos + 1))
                .take_while(|(d, t)| d == t)
                .count();
            if !matches!(mode, Mode::RightNoAccept) {
                spec.accept(n);
            }
            pos += 1 + n;
            match mode {
                Mode::LastOnly => history.push(last),
                Mode::Nothing => {}
                _ => {
                    history.push(last);
                    history.extend_from_slice(&draft[..n]);
                }
            }
        }
        spec.misuse_count()
    });
    let w = warnings.lock().unwrap().clone();
    (count, w)
}

#[test]
fn misuse_is_reported_once_per_sequence_and_rewrites_stay_quiet() {
    let _serial = serial();
    // A repetitive stream: ngram-simple drafts and most drafts are accepted.
    let text: Vec<Token> = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12].repeat(30);
    // A run of one repeated token: `last` equals the tokens before it, so a
    // right history also "ends with last"; it must stay quiet.
    let run_of_one: Vec<Token> = vec![5; 400];
    let cases: &[(Mode, &[Token], u64, &str)] = &[
        (Mode::Right, &text, 0, ""),
        (Mode::Right, &run_of_one, 0, ""),
        (Mode::RightNoAccept, &text, 0, ""),
        (Mode::Rollback, &text, 0, ""),
        (Mode::Depart, &text, 0, ""),
        (Mode::NewTurn, &text, 0, ""),
        (Mode::LastIncluded, &text, 1, "already ends with `last`"),
        (Mode::LastIncludedOnce, &text, 1, "already ends with `last`"),
        (
            Mode::LastIncludedTwoRequests,
            &text,
            2,
            "already ends with `last`",
        ),
        (
            Mode::LastIncludedNoBegin,
            &text,
            1,
            "already ends with `last`",
        ),
        (Mode::LastOnly, &text, 1, "did not grow"),
        (Mode::Nothing, &text, 1, "did not grow"),
        (Mode::Nothing, &run_of_one, 1, "did not grow"),
    ];
    for &(mode, target, want, message) in cases {
        let (count, warnings) = run(mode, target);
        assert_eq!(count, want, "{mode:?}: misuse_count; warnings {warnings:?}");
        assert_eq!(warnings.len() as u64, want, "{mode:?}: {warnings:?}");
        for w in &warnings {
            assert!(w.contains(message), "{mode:?}: {w}");
            assert!(w.contains("expected"), "{mode:?}: {w}");
        }
    }
}

#[test]
fn reset_stats_clears_the_misuse_count() {
    let _serial = serial();
    let mut spec = Speculative::new(&Config::default()).unwrap();
    let prompt: Vec<Token> = (0..100).map(|i| i % 20).collect();
    spec.begin(&prompt);
    spec.draft(&prompt, 0);
    spec.draft(&prompt, 0); // nothing appended
    assert_eq!(spec.misuse_count(), 1);
    spec.reset_stats();
    assert_eq!(spec.misuse_count(), 0);
}

#[test]
fn an_empty_prompt_is_checked_like_any_other() {
    let _serial = serial();
    let config = Config::new([Strategy::NgramSimple { n: 1, m: 4 }]);
    // Right: the history grows from nothing.
    let mut spec = Speculative::new(&config).unwrap();
    spec.begin(&[]);
    let mut history: Vec<Token> = Vec::new();
    for t in [1, 2, 3, 1, 2, 3, 1, 2, 3] {
        spec.draft(&history, t);
        spec.accept(0);
        history.push(t);
    }
    assert_eq!(spec.misuse_count(), 0);
    // Wrong: `last` pushed first, from the very first call.
    let mut spec = Speculative::new(&config).unwrap();
    spec.begin(&[]);
    spec.draft(&[7], 7);
    assert_eq!(spec.misuse_count(), 1);
    // Wrong: the history of the previous call, again (`last` never appended).
    let mut spec = Speculative::new(&config).unwrap();
    spec.begin(&[]);
    spec.draft(&[], 7);
    spec.draft(&[5], 8); // another history: quiet
    assert_eq!(spec.misuse_count(), 0);
    spec.draft(&[5], 9); // the same history: 8 was not appended
    assert_eq!(spec.misuse_count(), 1);
}
