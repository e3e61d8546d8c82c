//! Llama-family models from a GGUF file: the configuration from its metadata
//! (no `config.json`), the weights through candle's GGUF reader, every
//! tensor's shape checked against the configuration before it is read.
//!
//! ```no_run
//! use selfspec_candle::gguf::{GgufFile, Representation};
//!
//! let mut file = GgufFile::open("SmolLM2-135M-Instruct.Q4_1.gguf".as_ref())?;
//! let config = file.config()?;
//! let model = file.model(Representation::Q8_0)?;
//! assert_eq!(model.config(), &config);
//! # Ok::<(), selfspec_candle::Error>(())
//! ```

use std::fmt;
use std::fs::File;
use std::io::BufReader;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::Arc;

use candle_core::quantized::gguf_file::{Content, Value};
use candle_core::quantized::{GgmlDType, QMatMul, QTensor};
use candle_core::{Device, Tensor};

use crate::model::{Layer, Linear, Weights};
use crate::{Error, Model, ModelConfig};

/// How the projection weights are held in memory once read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Representation {
    /// Requantized to Q8_0 at load (candle has SIMD dot products for it).
    Q8_0,
    /// Dequantized to f32 at load (about 4 bytes a weight).
    F32,
    /// As stored in the file.
    Native,
}

impl FromStr for Representation {
    type Err = String;

    fn from_str(s: &str) -> Result<Representation, String> {
        match s {
            "q8_0" => Ok(Representation::Q8_0),
            "f32" => Ok(Representation::F32),
            "native" => Ok(Representation::Native),
            _ => Err(format!("{s:?} is not one of q8_0, f32, native")),
        }
    }
}

impl fmt::Display for Representation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Representation::Q8_0 => "q8_0",
            Representation::F32 => "f32",
            Representation::Native => "native",
        })
    }
}

/// An open GGUF file: its metadata and tensor directory, read and checked;
/// tensor data is read on demand.
#[derive(Debug)]
pub struct GgufFile {
    path: PathBuf,
    reader: BufReader<File>,
    content: Content,
}

/// Architectures whose GGUF tensors this crate's decoder runs, and whether
/// llama.cpp stores their q / k rows for interleaved RoPE.
const ARCHITECTURES: &[(&str, bool)] = &[("llama", true), ("qwen2", false), ("qwen3", false)];

impl GgufFile {
    /// Opens `path` and reads its header, metadata and tensor directory.
    ///
    /// # Errors
    ///
    /// [`Error::Io`] for a file that cannot be opened, [`Error::Gguf`] for one
    /// that is not a GGUF file or is truncated or corrupt.
    pub fn open(path: &Path) -> Result<GgufFile, Error> {
        let file = File::open(path).map_err(|source| Error::Io {
            path: path.to_path_buf(),
            source,
        })?;
        let mut reader = BufReader::new(file);
        let content = Content::read(&mut reader).map_err(|e| Error::Gguf {
            path: path.to_path_buf(),
            what: format!("not a readable GGUF file: {e}"),
        })?;
        Ok(GgufFile {
            path: path.to_path_buf(),
            reader,
            content,
        })
    }

    /// The file's path.
    #[must_use]
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// An error about this file.
    pub(crate) fn error(&self, what: impl Into<String>) -> Error {
        Error::Gguf {
            path: self.path.clone(),
            what: what.into(),
        }
    }

