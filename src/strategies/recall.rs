//! recall: drafts from everything the drafter has seen, with multi-order
//! context indexes, a copy pointer with locality, and a stop rule calibrated
//! online from the engine's own verifications.

use super::poly::Poly;
use super::Roomy;
use crate::drafter::{DraftLimits, Drafter, Token};

/// Context orders indexed, longest last.
const ORDERS: [usize; 8] = [1, 2, 3, 4, 6, 8, 12, 16];
const K: usize = ORDERS.len();
const NONE: u32 = u32::MAX;
const FACTOR: u64 = 0x9E37_79B9_7F4A_7C15;
/// Occurrences examined at the longest matching order.
const OCCURRENCES: usize = 8;
/// Weight of an occurrence in the current session relative to older ones
/// (earlier turns of a chat, the file being edited).
const SESSION_WEIGHT: f64 = 4.0;
/// Weight of an occurrence in the current request's own output.
const REQUEST_WEIGHT: f64 = 4.0;
/// Vote bonus of the occurrence nearest after the anchor (locality).
const LOCAL_BONUS: f64 = 32.0;
/// How far after an anchor locality looks.
const LOCAL_WINDOW: usize = 256;
/// A resumed copy needs this many matching context tokens.
const LOCAL_MIN_MATCH: usize = 1;
/// With a match this long, the copy pointer drafts without a vote.
const COPY_MATCH: usize = 24;
/// Vote weight of the copy pointer per token of match length.
const POINTER_WEIGHT: f64 = 0.5;
/// How much more an occurrence weighs per extra matching token, relative to the order.
const LONGER_WEIGHT: f64 = 16.0;
/// Observations the prior of a calibration cell counts as.
const PRIOR_WEIGHT: f64 = 4.0;
/// The stream is forgotten (cleared) when it would pass this many tokens, which
/// bounds the memory of a `Recall` (about 100 bytes per remembered token,
/// room reserved for generation after a long prompt included: at most about
/// 100 MiB).
pub const MAX_STREAM: usize = 1 << 20;
/// How many trailing tokens decide whether a history only grew.
const TAIL_CHECK: usize = 32;
const MIN_BITS: u32 = 12;
/// Contexts per bucket before the buckets grow. Small bucket arrays stay in
/// cache, which matters more than the few extra chain steps (tags filter
/// them): in the 128k benches (then re-beginning the drafter each window, on
/// a faster machine) a draft call took about 1.5 us with up to four contexts a
/// bucket, 2.5 us with up to two and 6 us with 2^20 buckets; eight and sixteen
/// measured the same as four within this machine's noise.
const MAX_LOAD: usize = 4;
/// Copy regions remembered for locality.
const ANCHORS: usize = 4;
/// Sources closer than this belong to the same region.
const REGION: usize = 512;

/// Features of a candidate token (see `Recall::score_candidates`).
const F: usize = 8;
/// Distinct candidate tokens scored at a draft position.
const CANDIDATES: usize = 8;
/// Step size of the online selector.
const LEARNING_RATE: f64 = 0.1;

/// Calibration cells: longest matching order x vote share x the copy
/// pointer's match length when it agrees with the token (0: it does not).
const SHARE_BUCKETS: usize = 6;
const M_BUCKETS: usize = 6;
/// How many occurrences voted: 1, 2-3, 4 or more.
const SUPPORT_BUCKETS: usize = 3;
const CELLS: usize = K * SHARE_BUCKETS * M_BUCKETS * SUPPORT_BUCKETS;
/// Longest match length measured backwards from a candidate position: the
/// copy pointer takes over from 24, so longer matches only cost comparisons.
const MAX_MATCH: usize = 64;

fn m_bucket(m: usize) -> usize {
    match m {
        0..=7 => 1,
        8..=15 => 2,
        16..=31 => 3,
        32..=63 => 4,
        _ => 5,
    }
}

