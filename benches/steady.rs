//! The draft benches' steady state: synthetic histories that grow as an
//! engine's do, and the timed windows over them.

use std::hint::black_box;
use std::time::{Duration, Instant};

use selfspec::{DraftLimits, Drafter, Token};

use crate::common::{code_edit_stream, grow_edits, grow_text, text_stream, Rng};

/// The kinds of synthetic history the draft benches run on.
#[derive(Clone, Copy)]
pub enum Kind {
    Text,
    Code,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::Text => "text",
            Kind::Code => "code",
        }
    }

    pub fn stream(self, len: usize) -> Vec<Token> {
        match self {
            Kind::Text => text_stream(len, 7),
            Kind::Code => code_edit_stream(len, 11),
        }
    }

    /// `prompt` followed by `n` new tokens of this kind (a new edit of the
    /// prompt's last 2048 tokens, or new text quoting the prompt), different
    /// for every `seed`.
    pub fn continued(self, prompt: &[Token], n: usize, seed: u64) -> Vec<Token> {
        let mut out = prompt.to_vec();
        let mut rng = Rng((seed + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
        match self {
            Kind::Text => grow_text(&mut out, prompt.len() + n, &mut rng),
            Kind::Code => {
                let file = prompt[prompt.len().saturating_sub(2048)..].to_vec();
                grow_edits(&mut out, file, prompt.len() + n, &mut rng);
            }
        }
        out
    }
}

/// How a timed window starts over at the prompt.
pub enum Restart {
    /// `begin(prompt)`: the drafter keeps its state per request.
    Begin,
    /// From a copy of the drafter's state primed on the prompt, taken after
    /// `warmup` untimed windows (which train what it learns online). For
    /// drafters that remember across requests (ngram-cache's context cache,
    /// recall's memory of everything seen), re-beginning would time the next
    /// windows at an ever longer history (recall) or with the window's tokens
    /// already learned (ngram-cache's high-water mark).
    Snapshot {
        warmup: usize,
        copy: fn(&dyn Drafter) -> Box<dyn Drafter>,
        /// Each window after the snapshot continues the prompt with text
        /// of the stream's kind that no window had before. recall's copies
        /// share the engine-wide memory and publish to it: with the same
        /// continuation every window, the memory would hold every earlier
        /// window's copy of it, and the drafter would copy it back 16
        /// tokens a call (what this bench measured until 2026-12-01).
        new_text: bool,
    },
}

/// A boxed copy of a drafter of type `D`.
pub fn copy_of<D: Drafter + Clone + 'static>(drafter: &dyn Drafter) -> Box<dyn Drafter> {
    let d = drafter.as_any().and_then(|a| a.downcast_ref::<D>());
    Box::new(d.expect("the drafter's type").clone())
}

/// Times `draft` calls the way an engine makes them: from a prompt of `len`
/// tokens, the history grows by the sampled token plus the accepted draft
/// tokens; after `window` tokens the drafter starts over (untimed).
pub fn steady_state(
    make: &dyn Fn() -> Box<dyn Drafter>,
    restart: &Restart,
    (kind, stream): (Kind, &[Token]),
    len: usize,
    limits: DraftLimits,
    iters: u64,
) -> Duration {
    let window = (len / 8).clamp(256, 8192);
    let prompt = &stream[..len];
    let mut drafter = make();
    drafter.begin(prompt);
    let mut snapshot: Option<Box<dyn Drafter>> = None;
    let mut draft = Vec::with_capacity(64);
    let mut windows = 0;
    let mut total = Duration::ZERO;
    let mut done = 0;
    while done < iters {
        let mut stream = stream;
        let continued;
        if let Restart::Snapshot {
            warmup,
            copy,
            new_text,
        } = restart
        {
            if *new_text && snapshot.is_some() {
                continued = kind.continued(prompt, window + limits.max + 1, windows as u64);
                stream = &continued;
            }
            if snapshot.is_none() && windows == *warmup {
                // What the first draft call after `begin` learns (untimed).
                drafter.draft(&prompt[..len - 1], prompt[len - 1], limits, &mut draft);
                draft.clear();
                snapshot = Some(copy(&*drafter));
            }
            if let Some(primed) = &snapshot {
                drafter = copy(&**primed);
            }
        }
        let mut pos = len;
        let t = Instant::now();
        while done < iters && pos + limits.max + 1 < len + window {
            draft.clear();
            drafter.draft(&stream[..pos], stream[pos], limits, &mut draft);
            draft.truncate(limits.max);
            let truth = &stream[pos + 1..];
            let n = draft.iter().zip(truth).take_while(|(d, t)| d == t).count();
            if n > 0 {
                drafter.accept(n);
            }
            pos += 1 + n;
            done += 1;
        }
        total += t.elapsed();
        windows += 1;
        drafter.begin(prompt);
    }
    black_box(&draft);
    total
}
