//! Error messages: workload I/O errors name the file without a line; the
//! out-of-memory error names what and how much.

use selfspec::Error;

#[test]
fn workload_errors_name_a_line_only_for_parse_errors() {
    let io = Error::Workload {
        source_name: "/nonexistent".into(),
        line: 0,
        reason: "No such file or directory (os error 2)".into(),
    };
    assert_eq!(
        io.to_string(),
        "/nonexistent: No such file or directory (os error 2)"
    );
    let parse = Error::Workload {
        source_name: "w.jsonl".into(),
        line: 3,
        reason: "EOF".into(),
    };
    assert_eq!(parse.to_string(), "w.jsonl:3: EOF");
    let oom = Error::OutOfMemory {
        what: "ngram-mod pool",
        bytes: 1 << 34,
    };
    assert_eq!(
        oom.to_string(),
        "ngram-mod pool: cannot allocate 17179869184 bytes (16.0 GiB); choose a smaller size"
    );
}

#[cfg(feature = "serde")]
#[test]
fn a_missing_workload_file_has_no_line() {
    let e = selfspec::replay::read_workload("/nonexistent/w.jsonl").unwrap_err();
    let msg = e.to_string();
    assert!(msg.starts_with("/nonexistent/w.jsonl: "), "{msg}");
    assert!(!msg.contains(":0:"), "{msg}");
}
