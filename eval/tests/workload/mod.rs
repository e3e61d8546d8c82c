//! Workload helpers of the harness's tests (with `tests/common` of the
//! repository root for the rest).
#![allow(dead_code)]

use std::path::{Path, PathBuf};

use selfspec::{DraftLimits, Drafter};
use selfspec_eval::Session;

/// `rel` under the repository root (`examples/data/...`, `tests/golden/...`).
pub fn repo_path(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(rel)
}

/// The sessions of a workload file (JSON Lines, one session per line).
pub fn load(path: impl AsRef<Path>) -> Vec<Session> {
    selfspec_eval::read_workload(path).unwrap_or_else(|e| panic!("{e}"))
}

/// Drives one drafter through `sessions` (begin, then steps on the output).
pub fn drive(d: &mut dyn Drafter, sessions: &[Session]) -> usize {
    let mut max_history = 0;
    let mut draft = Vec::new();
    for r in sessions.iter().flat_map(|s| &s.requests) {
        let mut history = r.prompt.clone();
        d.begin(&history);
        let mut i = 0;
        while i < r.output.len() {
            draft.clear();
            d.draft(&history, r.output[i], DraftLimits::default(), &mut draft);
            let a = draft
                .iter()
                .zip(&r.output[i + 1..])
                .take_while(|(x, y)| x == y)
                .count();
            if a > 0 {
                d.accept(a);
            }
            history.extend_from_slice(&r.output[i..i + a + 1]);
            i += a + 1;
        }
        max_history = max_history.max(history.len());
    }
    max_history
}
