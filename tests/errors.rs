//! Error messages: the out-of-memory error names what and how much; file
//! errors keep their I/O source.

use std::error::Error as _;
use std::io;

use selfspec::{CacheFileProblem, Error};

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
