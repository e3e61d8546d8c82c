//! Text conversations through the decoder: every reply the model's own,
//! decoded plainly and speculatively, S conversations at a time.

use std::collections::VecDeque;
use std::time::Duration;

use selfspec_conversations::{compare, Conversation, Decoded, Divergence, DraftSet, Tally};

use crate::model::{Message, Role};
use crate::{Counters, Decoder, Error, Finished, Reference, Reply};

/// One pass over some conversations: each turn's reply (`None`: the prompt
/// did not fit the context and the turn, with the rest of its
/// conversation, was skipped), and the decode time of the whole pass.
#[derive(Clone, Debug, Default)]
pub struct Pass {
    /// `replies[c][t]`: conversation `c`'s reply to turn `t`.
    pub replies: Vec<Vec<Option<Reply>>>,
    /// `prompts[c][t]`: the prompt of conversation `c`'s turn `t` (empty
    /// when the turn was skipped).
    pub prompts: Vec<Vec<Vec<u32>>>,
    /// Time in decode steps (prefill excluded: see
    /// [`Counters`](crate::Counters) for passes shared with prompt rows).
    pub decode_time: Duration,
    /// The draft budget's prices of the pass's decoding passes, beside
    /// their measured times.
    pub prices: crate::Prices,
    /// The decoding steps' work around their passes.
    pub loop_work: LoopWork,
    /// Greedy choices pinned to the history's token at a near tie
    /// ([`Pinning`]).
    pub pinned: usize,
}

/// `--pin-near-ties`: each request of a pass decodes against the history
/// pass's reply to its turn, keeping the history's token where a pass
/// prefers another at the history's near ties
/// ([`Decoder::start_pinned`](crate::Decoder::start_pinned)).
#[derive(Clone, Copy, Debug)]
pub struct Pinning<'a> {
    /// The history pass.
    pub history: &'a Pass,
    /// Margins under this are near ties.
    pub bound: f32,
}

/// The loop's own work in decoding steps: what a step spends outside
/// `llama_decode` (drafting, reading logits, verifying, rolling back).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct LoopWork {
    /// Decoding steps.
    pub steps: usize,
    /// Their time outside their passes.
    pub outside: Duration,
}

impl LoopWork {
    /// The work between counters `before` and `after` of one decoder.
    #[must_use]
    pub fn between(before: &Counters, after: &Counters) -> LoopWork {
        let outside = |c: &Counters| c.decode_time.saturating_sub(c.pass_time);
        LoopWork {
            steps: after.steps.saturating_sub(before.steps),
            outside: outside(after).saturating_sub(outside(before)),
        }
    }

    /// Adds `other`'s steps and time.
    pub fn add(&mut self, other: LoopWork) {
        self.steps += other.steps;
        self.outside += other.outside;
    }

    /// The time outside the passes a step, on average (zero without steps).
    #[must_use]
    pub fn per_step(&self) -> Duration {
        u32::try_from(self.steps)
            .ok()
            .filter(|&n| n > 0)
            .map_or(Duration::ZERO, |n| self.outside / n)
    }
}

/// Which part of a set's engine-wide memory a conversation drafts on.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Scopes {
    /// The scope of its kind (`chat`, `code`, `code-edit`:
    /// [`Shared::scope`](selfspec::Shared::scope)): each kind of traffic
    /// learns its own memory and calibration, as an engine serving several
    /// applications keeps them apart.
    #[default]
    Kind,
    /// The set's default scope, one for every conversation.
    None,
}

/// How the speculative pass drafts: a set, and the scope of each request.
#[derive(Clone, Copy, Debug)]
pub struct Drafting<'a> {
    /// The drafting configuration, token cost and engine-wide memory.
    pub set: &'a DraftSet,
    /// Which scope of the set's memory each conversation drafts on.
    pub scopes: Scopes,
}

impl Drafting<'_> {
    /// A drafter for one request of a conversation of `kind`.
    ///
    /// # Errors
    ///
    /// selfspec's, for a configuration or token cost it rejects.
    pub fn speculative(&self, kind: &str) -> Result<selfspec::Speculative, Error> {
        Ok(match self.scopes {
            Scopes::Kind => self.set.speculative_in(kind)?,
            Scopes::None => self.set.speculative()?,
        })
    }
}

