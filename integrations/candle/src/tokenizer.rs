//! Text to tokens and back: the tokenizer a GGUF file describes
//! (`tokenizer.ggml.*`: a byte-level BPE's tokens and merges) made into a
//! `tokenizers` tokenizer, or a given `tokenizer.json`; and the ChatML chat
//! template (`<|im_start|>role\ncontent<|im_end|>\n`).
//!
//! ```no_run
//! use selfspec_candle::gguf::GgufFile;
//! use selfspec_candle::tokenizer::{Message, TextTokenizer};
//!
//! let file = GgufFile::open("SmolLM2-135M-Instruct.Q4_1.gguf".as_ref())?;
//! let tok = TextTokenizer::from_gguf(&file)?;
//! let prompt = tok.render(&[Message::user("Write a haiku.")]);
//! let ids = tok.encode(&prompt)?;
//! assert_eq!(tok.decode(&ids)?, prompt);
//! # Ok::<(), selfspec_candle::Error>(())
//! ```

use std::path::Path;

use candle_core::quantized::gguf_file::Value;
use tokenizers::decoders::byte_level::ByteLevel as ByteLevelDecoder;
use tokenizers::models::bpe::{Vocab, BPE};
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::digits::Digits;
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::{AddedToken, Tokenizer};

use crate::gguf::GgufFile;
use crate::Error;

/// ChatML's turn delimiters.
const IM_START: &str = "<|im_start|>";
const IM_END: &str = "<|im_end|>";

/// GGUF token types that are not text: control (3) and user-defined (4).
const CONTROL: i32 = 3;
const USER_DEFINED: i32 = 4;

pub use selfspec_conversations::Role;

/// One message of a conversation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Message {
    /// Its author.
    pub role: Role,
    /// Its text.
    pub content: String,
}

impl Message {
    /// A user's message.
    #[must_use]
    pub fn user(content: &str) -> Message {
        Message {
            role: Role::User,
            content: content.to_string(),
        }
    }

    /// A reply of the model.
    #[must_use]
    pub fn assistant(content: &str) -> Message {
        Message {
            role: Role::Assistant,
            content: content.to_string(),
        }
    }
}

/// A tokenizer, the model's end-of-turn token and its chat template.
#[derive(Clone, Debug)]
pub struct TextTokenizer {
    inner: Tokenizer,
    end_of_turn: u32,
    /// The system prompt the template puts first when a conversation has
    /// none.
    default_system: Option<String>,
}

impl TextTokenizer {
    /// The tokenizer of a GGUF file: a byte-level BPE (`tokenizer.ggml.model`
    /// = `gpt2`) from `tokenizer.ggml.tokens` and `.merges`, digits split one
    /// by one before the byte-level split (as Hugging Face's SmolLM / StarCoder
    /// tokenizers do), control tokens as special tokens. The chat template
    /// (`tokenizer.chat_template`) must be ChatML.
    ///
    /// # Errors
    ///
    /// [`Error::Gguf`] for missing or malformed tokenizer metadata, another
    /// tokenizer model, or another chat template; [`Error::Tokenizer`] if the
    /// tokenizer cannot be built.
    pub fn from_gguf(file: &GgufFile) -> Result<TextTokenizer, Error> {
        let model = file.string("tokenizer.ggml.model")?;
        if model != "gpt2" {
            return Err(file.error(format!(
                "tokenizer.ggml.model {model:?} is not supported (allowed: gpt2, a byte-level BPE)"
            )));
        }
        let tokens = strings(file, "tokenizer.ggml.tokens")?;
        let merges = strings(file, "tokenizer.ggml.merges")?
            .into_iter()
            .map(|m| {
                m.split_once(' ')
                    .map(|(a, b)| (a.to_string(), b.to_string()))
                    .ok_or_else(|| file.error(format!("merge {m:?} is not two tokens")))
            })
            .collect::<Result<Vec<_>, Error>>()?;
        let types = match file.get("tokenizer.ggml.token_type") {
            Some(_) => file
                .array("tokenizer.ggml.token_type")?
                .iter()
                .map(|v| match v {
                    Value::I32(t) => Ok(*t),
                    v => Err(file.error(format!("token type {v:?} is not an i32"))),
                })
                .collect::<Result<Vec<i32>, Error>>()?,
            None => vec![1; tokens.len()],
        };
        if types.len() != tokens.len() {
            return Err(file.error(format!(
                "{} token types for {} tokens",
                types.len(),
                tokens.len()
            )));
        }
        let mut vocab = Vocab::default();
        for (id, token) in tokens.iter().enumerate() {
            let id = u32::try_from(id).map_err(|_| file.error("more than 2^32 tokens"))?;
            vocab.insert(token.clone(), id);
        }
        let bpe = BPE::builder()
            .vocab_and_merges(vocab, merges)
            .build()
            .map_err(|e| Error::Tokenizer(format!("BPE from the GGUF: {e}")))?;
        let mut inner = Tokenizer::new(bpe);
        inner.with_pre_tokenizer(Some(Sequence::new(vec![
            Digits::new(true).into(),
            ByteLevel::new(false, true, true).into(),
        ])));
        inner.with_decoder(Some(ByteLevelDecoder::new(false, true, true)));
        let special: Vec<AddedToken> = tokens
            .iter()
            .zip(&types)
            .filter(|(_, &t)| t == CONTROL || t == USER_DEFINED)
            .map(|(token, &t)| AddedToken::from(token.clone(), t == CONTROL))
            .collect();
        inner
            .add_special_tokens(special)
            .map_err(|e| Error::Tokenizer(format!("special tokens: {e}")))?;
        let template = match file.get("tokenizer.chat_template") {
            Some(_) => file.string("tokenizer.chat_template")?,
            None => "",
        };
        if !template.contains(IM_START) {
            return Err(file.error(
                "tokenizer.chat_template is not ChatML (<|im_start|>role ... <|im_end|>): the only template supported",
            ));
        }
        TextTokenizer::new(inner, default_system(template))
    }

