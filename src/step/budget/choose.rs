//! The budget's choice of a pass's draft rows: every plan it weighs, priced
//! by the pass-time model, and the one with the most expected tokens a
//! second.

use super::{Budget, Choice, Load, Split};
use crate::int::float;

impl Budget {
    /// Chooses the draft rows of a pass over [`slots`](Budget::slots) that
    /// `split` computes, from the candidates added; sorts them so that the
    /// first `rows` are the ones to send. Plans weighed: the first `m`
    /// candidates for every `m` (none when no draft pays) and, where the
    /// pass splits by sequence, every decoding sequence at the same draft
    /// length. Before any pass time is known: no draft rows (the first
    /// pass is timed plain).
    pub(crate) fn choose(&mut self, split: Split) -> Option<Choice> {
        self.base_plan();
        let sequences = self.slots.iter().filter(|s| s.room.is_some()).count();
        let Some(base) = self.sent_secs(split) else {
            let none = Choice {
                rows: 0,
                level: 0,
                break_even: 1.0,
                tokens: float(sequences),
            };
            return Some(none);
        };
        self.candidates.sort_unstable_by(|a, b| {
            b.q.total_cmp(&a.q)
                .then(a.seq.cmp(&b.seq))
                .then(a.pos.cmp(&b.pos))
        });
        let chunks = self.chunk_secs(split, base)?;
        let mut tokens = float(sequences);
        let decoding = base - chunks;
        let first = if decoding > 0.0 {
            tokens / decoding
        } else {
            0.0
        };
        let (mut best, mut rate) = ((0, 0), first);
        for m in 0..self.candidates.len() {
            let c = self.candidates[m];
            tokens += c.q;
            self.plan[crate::int::ix32(c.seq)].rows += 1;
            let t = self.sent_secs(split)? - chunks;
            if t > 0.0 && tokens / t > rate {
                (best, rate) = ((m + 1, 0), tokens / t);
            }
        }
        if let Split::EqualRuns { .. } = split {
            if let Some(level) = self.best_level(split, chunks, &mut rate)? {
                best = (0, level);
            }
        }
        let break_even = rate * self.next_row_secs(split, best)?;
        let drafted: f64 = if best.1 > 0 {
            self.level_gain[..best.1].iter().sum()
        } else {
            self.candidates[..best.0].iter().map(|c| c.q).sum()
        };
        Some(Choice {
            rows: best.0,
            level: best.1,
            break_even,
            tokens: float(sequences) + drafted,
        })
    }

    /// What the joining sequences' prompt chunks add to the time `base` of
    /// the pass without drafts. Drafts are weighed against a pass without
    /// them: in a pass a chunk makes long, a draft row looks cheap beside
    /// its time, but sent there it delays the joining request's first
    /// token while paying no more than in a decoding pass.
    fn chunk_secs(&mut self, split: Split, base: f64) -> Option<f64> {
        if !self.slots.iter().any(|s| s.room.is_none() && s.base > 0) {
            return Some(0.0);
        }
        self.base_plan();
        for (p, s) in self.plan.iter_mut().zip(&self.slots) {
            p.rows = s.room.map_or(0, |_| s.base);
        }
        let without = if self.plan.iter().any(|l| l.rows > 0) {
            self.sent_secs(split)?
        } else {
            0.0
        };
        self.base_plan();
        Some((base - without).max(0.0))
    }

    /// The draft length at which every decoding sequence (padded where its
    /// draft is shorter) gives more than `rate` tokens per second of the
    /// pass's time less `chunks`, the best such; `rate` becomes its rate.
    fn best_level(&mut self, split: Split, chunks: f64, rate: &mut f64) -> Option<Option<usize>> {
        let sequences = self.slots.iter().filter(|s| s.room.is_some()).count();
        let room = self.slots.iter().filter_map(|s| s.room).min().unwrap_or(0);
        let (mut tokens, mut best) = (float(sequences), None);
        for level in 1..=self.level_gain.len().min(room) {
            tokens += self.level_gain[level - 1];
            self.chosen((0, level));
            let t = self.sent_secs(split)? - chunks;
            if t > 0.0 && tokens / t > *rate {
                (best, *rate) = (Some(level), tokens / t);
            }
        }
        Some(best)
    }

    /// Each sequence's rows without a draft, into `self.plan`.
    fn base_plan(&mut self) {
        self.plan.clear();
        let loads = self.slots.iter().map(|s| Load {
            rows: s.base,
            cached: s.cached,
        });
        self.plan.extend(loads);
    }

    /// Each sequence's rows in the plan chosen, into `self.plan`.
    fn chosen(&mut self, (rows, level): (usize, usize)) {
        self.base_plan();
        if level > 0 {
            for (p, s) in self.plan.iter_mut().zip(&self.slots) {
                p.rows += s.room.map_or(0, |_| level);
            }
        } else {
            for c in &self.candidates[..rows] {
                self.plan[crate::int::ix32(c.seq)].rows += 1;
            }
        }
    }

    /// What one more draft row adds to the time of the plan chosen (the
    /// next candidate's sequence, or the first decoding sequence's), past
    /// the row that opens that sequence's draft. The opening row carries
    /// the fixed costs of a wider sequence (a computation of its own
    /// where a pass splits by sequence): [`choose`](Budget::choose) weighs
    /// those against the whole draft. Priced into the drafters' stopping
    /// point, they would stop every draft before the rows that pay for
    /// them, and a budget that was sent no long draft would never choose
    /// one.
    fn next_row_secs(&mut self, split: Split, best: (usize, usize)) -> Option<f64> {
        self.chosen(best);
        let next = match self.candidates.get(best.0) {
            Some(c) if best.1 == 0 => crate::int::ix32(c.seq),
            _ => self
                .slots
                .iter()
                .position(|s| s.room.is_some())
                .unwrap_or(0),
        };
        let opened = self.slots.get(next).map_or(0, |s| s.base + 1);
        if let Some(p) = self.plan.get_mut(next) {
            p.rows = p.rows.max(opened);
        }
        let now = self.sent_secs(split)?;
        if let Some(p) = self.plan.get_mut(next) {
            p.rows += 1;
        }
        Some(self.sent_secs(split)? - now)
    }

    /// Whether idle sequences between sequences with rows get a filler row
    /// ([`fill`](Budget::fill)) in the pass `choice` chose: where the pass
    /// splits by sequence runs, a gap in the run costs a computation, a
    /// filler a row; the plans were weighed with their fillers
    /// ([`sent_secs`](Budget::sent_secs)), so the pass is sent as priced.
    pub(crate) fn fill_gaps(&mut self, split: Split, choice: Choice) {
        self.fill.clear();
        self.fill.resize(self.slots.len(), false);
        if !matches!(split, Split::EqualRuns { .. }) {
            return;
        }
        self.chosen((choice.rows, choice.level));
        if self.sent_secs(split).is_none() {
            self.fill.fill(false);
        }
    }
}
