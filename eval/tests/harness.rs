//! The harness itself: workload errors name the file and the line, the
//! replay protocol keeps the history contract and reports only its own
//! counts, a slot's steps are the protocol's, its report's durations are
//! seconds.

use std::error::Error as _;
use std::time::Duration;

use selfspec::{Config, Error, Speculative, Strategy, Token};
use selfspec_eval::{
    parse_workload, read_workload, replay, ReplayReport, Request, Session, Slot, WorkloadProblem,
    STOP,
};

#[test]
fn workload_errors_name_a_line_only_for_parse_errors() {
    let io = read_workload("/nonexistent").unwrap_err();
    assert_eq!(
        io.to_string(),
        "/nonexistent: No such file or directory (os error 2)"
    );
    assert!(matches!(io.problem, WorkloadProblem::Io(_)) && io.source().is_some());
    let parse = parse_workload("w.jsonl", "\n\n{").unwrap_err();
    assert_eq!((parse.line, parse.source_name.as_str()), (3, "w.jsonl"));
    assert!(parse.to_string().starts_with("w.jsonl:3: EOF"), "{parse}");
}

#[test]
fn compact_workloads_are_checked_request_by_request() {
    let line =
        |requests: &str| format!(r#"{{"id": "s", "kind": "agent", "requests": [{requests}]}}"#);
    type Case = (&'static str, fn(&WorkloadProblem) -> bool, &'static str);
    let cases: [Case; 3] = [
        (
            r#"{"extend": [1], "output": [2]}"#,
            |p| matches!(p, WorkloadProblem::ExtendInFirst { request: 0 }),
            "w:1: request 0: `extend` in a session's first request; the first request needs `prompt`",
        ),
        (
            r#"{"prompt": [1], "output": [2]}, {"prompt": [1], "extend": [3], "output": [4]}"#,
            |p| matches!(p, WorkloadProblem::PromptAndExtend { request: 1 }),
            "w:1: request 1: both `prompt` and `extend`; give one (`extend`: prompt = previous prompt + previous output + extend)",
        ),
        (
            r#"{"prompt": [1], "output": [2]}, {"output": [4]}"#,
            |p| matches!(p, WorkloadProblem::NoPrompt { request: 1 }),
            "w:1: request 1: neither `prompt` nor `extend`",
        ),
    ];
    for (requests, kind, message) in cases {
        let e = parse_workload("w", &line(requests)).unwrap_err();
        assert!(kind(&e.problem), "{requests}: {e}");
        assert_eq!(e.to_string(), message);
    }
    // The compact form expands to whole prompts.
    let ok = parse_workload(
        "w",
        &line(r#"{"prompt": [1, 2], "output": [3]}, {"extend": [4, 5], "output": [6]}, {"extend": [], "output": [7]}"#),
    )
    .unwrap();
    let prompts: Vec<&[u32]> = ok[0].requests.iter().map(|r| r.prompt.as_slice()).collect();
    assert_eq!(
        prompts,
        [&[1, 2][..], &[1, 2, 3, 4, 5], &[1, 2, 3, 4, 5, 6]]
    );
    // Recorded margins are read where given, empty where not.
    let margins = parse_workload(
        "w",
        &line(r#"{"prompt": [1], "output": [2, 3], "margins": [0.5, 7.25]}, {"extend": [4], "output": [5]}"#),
    )
    .unwrap();
    let read: Vec<&[f32]> = margins[0]
        .requests
        .iter()
        .map(|r| r.margins.as_slice())
        .collect();
    assert_eq!(read, [&[0.5, 7.25][..], &[]]);
}

/// The replay protocol keeps the contract (no report over the samples).
#[test]
fn replay_keeps_the_contract() {
    for (name, text) in [
        (
            "chat",
            include_str!("../../examples/data/sample-chat.jsonl"),
        ),
        (
            "code-edit",
            include_str!("../../examples/data/sample-code-edit.jsonl"),
        ),
    ] {
        let sessions = selfspec_eval::parse_workload(name, text).unwrap();
        let mut spec = Speculative::new(&Config::llama_cpp_chain()).unwrap();
        let report = selfspec_eval::replay(&mut spec, &sessions).unwrap();
        assert!(report.accepted > 0, "{name}");
        assert_eq!(spec.misuse_count(), 0, "{name}");
    }
}

#[test]
fn replay_reports_only_its_own_counts() {
    let text: Vec<Token> = (0..400).map(|i| i * 7 % 50).collect();
    let sessions = [Session::new(
        "s",
        "synthetic",
        vec![Request::new(text[..200].to_vec(), text[200..].to_vec())],
    )];
    let mut spec = Speculative::new(&Config::default()).unwrap();
    let first = replay(&mut spec, &sessions).unwrap();
    let second = replay(&mut spec, &sessions).unwrap();
    let total = &spec.stats()[0];
    assert_eq!(
        first.stats[0].calls_draft + second.stats[0].calls_draft,
        total.calls_draft
    );
    assert_eq!(second.stats[0].calls_begin, 1);
    assert_eq!(second.stats[0].acc_tokens, second.accepted);
    assert_eq!(second.stats[0].gen_tokens, second.drafted);
}

/// A slot's steps, as (index of `last`, draft, accepted).
fn steps(slot: &mut Slot<'_>) -> Vec<(usize, Vec<Token>, usize)> {
    let mut steps = Vec::new();
    while let Some(v) = slot.step().unwrap() {
        steps.push((v.index, v.draft.clone(), v.accepted));
    }
    steps
}

#[test]
fn a_slot_steps_through_the_recorded_output() {
    // ngram-simple n=2, m=3: after `last`, the 3 tokens that followed the
    // last earlier occurrence of the 2-gram ending with `last`.
    let config = Config::new([Strategy::NgramSimple { n: 2, m: 3 }]);
    let spec = Speculative::new(&config).unwrap();
    let request = Request::new(vec![1, 2, 3, 4, 5, 9, 1, 2], vec![3, 4, 5, 6, 7]);
    let mut slot = Slot::new().unwrap();
    slot.start(&request, Some(spec)).unwrap();
    assert!(slot.is_running());
    // [2] 3 drafts 4 5 9: 4 and 5 kept, 6 chosen; then 6 and 7, new, draft
    // nothing; the end is known after 7.
    let want = vec![(0, vec![4, 5, 9], 2), (3, vec![], 0), (4, vec![], 0)];
    assert_eq!(steps(&mut slot), want);
    assert!(!slot.is_running());
    let spec = slot.take_spec().expect("the drafter comes back");
    assert_eq!(spec.stats()[0].calls_draft, 3);
    assert_eq!(spec.stats()[0].acc_tokens, 2);
    assert_eq!(spec.misuse_count(), 0);

    // An empty output ends at its start (after `begin`); an empty prompt
    // starts from the first output token.
    let mut slot = Slot::new().unwrap();
    let empty = Request::new(vec![1, 2], vec![]);
    slot.start(&empty, Some(Speculative::new(&config).unwrap()))
        .unwrap();
    assert!(!slot.is_running() && steps(&mut slot).is_empty());
    assert_eq!(slot.spec_mut().unwrap().stats()[0].calls_begin, 1);
    let no_prompt = Request::new(vec![], vec![7, 8, 7, 8, 7]);
    slot.start(&no_prompt, None).unwrap();
    let indexes: Vec<usize> = steps(&mut slot).iter().map(|s| s.0).collect();
    assert_eq!(indexes.first(), Some(&0));
    assert_eq!(slot.spec_mut().unwrap().stats()[0].calls_begin, 2);

    // An id the target keeps for the end is refused; the slot keeps its
    // drafter.
    let bad = Request::new(vec![1], vec![STOP]);
    let e = slot.start(&bad, None).unwrap_err();
    assert!(
        matches!(e, Error::TokenOutOfRange { token: STOP, .. }),
        "{e}"
    );
    assert!(slot.take_spec().is_some());
}

#[test]
fn report_durations_are_seconds() {
    let report = ReplayReport {
        draft_time: Duration::from_millis(1500),
        ..ReplayReport::default()
    };
    let v = serde_json::to_value(&report).unwrap();
    assert_eq!(v["draft_time"], serde_json::json!(1.5));
    assert_eq!(serde_json::from_value::<ReplayReport>(v).unwrap(), report);
}