    /// A Hugging Face `tokenizer.json`, with the ChatML template and no
    /// default system prompt.
    ///
    /// # Errors
    ///
    /// [`Error::Tokenizer`] for a file that cannot be read or has no
    /// `<|im_end|>` token.
    pub fn from_file(path: &Path) -> Result<TextTokenizer, Error> {
        let inner = Tokenizer::from_file(path)
            .map_err(|e| Error::Tokenizer(format!("{}: {e}", path.display())))?;
        TextTokenizer::new(inner, None)
    }

    fn new(inner: Tokenizer, default_system: Option<String>) -> Result<TextTokenizer, Error> {
        let end_of_turn = inner
            .token_to_id(IM_END)
            .ok_or_else(|| Error::Tokenizer(format!("no {IM_END} token (ChatML's end of turn)")))?;
        Ok(TextTokenizer {
            inner,
            end_of_turn,
            default_system,
        })
    }

    /// The token that ends a reply (`<|im_end|>`).
    #[must_use]
    pub fn end_of_turn(&self) -> u32 {
        self.end_of_turn
    }

    /// The system prompt put first when a conversation has none (from the
    /// GGUF's chat template).
    #[must_use]
    pub fn default_system(&self) -> Option<&str> {
        self.default_system.as_deref()
    }

    /// The ids of `text`; special tokens written in it (`<|im_start|>`) are
    /// their own ids. No BOS is added.
    ///
    /// # Errors
    ///
    /// [`Error::Tokenizer`] if the tokenizer fails.
    pub fn encode(&self, text: &str) -> Result<Vec<u32>, Error> {
        self.inner
            .encode(text, false)
            .map(|e| e.get_ids().to_vec())
            .map_err(|e| Error::Tokenizer(e.to_string()))
    }

    /// The text of `ids`, special tokens included.
    ///
    /// # Errors
    ///
    /// [`Error::Tokenizer`] for an id outside the vocabulary.
    pub fn decode(&self, ids: &[u32]) -> Result<String, Error> {
        self.inner
            .decode(ids, false)
            .map_err(|e| Error::Tokenizer(e.to_string()))
    }

    /// The id of a token's text, if the vocabulary has it.
    #[must_use]
    pub fn token_id(&self, token: &str) -> Option<u32> {
        self.inner.token_to_id(token)
    }

    /// `messages` in ChatML, the default system prompt first when the first
    /// message is not a system prompt, ending with the assistant's turn
    /// opened (`<|im_start|>assistant\n`): the prompt of the next reply.
    #[must_use]
    pub fn render(&self, messages: &[Message]) -> String {
        let mut out = String::new();
        let turn = |out: &mut String, role: Role, content: &str| {
            out.push_str(IM_START);
            out.push_str(role.name());
            out.push('\n');
            out.push_str(content);
            out.push_str(IM_END);
            out.push('\n');
        };
        if let (Some(system), false) = (
            &self.default_system,
            messages.first().is_some_and(|m| m.role == Role::System),
        ) {
            turn(&mut out, Role::System, system);
        }
        for m in messages {
            turn(&mut out, m.role, &m.content);
        }
        out.push_str(IM_START);
        out.push_str(Role::Assistant.name());
        out.push('\n');
        out
    }
}

/// A string array of the metadata.
fn strings(file: &GgufFile, key: &str) -> Result<Vec<String>, Error> {
    file.array(key)?
        .iter()
        .map(|v| match v {
            Value::String(s) => Ok(s.clone()),
            v => Err(file.error(format!("{key}: {v:?} is not a string"))),
        })
        .collect()
}

/// The literal system prompt of a ChatML template
/// (`'<|im_start|>system\n...<|im_end|>'` in a string of the template), if
/// it has one.
fn default_system(template: &str) -> Option<String> {
    let template = template.replace("\\n", "\n");
    let start = format!("{IM_START}system\n");
    let from = template.find(&start)? + start.len();
    let text = &template[from..];
    let text = &text[..text.find(IM_END)?];
    // Only a literal: no Jinja expression, no end of the string literal.
    if text.contains("{{") || text.contains('\'') || text.contains('"') {
        return None;
    }
    Some(text.to_string())
}

#[cfg(test)]
mod tests {
    use super::default_system;

    #[test]
    fn the_default_system_prompt_is_read_from_a_chatml_template() {
        let smollm = "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}";
        assert_eq!(
            default_system(smollm).as_deref(),
            Some("You are a helpful AI assistant named SmolLM, trained by Hugging Face")
        );
        let escaped = smollm.replace('\n', "\\n");
        assert_eq!(default_system(&escaped), default_system(smollm));
        let plain =
            "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>'}}";
        assert_eq!(default_system(plain), None);
        let dynamic = "{{ '<|im_start|>system\n' + messages[0]['content'] + '<|im_end|>' }}";
        assert_eq!(default_system(dynamic), None);
    }
}
