//! Drafting decisions on a GPU, on paper: recorded outputs decoded by
//! selfspec's `Stepper` over B sequences at once, each pass charged from a
//! measured pass-cost curve (`t(B, k)`: B sequences, k rows each) instead of
//! run.

use std::convert::Infallible;
use std::time::Duration;

use selfspec::step::{Batch, Choice, Decode, Kept, PassTimes, SeqId, Shape, Stepper, Target};
use selfspec::{Config, Error, Shared, Speculative, Token};

use crate::{Session, STOP};

/// A pass-cost curve: milliseconds of a pass of B sequences with k rows
/// each, at a few B and k.
#[derive(Clone, Debug, PartialEq)]
pub struct CostCurve {
    /// `(B, [(k, ms)])`, B ascending, k ascending.
    pub points: Vec<(usize, Vec<(usize, f64)>)>,
}

fn interpolate(points: &[(f64, f64)], x: f64) -> f64 {
    let i = points
        .partition_point(|p| p.0 < x)
        .clamp(1, points.len().max(2) - 1);
    match points.len() {
        0 => 0.0,
        1 => points[0].1,
        _ => {
            let ((x0, y0), (x1, y1)) = (points[i - 1], points[i]);
            (y0 + (y1 - y0) * (x - x0) / (x1 - x0)).max(0.0)
        }
    }
}

impl CostCurve {
    /// The time of a pass of `b` sequences with `rows` rows in all:
    /// linear in k between the measured k (rows / b, at least 1), then
    /// linear in B between the measured B.
    #[must_use]
    pub fn time(&self, b: usize, rows: usize) -> Duration {
        let (b, rows) = (b.max(1), rows.max(1));
        let k = f64_of(rows) / f64_of(b);
        let at_b: Vec<(f64, f64)> = self
            .points
            .iter()
            .map(|(pb, ks)| {
                let ks: Vec<(f64, f64)> = ks.iter().map(|&(k, ms)| (f64_of(k), ms)).collect();
                (f64_of(*pb), interpolate(&ks, k.max(1.0)))
            })
            .collect();
        Duration::from_secs_f64(interpolate(&at_b, f64_of(b)) / 1000.0)
    }
}

fn f64_of(x: usize) -> f64 {
    u32::try_from(x).map_or(f64::MAX, f64::from)
}

/// One sequence's recorded request.
#[derive(Debug, Default, Clone, Copy)]
struct Text<'a> {
    prompt: &'a [Token],
    output: &'a [Token],
    margins: &'a [f32],
}

impl Text<'_> {
    fn at(&self, i: usize) -> Token {
        match i.checked_sub(self.prompt.len()) {
            None => self.prompt[i],
            Some(o) => self.output.get(o).copied().unwrap_or(STOP),
        }
    }
}

/// B sequences that "generate" their recorded outputs; each pass charged
/// from the curve by its sequences and read rows (prompt rows are free:
/// plain and speculative decoding prefill the same prompts).
struct Simulated<'a> {
    texts: Vec<Text<'a>>,
    rows: Vec<(usize, usize)>,
    curve: &'a CostCurve,
    took: Duration,
    /// Charge only each sequence's rows up to its first wrong draft token
    /// (the bound of perfect sizing).
    hindsight: bool,
}

impl<'a> Simulated<'a> {
    fn new(b: usize, curve: &'a CostCurve) -> Simulated<'a> {
        Simulated {
            texts: vec![Text::default(); b],
            rows: Vec::new(),
            curve,
            took: Duration::ZERO,
            hindsight: false,
        }
    }
}

impl Target for Simulated<'_> {
    type Error = Infallible;

    fn shape(&self) -> Shape {
        Shape {
            sequences: self.texts.len(),
            context: usize::MAX / 2,
            vocab: usize::try_from(STOP).unwrap_or(usize::MAX),
            batch: 1 << 24,
        }
    }