    /// The metadata value of `key`, if present.
    #[must_use]
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.content.metadata.get(key)
    }

    /// The integer metadata value of `key` (any integer type).
    ///
    /// # Errors
    ///
    /// [`Error::Gguf`] when it is missing or not a non-negative integer.
    pub fn usize(&self, key: &str) -> Result<usize, Error> {
        let v = self
            .get(key)
            .ok_or_else(|| self.error(format!("no {key} in the metadata")))?;
        let n = match *v {
            Value::U8(x) => Some(u64::from(x)),
            Value::U16(x) => Some(u64::from(x)),
            Value::U32(x) => Some(u64::from(x)),
            Value::U64(x) => Some(x),
            Value::I8(x) => u64::try_from(x).ok(),
            Value::I16(x) => u64::try_from(x).ok(),
            Value::I32(x) => u64::try_from(x).ok(),
            Value::I64(x) => u64::try_from(x).ok(),
            _ => None,
        };
        n.and_then(|n| usize::try_from(n).ok())
            .ok_or_else(|| self.error(format!("{key} is {v:?}, not a non-negative integer")))
    }

    /// The floating-point metadata value of `key`, or `default` when absent.
    ///
    /// # Errors
    ///
    /// [`Error::Gguf`] when it is present but not a number.
    pub fn f64_or(&self, key: &str, default: f64) -> Result<f64, Error> {
        match self.get(key) {
            None => Ok(default),
            Some(Value::F32(x)) => Ok(f64::from(*x)),
            Some(Value::F64(x)) => Ok(*x),
            Some(v) => Err(self.error(format!("{key} is {v:?}, not a number"))),
        }
    }

    /// The string metadata value of `key`.
    ///
    /// # Errors
    ///
    /// [`Error::Gguf`] when it is missing or not a string.
    pub fn string(&self, key: &str) -> Result<&str, Error> {
        match self.get(key) {
            Some(Value::String(s)) => Ok(s),
            Some(v) => Err(self.error(format!("{key} is {v:?}, not a string"))),
            None => Err(self.error(format!("no {key} in the metadata"))),
        }
    }

    /// The metadata array of `key`.
    ///
    /// # Errors
    ///
    /// [`Error::Gguf`] when it is missing or not an array.
    pub fn array(&self, key: &str) -> Result<&[Value], Error> {
        match self.get(key) {
            Some(Value::Array(a)) => Ok(a),
            Some(_) => Err(self.error(format!("{key} is not an array"))),
            None => Err(self.error(format!("no {key} in the metadata"))),
        }
    }

    /// `general.architecture`, if it is one this crate runs, and whether its
    /// RoPE is interleaved.
    fn architecture(&self) -> Result<(&str, bool), Error> {
        let arch = self.string("general.architecture")?;
        ARCHITECTURES
            .iter()
            .find(|(name, _)| *name == arch)
            .map(|&(name, interleaved)| (name, interleaved))
            .ok_or_else(|| {
                let allowed: Vec<&str> = ARCHITECTURES.iter().map(|(n, _)| *n).collect();
                self.error(format!(
                    "architecture {arch:?} is not supported (allowed: {})",
                    allowed.join(", ")
                ))
            })
    }

    /// The decoder's configuration from the metadata
    /// (`{arch}.embedding_length`, `.block_count`, `.attention.head_count`,
    /// ...), checked against the token embedding's shape.
    ///
    /// # Errors
    ///
    /// [`Error::Gguf`] for missing or inconsistent metadata, or features the
    /// decoder does not have (RoPE scaling, partial rotary dimensions).
    pub fn config(&self) -> Result<ModelConfig, Error> {
        let (arch, rope_interleaved) = self.architecture()?;
        let key = |k: &str| format!("{arch}.{k}");
        let heads = self.usize(&key("attention.head_count"))?;
        let hidden = self.usize(&key("embedding_length"))?;
        let head_dim = match self.get(&key("attention.key_length")) {
            Some(_) => Some(self.usize(&key("attention.key_length"))?),
            None => None,
        };
        let embed = self.info("token_embd.weight")?;
        let vocab = match self.get(&key("vocab_size")) {
            Some(_) => self.usize(&key("vocab_size"))?,
            None => embed.dims().first().copied().unwrap_or(0),
        };
        let kv = match self.get(&key("attention.head_count_kv")) {
            Some(_) => self.usize(&key("attention.head_count_kv"))?,
            None => heads,
        };
        let config = ModelConfig {
            hidden_size: hidden,
            intermediate_size: self.usize(&key("feed_forward_length"))?,
            num_hidden_layers: self.usize(&key("block_count"))?,
            num_attention_heads: heads,
            num_key_value_heads: Some(kv),
            head_dim,
            vocab_size: vocab,
            rope_theta: self.f64_or(&key("rope.freq_base"), 10_000.0)?,
            rms_norm_eps: self.f64_or(&key("attention.layer_norm_rms_epsilon"), 1e-5)?,
            tie_word_embeddings: !self.content.tensor_infos.contains_key("output.weight"),
            max_position_embeddings: Some(self.usize(&key("context_length"))?),
            rope_interleaved,
        };
        config
            .validate()
            .map_err(|e| self.error(format!("metadata: {e}")))?;
        if let Some(Value::String(t)) = self.get(&key("rope.scaling.type")) {
            if t != "none" {
                return Err(self.error(format!("RoPE scaling {t:?} is not supported")));
            }
        }
        if self.content.tensor_infos.contains_key("rope_freqs.weight") {
            return Err(self.error("RoPE frequency factors (rope_freqs.weight) are not supported"));
        }
        if let Some(Value::U32(_) | Value::U64(_) | Value::I32(_)) =
            self.get(&key("rope.dimension_count"))
        {
            let dims = self.usize(&key("rope.dimension_count"))?;
            if dims != config.head_dim() {
                return Err(self.error(format!(
                    "rope.dimension_count {dims} differs from the head width {}: partial rotary embeddings are not supported",
                    config.head_dim()
                )));
            }
        }
        Ok(config)
    }

    fn info(&self, name: &str) -> Result<&candle_core::Shape, Error> {
        self.content
            .tensor_infos
            .get(name)
            .map(|i| &i.shape)
            .ok_or_else(|| self.error(format!("no tensor {name}")))
    }

    /// Reads tensor `name` after checking that its shape is `shape`.
    fn tensor(&mut self, name: &str, shape: &[usize]) -> Result<QTensor, Error> {
        let found = self.info(name)?.dims().to_vec();
        if found != shape {
            return Err(self.error(format!(
                "tensor {name} has shape {found:?}, the metadata says {shape:?}"
            )));
        }
        self.content
            .tensor(&mut self.reader, name, &Device::Cpu)
            .map_err(|e| Error::Gguf {
                path: self.path.clone(),
                what: format!("tensor {name}: {e}"),
            })
    }

    fn optional(&mut self, name: &str, shape: &[usize]) -> Result<Option<QTensor>, Error> {
        if self.content.tensor_infos.contains_key(name) {
            self.tensor(name, shape).map(Some)
        } else {
            Ok(None)
        }
    }

    fn dense(&mut self, name: &str, shape: &[usize]) -> Result<Tensor, Error> {
        let t = self.tensor(name, shape)?;
        t.dequantize(&Device::Cpu)
            .map_err(|e| self.error(format!("tensor {name}: {e}")))
    }

    fn linear(
        &mut self,
        name: &str,
        shape: [usize; 2],
        repr: Representation,
    ) -> Result<Linear, Error> {
        let q = self.tensor(&format!("{name}.weight"), &shape)?;
        let weight = project(q, repr).map_err(|e| self.error(format!("tensor {name}: {e}")))?;
        let bias = match self.optional(&format!("{name}.bias"), &shape[..1])? {
            Some(b) => Some(b.dequantize(&Device::Cpu)?),
            None => None,
        };
        Ok(Linear::new(weight, bias))
    }

    fn optional_dense(&mut self, name: &str, n: usize) -> Result<Option<Tensor>, Error> {
        match self.optional(name, &[n])? {
            Some(t) => Ok(Some(t.dequantize(&Device::Cpu)?)),
            None => Ok(None),
        }
    }

    fn layer(&mut self, i: usize, c: &ModelConfig, repr: Representation) -> Result<Layer, Error> {
        let (h, d, f) = (c.hidden_size, c.head_dim(), c.intermediate_size);
        let (q, kv) = (c.num_attention_heads * d, c.kv_heads() * d);
        let p = |n: &str| format!("blk.{i}.{n}");
        Ok(Layer {
            input_norm: self.dense(&p("attn_norm.weight"), &[h])?,
            q: self.linear(&p("attn_q"), [q, h], repr)?,
            k: self.linear(&p("attn_k"), [kv, h], repr)?,
            v: self.linear(&p("attn_v"), [kv, h], repr)?,
            o: self.linear(&p("attn_output"), [h, q], repr)?,
            q_norm: self.optional_dense(&p("attn_q_norm.weight"), d)?,
            k_norm: self.optional_dense(&p("attn_k_norm.weight"), d)?,
            post_norm: self.dense(&p("ffn_norm.weight"), &[h])?,
            gate: self.linear(&p("ffn_gate"), [f, h], repr)?,
            up: self.linear(&p("ffn_up"), [f, h], repr)?,
            down: self.linear(&p("ffn_down"), [h, f], repr)?,
        })
    }

    /// The model: configuration from [`config`](GgufFile::config), projections
    /// (the lm_head included) in `repr`, embeddings and norms in f32.
    ///
    /// # Errors
    ///
    /// [`Error::Gguf`] for bad metadata, a missing tensor, a shape that
    /// differs from the metadata's, or tensor data the file does not hold.
    pub fn model(&mut self, repr: Representation) -> Result<Model, Error> {
        let c = self.config()?;
        let (v, h) = (c.vocab_size, c.hidden_size);
        // All tensors present with their shapes before any data is read.
        for i in 0..c.num_hidden_layers {
            self.info(&format!("blk.{i}.attn_q.weight"))?;
        }
        let embed_q = self.tensor("token_embd.weight", &[v, h])?;
        let embed = embed_q.dequantize(&Device::Cpu)?;
        let layers = (0..c.num_hidden_layers)
            .map(|i| self.layer(i, &c, repr))
            .collect::<Result<Vec<_>, Error>>()?;
        let norm = self.dense("output_norm.weight", &[h])?;
        let lm_head = if c.tie_word_embeddings {
            let w = project(embed_q, repr).map_err(|e| self.error(format!("token_embd: {e}")))?;
            Linear::new(w, None)
        } else {
            self.linear("output", [v, h], repr)?
        };
        let weights = Weights {
            embed,
            layers,
            norm,
            lm_head,
        };
        Ok(Model::from_weights(&c, weights))
    }
}

