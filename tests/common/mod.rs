//! Helpers shared by the integration tests: reading workloads and golden lines.
#![allow(dead_code)]

use std::path::Path;

use selfspec::replay::{Request, Session};
use serde::Deserialize;

#[derive(Deserialize)]
pub struct JsonRequest {
    pub prompt: Vec<u32>,
    pub output: Vec<u32>,
}

#[derive(Deserialize)]
pub struct JsonSession {
    #[serde(default)]
    pub id: String,
    #[serde(default)]
    pub kind: String,
    pub requests: Vec<JsonRequest>,
}

impl From<JsonSession> for Session {
    fn from(s: JsonSession) -> Session {
        Session::new(
            s.id,
            s.kind,
            s.requests
                .into_iter()
                .map(|r| Request::new(r.prompt, r.output))
                .collect(),
        )
    }
}

/// The sessions of a workload file (JSON Lines, one session per line).
pub fn load_workload(path: impl AsRef<Path>) -> Vec<Session> {
    let path = path.as_ref();
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            serde_json::from_str::<JsonSession>(l)
                .expect("a workload line")
                .into()
        })
        .collect()
}

pub fn manifest_path(rel: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(rel)
}
