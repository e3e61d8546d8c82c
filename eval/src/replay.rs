//! The replay protocol: one drafter, sessions in order, greedy
//! verification against the recorded outputs.

use selfspec::{DrafterStats, Speculative, Token};

use crate::{ReplayReport, Session};

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
