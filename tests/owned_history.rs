//! The owned-history API (`begin_owned` / `draft_next` / `accept`, with
//! `i32` ids) drafts exactly as the `&[u32]` API on the same stream, for every
//! strategy, the recommended configuration and a chain of all of them,
//! through rollbacks, tokens added outside drafting and new requests.

mod common;

use common::{every_strategy, Rng};
use selfspec::{Config, IntoToken, Speculative, Token};

/// An i32 stream from a small alphabet (negative ids included: -1, i32::MIN)
/// with copies of earlier stretches, as engine outputs repeat themselves.
fn stream(len: usize, seed: u64) -> Vec<i32> {
    const ALPHABET: [i32; 12] = [
        -1,
        i32::MIN,
        i32::MAX,
        0,
        1,
        2,
        3,
        7,
        100,
        -100,
        151_643,
        42,
    ];
    Rng(seed | 1).with_copies(len, (32, 3, 40), |r| ALPHABET[r.pick(ALPHABET.len())])
}

fn to_u32(ids: &[i32]) -> Vec<Token> {
    ids.iter().map(|&id| id.into_token()).collect()
}

fn configs() -> Vec<(String, Config)> {
    let strategies = every_strategy();
    let mut out: Vec<(String, Config)> = strategies
        .iter()
        .map(|s| {
            (
                s.name().to_string(),
                Config::new([s.clone()]).with_pool_size(1 << 16),
            )
        })
        .collect();
    out.push(("recommended".into(), Config::recommended()));
    out.push((
        "all, draft_min 2".into(),
        Config::new(strategies)
            .with_pool_size(1 << 16)
            .with_draft_min(2),
    ));
    out
}

/// What the engine does between two drafting steps, besides the step itself.
#[derive(Clone, Copy, Debug)]
enum Event {
    /// Nothing.
    Step,
    /// The target's cache is rolled back by this many tokens.
    Rollback(usize),
    /// Tokens the target evaluates outside drafting (a tool's output).
    Insert(usize),
    /// A new request whose prompt is the history so far.
    Restart,
}

/// Drives both APIs side by side on `stream` (the prompt is its first
/// `prompt` tokens, the target then "generates" the rest greedily) and
/// asserts equal drafts at every step.
fn lockstep(name: &str, config: &Config, ids: &[i32], prompt: usize, seed: u64) {
    let mut rng = Rng(seed | 1);
    let mut slice_api = Speculative::new(config).expect("a valid config");
    let mut owned_api = Speculative::new(config).expect("a valid config");
    let tokens = to_u32(ids);
    let mut history: Vec<Token> = tokens[..prompt].to_vec();
    slice_api.begin(&history);
    owned_api.begin_owned(&ids[..prompt]);
    let mut step = 0;
    let mut drafted = 0;
    while history.len() + 1 < tokens.len() {
        let event = match rng.pick(40) {
            0 => Event::Rollback(1 + rng.pick(8)),
            1 => Event::Insert(1 + rng.pick(8)),
            2 => Event::Restart,
            _ => Event::Step,
        };
        match event {
            Event::Step => {}
            Event::Rollback(n) => {
                let len = history.len().saturating_sub(n).max(1);
                history.truncate(len);
                owned_api.truncate_history(len);
            }
            Event::Insert(n) => {
                let end = (history.len() + n).min(tokens.len() - 1);
                let from = history.len();
                history.extend_from_slice(&tokens[from..end]);
                owned_api.extend_history(&ids[from..end]);
            }
            Event::Restart => {
                slice_api.begin(&history);
                let ids_so_far: Vec<i32> = ids[..history.len()].to_vec();
                owned_api.begin_owned(ids_so_far);
            }
        }
        if history.len() + 1 >= tokens.len() {
            break;
        }
        let i = history.len();
        let (last, last_id) = (tokens[i], ids[i]);
        let a = slice_api.draft(&history, last).to_vec();
        let b = owned_api.draft_next(last_id).to_vec();
        // The same drafts, in the engine's own i32 ids.
        let a_ids: Vec<i32> = a.iter().map(|&t| i32::from_token(t)).collect();
        assert_eq!(
            a_ids, b,
            "{name}: step {step}, history {i}, event {event:?}"
        );
        drafted += a.len();
        let n_accepted = a
            .iter()
            .zip(&tokens[i + 1..])
            .take_while(|(d, t)| d == t)
            .count();
        // Now and then a count above the draft's length (clamped), also
        // without a draft.
        let told = if n_accepted == a.len() && rng.pick(4) == 0 {
            n_accepted + 3
        } else {
            n_accepted
        };
        slice_api.accept(told);
        owned_api.accept(told);
        history.push(last);
        history.extend_from_slice(&a[..n_accepted]);
        assert_eq!(owned_api.history(), &history[..], "{name}: step {step}");
        step += 1;
    }
    assert!(drafted > 100, "{name}: drafted {drafted}");
    // Rollbacks and inserted tokens may look like misuses: both APIs see the same.
    assert_eq!(slice_api.misuse_count(), owned_api.misuse_count(), "{name}");
    for (a, b) in slice_api.stats().iter().zip(owned_api.stats()) {
        assert_eq!(
            (a.gen_drafts, a.gen_tokens, a.acc_drafts, a.acc_tokens),
            (b.gen_drafts, b.gen_tokens, b.acc_drafts, b.acc_tokens),
            "{name}"
        );
    }
}

