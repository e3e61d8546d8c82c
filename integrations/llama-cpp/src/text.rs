//! Tokens to text as they arrive, for streaming.

use llama_cpp_2::model::LlamaModel;
use llama_cpp_2::token::LlamaToken;

/// Turns a reply's tokens into text as they are accepted: a token's bytes
/// may end inside a UTF-8 character, whose rest comes with the next token,
/// so each [`push`](TextStream::push) gives the text completed so far.
/// Turn-ending tokens (end of generation) give no text. Its buffers are
/// reused from token to token.
///
/// ```no_run
/// # fn f(model: &llama_cpp_2::model::LlamaModel, tokens: &[u32]) {
/// use selfspec_llama_cpp::TextStream;
///
/// let mut text = TextStream::new();
/// for &token in tokens {
///     print!("{}", text.push(model, token));
/// }
/// print!("{}", text.finish());
/// # }
/// ```
#[derive(Clone, Debug, Default)]
pub struct TextStream {
    /// Bytes of a character not complete yet.
    pending: Vec<u8>,
    /// The text the last call gave.
    out: String,
}

impl TextStream {
    /// A stream at the start of a reply.
    #[must_use]
    pub fn new() -> TextStream {
        TextStream::default()
    }

    /// `token`'s text, with what earlier tokens left of a character;
    /// bytes that cannot start or continue UTF-8 become U+FFFD.
    pub fn push(&mut self, model: &LlamaModel, token: u32) -> &str {
        self.out.clear();
        let vocab = model.vocab();
        let Ok(id) = i32::try_from(token) else {
            return &self.out;
        };
        let within = usize::try_from(id).is_ok_and(|t| t < vocab_len(model));
        if !within || vocab.is_eog(LlamaToken(id)) {
            return &self.out;
        }
        vocab.token_to_piece_into(LlamaToken(id), &mut self.pending, false, None);
        self.drain(false);
        &self.out
    }

    /// What is left of an unfinished character (as U+FFFD), at the end of
    /// a reply; the stream is then ready for the next one.
    pub fn finish(&mut self) -> &str {
        self.out.clear();
        self.drain(true);
        &self.out
    }

    /// Moves the complete characters of `pending` to `out` (and, at the
    /// end, the incomplete ones as U+FFFD).
    fn drain(&mut self, end: bool) {
        let mut start = 0;
        loop {
            match std::str::from_utf8(&self.pending[start..]) {
                Ok(s) => {
                    self.out.push_str(s);
                    start = self.pending.len();
                    break;
                }
                Err(e) => {
                    let valid = start + e.valid_up_to();
                    // Valid by the check above.
                    self.out
                        .push_str(std::str::from_utf8(&self.pending[start..valid]).unwrap_or(""));
                    match e.error_len() {
                        Some(bad) => {
                            self.out.push(char::REPLACEMENT_CHARACTER);
                            start = valid + bad;
                        }
                        None if end => {
                            self.out.push(char::REPLACEMENT_CHARACTER);
                            start = self.pending.len();
                            break;
                        }
                        None => {
                            start = valid;
                            break;
                        }
                    }
                }
            }
        }
        self.pending.drain(..start);
    }
}

fn vocab_len(model: &LlamaModel) -> usize {
    usize::try_from(model.n_vocab()).unwrap_or(0)
}
