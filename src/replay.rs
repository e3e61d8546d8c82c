//! Draft quality without a model: replaying recorded generations under greedy
//! verification (the protocol of `docs/replay.md` in the repository). An
//! evaluation tool, behind the `replay` feature: engines do not need it.
//!
//! For each request: `begin(prompt)`, then per step `draft(history, last)`,
//! verification against the recorded output (the accepted prefix is the longest
//! common prefix of draft and actual continuation), `accept(a)`, and the history
//! grows by `last` plus the accepted tokens. One step is one target forward pass,
//! so `tau = generated tokens / steps` is the speed-up in forward passes.
//!
//! ```
//! use selfspec::{Config, Speculative};
//! use selfspec::replay::{replay, Request, Session};
//!
//! let text: Vec<u32> = (0..400).map(|i| (i * 7 % 50) as u32).collect();
//! let session = Session::new("demo", "synthetic", vec![Request::new(text[..200].to_vec(), text[200..].to_vec())]);
//! let mut spec = Speculative::new(&Config::default())?;
//! let report = replay(&mut spec, &[session]);
//! assert_eq!(report.tokens, 200);
//! assert!(report.tau() > 5.0);
//! # Ok::<(), selfspec::Error>(())
//! ```

use std::time::Duration;

use crate::config::Config;
use crate::speculative::Speculative;
use crate::stats::DrafterStats;
use crate::token::Token;
use crate::{Error, Shared};

/// One request: the history at the start of generation and what the target generated.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Request {
    /// The whole token history the engine holds when generation starts.
    pub prompt: Vec<Token>,
    /// The tokens the target generated, in order.
    pub output: Vec<Token>,
}

impl Request {
    /// A request from its prompt and recorded output.
    #[must_use]
    pub fn new(prompt: Vec<Token>, output: Vec<Token>) -> Request {
        Request { prompt, output }
    }
}

/// Requests served one after another by one engine slot (a chat, a series of edits).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Session {
    /// An identifier, for reports.
    #[cfg_attr(feature = "serde", serde(default))]
    pub id: String,
    /// A free label used to group figures (`chat`, `code-edit`, ...).
    #[cfg_attr(feature = "serde", serde(default))]
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
            requests.push(Request::new(prompt, r.output));
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
/// use selfspec::replay::{parse_workload, WorkloadProblem};
///
/// let text = r#"{"id": "a", "kind": "chat", "requests": [{"prompt": [1, 2], "output": [3]}, {"extend": [4], "output": [5]}]}"#;
/// let sessions = parse_workload("inline", text)?;
/// assert_eq!(sessions[0].requests[1].prompt, [1, 2, 3, 4]);
/// let bad = r#"{"requests": [{"extend": [4], "output": [5]}]}"#;
/// let e = parse_workload("inline", bad).unwrap_err();
/// assert!(matches!(e.problem, WorkloadProblem::ExtendInFirst { request: 0 }));
/// assert!(parse_workload("inline", "{").is_err());
/// # Ok::<(), selfspec::replay::WorkloadError>(())
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

/// One replay step, as seen by an observer (see [`replay_observed`]).
#[derive(Clone, Copy, Debug)]
pub struct Step<'a> {
    /// 0-based index of the draft call over the whole replay.
    pub call: usize,
    /// Index of the session.
    pub session: usize,
    /// Index of the request in its session.
    pub request: usize,
    /// Index in the output of `last`, the token just sampled.
    pub index: usize,
    /// Length of the history passed to `draft`.
    pub history_len: usize,
    /// The draft the engine received (already within the limits).
    pub draft: &'a [Token],
    /// Index in the chain of the strategy that drafted (when the draft is non-empty).
    pub drafted_by: Option<usize>,
    /// Draft tokens the target accepted.
    pub n_accepted: usize,
}

/// The figures of one replay.
#[derive(Clone, Debug, Default, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct ReplayReport {
    /// Sessions replayed.
    pub sessions: usize,
    /// Requests replayed.
    pub requests: usize,
    /// Tokens generated (the recorded outputs' total length).
    pub tokens: u64,
    /// Target forward passes (one per draft call).
    pub steps: u64,
    /// Non-empty drafts handed to the engine.
    pub drafts: u64,
    /// Draft tokens handed to the engine.
    pub drafted: u64,
    /// Draft tokens accepted.
    pub accepted: u64,
    /// Time spent in `draft` calls, all strategies (serde: seconds, an `f64`).
    #[cfg_attr(feature = "serde", serde(with = "crate::stats::secs"))]
    pub draft_time: Duration,
    /// Per-strategy statistics accumulated during this replay.
    pub stats: Vec<DrafterStats>,
    /// The figures of each session kind in the replay, in order of first
    /// appearance: how each kind fares in a mixed workload.
    #[cfg_attr(feature = "serde", serde(default))]
    pub kinds: Vec<KindFigures>,
}

