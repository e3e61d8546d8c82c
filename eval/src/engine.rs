//! The concurrent engine: slots decoded in rounds on one `Shared`
//! (`docs/replay.md` in the repository, "Concurrent engine").

use selfspec::{Config, DrafterStats, Error, Shared, Speculative};

use crate::{ReplayReport, Session, Slot};

/// How the replayed engine runs its drafters (`docs/replay.md`, "Concurrent
/// engine"): `slots` sequences decoded at once, one step each per round
/// (a batched forward pass), sessions taken in file order; with `fresh`, a
/// new per-sequence drafter for every request (built on the same
/// [`Shared`]), as engines that create drafter state per request do.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct Engine {
    /// Sequences decoded at once (at least 1).
    pub slots: usize,
    /// A new drafter per request (else one per slot, for all its requests).
    pub fresh: bool,
    /// Each session in a [scope](Shared::scope) of its own (with a new
    /// drafter per request on it, as `fresh`): what tenant isolation costs
    /// when every conversation is its own tenant.
    #[serde(default)]
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

/// One engine slot: a [`Slot`] of its own stepper, and the request it
/// decodes.
struct Lane<'a> {
    slot: Slot<'a>,
    session: usize,
    /// Its session's index in the report's `kinds`.
    kind: usize,
    request: usize,
    busy: bool,
    /// The slot's drafter before its first request (unless fresh).
    spec: Option<Speculative>,
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

impl<'a> EngineReplay<'a> {
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

    /// Starts request `r` of session `s` on `lane` (a new drafter if
    /// fresh, else the slot's): its prefill, `begin(prompt)`.
    fn start(&mut self, lane: &mut Lane<'a>, s: usize, r: usize) -> Result<(), Error> {
        let spec = if self.engine.scoped {
            let scope = self.shared.scope(&format!("session-{s}"));
            Some(Speculative::with_shared(self.config, &scope)?)
        } else if self.engine.fresh {
            Some(Speculative::with_shared(self.config, self.shared)?)
        } else {
            lane.spec.take() // then the slot's, request after request
        };
        let session = &self.sessions[s];
        let request = &session.requests[r];
        lane.kind = self
            .report
            .count_request(&session.kind, request.output.len());
        lane.session = s;
        lane.request = r;
        lane.busy = true;
        lane.slot.start(request, spec)
    }

    /// One step of `lane`'s request (a draft, its verification), then the
    /// next request of its session or a free slot when it is done.
    fn step(&mut self, lane: &mut Lane<'a>) -> Result<(), Error> {
        if let Some(v) = lane.slot.step()? {
            self.report.count_step(lane.kind, v.draft.len(), v.accepted);
        }
        if !lane.slot.is_running() {
            if self.engine.fresh {
                if let Some(spec) = lane.slot.take_spec() {
                    self.add_stats(&spec);
                }
            }
            let (s, r) = (lane.session, lane.request + 1);
            if r < self.sessions[s].requests.len() {
                self.start(lane, s, r)?;
            } else {
                lane.busy = false;
            }
        }
        Ok(())
    }
}

/// Replays `sessions` on an engine of `engine.slots` slots sharing `shared`
/// (the protocol of `docs/replay.md`, "Concurrent engine"), each slot a
/// [`Slot`] of its own: in a round, each slot in turn takes one step, then
/// starts its next request if it is done. Every request's end calls its
/// drafter's `end_request` (the stepper does). Figures are summed over all
/// slots; `Engine::SEQUENTIAL` is exactly [`replay`](crate::replay()).
///
/// ```
/// use selfspec::{Config, Shared};
/// use selfspec_eval::{replay_engine, Engine, Request, Session};
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
/// An invalid `config` ([`Config::validate`]); [`Error::TokenOutOfRange`]
/// for a token id not below [`STOP`](crate::STOP).
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
    let mut lanes: Vec<Lane> = Vec::with_capacity(engine.slots.max(1));
    for _ in 0..engine.slots.max(1) {
        let spec = if engine.fresh {
            None
        } else {
            Some(Speculative::with_shared(config, shared)?)
        };
        lanes.push(Lane {
            slot: Slot::new()?,
            spec,
            session: 0,
            kind: 0,
            request: 0,
            busy: false,
        });
    }
    let mut next = 0;
    loop {
        // One round: one batched forward pass of the engine.
        let mut busy = false;
        for lane in &mut lanes {
            while !lane.busy && next < sessions.len() {
                if !sessions[next].requests.is_empty() {
                    run.start(lane, next, 0)?;
                }
                next += 1;
            }
            if lane.busy {
                busy = true;
                run.step(lane)?;
            }
        }
        if !busy && next >= sessions.len() {
            break;
        }
    }
    for mut lane in lanes {
        if let Some(spec) = lane.spec.or_else(|| lane.slot.take_spec()) {
            run.add_stats(&spec);
        }
    }
    let mut report = run.report;
    report.draft_time = run.totals.iter().map(|s| s.t_draft).sum();
    report.stats = run.totals;
    Ok(report)
}