fn share_bucket(share: f64) -> usize {
    match share {
        s if s < 0.35 => 0,
        s if s < 0.5 => 1,
        s if s < 0.7 => 2,
        s if s < 0.85 => 3,
        s if s < 0.99 => 4,
        _ => 5,
    }
}

/// 32 bits of a context's hash, well spread: the high half of one multiply
/// (each order has its own buckets, so the order need not enter).
fn tag_of(hash: u64) -> u32 {
    (hash.wrapping_mul(0xD6E8_FEB8_6659_FD93) >> 32) as u32
}

/// The recall drafter (`Strategy::Recall`).
///
/// One memory of every token the drafter has seen (the new part of each
/// prompt, then what the target generated), indexed by hashed contexts of 1 to
/// 16 tokens. Each draft token is a continuation of the recent occurrences of
/// the longest context that occurred before: the votes (occurrences in the
/// current session count four times, the copy pointer, the occurrence the
/// previous token came from, extends long matches) and a few features of each
/// candidate (agreement with the copy pointer, locality, the current request,
/// recency) enter a linear score whose weights are learned online, by softmax
/// regression, from the tokens the target chose. Each
/// token's probability of acceptance is read from a table calibrated online
/// from the engine's verifications (longest order, vote share, agreement with
/// the copy pointer); the draft stops where the running product of these
/// probabilities falls below the threshold. A low threshold drafts long and
/// aggressively, a high one short and safe.
///
/// ```
/// use selfspec::{DraftLimits, Drafter, strategies::Recall};
///
/// let mut recall = Recall::new(0.1);
/// let text: Vec<u32> = (0..60).map(|i| i % 20).collect();
/// recall.begin(&text);
/// let mut draft = Vec::new();
/// recall.draft(&text, 0, DraftLimits::default(), &mut draft);
/// assert_eq!(&draft[..4], &[1, 2, 3, 4]);
/// ```
#[derive(Clone, Debug)]
pub struct Recall {
    threshold: f64,
    polys: [Poly; K],
    stream: Roomy<Token>,
    /// For each end position e of a context (the context is `stream[e-k..e]`,
    /// its continuation `stream[e]`), per order, 32 bits of its hash and the
    /// previous end position in the same bucket, side by side: a chain walk
    /// reads both at once, and adding a token writes one 64-byte entry.
    links: Roomy<[(u32, u32); K]>,
    heads: Vec<Vec<u32>>,
    bits: u32,
    /// Hash of the context of each order ending at the stream's end.
    rolling: [u64; K],
    /// `history ++ [last]` as last seen, to tell a grown history from a new prompt.
    mirror: Roomy<Token>,
    /// Stream position where the current session's text starts.
    session_start: usize,
    /// Stream position where the current request's output starts.
    request_start: usize,
    /// Accepted / tried per calibration cell.
    calibration: Vec<(f64, f64)>,
    /// The cells of the last draft's tokens, and the source positions they
    /// were copied from.
    pending: Vec<u16>,
    sources: Vec<u32>,
    /// Where the next token is expected in the stream (locality across calls).
    expect: Option<usize>,
    scratch: Vec<(Token, f64, u32)>,
    /// Recent distinct copy regions (their latest accepted source positions),
    /// newest first (`usize::MAX`: none). Occurrences just after the first
    /// (the source of the last accepted token) are preferred, and after an
    /// excursion (an edited line copied from a diff) copying resumes near one
    /// of them.
    anchors: [usize; ANCHORS],
    /// The candidate selector: a linear score over candidate features,
    /// learned online (softmax regression) from the tokens the target chose.
    weights: [f64; F],
    /// Candidates (token, features) of the positions of the last draft, and
    /// each position's range in it; a position past the draft is the one
    /// where it stopped.
    candidates: Vec<(Token, [f64; F])>,
    ranges: Vec<(u32, u32)>,
    chosen: Vec<Token>,
    /// The position whose true token the next call's `last` reveals, and the
    /// length `history ++ [last]` must have then.
    awaiting: Option<(usize, usize)>,
    /// Match length of each scratch occurrence.
    scratch_m: Vec<u32>,
}

