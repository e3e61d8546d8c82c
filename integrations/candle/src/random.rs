//! Random test models: seeded weights in Llama's layout, written to a
//! safetensors file and a `config.json`, so that the real loading code and the
//! decoding loop run without downloaded weights.
//!
//! Random weights say nothing about real acceptance rates: they only exercise
//! the loop (drafts, verification, rollback) and measure its costs.
//!
//! # The successor term, and argmax margins
//!
//! A batched pass over `k + 1` tokens and `k + 1` single-token passes compute
//! the same logits up to float rounding (different matrix shapes, different
//! summation orders): about 1e-6 here. Where the top-1 / top-2 gap of a row is
//! below that, the two can pick different tokens, and speculative greedy
//! output would differ from plain greedy output for a reason that has nothing
//! to do with the loop. The lm_head adds a *successor* term to its random rows: row `s` also points along the
//! embedding of `pred(s)` (a fixed random permutation), so the token after
//! `t` is pushed towards `succ(t)` with a logit gap of order
//! [`RandomModel::successor`], while the random part keeps the choice
//! context-dependent: strong enough (the bench model's 15), the model
//! repeats one of the permutation's cycles, which makes a repetitive prompt
//! by construction ([`RandomModel::cycle`]). It does not by itself keep the
//! gaps clear of float error. The tests measure the smallest top-1 / top-2 margin of
//! every decision they make and the batched-vs-single disagreements
//! (`tests/margins.rs`): about 1 in 2,000-4,000 teacher-forced positions has
//! a gap below 1e-4 with or without the successor term, and no argmax
//! flipped in 16,000 positions. So the identical-output test builds its
//! model with an lm_head nudged at each near tie of its workload
//! (`tests/common`), which leaves every decision with a gap of 1e-3 or more.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use candle_core::{Device, Tensor};

use crate::{Error, ModelConfig};

/// A seeded random decoder.
#[derive(Clone, Debug, PartialEq)]
pub struct RandomModel {
    /// Its shape.
    pub config: ModelConfig,
    /// The seed of every weight.
    pub seed: u64,
    /// Weight of the successor term in the lm_head (0: plain random rows).
    pub successor: f32,
    /// Length of the successor permutation's cycles (the last one may be
    /// shorter): a model that follows its successors repeats such a cycle.
    pub cycle_len: usize,
}

/// splitmix64: a small, seedable generator (candle's CPU device cannot be seeded).
struct Rng(u64);

