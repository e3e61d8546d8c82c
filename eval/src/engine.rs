//! The concurrent engine: slots decoded in rounds on one `Shared`
//! (`docs/replay.md` in the repository, "Concurrent engine").

use selfspec::{Config, DrafterStats, Error, Shared, Speculative, Token};

use crate::{ReplayReport, Session};

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
/// over all slots; `Engine::SEQUENTIAL` is exactly [`replay`](crate::replay()).
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