impl Recall {
    /// A drafter that stops where the estimated probability that the whole
    /// draft is accepted falls below `threshold` (clamped to 0.001..=0.999).
    ///
    /// Does not validate: out-of-range values are clamped and a non-finite one
    /// (NaN, infinity) silently becomes 0.1. To check the value, use
    /// [`Config`](crate::Config) / [`Strategy::validate`](crate::Strategy::validate)
    /// with `threshold_permille` (1..=999 thousandths; default 130).
    pub fn new(threshold: f64) -> Recall {
        let threshold = if threshold.is_finite() {
            threshold.clamp(0.001, 0.999)
        } else {
            0.1
        };
        Recall {
            threshold,
            polys: ORDERS.map(|k| Poly::new(FACTOR, k)),
            stream: Roomy::default(),
            links: Roomy::default(),
            heads: vec![vec![NONE; 1 << MIN_BITS]; K],
            bits: MIN_BITS,
            rolling: [0; K],
            mirror: Roomy::default(),
            session_start: 0,
            request_start: 0,
            calibration: vec![(0.0, 0.0); CELLS],
            pending: Vec::new(),
            sources: Vec::new(),
            expect: None,
            scratch: Vec::new(),
            anchors: [usize::MAX; ANCHORS],
            weights: {
                let mut w = [0.0; F];
                w[0] = 6.0;
                w
            },
            candidates: Vec::new(),
            ranges: Vec::new(),
            chosen: Vec::new(),
            awaiting: None,
            scratch_m: Vec::new(),
        }
    }

    /// One step of softmax regression on the candidates in `range` towards
    /// `truth` (nothing when the truth was not a candidate).
    fn learn(&mut self, range: (u32, u32), truth: Token) {
        let cands = &self.candidates[range.0 as usize..range.1 as usize];
        if cands.len() < 2 || !cands.iter().any(|c| c.0 == truth) {
            return;
        }
        let score = |x: &[f64; F]| x.iter().zip(&self.weights).map(|(a, b)| a * b).sum::<f64>();
        let top = cands.iter().map(|c| score(&c.1)).fold(f64::MIN, f64::max);
        let z: f64 = cands.iter().map(|c| (score(&c.1) - top).exp()).sum();
        let mut grad = [0.0; F];
        for (t, x) in cands {
            let p = (score(x) - top).exp() / z;
            let y = if *t == truth { 1.0 } else { 0.0 };
            for (g, &xj) in grad.iter_mut().zip(x) {
                *g += (y - p) * xj;
            }
        }
        for (w, g) in self.weights.iter_mut().zip(grad) {
            // Bounded, so that no run of one-sided evidence saturates a weight.
            *w = (*w + LEARNING_RATE * g).clamp(-50.0, 50.0);
        }
    }

    /// Tokens remembered.
    pub fn stream_len(&self) -> usize {
        self.stream.len()
    }

    /// The bucket of a context whose tag (the high 32 bits of its mixed
    /// hash) is `tag`: the tag's top bits, so that growing re-chains from the
    /// stored tags without hashing again.
    fn bucket(&self, tag: u32) -> usize {
        (tag >> (32 - self.bits)) as usize
    }

    fn clear(&mut self) {
        self.stream.clear();
        self.links.clear();
        for heads in &mut self.heads {
            heads.fill(NONE);
        }
        self.session_start = 0;
        self.expect = None;
    }