/// One session kind's share of a [`ReplayReport`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct KindFigures {
    /// The sessions' `kind`.
    pub kind: String,
    /// Tokens generated in sessions of this kind.
    pub tokens: u64,
    /// Target forward passes they took.
    pub steps: u64,
    /// Draft tokens handed to the engine for them.
    pub drafted: u64,
    /// Draft tokens accepted.
    pub accepted: u64,
}

/// `a / b`, 0 when `b` is 0 (a replay that generated or drafted nothing).
fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 {
        0.0
    } else {
        a as f64 / b as f64
    }
}

impl KindFigures {
    /// Tokens per target forward pass (0 when nothing was generated).
    #[must_use]
    pub fn tau(&self) -> f64 {
        ratio(self.tokens, self.steps)
    }

    /// Accepted / drafted tokens (0 without drafts).
    #[must_use]
    pub fn acceptance(&self) -> f64 {
        ratio(self.accepted, self.drafted)
    }
}

impl ReplayReport {
    /// The index in `kinds` of `kind` (added on first use), looked up once
    /// per request.
    fn kind(&mut self, kind: &str) -> usize {
        match self.kinds.iter().position(|k| k.kind == kind) {
            Some(i) => i,
            None => {
                self.kinds.push(KindFigures {
                    kind: kind.to_string(),
                    ..KindFigures::default()
                });
                self.kinds.len() - 1
            }
        }
    }

    /// Counts one step of a session of kind `k` (an index from
    /// [`kind`](ReplayReport::kind)): `drafted` tokens offered, `accepted`
    /// kept.
    fn count_step(&mut self, k: usize, drafted: usize, accepted: usize) {
        let k = &mut self.kinds[k];
        k.steps += 1;
        k.drafted += drafted as u64;
        k.accepted += accepted as u64;
    }

    /// Tokens per target forward pass (1.0 = no gain; 0 when nothing was generated).
    #[must_use]
    pub fn tau(&self) -> f64 {
        ratio(self.tokens, self.steps)
    }

    /// Accepted draft tokens / drafted tokens (0 when nothing was drafted).
    #[must_use]
    pub fn acceptance(&self) -> f64 {
        ratio(self.accepted, self.drafted)
    }

    /// Mean time of a draft call, in microseconds.
    #[must_use]
    pub fn micros_per_draft(&self) -> f64 {
        if self.steps == 0 {
            0.0
        } else {
            self.draft_time.as_secs_f64() * 1e6 / self.steps as f64
        }
    }
}

/// Replays `sessions` in order through `spec` (state carries over between
/// requests and sessions, as in one engine slot).
pub fn replay(spec: &mut Speculative, sessions: &[Session]) -> ReplayReport {
    replay_observed(spec, sessions, |_| {})
}

