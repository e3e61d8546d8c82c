//! Helpers shared by the integration tests.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

use selfspec::replay::Session;

/// The sessions of a workload file (JSON Lines, one session per line).
pub fn load_workload(path: impl AsRef<Path>) -> Vec<Session> {
    selfspec::replay::read_workload(path).unwrap_or_else(|e| panic!("{e}"))
}

pub fn manifest_path(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(rel)
}