    /// Appends tokens to the stream and indexes the contexts ending after each.
    fn push_mirror(&mut self, from: usize) {
        if self.stream.len() + self.mirror.len() - from > MAX_STREAM {
            self.clear();
        }
        // Size the buckets for a long block (a prompt) before indexing it
        // rather than re-chaining along the way.
        let n = self.mirror.len() - from;
        self.grow(self.stream.len() + n);
        // And the stream and its links, with room for what a prompt is
        // followed by: a doubling right after a long prompt would copy the
        // whole index (8 MiB at 128k tokens) in the middle of generation
        // (measured over the first 8k tokens drafted after a fresh 128k
        // prompt: ~10 us a call without the room, ~6.5-7 with it).
        if self.links.capacity() - self.links.len() < n {
            let len = self.links.len();
            let room = (n + (len + n) / 4).min(MAX_STREAM.saturating_sub(len).max(n));
            self.links.reserve(room);
            self.stream.reserve(room);
        }
        for j in from..self.mirror.len() {
            let t = self.mirror[j];
            // The context ending at the current end gets `t` as continuation;
            // index the contexts that end after `t`.
            self.stream.push(t);
            let len = self.stream.len();
            let mut entry = [(0, NONE); K];
            for (o, &k) in ORDERS.iter().enumerate() {
                let h = if len < k {
                    0
                } else if len == k {
                    self.polys[o].hash(self.stream[..k].iter().copied())
                } else {
                    self.polys[o].roll(self.rolling[o], self.stream[len - k - 1], t)
                };
                self.rolling[o] = h;
                if len < k {
                    continue;
                }
                let tag = tag_of(h);
                let b = self.bucket(tag);
                entry[o] = (tag, self.heads[o][b]);
                self.heads[o][b] = len as u32;
            }
            self.links.push(entry);
            // links are indexed by end position e - 1 (e runs from 1).
            if len > MAX_LOAD * self.heads[0].len() {
                self.grow(len);
            }
        }
    }

    /// Past `MAX_LOAD` contexts a bucket (tags tell them apart), grows the
    /// buckets to one per two contexts of `len` tokens, rounded up, and
    /// re-chains every context from its stored tag.
    #[inline(never)]
    fn grow(&mut self, len: usize) {
        if len <= MAX_LOAD * self.heads[0].len() {
            return;
        }
        self.bits = (len.next_power_of_two() / 2)
            .trailing_zeros()
            .clamp(MIN_BITS, 32);
        let size = 1usize << self.bits;
        for heads in &mut self.heads {
            heads.clear();
            heads.resize(size, NONE);
        }
        let shift = 32 - self.bits;
        for (e, entry) in (1..).zip(self.links.iter_mut()) {
            for (o, &k) in ORDERS.iter().enumerate() {
                if e >= k {
                    let b = (entry[o].0 >> shift) as usize;
                    entry[o].1 = self.heads[o][b];
                    self.heads[o][b] = e as u32;
                }
            }
        }
    }

    /// Brings the stream up to date with `history ++ [last]`.
    fn ingest(&mut self, history: &[Token], last: Token) {
        let at = |j: usize| if j < history.len() { history[j] } else { last };
        let len = history.len() + 1;
        let have = self.mirror.len();
        let tail = have.saturating_sub(TAIL_CHECK);
        let extends = len >= have && (tail..have).all(|j| self.mirror[j] == at(j));
        let common = if extends {
            have
        } else {
            (0..have.min(len))
                .find(|&j| self.mirror[j] != at(j))
                .unwrap_or(have.min(len))
        };
        if common < have {
            // A new prompt: a new block in the stream. Repeat the context
            // before the divergence so the stream's tail is the history's.
            let keep = common.saturating_sub(ORDERS[K - 1]);
            if common < have / 2 || common < 64 {
                // Mostly new text: a new session.
                self.session_start = self.stream.len();
            }
            self.mirror.truncate(keep);
            self.mirror.extend((keep..len).map(at));
            self.push_mirror(keep);
        } else if len > have {
            self.mirror.extend((have..len).map(at));
            self.push_mirror(have);
        }
    }

    /// How many tokens before stream position `p` equal the last tokens of the
    /// virtual sequence `stream[..len] ++ drafted` (capped).
    fn match_len(&self, p: usize, vlen: usize, drafted: &[Token]) -> usize {
        let len = self.stream.len();
        let vtok = |j: usize| {
            if j < len {
                self.stream[j]
            } else {
                drafted[j - len]
            }
        };
        let mut m = 0;
        while m < MAX_MATCH && m < p && m < vlen && p != vlen {
            if self.stream[p - 1 - m] != vtok(vlen - 1 - m) {
                break;
            }
            m += 1;
        }
        m
    }