    fn forward(&mut self, batch: &Batch) -> Result<(), Infallible> {
        self.rows.clear();
        self.rows
            .extend(batch.rows().iter().map(|r| (r.seq.index(), r.pos)));
        let mut wrong = vec![false; self.texts.len()];
        let read: Vec<usize> = batch
            .rows()
            .iter()
            .filter(|r| r.output)
            .filter(|r| {
                // Perfect sizing sends no row from a draft's first token
                // that is not the recorded one.
                let s = r.seq.index();
                if self.hindsight && !wrong[s] {
                    wrong[s] = r.token != self.texts[s].at(r.pos);
                }
                !wrong[s]
            })
            .map(|r| r.seq.index())
            .collect();
        let mut seqs = read.clone();
        seqs.dedup();
        self.took = if read.is_empty() {
            Duration::ZERO
        } else {
            self.curve.time(seqs.len(), read.len())
        };
        Ok(())
    }

    fn logits(&mut self, _row: usize) -> Result<&[f32], Infallible> {
        Ok(&[])
    }

    fn greedy(&mut self, row: usize) -> Result<Option<Choice>, Infallible> {
        let (seq, pos) = self.rows[row];
        let text = self.texts[seq];
        let margin = (pos + 1)
            .checked_sub(text.prompt.len())
            .and_then(|o| text.margins.get(o))
            .copied()
            .unwrap_or(f32::INFINITY);
        Ok(Some(Choice {
            token: text.at(pos + 1),
            margin,
        }))
    }

    fn pass_time(&self) -> Option<Duration> {
        Some(self.took)
    }

    fn truncate(&mut self, _seq: SeqId, _from: usize) -> Result<Kept, Infallible> {
        Ok(Kept::Exact)
    }
}

/// How drafts are sized in a simulated run.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Policy {
    /// No drafts.
    Plain,
    /// recall with `draft_max` = the length and its own stop rule.
    Fixed(usize),
    /// recall with `draft_max` = the length, sized by the stepper's budget
    /// from the simulated pass times.
    Budget(usize),
    /// recall drafting up to the length, each pass charged for its rows up
    /// to each draft's first wrong token: the bound of perfect sizing.
    Hindsight(usize),
}

/// What a simulated run gave.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Simulation {
    /// Tokens generated.
    pub tokens: usize,
    /// Simulated time of all passes.
    pub time: Duration,
    /// Passes.
    pub passes: usize,
}

impl Simulation {
    /// Tokens per pass (passes without drafts count as one each).
    #[must_use]
    pub fn tau(&self) -> f64 {
        f64_of(self.tokens) / f64_of(self.passes.max(1))
    }

    /// Tokens per second of simulated time.
    #[must_use]
    pub fn tokens_per_second(&self) -> f64 {
        f64_of(self.tokens) / self.time.as_secs_f64().max(1e-12)
    }
}

/// Which request each sequence decodes: sessions taken in file order by
/// free sequences, each session's requests in order.
struct Jobs<'a> {
    sessions: &'a [Session],
    next_session: usize,
    at: Vec<Option<(usize, usize)>>,
}

impl<'a> Jobs<'a> {
    /// The next request for sequence `s`, whose last one ended.
    fn next(&mut self, s: usize) -> Option<&'a crate::Request> {
        let sessions = self.sessions;
        let mut job = self.at[s].map(|(session, r)| (session, r + 1));
        if job.is_some_and(|(session, r)| r >= sessions[session].requests.len()) {
            job = None;
        }
        while job.is_none() && self.next_session < sessions.len() {
            if !sessions[self.next_session].requests.is_empty() {
                job = Some((self.next_session, 0));
            }
            self.next_session += 1;
        }
        self.at[s] = job;
        job.map(|(session, r)| &sessions[session].requests[r])
    }
}

