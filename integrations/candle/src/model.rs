//! A Llama-family decoder (RMSNorm, RoPE, grouped-query attention, SwiGLU,
//! tied or untied lm_head; Qwen2's q/k/v biases and Qwen3's q/k norms when
//! the weights have them) on candle's CPU device, its projections in f32 or
//! quantized (read from a GGUF file, see [`crate::gguf`]), with a KV cache
//! that can be truncated to any position.

use std::collections::HashMap;
use std::path::Path;

use candle_core::quantized::QMatMul;
use candle_core::{DType, Device, Module, Tensor};
use candle_nn::VarBuilder;

use crate::kv::KvBuffer;
pub use crate::kv::LayerCache;
use crate::target::Outputs;
use crate::{Error, ModelConfig};

/// A projection `x @ w^T (+ b)`, `w` as stored by Hugging Face and GGUF
/// (`[out, in]`): dense f32 or quantized (candle's `QMatMul`).
#[derive(Debug, Clone)]
pub(crate) struct Linear {
    weight: QMatMul,
    bias: Option<Tensor>,
}

impl Linear {
    pub(crate) fn new(weight: QMatMul, bias: Option<Tensor>) -> Linear {
        Linear { weight, bias }
    }

    fn load(vb: &VarBuilder, out_dim: usize, in_dim: usize) -> candle_core::Result<Linear> {
        let weight = QMatMul::Tensor(vb.get((out_dim, in_dim), "weight")?);
        let bias = if vb.contains_tensor("bias") {
            Some(vb.get(out_dim, "bias")?)
        } else {
            None
        };
        Ok(Linear { weight, bias })
    }

    /// `x`: `[t, in]` -> `[t, out]`.
    fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        let y = self.weight.forward(x)?;
        match &self.bias {
            Some(b) => y.broadcast_add(b),
            None => Ok(y),
        }
    }
}

/// One decoder layer's weights.
#[derive(Debug, Clone)]
pub(crate) struct Layer {
    pub(crate) input_norm: Tensor,
    pub(crate) q: Linear,
    pub(crate) k: Linear,
    pub(crate) v: Linear,
    pub(crate) o: Linear,
    /// Qwen3's per-head RMSNorm of queries and keys.
    pub(crate) q_norm: Option<Tensor>,
    pub(crate) k_norm: Option<Tensor>,
    pub(crate) post_norm: Tensor,
    pub(crate) gate: Linear,
    pub(crate) up: Linear,
    pub(crate) down: Linear,
}

impl Layer {
    fn load(vb: &VarBuilder, c: &ModelConfig) -> candle_core::Result<Layer> {
        let (h, d) = (c.hidden_size, c.head_dim());
        let attn = vb.pp("self_attn");
        let mlp = vb.pp("mlp");
        let norm = |vb: &VarBuilder, name: &str, n: usize| -> candle_core::Result<Option<Tensor>> {
            if vb.contains_tensor(&format!("{name}.weight")) {
                Ok(Some(vb.pp(name).get(n, "weight")?))
            } else {
                Ok(None)
            }
        };
        Ok(Layer {
            input_norm: vb.pp("input_layernorm").get(h, "weight")?,
            q: Linear::load(&attn.pp("q_proj"), c.num_attention_heads * d, h)?,
            k: Linear::load(&attn.pp("k_proj"), c.kv_heads() * d, h)?,
            v: Linear::load(&attn.pp("v_proj"), c.kv_heads() * d, h)?,
            o: Linear::load(&attn.pp("o_proj"), h, c.num_attention_heads * d)?,
            q_norm: norm(&attn, "q_norm", d)?,
            k_norm: norm(&attn, "k_norm", d)?,
            post_norm: vb.pp("post_attention_layernorm").get(h, "weight")?,
            gate: Linear::load(&mlp.pp("gate_proj"), c.intermediate_size, h)?,
            up: Linear::load(&mlp.pp("up_proj"), c.intermediate_size, h)?,
            down: Linear::load(&mlp.pp("down_proj"), h, c.intermediate_size)?,
        })
    }
}

/// A model's weights, however they were read.
#[derive(Debug, Clone)]
pub(crate) struct Weights {
    /// `[vocab, hidden]`, f32.
    pub(crate) embed: Tensor,
    pub(crate) layers: Vec<Layer>,
    pub(crate) norm: Tensor,
    pub(crate) lm_head: Linear,
}