    /// After a rejection: the position nearest after the anchor where the
    /// context matches best (an edit resumes copying near where it left off).
    fn local(&self, len: usize) -> Option<(usize, usize)> {
        let last = *self.stream.last()?;
        let mut best: Option<(usize, usize)> = None;
        for &anchor in &self.anchors {
            if anchor >= len {
                continue;
            }
            let end = (anchor + LOCAL_WINDOW).min(len - 1);
            for p in anchor + 1..=end {
                if self.stream[p - 1] != last {
                    continue;
                }
                let m = self.match_len(p, len, &[]);
                if best.map_or(true, |(_, bm)| m > bm) {
                    best = Some((p, m));
                }
            }
        }
        best.filter(|&(_, m)| m >= LOCAL_MIN_MATCH)
    }

    /// Adds up to `occurrences` recent occurrences of the order-`o` context
    /// with hash `hash` to `scratch` (continuation, weight, position).
    fn collect(&mut self, o: usize, hash: u64, len: usize) -> usize {
        let tag = tag_of(hash);
        let mut e = self.heads[o][self.bucket(tag)];
        let (mut seen, mut added) = (0, 0);
        while e != NONE && seen < 4 * OCCURRENCES {
            let p = e as usize;
            seen += 1;
            let (entry_tag, previous) = self.links[p - 1][o];
            if p < len && entry_tag == tag {
                let w = if p >= self.request_start {
                    REQUEST_WEIGHT
                } else if p >= self.session_start {
                    SESSION_WEIGHT
                } else {
                    1.0
                };
                self.scratch.push((self.stream[p], w, p as u32));
                added += 1;
                if added == OCCURRENCES {
                    break;
                }
            }
            e = previous;
        }
        added
    }

    /// Calibrated acceptance probability of a token in `cell` whose raw
    /// estimate is `prior`.
    fn probability(&self, cell: usize, prior: f64) -> f64 {
        let (acc, tried) = self.calibration[cell];
        // The prior counts as a few observations.
        (acc + PRIOR_WEIGHT * prior) / (tried + PRIOR_WEIGHT)
    }
}

impl Drafter for Recall {
    fn name(&self) -> &str {
        "recall"
    }

    fn begin(&mut self, prompt: &[Token]) {
        // Whether the last draft was accepted is unknown: forget it.
        self.pending.clear();
        self.expect = None;
        self.awaiting = None;
        if let Some((&last, history)) = prompt.split_last() {
            self.ingest(history, last);
        }
        self.request_start = self.stream.len();
    }