#[test]
fn owned_history_drafts_as_the_slice_api() {
    for (name, config) in configs() {
        for seed in 1..=3u64 {
            let ids = stream(3000, seed * 7919);
            lockstep(&name, &config, &ids, 400, seed);
        }
    }
}

#[test]
fn owned_history_drafts_something() {
    // Not vacuous: the lockstep streams give drafts, accepted ones included.
    let ids = stream(3000, 7919);
    let mut spec = Speculative::new(&Config::recommended()).unwrap();
    spec.begin_owned(&ids[..400]);
    let mut accepted = 0;
    let mut n = 400;
    while n + 1 < ids.len() {
        let draft = spec.draft_next(ids[n]).to_vec();
        let k = draft
            .iter()
            .zip(&ids[n + 1..])
            .take_while(|(d, t)| d == t)
            .count();
        spec.accept(k);
        accepted += k;
        n += 1 + k;
    }
    assert!(accepted > 300, "accepted {accepted}");
    assert_eq!(spec.history(), &to_u32(&ids[..n])[..]);
}

#[test]
fn the_conversion_is_llama_cpp_s() {
    for id in [-1i32, i32::MIN, i32::MAX, 0, 1, -2] {
        #[allow(clippy::cast_sign_loss)]
        let reference = id as u32;
        assert_eq!(id.into_token(), reference);
        assert_eq!((&id).into_token(), reference);
    }
}

#[test]
fn begin_clears_the_owned_history_and_draft_does_not_extend_it() {
    let mut spec = Speculative::new(&Config::recommended()).unwrap();
    spec.begin_owned([1u32, 2, 3]);
    assert_eq!(spec.history(), [1, 2, 3]);
    let before = spec.heap_bytes();
    spec.draft_next(4u32);
    assert_eq!(spec.history(), [1, 2, 3, 4]);
    assert!(spec.heap_bytes() >= before);
    // The slice API leaves the owned history alone, accept included.
    let h = [5u32, 6, 7, 5, 6, 7, 5, 6];
    spec.begin(&h);
    assert!(spec.history().is_empty());
    spec.draft(&h, 7);
    spec.accept(4);
    assert!(spec.history().is_empty());
    // Rollback past the start, accept without a draft: no panic.
    spec.truncate_history(usize::MAX);
    spec.truncate_history(0);
    spec.accept(usize::MAX);
    assert!(spec.draft_next(-1i32).len() <= spec.limits().max);
    assert_eq!(spec.history(), [u32::MAX]);
}