/// The decoder and its KV cache (one sequence).
///
/// [`forward`](Model::forward) evaluates tokens at the positions after the
/// cache and appends their keys and values; [`truncate`](Model::truncate)
/// drops positions from the end (the rollback after a rejected draft). As a
/// [`selfspec::step::Target`] (one sequence) it is driven by a
/// [`selfspec::step::Stepper`] ([`crate::decode`]).
#[derive(Debug, Clone)]
pub struct Model {
    config: ModelConfig,
    device: Device,
    weights: Weights,
    cache: Vec<Option<KvBuffer>>,
    /// The tokens whose keys and values the cache holds.
    tokens: Vec<u32>,
    /// The output rows of the last [`selfspec::step::Target::forward`].
    pub(crate) outputs: Outputs,
}

impl Model {
    /// Reads the weights of `config` from a safetensors file with candle's
    /// loader (`candle_core::safetensors::load`), converting them to f32.
    ///
    /// # Errors
    ///
    /// [`Error::Config`] for an invalid `config`, [`Error::Weights`] for a
    /// file that cannot be read or lacks a tensor (or has one of the wrong
    /// shape).
    pub fn load(weights: &Path, config: &ModelConfig) -> Result<Model, Error> {
        config.validate()?;
        let device = Device::Cpu;
        let wrap = |source| Error::Weights {
            path: weights.to_path_buf(),
            source,
        };
        let tensors = candle_core::safetensors::load(weights, &device).map_err(wrap)?;
        Model::from_tensors(tensors, config).map_err(|e| match e {
            Error::Candle(source) => wrap(source),
            e => e,
        })
    }

    /// Builds the model from named tensors (Llama's names:
    /// `model.embed_tokens.weight`, `model.layers.N.self_attn.q_proj.weight`,
    /// ..., `model.norm.weight`, `lm_head.weight`).
    ///
    /// # Errors
    ///
    /// [`Error::Config`] for an invalid `config`, [`Error::Candle`] for a
    /// missing tensor or one of the wrong shape.
    pub fn from_tensors(
        tensors: HashMap<String, Tensor>,
        config: &ModelConfig,
    ) -> Result<Model, Error> {
        config.validate()?;
        let device = Device::Cpu;
        let vb = VarBuilder::from_tensors(tensors, DType::F32, &device);
        let (v, h) = (config.vocab_size, config.hidden_size);
        let m = vb.pp("model");
        let embed = m.pp("embed_tokens").get((v, h), "weight")?;
        let layers = (0..config.num_hidden_layers)
            .map(|i| Layer::load(&m.pp(format!("layers.{i}")), config))
            .collect::<candle_core::Result<Vec<_>>>()?;
        let norm = m.pp("norm").get(h, "weight")?;
        let lm_head = if vb.contains_tensor("lm_head.weight") {
            vb.pp("lm_head").get((v, h), "weight")?
        } else if config.tie_word_embeddings {
            embed.clone()
        } else {
            return Err(Error::Config(
                "no lm_head.weight and tie_word_embeddings is false".into(),
            ));
        };
        let weights = Weights {
            embed,
            layers,
            norm,
            lm_head: Linear::new(QMatMul::Tensor(lm_head), None),
        };
        Ok(Model::from_weights(config, weights))
    }

    /// The model of `config` with `weights` (whose shapes were checked).
    pub(crate) fn from_weights(config: &ModelConfig, weights: Weights) -> Model {
        Model {
            config: config.clone(),
            device: Device::Cpu,
            weights,
            cache: vec![None; config.num_hidden_layers],
            tokens: Vec::new(),
            outputs: Outputs::default(),
        }
    }

    /// The model's configuration.
    #[must_use]
    pub fn config(&self) -> &ModelConfig {
        &self.config
    }

    /// Positions in the KV cache.
    #[must_use]
    pub fn cache_len(&self) -> usize {
        self.tokens.len()
    }

    /// The tokens whose keys and values the cache holds.
    #[must_use]
    pub fn cached_tokens(&self) -> &[u32] {
        &self.tokens
    }

    /// The KV cache, one entry per layer (`None` while empty): views of the
    /// cached positions.
    ///
    /// # Errors
    ///
    /// [`Error::Candle`] if a buffer cannot be narrowed (not expected).
    pub fn cache(&self) -> Result<Vec<Option<LayerCache>>, Error> {
        let len = self.cache_len();
        self.cache
            .iter()
            .map(|b| match b {
                Some(b) if len > 0 => Ok(Some(LayerCache {
                    k: b.k.narrow(1, 0, len)?,
                    v: b.v.narrow(1, 0, len)?,
                })),
                _ => Ok(None),
            })
            .collect()
    }