    fn draft(
        &mut self,
        history: &[Token],
        last: Token,
        limits: DraftLimits,
        draft: &mut Vec<Token>,
    ) {
        // A draft never followed by `accept` had its first token rejected
        // (the orchestrator does not forward 0).
        if let Some(&cell) = self.pending.first() {
            self.calibration[cell as usize].1 += 1.0;
        }
        self.pending.clear();
        self.sources.clear();
        // The token the target chose where the last draft was rejected or stopped.
        if let Some((i, expect)) = self.awaiting.take() {
            if history.len() + 1 == expect && i < self.ranges.len() {
                self.learn(self.ranges[i], last);
            }
        }
        self.candidates.clear();
        self.ranges.clear();
        self.chosen.clear();
        self.ingest(history, last);
        let len = self.stream.len();
        let base = draft.len();
        let mut hashes = self.rolling;
        let mut cumulative = 1.0;
        // The copy pointer: where the continuation is expected, and how many
        // tokens before it match the context.
        let mut pointer = self
            .expect
            .take()
            .filter(|&e| e < len && e > 0 && self.stream[e - 1] == last)
            .map(|e| (e, self.match_len(e, len, &[])));
        if pointer.is_none() {
            pointer = self.local(len);
        }
        // The longest order worth probing: a context that matches k tokens
        // after a drafted token matched k - 1 before it, so the search starts
        // one order above the last one found.
        let mut top = K - 1;
        while draft.len() - base < limits.max {
            let vlen = len + draft.len() - base;
            let copy = pointer
                .filter(|&(p, _)| p < len)
                .map(|(p, m)| (self.stream[p], p, m));
            // Longest order whose context occurred before, with its occurrences
            // (not needed while a long match is copied).
            let mut found = None;
            self.scratch.clear();
            if copy.map_or(true, |(_, _, m)| m < COPY_MATCH) {
                for o in (0..=top).rev() {
                    if vlen < ORDERS[o] + 1 {
                        continue;
                    }
                    if self.collect(o, hashes[o], len) > 0 {
                        found = Some(o);
                        top = (o + 1).min(K - 1);
                        break;
                    }
                }
            } else {
                found = Some(K - 1);
            }
            if found.is_none() && copy.is_none() {
                break;
            }
            let o = found.unwrap_or(0);
            let (token, source, share, ptr_state) = match copy {
                // A long match: copy on.
                Some((ct, cp, m)) if m >= COPY_MATCH => {
                    let at = self.candidates.len() as u32;
                    self.ranges.push((at, at));
                    (ct, cp, 1.0, m_bucket(m))
                }
                _ => {
                    // Locality: the occurrence nearest after the anchor gets a bonus.
                    let anchor = self.anchors[0];
                    let mut near_token = None;
                    if anchor != usize::MAX {
                        let window = LOCAL_WINDOW;
                        let near = self
                            .scratch
                            .iter()
                            .enumerate()
                            .filter(|(_, c)| {
                                (c.2 as usize) > anchor && (c.2 as usize) <= anchor + window
                            })
                            .min_by_key(|(_, c)| c.2)
                            .map(|(i, _)| i);
                        if let Some(i) = near {
                            self.scratch[i].1 += LOCAL_BONUS;
                            near_token = Some(self.scratch[i].0);
                        }
                    }
                    if let Some((ct, cp, m)) = copy {
                        self.scratch
                            .push((ct, POINTER_WEIGHT * m as f64, cp as u32));
                    }
                    // Occurrences that share more of the context than the order
                    // weigh more: the most specific context is the best evidence.
                    let k = ORDERS[o];
                    self.scratch_m.clear();
                    for i in 0..self.scratch.len() {
                        let p = self.scratch[i].2 as usize;
                        let m = self.match_len(p, vlen, &draft[base..]);
                        self.scratch_m.push(m as u32);
                        if m > k {
                            self.scratch[i].1 *= 1.0 + LONGER_WEIGHT * (m - k) as f64 / k as f64;
                        }
                    }
                    let total: f64 = self.scratch.iter().map(|c| c.1).sum();
                    // Distinct candidate tokens, each with its features; the
                    // learned score picks one.
                    let start = self.candidates.len();
                    let n = self.scratch.len() as f64;
                    let mut best = (0 as Token, f64::MIN, 0.0f64, 0u32);
                    for i in 0..self.scratch.len() {
                        let t = self.scratch[i].0;
                        if self.scratch[..i].iter().any(|c| c.0 == t)
                            || self.candidates.len() - start == CANDIDATES
                        {
                            continue;
                        }
                        let (mut votes, mut count, mut extra, mut newest) = (0.0, 0.0, 0u32, 0u32);
                        let mut request = 0.0;
                        for (c, &m) in self.scratch.iter().zip(&self.scratch_m) {
                            if c.0 == t {
                                votes += c.1;
                                count += 1.0;
                                extra = extra.max(m.saturating_sub(k as u32));
                                newest = newest.max(c.2);
                                if c.2 as usize >= self.request_start {
                                    request = 1.0;
                                }
                            }
                        }
                        let (agrees, m) = match copy {
                            Some((ct, _, m)) if ct == t => (1.0, m),
                            _ => (0.0, 0),
                        };
                        let x = [
                            if total > 0.0 { votes / total } else { 0.0 },
                            count / n,
                            agrees,
                            agrees * (1.0 + m as f64).ln() / 5.0,
                            (1.0 + extra as f64).ln() / 5.0,
                            if near_token == Some(t) { 1.0 } else { 0.0 },
                            request,
                            1.0 / (1.0 + (1.0 + len.saturating_sub(newest as usize) as f64).ln()),
                        ];
                        let score: f64 = x.iter().zip(&self.weights).map(|(a, b)| a * b).sum();
                        self.candidates.push((t, x));
                        if score > best.1 + 1e-9 {
                            best = (t, score, votes, self.scratch[i].2);
                        }
                    }
                    self.ranges
                        .push((start as u32, self.candidates.len() as u32));
                    let (token, _, votes, mut source) = best;
                    let mut state = 0;
                    if let Some((ct, cp, m)) = copy {
                        if ct == token {
                            source = cp as u32;
                            state = m_bucket(m);
                        }
                    }
                    let share = if total > 0.0 { votes / total } else { 0.0 };
                    (token, source as usize, share, state)
                }
            };
            let support = match self.scratch.len() {
                0 | 1 => 0,
                2 | 3 => 1,
                _ => 2,
            };
            let cell = ((o * SHARE_BUCKETS + share_bucket(share)) * M_BUCKETS + ptr_state)
                * SUPPORT_BUCKETS
                + support;
            let reach = if ptr_state > 0 {
                1.0
            } else {
                (ORDERS[o] as f64 / 16.0).min(1.0)
            };
            let prior = share * (0.3 + 0.65 * reach);
            let p = self.probability(cell, prior);
            if cumulative * p < self.threshold {
                break;
            }
            cumulative *= p;
            draft.push(token);
            self.chosen.push(token);
            self.pending.push(cell as u16);
            self.sources.push(source as u32);
            pointer = Some(match copy {
                Some((ct, cp, m)) if ct == token && cp == source => (cp + 1, m + 1),
                _ => (
                    source + 1,
                    self.match_len(source + 1, vlen + 1, &draft[base..]),
                ),
            });
            // Roll every order's hash over the drafted token.
            let vlen = vlen + 1;
            let stream = &self.stream;
            let vtok = |j: usize| {
                if j < len {
                    stream[j]
                } else {
                    draft[base + j - len]
                }
            };
            for (oi, &k) in ORDERS.iter().enumerate() {
                if vlen > k {
                    hashes[oi] = self.polys[oi].roll(hashes[oi], vtok(vlen - k - 1), token);
                } else if vlen == k {
                    hashes[oi] = self.polys[oi].hash((0..k).map(vtok));
                }
            }
        }
        if draft.len() - base < limits.min {
            draft.truncate(base);
            self.pending.clear();
            self.sources.clear();
        }
        self.awaiting = Some((0, history.len() + 2));
    }

