//! Text conversations decoded as a chat server does: each user turn is
//! appended to the history (the earlier turns and the model's own replies,
//! rendered with the chat template), the model replies until its end-of-turn
//! token, plainly and then speculatively with each drafting set, turn by
//! turn in the same sitting.
//!
//! The history always continues from the plain reply: where a speculative
//! reply differs (batched and one-token passes round differently on
//! quantized weights, so a near tie can flip), every mode still decodes the
//! same next prompt, and the turns compare like with like.

use selfspec::step::{Reply, Stepper};
pub use selfspec_conversations::DraftSet;
use selfspec_conversations::{compare, Conversation, Decoded, Divergence};

use crate::decode::{self, plain_until, speculative_until};
use crate::tokenizer::{Message, TextTokenizer};
use crate::{Error, Model};

/// One reply decoded plainly and with each set.
#[derive(Debug)]
pub struct Turn {
    /// The plain reply (its last token is the end-of-turn token when the
    /// model ended the turn).
    pub plain: Reply,
    /// One reply per [`DraftSet`], in order.
    pub spec: Vec<Reply>,
    /// Prompt tokens.
    pub prompt_tokens: usize,
}

/// What became of a turn.
#[derive(Debug)]
pub enum Outcome {
    /// Decoded.
    Decoded(Turn),
    /// The prompt plus the reply would not fit the model's context: skipped
    /// (and so are the session's later turns, whose prompts hold it).
    Skipped {
        /// Prompt tokens.
        prompt_tokens: usize,
    },
}

/// Decodes conversations with one model, one tokenizer and some draft sets.
#[derive(Debug)]
pub struct Chat<'a> {
    /// The model.
    model: &'a mut Model,
    /// Its tokenizer and chat template.
    tokenizer: &'a TextTokenizer,
    /// The drafting configurations compared with plain decoding.
    pub sets: Vec<DraftSet>,
    /// Tokens a reply may have at most.
    pub max_tokens: usize,
    /// Drives the model for every request: it keeps the prefix a prompt
    /// shares with what the cache holds.
    stepper: Stepper,
}

impl<'a> Chat<'a> {
    /// Conversations on `model` (from an empty cache), replies of at most
    /// `max_tokens` tokens ended by the tokenizer's end of turn, plain and
    /// with each of `sets`; with `budget`, every set's drafts are sized by
    /// selfspec's draft budget ([`decode::Sizing::Budget`]: one for the
    /// whole run, learning the model's pass times from every request),
    /// else by each set's drafter alone (its limits and token cost).
    ///
    /// # Errors
    ///
    /// [`Error::Selfspec`] for a model shape selfspec's stepper cannot drive.
    pub fn new(
        model: &'a mut Model,
        tokenizer: &'a TextTokenizer,
        sets: Vec<DraftSet>,
        max_tokens: usize,
        budget: bool,
    ) -> Result<Chat<'a>, Error> {
        model.reset();
        let stepper = decode::stepper(model, &[tokenizer.end_of_turn()], budget)?;
        Ok(Chat {
            model,
            tokenizer,
            sets,
            max_tokens,
            stepper,
        })
    }

    /// Decodes `conversation` turn by turn; `each` gets the turn's index and
    /// outcome as soon as it is decoded.
    ///
    /// # Errors
    ///
    /// [`Error::Tokenizer`] or a model error; a turn that does not fit the
    /// context is not an error (it is [`Outcome::Skipped`]).
    pub fn run(
        &mut self,
        conversation: &Conversation,
        mut each: impl FnMut(usize, &Outcome),
    ) -> Result<(), Error> {
        let context = self.model.config().max_position_embeddings;
        let mut history: Vec<Message> = Vec::new();
        let mut skipping = false;
        for (i, user) in conversation.turns.iter().enumerate() {
            history.push(Message::user(user));
            let prompt = self.tokenizer.encode(&self.tokenizer.render(&history))?;
            skipping |= context.is_some_and(|c| prompt.len() + self.max_tokens > c);
            if skipping {
                each(
                    i,
                    &Outcome::Skipped {
                        prompt_tokens: prompt.len(),
                    },
                );
                continue;
            }
            let turn = self.turn(&prompt)?;
            let reply = turn
                .plain
                .tokens
                .strip_suffix(&[self.tokenizer.end_of_turn()])
                .unwrap_or(&turn.plain.tokens);
            history.push(Message::assistant(&self.tokenizer.decode(reply)?));
            each(i, &Outcome::Decoded(turn));
        }
        Ok(())
    }

    /// One prompt decoded plainly, then with each set (a new drafter per
    /// request, on the set's engine-wide memory).
    fn turn(&mut self, prompt: &[u32]) -> Result<Turn, Error> {
        let (model, stepper, n) = (&mut *self.model, &mut self.stepper, self.max_tokens);
        let plain = plain_until(model, stepper, prompt, n)?;
        let mut spec = Vec::with_capacity(self.sets.len());
        for set in &self.sets {
            spec.push(speculative_until(
                model,
                stepper,
                set.speculative()?,
                prompt,
                n,
            )?);
        }
        // The cache now holds the prompt and the last reply: the next turn's
        // prefill evaluates only what its prompt does not share with them.
        Ok(Turn {
            plain,
            spec,
            prompt_tokens: prompt.len(),
        })
    }
}

/// The longest cache a reply to one of `conversations` is decoded after,
/// in tokens (at most): each conversation's user turns rendered as one
/// prompt, and `max_tokens` plus 16 (the template's tokens around a reply)
/// for each of its replies. The near-tie calibration
/// ([`numerics::calibrate`](crate::numerics::calibrate)) measures up to it.
///
/// # Errors
///
/// [`Error::Tokenizer`] for text the tokenizer cannot encode.
pub fn cache_reach(
    tokenizer: &TextTokenizer,
    conversations: &[Conversation],
    max_tokens: usize,
) -> Result<usize, Error> {
    let mut reach = 0;
    for c in conversations {
        let turns: Vec<Message> = c.turns.iter().map(|t| Message::user(t)).collect();
        let prompt = tokenizer.encode(&tokenizer.render(&turns))?;
        reach = reach.max(prompt.len() + c.turns.len() * (max_tokens + 16));
    }
    Ok(reach)
}

/// A reply as the report counts it ([`Decoded::from`]: forward passes as
/// [`Reply::tau`] counts them, decode time after the first token).
#[must_use]
pub fn decoded(r: &Reply) -> Decoded {
    Decoded::from(r)
}

/// Where a speculative reply first differs from the plain one, judged by the
/// plain pass's top-1 / top-2 gap against `near_tie`.
#[must_use]
pub fn divergence(plain: &Reply, spec: &Reply, near_tie: f32) -> Divergence {
    compare(&plain.tokens, &plain.margins, &spec.tokens, near_tie)
}
