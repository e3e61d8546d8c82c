//! An engine's own llama-cpp-2 objects handed to the adapter: compiles only
//! if both use one llama-cpp-2. Given a GGUF path, decodes 24 tokens
//! speculatively and prints them as they come.

use std::num::NonZeroU32;

use llama_cpp_2::context::params::LlamaContextParams;
use llama_cpp_2::llama_backend::LlamaBackend;
use llama_cpp_2::model::params::LlamaModelParams;
use llama_cpp_2::model::LlamaModel;
use selfspec::step::{Decode, SeqId, Stepper};
use selfspec::{Config, Shared, Speculative};
use selfspec_llama_cpp::{end_tokens, tokenize, LlamaTarget, Options, TextStream};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let Some(path) = std::env::args().nth(1) else {
        println!("built: llama-cpp-2 and selfspec-llama-cpp share one llama-cpp-2");
        return Ok(());
    };
    let mut backend = LlamaBackend::init()?;
    backend.void_logs();
    let model = LlamaModel::load_from_file(&backend, path, &LlamaModelParams::default())?;
    let params = LlamaContextParams::default()
        .with_n_ctx(NonZeroU32::new(1024))
        .with_n_threads(2)
        .with_n_threads_batch(2);
    let mut ctx = model.new_context(&backend, params.clone())?;
    let mut target = LlamaTarget::new(&model, &mut ctx, Options::new(&params))?;
    let mut stepper = Stepper::new(&target)?.with_stop_tokens(&end_tokens(&model));
    let config = Config::recommended();
    let shared = Shared::new(&config)?;
    let prompt = tokenize(&model, "one two three four five one two three four five one two");
    let spec = Speculative::with_shared(&config, &shared)?;
    stepper.start(SeqId::new(0), &prompt, Decode::greedy(24), Some(spec))?;
    let mut text = TextStream::new();
    while stepper.is_running() {
        stepper.step(&mut target)?;
        for e in stepper.events() {
            print!("{}", text.push(&model, e.token));
        }
    }
    println!("{}", text.finish());
    Ok(())
}
