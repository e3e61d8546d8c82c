//! llama.cpp's model: loading a GGUF file, its tokenizer and chat template,
//! and the tokens that end a turn.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use llama_cpp_2::llama_backend::LlamaBackend;
use llama_cpp_2::model::params::LlamaModelParams;
use llama_cpp_2::model::{LlamaChatMessage, LlamaChatTemplate, LlamaModel};
use llama_cpp_2::token::LlamaToken;

use crate::Error;

/// llama.cpp's process-wide backend: initialised once, its log silenced.
pub(crate) fn backend() -> Result<&'static LlamaBackend, Error> {
    static BACKEND: OnceLock<Result<LlamaBackend, String>> = OnceLock::new();
    BACKEND
        .get_or_init(|| {
            let mut b = LlamaBackend::init().map_err(|e| e.to_string())?;
            b.void_logs();
            Ok(b)
        })
        .as_ref()
        .map_err(|e| Error::Backend(e.clone()))
}

pub use selfspec_conversations::Role;

/// One message of a conversation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Message<'a> {
    /// Who wrote it.
    pub role: Role,
    /// Its text.
    pub content: &'a str,
}

/// A GGUF model loaded by llama.cpp (CPU), with its vocabulary and chat
/// template.
#[derive(Debug)]
pub struct Model {
    pub(crate) inner: LlamaModel,
    path: PathBuf,
    n_vocab: usize,
    template: LlamaChatTemplate,
}

impl Model {
    /// Loads the GGUF file at `path`.
    ///
    /// The chat template is the model's own (`tokenizer.chat_template`, as
    /// llama.cpp's `llama_chat_apply_template` recognises it); a model
    /// without one gets ChatML.
    ///
    /// # Errors
    ///
    /// [`Error::ModelMissing`] when there is no file, [`Error::NotGguf`] when
    /// it is not a GGUF file, [`Error::Load`] when llama.cpp refuses it,
    /// [`Error::Backend`] if llama.cpp's backend cannot start.
    pub fn load(path: &Path) -> Result<Model, Error> {
        if !path.is_file() {
            return Err(Error::ModelMissing {
                path: path.to_path_buf(),
            });
        }
        let mut magic = [0u8; 4];
        let read = std::fs::File::open(path).and_then(|mut f| f.read_exact(&mut magic));
        match read {
            Ok(()) if &magic == b"GGUF" => {}
            Ok(()) => return Err(Error::NotGguf { path: path.into() }),
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
                return Err(Error::NotGguf { path: path.into() })
            }
            Err(source) => {
                return Err(Error::Io {
                    path: path.into(),
                    source,
                })
            }
        }
        let backend = backend()?;
        let inner = LlamaModel::load_from_file(backend, path, &LlamaModelParams::default())
            .map_err(|_| Error::Load { path: path.into() })?;
        let n_vocab = usize::try_from(inner.n_vocab()).unwrap_or(0);
        if n_vocab == 0 {
            return Err(Error::Load { path: path.into() });
        }
        let template = match inner.chat_template(None) {
            Ok(t) => t,
            Err(_) => {
                LlamaChatTemplate::new("chatml").map_err(|e| Error::Template(e.to_string()))?
            }
        };
        Ok(Model {
            inner,
            path: path.into(),
            n_vocab,
            template,
        })
    }

    /// The file it was loaded from.
    #[must_use]
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The model family, as a recorded workload names its tokenizer
    /// ([`run::Recorder`](crate::run::Recorder)): the GGUF's
    /// `general.basename` in lower case (`smollm2`), else the file's name
    /// without its extension.
    #[must_use]
    pub fn family(&self) -> String {
        self.inner
            .meta_val_str("general.basename")
            .ok()
            .filter(|b| !b.trim().is_empty())
            .unwrap_or_else(|| {
                self.path
                    .file_stem()
                    .map_or_else(String::new, |s| s.to_string_lossy().into_owned())
            })
            .trim()
            .to_lowercase()
    }

    /// Vocabulary size (logit row length).
    #[must_use]
    pub fn n_vocab(&self) -> usize {
        self.n_vocab
    }

    /// The context length the model was trained with.
    #[must_use]
    pub fn n_ctx_train(&self) -> usize {
        self.inner.n_ctx_train() as usize
    }

    /// Whether `token` ends a turn (end of generation: `<|im_end|>`, EOS).
    #[must_use]
    pub fn is_end(&self, token: u32) -> bool {
        i32::try_from(token).is_ok_and(|t| self.inner.vocab().is_eog(LlamaToken(t)))
    }

    /// Every token that ends a turn ([`Model::is_end`]): the stepper's stop
    /// tokens.
    #[must_use]
    pub fn end_tokens(&self) -> Vec<u32> {
        (0..self.n_vocab)
            .filter_map(|t| u32::try_from(t).ok())
            .filter(|&t| self.is_end(t))
            .collect()
    }

    /// The tokens of `text` (special tokens such as `<|im_start|>` parsed;
    /// a BOS token added if the model asks for one).
    #[must_use]
    pub fn tokenize(&self, text: &str) -> Vec<u32> {
        let vocab = self.inner.vocab();
        let add_bos = vocab.should_add_bos();
        vocab
            .tokenize(text.as_bytes(), add_bos, true)
            .into_iter()
            .filter_map(|t| u32::try_from(t.0).ok())
            .collect()
    }

    /// The text of `tokens` (invalid UTF-8 replaced), turn-ending tokens
    /// left out.
    #[must_use]
    pub fn text(&self, tokens: &[u32]) -> String {
        let ids: Vec<LlamaToken> = tokens
            .iter()
            .filter(|&&t| !self.is_end(t))
            .filter_map(|&t| i32::try_from(t).ok().map(LlamaToken))
            .collect();
        let bytes = self.inner.vocab().detokenize(&ids, false, false);
        String::from_utf8_lossy(&bytes).into_owned()
    }

    /// The prompt for the model's next reply: `messages` rendered with the
    /// model's chat template (the assistant's turn opened), tokenized.
    ///
    /// # Errors
    ///
    /// [`Error::Template`] if llama.cpp cannot apply the template or a
    /// message holds a NUL byte.
    pub fn chat_prompt(&self, messages: &[Message<'_>]) -> Result<Vec<u32>, Error> {
        let chat = messages
            .iter()
            .map(|m| LlamaChatMessage::new(m.role.name().into(), m.content.into()))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| Error::Template(e.to_string()))?;
        let text = self
            .inner
            .apply_chat_template(&self.template, &chat, true)
            .map_err(|e| Error::Template(e.to_string()))?;
        Ok(self.tokenize(&text))
    }
}
