//! Error messages: workload errors name the file and the line (none for I/O
//! errors); the out-of-memory error names what and how much.

use std::error::Error as _;
use std::io;

use selfspec::replay::{parse_workload, read_workload, WorkloadProblem};
use selfspec::{CacheFileProblem, Error};

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
}

#[test]
fn out_of_memory_says_what_and_how_much() {
    let oom = Error::OutOfMemory {
        what: "ngram-mod pool",
        bytes: 1 << 34,
    };
    assert_eq!(
        oom.to_string(),
        "ngram-mod pool: cannot allocate 17179869184 bytes (16.0 GiB); choose a smaller size"
    );
}

/// File errors keep the I/O error as their source and stay `Clone`.
#[test]
fn file_errors_keep_their_io_source() {
    let e = selfspec::strategies::LookupCache::load("/nonexistent/cache.bin").unwrap_err();
    let problem = e.source().expect("a cache file error has a source");
    assert!(problem.downcast_ref::<CacheFileProblem>().is_some());
    assert_eq!(problem.to_string(), e.io_error().unwrap().to_string());
    let Error::CacheFile {
        problem: CacheFileProblem::Io(io),
        offset: 0,
        ..
    } = &e
    else {
        panic!("{e:?}");
    };
    assert_eq!(io.kind(), io::ErrorKind::NotFound);
    assert_eq!(e.clone().to_string(), e.to_string());
    // A parse problem is not an I/O error.
    let bad = selfspec::strategies::LookupCache::from_bytes(&[0; 17], "f").unwrap_err();
    assert_eq!(bad.io_error().map(io::Error::kind), None);
    assert!(
        matches!(
            &bad,
            Error::CacheFile {
                offset: 16,
                problem: CacheFileProblem::MissingFollowerCount,
                path,
            } if path.as_os_str() == "f"
        ),
        "{bad:?}"
    );
}
