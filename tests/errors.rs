//! Error messages: workload I/O errors name the file without a line; the
//! out-of-memory error names what and how much.

use std::error::Error as _;
use std::io;
use std::sync::Arc;

use selfspec::{CacheFileProblem, Error, WorkloadProblem};

#[test]
fn workload_errors_name_a_line_only_for_parse_errors() {
    let io = Error::Workload {
        source_name: "/nonexistent".into(),
        line: 0,
        problem: WorkloadProblem::Io(Arc::new(io::Error::from_raw_os_error(2))),
    };
    assert_eq!(
        io.to_string(),
        "/nonexistent: No such file or directory (os error 2)"
    );
    let parse = Error::Workload {
        source_name: "w.jsonl".into(),
        line: 3,
        problem: WorkloadProblem::Parse {
            message: "EOF".into(),
        },
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
    assert_eq!(
        e.io_error().map(io::Error::kind),
        Some(io::ErrorKind::NotFound)
    );
}

/// File errors keep the I/O error as their source, stay `Clone` and compare
/// (I/O errors by kind and message).
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
    assert_eq!(e.clone(), e);
    let other = Error::CacheFile {
        path: "/nonexistent/cache.bin".into(),
        offset: 0,
        problem: CacheFileProblem::Io(Arc::new(io::Error::other("boom"))),
    };
    assert_ne!(other, e);
    // A parse problem is not an I/O error.
    let bad = selfspec::strategies::LookupCache::from_bytes(&[0; 17], "f").unwrap_err();
    assert_eq!(bad.io_error().map(io::Error::kind), None);
    assert_eq!(
        bad,
        Error::CacheFile {
            path: "f".into(),
            offset: 16,
            problem: CacheFileProblem::MissingFollowerCount,
        }
    );
}