/// Starts `request` on sequence `s`.
fn start<'a>(
    stepper: &mut Stepper,
    target: &mut Simulated<'a>,
    s: usize,
    request: &'a crate::Request,
    spec: Option<Speculative>,
) -> Result<(), Error> {
    let text = request.prompt.iter().chain(&request.output);
    if let Some(&token) = text.into_iter().find(|&&t| t >= STOP) {
        let vocab = usize::try_from(STOP).unwrap_or(usize::MAX);
        return Err(Error::TokenOutOfRange { token, vocab });
    }
    target.texts[s] = Text {
        prompt: &request.prompt,
        output: &request.output,
        margins: &request.margins,
    };
    let decode = Decode::greedy(request.output.len().max(1));
    if request.prompt.is_empty() {
        let first = request.output.first().copied().unwrap_or(STOP);
        stepper.resume(SeqId::new(s), &[], first, decode, spec)
    } else {
        stepper.start(SeqId::new(s), &request.prompt, decode, spec)
    }
}

/// Decodes `sessions` (each session's requests in order, sessions taken by
/// free sequences in file order) on `b` sequences under `policy`, passes
/// charged from `curve`.
///
/// # Errors
///
/// A token id from [`STOP`] up, or an invalid configuration.
pub fn simulate(
    sessions: &[Session],
    b: usize,
    curve: &CostCurve,
    policy: Policy,
) -> Result<Simulation, Error> {
    let config = match policy {
        Policy::Fixed(n) | Policy::Budget(n) | Policy::Hindsight(n) => {
            Config::recommended().with_draft_max(n)
        }
        Policy::Plain => Config::recommended(),
    };
    let shared = Shared::new(&config)?;
    let mut target = Simulated::new(b, curve);
    target.hindsight = matches!(policy, Policy::Hindsight(_));
    let mut stepper = Stepper::new(&target)?.with_stop_tokens(&[STOP]);
    if let Policy::Budget(_) = policy {
        stepper = stepper.with_budget(PassTimes::new());
    }
    decode(&mut stepper, &mut target, sessions, || {
        Ok(match policy {
            Policy::Plain => None,
            Policy::Hindsight(_) => {
                let mut spec = Speculative::with_shared(&config, &shared)?;
                spec.set_token_cost(0.001)?;
                Some(spec)
            }
            _ => Some(Speculative::with_shared(&config, &shared)?),
        })
    })
}

/// Decodes `before`, then `sessions`, through one stepper with the draft
/// budget and one `Shared` (each on a scope of its own), recall's
/// `draft_max` at `draft_max`; returns what `sessions` gave. Against
/// [`simulate`] of `sessions` alone with [`Policy::Budget`], what the
/// budget learned on other traffic costs the traffic after it.
///
/// # Errors
///
/// As [`simulate`].
pub fn simulate_after(
    before: &[Session],
    sessions: &[Session],
    b: usize,
    curve: &CostCurve,
    draft_max: usize,
) -> Result<Simulation, Error> {
    let config = Config::recommended().with_draft_max(draft_max);
    let shared = Shared::new(&config)?;
    let mut target = Simulated::new(b, curve);
    let mut stepper = Stepper::new(&target)?
        .with_stop_tokens(&[STOP])
        .with_budget(PassTimes::new());
    let first = shared.scope("before");
    decode(&mut stepper, &mut target, before, || {
        Ok(Some(Speculative::with_shared(&config, &first)?))
    })?;
    let then = shared.scope("after");
    decode(&mut stepper, &mut target, sessions, || {
        Ok(Some(Speculative::with_shared(&config, &then)?))
    })
}