/// Like [`replay`], calling `observe` after every verification step.
pub fn replay_observed(
    spec: &mut Speculative,
    sessions: &[Session],
    mut observe: impl FnMut(&Step<'_>),
) -> ReplayReport {
    let before: Vec<DrafterStats> = spec.stats().to_vec();
    let mut report = ReplayReport {
        sessions: sessions.len(),
        ..ReplayReport::default()
    };
    let mut history: Vec<Token> = Vec::new();
    let mut call = 0;
    for (s, session) in sessions.iter().enumerate() {
        for (r, request) in session.requests.iter().enumerate() {
            report.requests += 1;
            report.tokens += request.output.len() as u64;
            let kind = report.kind(&session.kind);
            report.kinds[kind].tokens += request.output.len() as u64;
            history.clear();
            history.extend_from_slice(&request.prompt);
            spec.begin(&history);
            let output = &request.output;
            let mut i = 0;
            while i < output.len() {
                let last = output[i];
                spec.draft(&history, last);
                let draft = spec.last_draft();
                let n_accepted = draft
                    .iter()
                    .zip(&output[i + 1..])
                    .take_while(|(d, o)| d == o)
                    .count();
                let step = Step {
                    call,
                    session: s,
                    request: r,
                    index: i,
                    history_len: history.len(),
                    draft,
                    drafted_by: if draft.is_empty() {
                        None
                    } else {
                        spec.drafted_by()
                    },
                    n_accepted,
                };
                if !draft.is_empty() {
                    report.drafts += 1;
                    report.drafted += draft.len() as u64;
                    report.accepted += n_accepted as u64;
                }
                report.count_step(kind, draft.len(), n_accepted);
                observe(&step);
                spec.accept(n_accepted);
                history.extend_from_slice(&output[i..i + n_accepted + 1]);
                i += n_accepted + 1;
                report.steps += 1;
                call += 1;
            }
        }
    }
    report.stats = spec
        .stats()
        .iter()
        .zip(&before)
        .map(|(after, before)| after.since(before))
        .collect();
    report.draft_time = report.stats.iter().map(|s| s.t_draft).sum();
    report
}

/// How the replayed engine runs its drafters (`docs/replay.md`, "Concurrent
/// engine"): `slots` sequences decoded at once, one step each per round
/// (a batched forward pass), sessions taken in file order; with `fresh`, a
/// new per-sequence drafter for every request (built on the same
/// [`Shared`]), as engines that create drafter state per request do.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Engine {
    /// Sequences decoded at once (at least 1).
    pub slots: usize,
    /// A new drafter per request (else one per slot, for all its requests).
    pub fresh: bool,
    /// Each session in a [scope](Shared::scope) of its own (with a new
    /// drafter per request on it, as `fresh`): what tenant isolation costs
    /// when every conversation is its own tenant.
    #[cfg_attr(feature = "serde", serde(default))]
    pub scoped: bool,
}

impl Engine {
    /// The sequential protocol: one slot, one drafter for the whole file.
    pub const SEQUENTIAL: Engine = Engine {
        slots: 1,
        fresh: false,
        scoped: false,
    };

    /// `slots` slots, each keeping its drafter.
    #[must_use]
    pub fn slots(slots: usize) -> Engine {
        Engine {
            slots,
            fresh: false,
            scoped: false,
        }
    }

    /// `slots` slots, a new drafter for every request.
    #[must_use]
    pub fn fresh(slots: usize) -> Engine {
        Engine {
            slots,
            fresh: true,
            scoped: false,
        }
    }

    /// `slots` slots, each session in a scope of its own, a new drafter
    /// for every request.
    #[must_use]
    pub fn scoped(slots: usize) -> Engine {
        Engine {
            slots,
            fresh: true,
            scoped: true,
        }
    }
}

impl std::fmt::Display for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.scoped {
            return write!(f, "scoped {}", self.slots);
        }
        match (self.slots, self.fresh) {
            (1, false) => write!(f, "seq"),
            (s, false) => write!(f, "{s} slots"),
            (s, true) => write!(f, "fresh {s}"),
        }
    }
}

/// One engine slot's request in flight.
struct Slot {
    spec: Option<Speculative>,
    session: usize,
    /// Its session's index in the report's `kinds`.
    kind: usize,
    request: usize,
    history: Vec<Token>,
    /// Index in the output of the last sampled token.
    i: usize,
    busy: bool,
}

/// The replayed engine: its slots, the figures, the drafters' statistics.
struct EngineReplay<'a> {
    config: &'a Config,
    shared: &'a Shared,
    sessions: &'a [Session],
    engine: Engine,
    report: ReplayReport,
    totals: Vec<DrafterStats>,
}

