//! The workload format: sessions of recorded requests in JSON Lines
//! (`docs/replay.md` in the repository, "Workload format").

use selfspec::Token;

/// One request: the history at the start of generation and what the target generated.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Request {
    /// The whole token history the engine holds when generation starts.
    pub prompt: Vec<Token>,
    /// The tokens the target generated, in order.
    pub output: Vec<Token>,
    /// Each output token's top-1 / top-2 logit margin, when recorded.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub margins: Vec<f32>,
}

impl Request {
    /// A request from its prompt and recorded output.
    #[must_use]
    pub fn new(prompt: Vec<Token>, output: Vec<Token>) -> Request {
        Request {
            prompt,
            output,
            margins: Vec::new(),
        }
    }
}

/// Requests served one after another by one engine slot (a chat, a series of edits).
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Session {
    /// An identifier, for reports.
    #[serde(default)]
    pub id: String,
    /// A free label used to group figures (`chat`, `code-edit`, ...).
    #[serde(default)]
    pub kind: String,
    /// The requests, in order.
    pub requests: Vec<Request>,
}

impl Session {
    /// A session from its parts.
    pub fn new(id: impl Into<String>, kind: impl Into<String>, requests: Vec<Request>) -> Session {
        Session {
            id: id.into(),
            kind: kind.into(),
            requests,
        }
    }
}

/// A workload that cannot be read or parsed ([`read_workload`],
/// [`parse_workload`]). Shown as `FILE:LINE: problem`, or `FILE: problem`
/// for the file as a whole (an I/O error).
#[derive(Debug, thiserror::Error)]
#[error("{}: {problem}", location(.source_name, *.line))]
pub struct WorkloadError {
    /// The file (or label) the workload came from.
    pub source_name: String,
    /// 1-based line of the offending session, 0 for the file as a whole.
    pub line: usize,
    /// What is wrong.
    #[source]
    pub problem: WorkloadProblem,
}

/// What is wrong with a workload ([`WorkloadError`]).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WorkloadProblem {
    /// The file cannot be read.
    #[error(transparent)]
    Io(std::io::Error),
    /// A line is not a session (the JSON parser's message).
    #[error("{message}")]
    Parse {
        /// What the parser says.
        message: String,
    },
    /// The first request of a session has `"extend"`: there is no earlier
    /// request to extend.
    #[error("request {request}: `extend` in a session's first request; the first request needs `prompt`")]
    ExtendInFirst {
        /// 0-based request index.
        request: usize,
    },
    /// A request has both `"prompt"` and `"extend"`.
    #[error("request {request}: both `prompt` and `extend`; give one (`extend`: prompt = previous prompt + previous output + extend)")]
    PromptAndExtend {
        /// 0-based request index.
        request: usize,
    },
    /// A request has neither `"prompt"` nor `"extend"`.
    #[error("request {request}: neither `prompt` nor `extend`")]
    NoPrompt {
        /// 0-based request index.
        request: usize,
    },
}

/// `FILE:LINE`, or `FILE` alone for line 0.
fn location(source: &str, line: usize) -> String {
    if line == 0 {
        source.to_string()
    } else {
        format!("{source}:{line}")
    }
}

/// A request as a workload line holds it: a whole `prompt`, or (compact
/// form) an `extend` of the previous request's prompt and output.
#[derive(serde::Deserialize)]
struct LineRequest {
    prompt: Option<Vec<Token>>,
    extend: Option<Vec<Token>>,
    output: Vec<Token>,
    #[serde(default)]
    margins: Vec<f32>,
}

/// A session as a workload line holds it.
#[derive(serde::Deserialize)]
struct LineSession {
    #[serde(default)]
    id: String,
    #[serde(default)]
    kind: String,
    requests: Vec<LineRequest>,
}

impl LineSession {
    /// The session with every prompt whole.
    fn expand(self) -> Result<Session, WorkloadProblem> {
        let mut requests: Vec<Request> = Vec::with_capacity(self.requests.len());
        for (i, r) in self.requests.into_iter().enumerate() {
            let prompt = match (r.prompt, r.extend, requests.last()) {
                (Some(_), Some(_), _) => {
                    return Err(WorkloadProblem::PromptAndExtend { request: i })
                }
                (None, None, _) => return Err(WorkloadProblem::NoPrompt { request: i }),
                (None, Some(_), None) => return Err(WorkloadProblem::ExtendInFirst { request: i }),
                (Some(prompt), None, _) => prompt,
                (None, Some(extend), Some(previous)) => {
                    let mut prompt = Vec::with_capacity(
                        previous.prompt.len() + previous.output.len() + extend.len(),
                    );
                    prompt.extend_from_slice(&previous.prompt);
                    prompt.extend_from_slice(&previous.output);
                    prompt.extend_from_slice(&extend);
                    prompt
                }
            };
            let mut request = Request::new(prompt, r.output);
            request.margins = r.margins;
            requests.push(request);
        }
        Ok(Session::new(self.id, self.kind, requests))
    }
}

/// Parses a workload in JSON Lines (one [`Session`] per line: `{"id", "kind",
/// "requests": [{"prompt": [..], "output": [..]}]}`, other keys ignored);
/// `name` labels errors. In the compact form a request after the first may
/// give `"extend"` instead of `"prompt"`: its prompt is the previous
/// request's prompt and output, then `extend`.
///
/// ```
/// use selfspec_eval::{parse_workload, WorkloadProblem};
///
/// let text = r#"{"id": "a", "kind": "chat", "requests": [{"prompt": [1, 2], "output": [3]}, {"extend": [4], "output": [5]}]}"#;
/// let sessions = parse_workload("inline", text)?;
/// assert_eq!(sessions[0].requests[1].prompt, [1, 2, 3, 4]);
/// let bad = r#"{"requests": [{"extend": [4], "output": [5]}]}"#;
/// let e = parse_workload("inline", bad).unwrap_err();
/// assert!(matches!(e.problem, WorkloadProblem::ExtendInFirst { request: 0 }));
/// assert!(parse_workload("inline", "{").is_err());
/// # Ok::<(), selfspec_eval::WorkloadError>(())
/// ```
///
/// # Errors
///
/// [`WorkloadError`] with the 1-based line that is not a session.
pub fn parse_workload(name: &str, text: &str) -> Result<Vec<Session>, WorkloadError> {
    let mut sessions = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let fail = |problem| WorkloadError {
            source_name: name.to_string(),
            line: i + 1,
            problem,
        };
        let session: LineSession = serde_json::from_str(line).map_err(|e| {
            fail(WorkloadProblem::Parse {
                message: e.to_string(),
            })
        })?;
        sessions.push(session.expand().map_err(fail)?);
    }
    Ok(sessions)
}

/// Reads a workload file in JSON Lines (see [`parse_workload`]).
///
/// # Errors
///
/// [`WorkloadError`] (line 0) when the file cannot be read, or as
/// [`parse_workload`].
pub fn read_workload(path: impl AsRef<std::path::Path>) -> Result<Vec<Session>, WorkloadError> {
    let path = path.as_ref();
    let name = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| WorkloadError {
        source_name: name.clone(),
        line: 0,
        problem: WorkloadProblem::Io(e),
    })?;
    parse_workload(&name, &text)
}
