//! The shape of a decoder.

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
        }
    }
}
