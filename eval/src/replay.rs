//! The replay protocol: one drafter, sessions in order, greedy
//! verification against the recorded outputs.

use selfspec::{DraftLimits, Drafter, DrafterStats, Error, Speculative, Token};

use crate::{ReplayReport, Session, Slot};

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
///
/// # Errors
///
/// [`Error::TokenOutOfRange`] for a token id not below
/// [`STOP`](crate::STOP) (the figures of the requests before it are lost).
pub fn replay(spec: &mut Speculative, sessions: &[Session]) -> Result<ReplayReport, Error> {
    replay_observed(spec, sessions, |_| {})
}

/// Like [`replay`], calling `observe` after every verification step.
///
/// # Errors
///
/// As [`replay`].
pub fn replay_observed(
    spec: &mut Speculative,
    sessions: &[Session],
    mut observe: impl FnMut(&Step<'_>),
) -> Result<ReplayReport, Error> {
    let before: Vec<DrafterStats> = spec.stats().to_vec();
    let mut report = ReplayReport {
        sessions: sessions.len(),
        ..ReplayReport::default()
    };
    // The slot's stepper owns the drafter while it decodes a request.
    let mut slot = Slot::new()?;
    let mut first = Some(std::mem::replace(spec, placeholder()?));
    let replayed = replay_slot(&mut slot, &mut first, sessions, &mut report, &mut observe);
    if let Some(back) = first.or_else(|| slot.take_spec()) {
        *spec = back;
    }
    replayed?;
    report.stats = spec
        .stats()
        .iter()
        .zip(&before)
        .map(|(after, before)| after.since(before))
        .collect();
    report.draft_time = report.stats.iter().map(|s| s.t_draft).sum();
    Ok(report)
}

/// Replays `sessions` on `slot`, its first request with `spec`.
fn replay_slot<'a>(
    slot: &mut Slot<'a>,
    spec: &mut Option<Speculative>,
    sessions: &'a [Session],
    report: &mut ReplayReport,
    observe: &mut impl FnMut(&Step<'_>),
) -> Result<(), Error> {
    let mut call = 0;
    for (s, session) in sessions.iter().enumerate() {
        for (r, request) in session.requests.iter().enumerate() {
            let kind = report.count_request(&session.kind, request.output.len());
            slot.start(request, spec.take())?;
            while let Some(v) = slot.step()? {
                report.count_step(kind, v.draft.len(), v.accepted);
                observe(&Step {
                    call,
                    session: s,
                    request: r,
                    index: v.index,
                    history_len: request.prompt.len() + v.index,
                    draft: &v.draft,
                    drafted_by: v.drafted_by,
                    n_accepted: v.accepted,
                });
                call += 1;
            }
        }
    }
    Ok(())
}

/// What holds `replay`'s drafter's place while the slot's stepper owns it.
fn placeholder() -> Result<Speculative, Error> {
    #[derive(Debug)]
    struct Idle;
    impl Drafter for Idle {
        fn name(&self) -> &str {
            "idle"
        }
        fn begin(&mut self, _prompt: &[Token]) {}
        fn draft(&mut self, _: &[Token], _: Token, _: DraftLimits, _: &mut Vec<Token>) {}
        fn accept(&mut self, _n_accepted: usize) {}
    }
    Speculative::from_drafters(vec![Box::new(Idle)], DraftLimits { min: 0, max: 1 })
}
