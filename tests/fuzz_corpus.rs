//! A stable-Rust smoke of the fuzz targets: replays every committed corpus and
//! regression input of `fuzz/` through the same operation decoders, plus a
//! deterministic batch of pseudo-random inputs.

mod fuzz_ops;

use std::path::Path;

fn inputs(target: &str) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    for dir in ["corpus", "regressions"] {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("fuzz")
            .join(dir)
            .join(target);
        let Ok(entries) = std::fs::read_dir(&path) else {
            continue;
        };
        for e in entries.flatten() {
            out.push((
                e.path().display().to_string(),
                std::fs::read(e.path()).unwrap(),
            ));
        }
    }
    // Pseudo-random inputs, so the smoke runs even before a corpus exists.
    let mut x = 0x853c_49e6_748f_ea9bu64;
    for i in 0..300 {
        let len = 16 + (i * 37) % 700;
        let bytes = (0..len)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                ((x >> 32) & 0xFF) as u8
            })
            .collect();
        out.push((format!("random #{i}"), bytes));
    }
    out
}

fn replay(target: &str, run: fn(&[u8])) -> usize {
    let inputs = inputs(target);
    for (name, data) in &inputs {
        if std::panic::catch_unwind(|| run(data)).is_err() {
            panic!("fuzz target `{target}` fails on {name}");
        }
    }
    inputs.len()
}

#[test]
fn chaos_corpus() {
    assert!(replay("chaos", fuzz_ops::chaos) >= 300);
}

#[test]
fn differential_corpus() {
    assert!(replay("differential", fuzz_ops::differential) >= 300);
}

#[test]
fn parse_corpus() {
    assert!(replay("parse", fuzz_ops::parse) >= 300);
}

#[test]
fn load_corpus() {
    assert!(replay("load", fuzz_ops::load) >= 300);
}