    fn accept(&mut self, n_accepted: usize) {
        // Tokens before the first rejection were accepted; the first rejected
        // one was tried; later ones are unknown.
        for (i, &cell) in self.pending.iter().enumerate() {
            let c = &mut self.calibration[cell as usize];
            if i < n_accepted {
                *c = (c.0 + 1.0, c.1 + 1.0);
            } else {
                c.1 += 1.0;
                break;
            }
        }
        // Accepted tokens were the right choices; the next call's `last` tells
        // the one after them.
        for i in 0..n_accepted.min(self.chosen.len()).min(self.ranges.len()) {
            self.learn(self.ranges[i], self.chosen[i]);
        }
        self.awaiting = self
            .awaiting
            .map(|(_, expect)| (n_accepted, expect.saturating_add(n_accepted)));
        // The next token is expected right after the last accepted one's source.
        let source = n_accepted
            .checked_sub(1)
            .and_then(|i| self.sources.get(i))
            .map(|&s| s as usize);
        self.expect = source.map(|s| s + 2);
        if let Some(s) = source {
            // Move the region's anchor to the front (or evict the oldest).
            let i = self
                .anchors
                .iter()
                .position(|&a| a != usize::MAX && a.abs_diff(s) < REGION)
                .unwrap_or(ANCHORS - 1);
            self.anchors.copy_within(0..i, 1);
            self.anchors[0] = s;
        }
        self.pending.clear();
    }