struct Lane {
    conversation: usize,
    turn: usize,
}

/// Decodes every turn of `conversations` with the decoder's slots, each slot
/// taking the next conversation when its own ends. A turn's prompt is the
/// conversation so far rendered with the model's chat template; the
/// history's replies are `history[c][t]` when given (the plain pass's
/// replies, so that both modes see the same prompts), else the replies of
/// this pass. With `drafting`, each request drafts with its own
/// [`Speculative`](selfspec::Speculative) ([`Drafting::speculative`]: the
/// set's configuration and token cost, on its engine-wide memory's scope
/// for the conversation's kind, or its default scope).
///
/// # Errors
///
/// llama.cpp's errors, a template error, a bad configuration or token
/// cost. A prompt longer than the context is not an error: that turn and the
/// rest of its conversation are skipped (`None`).
pub fn decode_pass(
    decoder: &mut Decoder<'_>,
    conversations: &[&Conversation],
    max_tokens: usize,
    history: Option<&[Vec<String>]>,
    drafting: Option<&Drafting<'_>>,
) -> Result<Pass, Error> {
    let mut run = Run::new(decoder, conversations, max_tokens, history, drafting, None)?;
    while run.advance(decoder)? {}
    Ok(run.finish(decoder))
}

/// One pass of [`decode_pass`] for each decoder, all on the same
/// conversations and `history`, advanced one decoding step each in turn
/// (`drafting[i]` for `decoders[i]`; a pass for each pair, so as many as
/// the shorter of the two), so that a machine whose speed drifts slows
/// them alike: their decode times are each decoder's own steps. With
/// `pinning`, every request decodes against the history pass's reply.
///
/// # Errors
///
/// As [`decode_pass`]'s.
pub fn decode_in_step(
    decoders: &mut [Decoder<'_>],
    conversations: &[&Conversation],
    max_tokens: usize,
    history: &[Vec<String>],
    drafting: &[Option<Drafting<'_>>],
    pinning: Option<Pinning<'_>>,
) -> Result<Vec<Pass>, Error> {
    let mut runs = decoders
        .iter_mut()
        .zip(drafting)
        .map(|(d, drafting)| {
            Run::new(
                d,
                conversations,
                max_tokens,
                Some(history),
                drafting.as_ref(),
                pinning,
            )
        })
        .collect::<Result<Vec<_>, _>>()?;
    let mut going = vec![true; runs.len()];
    while going.iter().any(|&g| g) {
        for ((run, decoder), going) in runs.iter_mut().zip(decoders.iter_mut()).zip(&mut going) {
            if *going {
                *going = run.advance(decoder)?;
            }
        }
    }
    Ok(runs
        .into_iter()
        .zip(decoders.iter_mut())
        .map(|(run, decoder)| run.finish(decoder))
        .collect())
}

/// A pass under way: which turn each slot decodes, what is left.
struct Run<'c, 'h> {
    conversations: &'c [&'c Conversation],
    max_tokens: usize,
    history: Option<&'h [Vec<String>]>,
    drafting: Option<&'h Drafting<'h>>,
    pinning: Option<Pinning<'h>>,
    pass: Pass,
    texts: Vec<Vec<String>>,
    queue: VecDeque<usize>,
    lanes: Vec<Option<Lane>>,
    finished: Vec<Finished>,
    /// The decoder's counters when the pass began.
    start: Counters,
}

impl<'c, 'h> Run<'c, 'h> {
    fn new(
        decoder: &mut Decoder<'_>,
        conversations: &'c [&'c Conversation],
        max_tokens: usize,
        history: Option<&'h [Vec<String>]>,
        drafting: Option<&'h Drafting<'h>>,
        pinning: Option<Pinning<'h>>,
    ) -> Result<Self, Error> {
        decoder.clear()?;
        let _ = decoder.take_prices();
        Ok(Run {
            conversations,
            max_tokens,
            history,
            drafting,
            pinning,
            pass: Pass {
                replies: conversations
                    .iter()
                    .map(|c| vec![None; c.turns.len()])
                    .collect(),
                prompts: conversations
                    .iter()
                    .map(|c| vec![Vec::new(); c.turns.len()])
                    .collect(),
                decode_time: Duration::ZERO,
                prices: crate::Prices::default(),
                loop_work: LoopWork::default(),
                pinned: 0,
            },
            texts: conversations.iter().map(|_| Vec::new()).collect(),
            queue: (0..conversations.len()).collect(),
            lanes: (0..decoder.settings().sequences).map(|_| None).collect(),
            finished: Vec::new(),
            start: decoder.counters(),
        })
    }

    /// Starts the next turns on the free slots and, while any slot is
    /// busy, decodes one step; false when the pass is over.
    fn advance(&mut self, decoder: &mut Decoder<'_>) -> Result<bool, Error> {
        for slot in 0..self.lanes.len() {
            self.fill(decoder, slot)?;
        }
        if !decoder.any_busy() {
            return Ok(false);
        }
        decoder.step(&mut self.finished)?;
        let model = decoder.model();
        for f in self.finished.drain(..) {
            let Some(lane) = self.lanes[f.seq.index()].as_mut() else {
                continue;
            };
            let (c, t) = (lane.conversation, lane.turn);
            self.texts[c].push(model.text(&f.reply.tokens));
            self.pass.replies[c][t] = Some(f.reply);
            lane.turn += 1;
        }
        Ok(true)
    }

    /// Gives `slot` its lane's next turn, or the next conversation.
    fn fill(&mut self, decoder: &mut Decoder<'_>, slot: usize) -> Result<(), Error> {
        let lane = &mut self.lanes[slot];
        while lane.is_none() || !decoder.is_busy(slot) {
            let (c, t) = match lane {
                Some(l) if l.turn < self.conversations[l.conversation].turns.len() => {
                    (l.conversation, l.turn)
                }
                _ => match self.queue.pop_front() {
                    // A new conversation starts from an empty cache: its
                    // prefill must not depend on what the slot held.
                    Some(c) => {
                        decoder.forget(slot);
                        (c, 0)
                    }
                    None => {
                        *lane = None;
                        return Ok(());
                    }
                },
            };
            *lane = Some(Lane {
                conversation: c,
                turn: t,
            });
            let replies = self.history.map_or(&self.texts[c][..], |h| &h[c][..]);
            let conversation = self.conversations[c];
            let prompt = decoder
                .model()
                .chat_prompt(&messages(&conversation.turns[..=t], replies))?;
            let spec = self
                .drafting
                .map(|d| d.speculative(&conversation.kind))
                .transpose()?;
            let reference = self.pinning.and_then(|p| {
                let r = p.history.replies.get(c)?.get(t)?.as_ref()?;
                Some(Reference {
                    tokens: &r.tokens,
                    margins: &r.margins,
                    bound: p.bound,
                })
            });
            match decoder.start_pinned(slot, &prompt, self.max_tokens, spec, reference) {
                Ok(()) => self.pass.prompts[c][t] = prompt,
                Err(Error::PromptTooLong { .. }) => {
                    // skipped: this turn and the rest of the conversation
                    *lane = None;
                }
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    fn finish(mut self, decoder: &mut Decoder<'_>) -> Pass {
        let now = decoder.counters();
        self.pass.decode_time = now.decode_time.saturating_sub(self.start.decode_time);
        self.pass.loop_work = LoopWork::between(&self.start, &now);
        self.pass.pinned = now.pinned.saturating_sub(self.start.pinned);
        self.pass.prices = decoder.take_prices();
        self.pass
    }
}

/// An upper bound of the longest cache a reply of `conversations` is
/// decoded after, `max_tokens` a reply: every turn's text as the user's
/// messages in the model's template, each turn's reply at `max_tokens`
/// (and 16 template tokens a reply), over the longest conversation.
///
/// # Errors
///
/// A template error.
pub fn cache_reach(
    model: &crate::Model,
    conversations: &[Conversation],
    max_tokens: usize,
) -> Result<usize, Error> {
    let mut reach = 0;
    for c in conversations {
        let turns: Vec<Message<'_>> = c
            .turns
            .iter()
            .map(|t| Message {
                role: Role::User,
                content: t,
            })
            .collect();
        let prompt = model.chat_prompt(&turns)?;
        reach = reach.max(prompt.len() + c.turns.len() * (max_tokens + 16));
    }
    Ok(reach)
}

/// The chat so far: `turns` (the user's) interleaved with `replies` (the
/// model's), the last turn awaiting its reply.
fn messages<'a>(turns: &'a [String], replies: &'a [String]) -> Vec<Message<'a>> {
    let mut m = Vec::with_capacity(turns.len() * 2);
    for (i, turn) in turns.iter().enumerate() {
        m.push(Message {
            role: Role::User,
            content: turn,
        });
        if let Some(r) = replies.get(i).filter(|_| i + 1 < turns.len()) {
            m.push(Message {
                role: Role::Assistant,
                content: r,
            });
        }
    }
    m
}

/// One divergence between the plain and the speculative reply of a turn.
#[derive(Clone, Debug, PartialEq)]
pub struct TurnDivergence {
    /// The conversation's id.
    pub id: String,
    /// The turn.
    pub turn: usize,
    /// Where and how it diverged.
    pub divergence: Divergence,
}

/// Compares the two passes turn by turn into `tally` (counts per turn, the
/// passes' decode times for `kind`) and returns every divergence.
pub fn tally_kind(
    tally: &mut Tally,
    kind: &str,
    conversations: &[&Conversation],
    plain: &Pass,
    spec: &Pass,
    bound: f32,
) -> Vec<TurnDivergence> {
    let mut divergences = Vec::new();
    for (c, conv) in conversations.iter().enumerate() {
        for (t, (p, s)) in plain.replies[c].iter().zip(&spec.replies[c]).enumerate() {
            let (Some(p), Some(s)) = (p, s) else {
                tally.note_skipped(kind);
                continue;
            };
            let d = compare(&p.tokens, &p.margins, &s.tokens, bound);
            tally.add_counts(kind, &Decoded::from(p), &Decoded::from(s), &d);
            if d.diverged() {
                divergences.push(TurnDivergence {
                    id: conv.id.clone(),
                    turn: t,
                    divergence: d,
                });
            }
        }
    }
    tally.add_time(kind, plain.decode_time, spec.decode_time);
    divergences
}

/// The plain pass's reply texts, for the speculative pass's history.
#[must_use]
pub fn reply_texts(decoder: &Decoder<'_>, pass: &Pass) -> Vec<Vec<String>> {
    pass.replies
        .iter()
        .map(|turns| {
            turns
                .iter()
                .map(|r| {
                    r.as_ref()
                        .map_or_else(String::new, |r| decoder.model().text(&r.tokens))
                })
                .collect()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_loops_work_is_a_steps_time_outside_its_pass() {
        let ms = Duration::from_millis;
        let counters = |steps, decode, pass| Counters {
            steps,
            decode_time: ms(decode),
            pass_time: ms(pass),
            ..Counters::default()
        };
        // (before, after, steps, outside, a step)
        let cases = [
            (counters(0, 0, 0), counters(4, 48, 40), 4, ms(8), ms(2)),
            (counters(4, 48, 40), counters(6, 70, 60), 2, ms(2), ms(1)),
            (counters(4, 48, 40), counters(4, 48, 40), 0, ms(0), ms(0)),
        ];
        for (i, (before, after, steps, outside, each)) in cases.into_iter().enumerate() {
            let w = LoopWork::between(&before, &after);
            assert_eq!(
                (w.steps, w.outside, w.per_step()),
                (steps, outside, each),
                "case {i}"
            );
        }
        let mut sum = LoopWork::default();
        sum.add(LoopWork::between(
            &Counters::default(),
            &counters(3, 30, 21),
        ));
        sum.add(LoopWork::between(&Counters::default(), &counters(1, 10, 9)));
        assert_eq!((sum.steps, sum.per_step()), (4, ms(10) / 4));
    }
}