impl EngineReplay<'_> {
    fn new_spec(&self) -> Result<Speculative, Error> {
        Speculative::with_shared(self.config, self.shared)
    }

    /// Adds a finished drafter's statistics to the totals.
    fn add_stats(&mut self, spec: &Speculative) {
        if self.totals.is_empty() {
            self.totals = spec
                .stats()
                .iter()
                .map(|s| DrafterStats::new(s.name.clone()))
                .collect();
        }
        for (t, s) in self.totals.iter_mut().zip(spec.stats()) {
            t.merge(s);
        }
    }

    /// Starts request `r` of session `s` on `slot` (a new drafter if fresh).
    fn start(&mut self, slot: &mut Slot, s: usize, r: usize) -> Result<(), Error> {
        if self.engine.scoped {
            let scope = self.shared.scope(&format!("session-{s}"));
            slot.spec = Some(Speculative::with_shared(self.config, &scope)?);
        } else if self.engine.fresh {
            slot.spec = Some(self.new_spec()?);
        }
        let request = &self.sessions[s].requests[r];
        self.report.requests += 1;
        self.report.tokens += request.output.len() as u64;
        slot.kind = self.report.kind(&self.sessions[s].kind);
        self.report.kinds[slot.kind].tokens += request.output.len() as u64;
        slot.session = s;
        slot.request = r;
        slot.i = 0;
        slot.busy = true;
        slot.history.clear();
        slot.history.extend_from_slice(&request.prompt);
        if let Some(spec) = &mut slot.spec {
            spec.begin(&slot.history);
        }
        Ok(())
    }

    /// One step of `slot`'s request (a draft, its verification), then the
    /// next request of its session or a free slot when it is done.
    fn step(&mut self, slot: &mut Slot) -> Result<(), Error> {
        let sessions = self.sessions;
        let output = &sessions[slot.session].requests[slot.request].output;
        if let (true, Some(spec)) = (slot.i < output.len(), &mut slot.spec) {
            let last = output[slot.i];
            let draft = spec.draft(&slot.history, last);
            let truth = &output[slot.i + 1..];
            let n_accepted = draft.iter().zip(truth).take_while(|(d, o)| d == o).count();
            if !draft.is_empty() {
                self.report.drafts += 1;
                self.report.drafted += draft.len() as u64;
                self.report.accepted += n_accepted as u64;
            }
            let drafted = draft.len();
            slot.history
                .extend_from_slice(&output[slot.i..=slot.i + n_accepted]);
            self.report.count_step(slot.kind, drafted, n_accepted);
            spec.accept(n_accepted);
            slot.i += n_accepted + 1;
            self.report.steps += 1;
        }
        if slot.i >= output.len() {
            if self.engine.fresh {
                if let Some(mut spec) = slot.spec.take() {
                    spec.end_request();
                    self.add_stats(&spec);
                }
            }
            let (s, r) = (slot.session, slot.request + 1);
            if r < sessions[s].requests.len() {
                self.start(slot, s, r)?;
            } else {
                slot.busy = false;
            }
        }
        Ok(())
    }
}

/// Replays `sessions` on an engine of `engine.slots` slots sharing `shared`
/// (the protocol of `docs/replay.md`, "Concurrent engine"). Figures are summed
/// over all slots; `Engine::SEQUENTIAL` is exactly [`replay`].
///
/// ```
/// use selfspec::{Config, Shared};
/// use selfspec::replay::{replay_engine, Engine, Request, Session};
///
/// let text: Vec<u32> = (0..400).map(|i| (i * 7 % 50) as u32).collect();
/// let sessions: Vec<Session> = (0..4)
///     .map(|i| Session::new(format!("s{i}"), "synthetic", vec![Request::new(text[..200].to_vec(), text[200..].to_vec())]))
///     .collect();
/// let config = Config::recommended();
/// let shared = Shared::new(&config)?;
/// let report = replay_engine(&config, &shared, &sessions, Engine::fresh(2))?;
/// assert_eq!(report.tokens, 800);
/// assert!(report.tau() > 2.0);
/// # Ok::<(), selfspec::Error>(())
/// ```
///
/// # Errors
///
/// An invalid `config` ([`Config::validate`]).
pub fn replay_engine(
    config: &Config,
    shared: &Shared,
    sessions: &[Session],
    engine: Engine,
) -> Result<ReplayReport, Error> {
    config.validate()?;
    let mut run = EngineReplay {
        config,
        shared,
        sessions,
        engine,
        report: ReplayReport {
            sessions: sessions.len(),
            ..ReplayReport::default()
        },
        totals: Vec::new(),
    };
    let mut slots: Vec<Slot> = Vec::with_capacity(engine.slots.max(1));
    for _ in 0..engine.slots.max(1) {
        slots.push(Slot {
            spec: if engine.fresh {
                None
            } else {
                Some(run.new_spec()?)
            },
            session: 0,
            kind: 0,
            request: 0,
            history: Vec::new(),
            i: 0,
            busy: false,
        });
    }
    let mut next = 0;
    loop {
        // One round: one batched forward pass of the engine.
        let mut busy = false;
        for slot in &mut slots {
            while !slot.busy && next < sessions.len() {
                if !sessions[next].requests.is_empty() {
                    run.start(slot, next, 0)?;
                }
                next += 1;
            }
            if slot.busy {
                busy = true;
                run.step(slot)?;
            }
        }
        if !busy && next >= sessions.len() {
            break;
        }
    }
    for slot in slots {
        if let Some(spec) = slot.spec {
            run.add_stats(&spec);
        }
    }
    let mut report = run.report;
    report.draft_time = run.totals.iter().map(|s| s.t_draft).sum();
    report.stats = run.totals;
    Ok(report)
}