    fn heap_bytes(&self) -> usize {
        4 * (self.stream.capacity() + self.mirror.capacity())
            + 8 * K * self.links.capacity()
            + 4 * self.heads.iter().map(Vec::capacity).sum::<usize>()
            + 16 * self.calibration.capacity()
    }

    fn as_any(&self) -> Option<&dyn std::any::Any> {
        Some(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn draft(r: &mut Recall, history: &[Token], last: Token, max: usize) -> Vec<Token> {
        let mut out = Vec::new();
        r.draft(history, last, DraftLimits { min: 0, max }, &mut out);
        out
    }

    #[test]
    fn copies_long_repeats_and_stops_at_the_limit() {
        let text: Vec<Token> = (0..500).map(|i| (i * 7919 % 1000) as Token).collect();
        let mut r = Recall::new(0.1);
        // The text, then its first 100 tokens again: the rest is a long copy.
        let history: Vec<Token> = text.iter().chain(&text[..100]).copied().collect();
        r.begin(&history);
        let d = draft(&mut r, &history, text[100], 64);
        assert_eq!(d, &text[101..101 + d.len()]);
        assert!(d.len() >= 16, "a long match drafts long: {}", d.len());
        assert!(draft(&mut r, &history, text[100], 5).len() <= 5);
    }

    #[test]
    fn calibration_learns_from_rejections() {
        // A periodic history, but the target never follows the pattern: every
        // draft is rejected at its first token (the orchestrator then calls no
        // accept). The calibrated probabilities fall and the drafts stop.
        let mut r = Recall::new(0.2);
        let mut history: Vec<Token> = [1, 2, 3].repeat(30);
        let mut drafted = Vec::new();
        for round in 0..300 {
            let last = [1, 2, 3][round % 3];
            drafted.push(!draft(&mut r, &history, last, 16).is_empty());
            history.push(last);
        }
        assert!(
            drafted[..10].iter().all(|&d| d),
            "drafts at first: {:?}",
            &drafted[..10]
        );
        assert!(
            drafted[250..].iter().all(|&d| !d),
            "no drafts once calibrated"
        );
    }

    #[test]
    fn the_selector_learns_which_candidate_the_target_takes() {
        // Two candidates: the voted one (share 0.8) and one from the current
        // request (share 0.2). The target keeps taking the second.
        let mut r = Recall::new(0.1);
        let voted = [0.8, 0.5, 0.0, 0.0, 0.0, 0.0, 0.0, 0.5];
        let request = [0.2, 0.5, 0.0, 0.0, 0.0, 0.0, 1.0, 0.5];
        r.candidates = vec![(1, voted), (2, request)];
        let score = |r: &Recall, x: &[f64; F]| -> f64 {
            x.iter().zip(&r.weights).map(|(a, b)| a * b).sum()
        };
        assert!(score(&r, &voted) > score(&r, &request));
        // A truth that was no candidate teaches nothing.
        let before = r.weights;
        r.learn((0, 2), 3);
        assert_eq!(r.weights, before);
        for _ in 0..100 {
            r.learn((0, 2), 2);
        }
        assert!(score(&r, &request) > score(&r, &voted), "{:?}", r.weights);
        assert!(r.weights[6] > 0.0);
    }

    #[test]
    fn odd_inputs_do_not_panic() {
        let mut r = Recall::new(f64::NAN);
        r.begin(&[]);
        assert!(draft(&mut r, &[], 0, 16).is_empty());
        r.accept(usize::MAX);
        let h: Vec<Token> = (0..300).map(|i| [u32::MAX, 0, 7][i % 3]).collect();
        r.begin(&h);
        for len in [300, 10, 0, 299, 1] {
            let d = draft(&mut r, &h[..len], u32::MAX, 16);
            r.accept(d.len());
        }
        assert!(r.stream_len() > 0);
    }
}
