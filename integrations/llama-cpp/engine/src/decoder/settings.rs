//! The shape of a decoder, and the llama.cpp context it makes of it.

use std::num::NonZeroU32;

use llama_cpp_2::context::params::LlamaContextParams;
use selfspec_llama_cpp::{LlamaTarget, Options};

use crate::model::backend;
use crate::{Error, Model};

/// The shape of a decoder.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Settings {
    /// Sequences decoded side by side (slots), each with its own sequence id.
    pub sequences: usize,
    /// Tokens one sequence's context holds (prompt and reply).
    pub context: usize,
    /// CPU threads llama.cpp uses.
    pub threads: usize,
    /// The most tokens one `llama_decode` call takes (llama.cpp's
    /// `n_batch`): the limit of [`Decoder::evaluate_batch`](crate::Decoder::evaluate_batch)'s
    /// passes. The stepper's passes and [`cost`](crate::cost)'s
    /// measurements are [`step_tokens`](Settings::step_tokens) rows at most.
    pub batch: usize,
    /// The most tokens one step puts into its batch, all sequences together:
    /// the stepper's batch ([`selfspec::step::Shape::batch`]). Each decoding
    /// sequence's draft is cut to its share; a joining sequence's prompt is
    /// evaluated in chunks of up to half of it, beside the others' rows
    /// (whose shares then split the other half). At least two tokens a
    /// sequence. The default, 63,
    /// keeps steps under 64 rows, where llama.cpp's CPU kernels change path
    /// (with flash attention on, its tiled kernel starts at 64 rows and sums
    /// in another order), and bounds what one rejected draft can cost.
    pub step_tokens: usize,
    /// Whether llama.cpp's attention runs as flash attention. Off by
    /// default: on this package's model and a 2-core AVX-512 CPU, llama.cpp's
    /// CPU flash attention made one-token passes after a long cache, and
    /// passes of up to 63 tokens (its tiled kernel starts at 64), several
    /// times slower than plain attention (BENCHMARKS.md, "llama.cpp's pass
    /// cost"); llama.cpp's own default (`auto`) turns it on for the CPU.
    pub flash_attention: bool,
    /// Whether the sequences share one KV cache buffer (llama.cpp's
    /// `kv_unified`). Off by default. With a cache per sequence, llama.cpp
    /// splits a batch into micro-batches of equally many rows of each
    /// sequence, so a step where one sequence sends a draft and the others
    /// one row each runs as several graph computations; with one buffer,
    /// every sequence attends over all sequences' cells (masked). On the
    /// 2-core CPU measured, plain decoding lost more with one buffer than
    /// speculative decoding gained (BENCHMARKS.md, "One KV cache for all
    /// sequences").
    pub kv_unified: bool,
}

impl Default for Settings {
    fn default() -> Settings {
        Settings {
            sequences: 1,
            context: 8192,
            threads: std::thread::available_parallelism().map_or(1, std::num::NonZero::get),
            batch: 2048,
            step_tokens: 63,
            flash_attention: false,
            kv_unified: false,
        }
    }
}

pub(crate) fn setting(
    what: &'static str,
    value: usize,
    ok: bool,
    allowed: &'static str,
) -> Result<(), Error> {
    if ok {
        Ok(())
    } else {
        Err(Error::Setting {
            what,
            value,
            allowed,
        })
    }
}

impl Settings {
    fn check(&self) -> Result<(), Error> {
        let s = self;
        let ok = (1..=64).contains(&s.sequences);
        setting("sequences", s.sequences, ok, "1 to 64")?;
        setting("context", s.context, s.context >= 16, "at least 16 tokens")?;
        let ok = (1..=1024).contains(&s.threads);
        setting("threads", s.threads, ok, "1 to 1024")?;
        let ok = s.batch >= 2 * s.sequences && s.batch <= 1 << 20;
        setting("batch", s.batch, ok, "at least 2 tokens a sequence")?;
        let ok = s.step_tokens >= 2 * s.sequences && s.step_tokens <= s.batch;
        let allowed = "from two a sequence to the batch size";
        setting("step_tokens", s.step_tokens, ok, allowed)
    }

    /// A context of `sequences` sequences of `context` tokens each on
    /// `model`, as the adapter's target over sequence ids `0..sequences`.
    pub(crate) fn target<'m>(&self, model: &'m Model) -> Result<LlamaTarget<'m>, Error> {
        let s = *self;
        s.check()?;
        let n_ctx = s.context.saturating_mul(s.sequences);
        let err = || Error::Context {
            n_ctx,
            sequences: s.sequences,
        };
        let as_u32 = |v: usize| u32::try_from(v).map_err(|_| err());
        let threads = i32::try_from(s.threads).map_err(|_| err())?;
        let params = LlamaContextParams::default()
            .with_n_ctx(NonZeroU32::new(as_u32(n_ctx)?))
            .with_n_batch(as_u32(s.batch)?)
            .with_n_seq_max(as_u32(s.sequences)?)
            .with_n_threads(threads)
            .with_n_threads_batch(threads)
            .with_kv_unified(s.kv_unified)
            .with_flash_attention_policy(if s.flash_attention {
                llama_cpp_sys_2::LLAMA_FLASH_ATTN_TYPE_ENABLED
            } else {
                llama_cpp_sys_2::LLAMA_FLASH_ATTN_TYPE_DISABLED
            });
        let ctx = model
            .inner
            .new_context(backend()?, params.clone())
            .map_err(|_| err())?;
        let options = Options::new(&params)
            .with_context(s.context)
            .with_batch(s.batch)
            .with_step_rows(s.step_tokens);
        Ok(LlamaTarget::new(&model.inner, ctx, options)?)
    }
}