/// A projection's weight in `repr`. Float tensors stay dense; a tensor whose
/// rows do not split into Q8_0 blocks stays f32.
fn project(q: QTensor, repr: Representation) -> candle_core::Result<QMatMul> {
    let float = matches!(q.dtype(), GgmlDType::F32 | GgmlDType::F16 | GgmlDType::BF16);
    let rows_fit = q
        .shape()
        .dims()
        .last()
        .is_some_and(|n| n % GgmlDType::Q8_0.block_size() == 0);
    Ok(match repr {
        Representation::F32 => QMatMul::Tensor(q.dequantize(&Device::Cpu)?),
        _ if float => QMatMul::Tensor(q.dequantize(&Device::Cpu)?),
        Representation::Native => QMatMul::QTensor(Arc::new(q)),
        Representation::Q8_0 if q.dtype() == GgmlDType::Q8_0 => QMatMul::QTensor(Arc::new(q)),
        Representation::Q8_0 if rows_fit => {
            let dense = q.dequantize(&Device::Cpu)?;
            QMatMul::QTensor(Arc::new(QTensor::quantize(&dense, GgmlDType::Q8_0)?))
        }
        Representation::Q8_0 => QMatMul::Tensor(q.dequantize(&Device::Cpu)?),
    })
}

impl Model {
    /// Reads a Llama-family model from a GGUF file (see [`GgufFile::model`]).
    ///
    /// # Errors
    ///
    /// As [`GgufFile::open`] and [`GgufFile::model`].
    pub fn from_gguf(path: &Path, repr: Representation) -> Result<Model, Error> {
        GgufFile::open(path)?.model(repr)
    }
}