    /// Empties the KV cache (a new sequence); its buffers are kept for reuse.
    pub fn reset(&mut self) {
        self.tokens.clear();
    }

    /// Keeps the first `len` positions of the KV cache (no-op when it holds
    /// no more).
    pub fn truncate(&mut self, len: usize) {
        self.tokens.truncate(len);
    }

    /// Makes the cache hold `prompt` and returns the logits of its last
    /// position, `[1, vocab]`: the cached positions that are a prefix of
    /// `prompt` are kept (a conversation's earlier turns), the rest is
    /// evaluated in passes of at most `chunk` tokens.
    ///
    /// # Errors
    ///
    /// As [`forward`](Model::forward).
    pub fn prefill(&mut self, prompt: &[u32], chunk: usize) -> Result<Tensor, Error> {
        if prompt.is_empty() {
            return Err(Error::EmptyPrompt);
        }
        let same = self
            .tokens
            .iter()
            .zip(prompt)
            .take_while(|(a, b)| a == b)
            .count();
        // At least the last token is evaluated: its row is the result.
        self.truncate(same.min(prompt.len() - 1));
        let mut last = None;
        for part in prompt[self.cache_len()..].chunks(chunk.max(1)) {
            last = Some(self.hidden(part)?);
        }
        let hidden = last.ok_or(Error::EmptyPrompt)?;
        let rows = hidden.dim(0)?;
        Ok(self
            .weights
            .lm_head
            .forward(&hidden.narrow(0, rows - 1, 1)?)?)
    }

    /// Evaluates `tokens` at positions `cache_len()..cache_len() + tokens.len()`
    /// (one forward pass), appends their keys and values to the cache and
    /// returns the logits, `[tokens.len(), vocab]`: row `i` predicts the
    /// token after `tokens[..=i]`.
    ///
    /// # Errors
    ///
    /// [`Error::EmptyPrompt`] for no tokens, [`Error::TokenOutOfRange`] for a
    /// token the vocabulary lacks, [`Error::Candle`] if an operation fails.
    pub fn forward(&mut self, tokens: &[u32]) -> Result<Tensor, Error> {
        let x = self.hidden(tokens)?;
        Ok(self.weights.lm_head.forward(&x)?)
    }

    /// The lm_head over `hidden` (rows of [`hidden`](Model::hidden)'s
    /// output): `[rows, vocab]` logits.
    pub(crate) fn head(&self, hidden: &Tensor) -> candle_core::Result<Tensor> {
        self.weights.lm_head.forward(hidden)
    }

    /// As [`forward`](Model::forward), but returns the lm_head's input (the
    /// final RMSNorm's output), `[tokens.len(), hidden]`.
    ///
    /// # Errors
    ///
    /// As [`forward`](Model::forward).
    pub fn hidden(&mut self, tokens: &[u32]) -> Result<Tensor, Error> {
        if tokens.is_empty() {
            return Err(Error::EmptyPrompt);
        }
        let vocab = self.config.vocab_size;
        if let Some(&token) = tokens.iter().find(|&&t| t as usize >= vocab) {
            return Err(Error::TokenOutOfRange { token, vocab });
        }
        let t = tokens.len();
        let offset = self.cache_len();
        if let Some(max) = self.config.max_position_embeddings {
            if offset + t > max {
                return Err(Error::ContextFull {
                    needed: offset + t,
                    max,
                });
            }
        }
        let ids = Tensor::new(tokens, &self.device)?;
        let mut x = self.weights.embed.index_select(&ids, 0)?; // [t, hidden]
        let (cos, sin) = self.rope_tables(offset, t)?;
        let mask = if t > 1 {
            Some(causal_mask(offset, t, &self.device)?)
        } else {
            None
        };
        let eps = self.eps();
        for (layer, cache) in self.weights.layers.iter().zip(self.cache.iter_mut()) {
            x = layer_forward(
                layer,
                &self.config,
                eps,
                &x,
                &cos,
                &sin,
                mask.as_ref(),
                cache,
                offset,
            )?;
        }
        self.tokens.extend_from_slice(tokens);
        Ok(candle_nn::ops::rms_norm(&x, &self.weights.norm, eps)?)
    }

    #[allow(clippy::cast_possible_truncation)] // an f64 epsilon to candle's f32 kernel
    fn eps(&self) -> f32 {
        self.config.rms_norm_eps as f32
    }

