//! The decoder's shape, read from a Hugging Face `config.json`.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::Error;

/// A Llama-family decoder's hyper-parameters, with Hugging Face's field names
/// (`config.json` of Llama, Qwen2, Qwen3, Mistral...). Unknown fields are
/// ignored.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ModelConfig {
    /// Width of the residual stream.
    pub hidden_size: usize,
    /// Width of the SwiGLU MLP.
    pub intermediate_size: usize,
    /// Decoder layers.
    pub num_hidden_layers: usize,
    /// Query heads.
    pub num_attention_heads: usize,
    /// Key / value heads (grouped-query attention); defaults to the query heads.
    #[serde(default)]
    pub num_key_value_heads: Option<usize>,
    /// Per-head width; defaults to `hidden_size / num_attention_heads` (Qwen3 sets it).
    #[serde(default)]
    pub head_dim: Option<usize>,
    /// Vocabulary size (rows of the embedding and of the lm_head).
    pub vocab_size: usize,
    /// RoPE base frequency.
    #[serde(default = "default_rope_theta")]
    pub rope_theta: f64,
    /// RMSNorm epsilon.
    #[serde(default = "default_rms_norm_eps")]
    pub rms_norm_eps: f64,
    /// The lm_head is the embedding matrix (no `lm_head.weight` tensor).
    #[serde(default)]
    pub tie_word_embeddings: bool,
    /// Positions the model was trained for (Hugging Face's
    /// `max_position_embeddings`, a GGUF's `context_length`); `None`: no
    /// limit is known.
    #[serde(default)]
    pub max_position_embeddings: Option<usize>,
    /// RoPE rotates interleaved pairs `(2i, 2i + 1)` (llama.cpp's Llama
    /// layout, whose GGUF files permute the q / k rows for it) rather than
    /// the two halves of a head (Hugging Face's layout).
    #[serde(default)]
    pub rope_interleaved: bool,
}

fn default_rope_theta() -> f64 {
    10_000.0
}

fn default_rms_norm_eps() -> f64 {
    1e-6
}

impl ModelConfig {
    /// Reads and checks a `config.json`.
    ///
    /// # Errors
    ///
    /// [`Error::Io`] for an unreadable file, [`Error::ConfigJson`] for one
    /// that is not a config, [`Error::Config`] for inconsistent sizes.
    pub fn from_file(path: &Path) -> Result<ModelConfig, Error> {
        let text = std::fs::read_to_string(path).map_err(|source| Error::Io {
            path: path.to_path_buf(),
            source,
        })?;
        let config: ModelConfig =
            serde_json::from_str(&text).map_err(|source| Error::ConfigJson {
                path: path.to_path_buf(),
                source,
            })?;
        config.validate()?;
        Ok(config)
    }

    /// Key / value heads.
    #[must_use]
    pub fn kv_heads(&self) -> usize {
        self.num_key_value_heads.unwrap_or(self.num_attention_heads)
    }

    /// Per-head width.
    #[must_use]
    pub fn head_dim(&self) -> usize {
        self.head_dim
            .unwrap_or(self.hidden_size / self.num_attention_heads.max(1))
    }

    /// Checks that the sizes fit together.
    ///
    /// # Errors
    ///
    /// [`Error::Config`] saying which sizes do not.
    pub fn validate(&self) -> Result<(), Error> {
        let bad = |msg: String| Err(Error::Config(msg));
        if self.hidden_size == 0
            || self.intermediate_size == 0
            || self.num_hidden_layers == 0
            || self.vocab_size == 0
        {
            return bad(
                "hidden_size, intermediate_size, num_hidden_layers and vocab_size must be positive"
                    .into(),
            );
        }
        if self.num_attention_heads == 0 || self.kv_heads() == 0 {
            return bad("num_attention_heads and num_key_value_heads must be positive".into());
        }
        if !self.num_attention_heads.is_multiple_of(self.kv_heads()) {
            return bad(format!(
                "num_attention_heads ({}) is not a multiple of num_key_value_heads ({})",
                self.num_attention_heads,
                self.kv_heads()
            ));
        }
        if self.head_dim.is_none() && !self.hidden_size.is_multiple_of(self.num_attention_heads) {
            return bad(format!(
                "hidden_size ({}) is not a multiple of num_attention_heads ({}) and no head_dim is given",
                self.hidden_size, self.num_attention_heads
            ));
        }
        if !self.head_dim().is_multiple_of(2) || self.head_dim() == 0 {
            return bad(format!(
                "head_dim ({}) must be even and positive (RoPE)",
                self.head_dim()
            ));
        }
        if !(self.rope_theta.is_finite() && self.rope_theta > 0.0) {
            return bad(format!("rope_theta ({}) must be positive", self.rope_theta));
        }
        if !(self.rms_norm_eps.is_finite() && self.rms_norm_eps > 0.0) {
            return bad(format!(
                "rms_norm_eps ({}) must be positive",
                self.rms_norm_eps
            ));
        }
        Ok(())
    }
}