impl Rng {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    #[allow(clippy::cast_precision_loss)]
    fn uniform(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Standard normal (Box-Muller).
    #[allow(clippy::cast_possible_truncation)]
    fn normal(&mut self) -> f32 {
        let u1 = 1.0 - self.uniform();
        let u2 = self.uniform();
        ((-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()) as f32
    }

    fn below(&mut self, n: usize) -> usize {
        // n is small (a vocabulary): the modulo bias is negligible here.
        usize::try_from(self.next_u64() % n as u64).unwrap_or(0)
    }
}

impl RandomModel {
    /// The tests' model: 2 layers, hidden 64, 4 query / 2 key-value heads,
    /// vocabulary 128, untied lm_head.
    #[must_use]
    pub fn tiny(seed: u64) -> RandomModel {
        RandomModel {
            config: ModelConfig {
                hidden_size: 64,
                intermediate_size: 128,
                num_hidden_layers: 2,
                num_attention_heads: 4,
                num_key_value_heads: Some(2),
                head_dim: None,
                vocab_size: 128,
                rope_theta: 10_000.0,
                rms_norm_eps: 1e-6,
                tie_word_embeddings: false,
                max_position_embeddings: None,
                rope_interleaved: false,
            },
            seed,
            successor: 3.0,
            cycle_len: 32,
        }
    }

    /// The bench's and `--random`'s model: 4 layers, hidden 256, 8 query / 4
    /// key-value heads, MLP 768, vocabulary 2048.
    #[must_use]
    pub fn bench(seed: u64) -> RandomModel {
        RandomModel {
            config: ModelConfig {
                hidden_size: 256,
                intermediate_size: 768,
                num_hidden_layers: 4,
                num_attention_heads: 8,
                num_key_value_heads: Some(4),
                head_dim: None,
                vocab_size: 2048,
                rope_theta: 10_000.0,
                rms_norm_eps: 1e-6,
                tie_word_embeddings: false,
                max_position_embeddings: None,
                rope_interleaved: false,
            },
            seed,
            successor: 15.0,
            cycle_len: 64,
        }
    }

    /// The successor permutation of the lm_head's extra term: `succ[t]` is
    /// the token the model leans towards after `t`. The vocabulary is
    /// shuffled and cut into cycles of [`cycle_len`](RandomModel::cycle_len).
    #[must_use]
    pub fn successors(&self) -> Vec<u32> {
        let n = self.config.vocab_size;
        let mut rng = Rng(self.seed ^ 0x5u64.wrapping_mul(0x1000_0000_0000_0001));
        let mut order: Vec<u32> = (0..u32::try_from(n).unwrap_or(u32::MAX)).collect();
        for i in (1..order.len()).rev() {
            let j = rng.below(i + 1);
            order.swap(i, j);
        }
        let mut succ = vec![0; n];
        for cycle in order.chunks(self.cycle_len.max(1)) {
            for (i, &t) in cycle.iter().enumerate() {
                succ[t as usize] = cycle[(i + 1) % cycle.len()];
            }
        }
        succ
    }

    /// `len` tokens of the successor cycle through `start`: a prompt that the
    /// model, where it follows its successors, continues.
    #[must_use]
    pub fn cycle(&self, start: u32, len: usize) -> Vec<u32> {
        let succ = self.successors();
        std::iter::successors(Some(start), |&t| succ.get(t as usize).copied())
            .take(len)
            .collect()
    }

    /// The weights, by Llama's tensor names.
    ///
    /// # Errors
    ///
    /// [`Error::Config`] for an invalid config, [`Error::Candle`] if a tensor
    /// cannot be made.
    #[allow(clippy::cast_precision_loss)]
    pub fn tensors(&self) -> Result<HashMap<String, Tensor>, Error> {
        let c = &self.config;
        c.validate()?;
        let dev = Device::Cpu;
        let mut rng = Rng(self.seed);
        let mut out = HashMap::new();
        let (h, d, v) = (c.hidden_size, c.head_dim(), c.vocab_size);
        let mut matrix = |rows: usize, cols: usize, std: f32| -> Vec<f32> {
            (0..rows * cols).map(|_| rng.normal() * std).collect()
        };
        let fan = |n: usize| 1.0 / (n as f32).sqrt();

        let embed = matrix(v, h, 1.0);
        let mut put = |name: String, data: Vec<f32>, shape: &[usize]| -> Result<(), Error> {
            out.insert(name, Tensor::from_vec(data, shape, &dev)?);
            Ok(())
        };
        for i in 0..c.num_hidden_layers {
            let p = format!("model.layers.{i}");
            let (qo, kvo) = (c.num_attention_heads * d, c.kv_heads() * d);
            put(format!("{p}.input_layernorm.weight"), vec![1.0; h], &[h])?;
            put(
                format!("{p}.post_attention_layernorm.weight"),
                vec![1.0; h],
                &[h],
            )?;
            put(
                format!("{p}.self_attn.q_proj.weight"),
                matrix(qo, h, fan(h)),
                &[qo, h],
            )?;
            put(
                format!("{p}.self_attn.k_proj.weight"),
                matrix(kvo, h, fan(h)),
                &[kvo, h],
            )?;
            put(
                format!("{p}.self_attn.v_proj.weight"),
                matrix(kvo, h, fan(h)),
                &[kvo, h],
            )?;
            put(
                format!("{p}.self_attn.o_proj.weight"),
                matrix(h, qo, fan(qo)),
                &[h, qo],
            )?;
            let m = c.intermediate_size;
            put(
                format!("{p}.mlp.gate_proj.weight"),
                matrix(m, h, fan(h)),
                &[m, h],
            )?;
            put(
                format!("{p}.mlp.up_proj.weight"),
                matrix(m, h, fan(h)),
                &[m, h],
            )?;
            put(
                format!("{p}.mlp.down_proj.weight"),
                matrix(h, m, fan(m)),
                &[h, m],
            )?;
        }
        put("model.norm.weight".into(), vec![1.0; h], &[h])?;
        let mut lm_head = matrix(v, h, fan(h));
        let succ = self.successors();
        if self.successor != 0.0 {
            // Row succ[t] += successor * embed[t] / h: after the final norm the
            // hidden state of a position holding `t` still leans along embed[t].
            let w = self.successor / h as f32;
            for (t, &s) in succ.iter().enumerate() {
                let s = s as usize;
                for j in 0..h {
                    lm_head[s * h + j] += w * embed[t * h + j];
                }
            }
        }
        put("model.embed_tokens.weight".into(), embed, &[v, h])?;
        if !c.tie_word_embeddings {
            put("lm_head.weight".into(), lm_head, &[v, h])?;
        }
        Ok(out)
    }

    /// Writes `model.safetensors` (candle's writer) and `config.json` into
    /// `dir` and returns their paths.
    ///
    /// # Errors
    ///
    /// [`Error::Io`] if `dir` cannot be written, or what [`tensors`](RandomModel::tensors) returns.
    pub fn write(&self, dir: &Path) -> Result<(PathBuf, PathBuf), Error> {
        let io = |path: &Path| {
            let path = path.to_path_buf();
            move |source| Error::Io { path, source }
        };
        std::fs::create_dir_all(dir).map_err(io(dir))?;
        let weights = dir.join("model.safetensors");
        let config = dir.join("config.json");
        candle_core::safetensors::save(&self.tensors()?, &weights).map_err(|source| {
            Error::Weights {
                path: weights.clone(),
                source,
            }
        })?;
        let json =
            serde_json::to_string_pretty(&self.config).map_err(|source| Error::ConfigJson {
                path: config.clone(),
                source,
            })?;
        std::fs::write(&config, json).map_err(io(&config))?;
        Ok((weights, config))
    }
}

/// `n` pseudo-random tokens below `vocab` (xorshift, seeded): a prompt with
/// no repetition of its own.
#[must_use]
pub fn random_tokens(seed: u64, n: usize, vocab: u32) -> Vec<u32> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            u32::try_from(x % u64::from(vocab.max(1))).unwrap_or(0)
        })
        .collect()
}