    /// cos / sin of the rotation angles at positions `offset..offset + t`,
    /// each `[t, head_dim / 2]`.
    #[allow(clippy::cast_possible_truncation, clippy::cast_precision_loss)]
    fn rope_tables(&self, offset: usize, t: usize) -> candle_core::Result<(Tensor, Tensor)> {
        let half = self.config.head_dim() / 2;
        let theta = self.config.rope_theta;
        let mut cos = Vec::with_capacity(t * half);
        let mut sin = Vec::with_capacity(t * half);
        for p in offset..offset + t {
            for i in 0..half {
                let inv_freq = 1.0 / theta.powf((2 * i) as f64 / (2 * half) as f64);
                let angle = p as f64 * inv_freq;
                cos.push(angle.cos() as f32);
                sin.push(angle.sin() as f32);
            }
        }
        Ok((
            Tensor::from_vec(cos, (t, half), &self.device)?,
            Tensor::from_vec(sin, (t, half), &self.device)?,
        ))
    }
}

/// `[t, offset + t]`: 0 where query `i` (position `offset + i`) may see key
/// `j`, minus infinity after it.
fn causal_mask(offset: usize, t: usize, device: &Device) -> candle_core::Result<Tensor> {
    let keys = offset + t;
    let mask: Vec<f32> = (0..t)
        .flat_map(|i| {
            (0..keys).map(move |j| {
                if j > offset + i {
                    f32::NEG_INFINITY
                } else {
                    0.0
                }
            })
        })
        .collect();
    Tensor::from_vec(mask, (t, keys), device)
}

#[allow(clippy::too_many_arguments, clippy::cast_precision_loss)]
fn layer_forward(
    layer: &Layer,
    c: &ModelConfig,
    eps: f32,
    x: &Tensor,
    cos: &Tensor,
    sin: &Tensor,
    mask: Option<&Tensor>,
    cache: &mut Option<KvBuffer>,
    offset: usize,
) -> candle_core::Result<Tensor> {
    let (t, _) = x.dims2()?;
    let (nh, nkv, d) = (c.num_attention_heads, c.kv_heads(), c.head_dim());
    let rep = nh / nkv;

    let h = candle_nn::ops::rms_norm(x, &layer.input_norm, eps)?;
    let mut q = layer.q.forward(&h)?.reshape((t, nh, d))?;
    let mut k = layer.k.forward(&h)?.reshape((t, nkv, d))?;
    let v = layer.v.forward(&h)?.reshape((t, nkv, d))?;
    if let Some(w) = &layer.q_norm {
        q = candle_nn::ops::rms_norm(&q.contiguous()?, w, eps)?;
    }
    if let Some(w) = &layer.k_norm {
        k = candle_nn::ops::rms_norm(&k.contiguous()?, w, eps)?;
    }
    // [1, heads, t, d] for candle's RoPE kernels.
    let rope = |x: &Tensor| -> candle_core::Result<Tensor> {
        let x = x.transpose(0, 1)?.contiguous()?.unsqueeze(0)?;
        let y = if c.rope_interleaved {
            candle_nn::rotary_emb::rope_i(&x, cos, sin)?
        } else {
            candle_nn::rotary_emb::rope(&x, cos, sin)?
        };
        y.squeeze(0)
    };
    let (q, k) = (rope(&q)?, rope(&k)?);
    let v = v.transpose(0, 1)?.contiguous()?; // [nkv, t, d]

    let LayerCache { k, v } = KvBuffer::write(cache, offset, &k, &v)?;
    let keys = k.dim(1)?;

    // Grouped-query attention without copying the keys: the `rep` query
    // heads of a key head are stacked along the rows, [nkv, rep * t, d].
    let q = q.reshape((nkv, rep * t, d))?;
    let scale = 1.0 / (d as f64).sqrt();
    let att = (q.matmul(&k.t()?)? * scale)?; // [nkv, rep * t, keys]
    let att = match mask {
        Some(m) => att
            .reshape((nkv, rep, t, keys))?
            .broadcast_add(m)?
            .reshape((nkv, rep * t, keys))?,
        None => att,
    };
    let att = candle_nn::ops::softmax_last_dim(&att)?;
    let out = att.matmul(&v)?; // [nkv, rep * t, d]
    let out = out
        .reshape((nh, t, d))?
        .transpose(0, 1)?
        .contiguous()?
        .reshape((t, nh * d))?;
    let x = (x + layer.o.forward(&out)?)?;

    let h = candle_nn::ops::rms_norm(&x, &layer.post_norm, eps)?;
    let mlp = (candle_nn::ops::silu(&layer.gate.forward(&h)?)? * layer.up.forward(&h)?)?;
    x + layer.down.forward(&mlp)?
}