/// Decodes `sessions` (each session's requests in order, sessions taken by
/// free sequences in file order) on the stepper's sequences, each request
/// drafting with what `spec` makes.
fn decode<'a>(
    stepper: &mut Stepper,
    target: &mut Simulated<'a>,
    sessions: &'a [Session],
    mut spec: impl FnMut() -> Result<Option<Speculative>, Error>,
) -> Result<Simulation, Error> {
    let b = target.texts.len();
    let mut jobs = Jobs {
        sessions,
        next_session: 0,
        at: vec![None; b],
    };
    let mut sim = Simulation::default();
    loop {
        for s in 0..b {
            if stepper.is_busy(SeqId::new(s)) {
                continue;
            }
            if let Some(request) = jobs.next(s) {
                start(stepper, target, s, request, spec()?)?;
            }
        }
        if !stepper.is_running() {
            return Ok(sim);
        }
        if let Err(selfspec::step::StepError::Selfspec(e)) = stepper.step(target) {
            return Err(e);
        }
        sim.time += target.took;
        sim.passes += usize::from(target.took > Duration::ZERO);
        sim.tokens += stepper
            .finished()
            .map(|f| f.reply.tokens.len())
            .sum::<usize>();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Request;

    fn curve(per_row: f64) -> CostCurve {
        CostCurve {
            points: vec![(1, vec![(1, 1.0), (64, 1.0 + 63.0 * per_row)])],
        }
    }

    fn sessions() -> Vec<Session> {
        let text: Vec<Token> = (0..600).map(|i| (i % 37) * 3).collect();
        (0..3)
            .map(|i| {
                Session::new(
                    format!("s{i}"),
                    "synthetic",
                    vec![Request::new(text[..100].to_vec(), text[100..].to_vec())],
                )
            })
            .collect()
    }

    #[test]
    fn cheap_rows_pay_and_dear_rows_do_not() {
        let s = sessions();
        for (per_row, pays) in [(0.01, true), (1.5, false)] {
            let c = curve(per_row);
            let plain = simulate(&s, 1, &c, Policy::Plain).unwrap();
            let budget = simulate(&s, 1, &c, Policy::Budget(16)).unwrap();
            assert_eq!(plain.tokens, budget.tokens);
            let speedup = budget.tokens_per_second() / plain.tokens_per_second();
            assert_eq!(speedup > 2.0, pays, "{per_row}: {speedup}");
            assert!(speedup > 0.97, "the budget never costs much: {speedup}");
        }
    }

    #[test]
    fn hindsight_bounds_every_policy() {
        let s = sessions();
        let c = curve(0.5);
        let plain = simulate(&s, 1, &c, Policy::Plain).unwrap();
        let bound = simulate(&s, 1, &c, Policy::Hindsight(16)).unwrap();
        assert_eq!(plain.tokens, bound.tokens);
        for policy in [
            Policy::Plain,
            Policy::Fixed(4),
            Policy::Fixed(16),
            Policy::Budget(16),
        ] {
            let run = simulate(&s, 1, &c, policy).unwrap();
            assert!(
                run.tokens_per_second() <= bound.tokens_per_second() * 1.000_001,
                "{policy:?}: {} above the bound {}",
                run.tokens_per_second(),
                bound.tokens_per_second()
            );
        }
        // The repeating text's drafts hold: cut at their first wrong
        // token, passes give several tokens each.
        assert!(bound.tau() > 2.0, "{}", bound.tau());
    }

    #[test]
    fn recorded_margins_reach_the_stepper() {
        let text: Vec<Token> = (0..40).collect();
        let mut request = Request::new(text[..10].to_vec(), text[10..].to_vec());
        request.margins = (0..30)
            .map(|i| f32::from(u8::try_from(i).unwrap()))
            .collect();
        let c = curve(0.5);
        let mut target = Simulated::new(1, &c);
        let mut stepper = Stepper::new(&target).unwrap().with_stop_tokens(&[STOP]);
        start(&mut stepper, &mut target, 0, &request, None).unwrap();
        let mut margins = Vec::new();
        while stepper.is_running() {
            stepper.step(&mut target).unwrap();
            margins.extend(stepper.finished().flat_map(|f| f.reply.margins.clone()));
        }
        assert_eq!(margins, request.margins);
    }

    #[test]
    fn the_curve_interpolates_in_k_and_b() {
        let c = CostCurve {
            points: vec![(1, vec![(1, 1.0), (2, 2.0)]), (3, vec![(1, 3.0), (2, 5.0)])],
        };
        let ms = |b, rows| c.time(b, rows).as_secs_f64() * 1000.0;
        for (b, rows, want) in [
            (1, 1, 1.0),
            (1, 2, 2.0),
            (3, 3, 3.0),
            (3, 6, 5.0),
            (2, 2, 2.0),
            (1, 3, 3.0),
        ] {
            assert!(
                (ms(b, rows) - want).abs() < 1e-9,
                "{b} {rows}: {}",
                ms(b, rows)
            );
        }
    }
}
