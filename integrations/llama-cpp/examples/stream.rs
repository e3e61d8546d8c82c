//! Streams a reply from your own GGUF model, decoded speculatively through
//! your own llama.cpp context: tokens are printed as they are accepted.
//!
//! ```sh
//! cargo run --release --example stream -- --gguf PATH [--prompt TEXT] [--max-tokens N]
//!     [--temperature T] [--seed S] [--threads N] [--gpu-layers N]
//! ```
//!
//! `--temperature 0` decodes greedily; otherwise llama.cpp's sampler
//! settings (top-k 40, top-p 0.95, min-p 0.05) at that temperature.

use std::io::Write;
use std::num::NonZeroU32;
use std::path::PathBuf;
use std::process::ExitCode;

use llama_cpp_2::context::params::LlamaContextParams;
use llama_cpp_2::llama_backend::LlamaBackend;
use llama_cpp_2::model::params::LlamaModelParams;
use llama_cpp_2::model::{LlamaChatMessage, LlamaModel};
use selfspec::step::{Decode, PassTimes, Sampler, SeqId, Stepper};
use selfspec::{Config, Shared, Speculative};
use selfspec_llama_cpp::{end_tokens, tokenize, LlamaTarget, Options, TextStream};

struct Args {
    gguf: PathBuf,
    prompt: String,
    max_tokens: usize,
    temperature: f32,
    seed: u64,
    threads: i32,
    gpu_layers: u32,
}

const USAGE: &str = "usage: stream --gguf PATH [--prompt TEXT] [--max-tokens N] \
[--temperature T] [--seed S] [--threads N] [--gpu-layers N]";

fn parse() -> Result<Args, String> {
    let mut args = Args {
        gguf: PathBuf::new(),
        prompt: "Write a Python function that checks whether a number is prime, \
then the same function again with comments."
            .into(),
        max_tokens: 256,
        temperature: 0.0,
        seed: 0,
        threads: 2,
        gpu_layers: 0,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        if flag == "-h" || flag == "--help" {
            return Err(USAGE.into());
        }
        let value = it.next().ok_or(format!("{flag} needs a value\n{USAGE}"))?;
        let bad = |e: &dyn std::fmt::Display| format!("{flag} {value}: {e}");
        match flag.as_str() {
            "--gguf" => args.gguf = value.into(),
            "--prompt" => args.prompt = value,
            "--max-tokens" => args.max_tokens = value.parse().map_err(|e| bad(&e))?,
            "--temperature" => args.temperature = value.parse().map_err(|e| bad(&e))?,
            "--seed" => args.seed = value.parse().map_err(|e| bad(&e))?,
            "--threads" => args.threads = value.parse().map_err(|e| bad(&e))?,
            "--gpu-layers" => args.gpu_layers = value.parse().map_err(|e| bad(&e))?,
            _ => return Err(format!("unknown option {flag}\n{USAGE}")),
        }
    }
    if args.gguf.as_os_str().is_empty() {
        return Err(format!("--gguf PATH is needed\n{USAGE}"));
    }
    Ok(args)
}

fn main() -> ExitCode {
    let args = match parse() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("stream: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: &Args) -> Result<(), Box<dyn std::error::Error>> {
    // Your backend, model and context, with your parameters.
    let mut backend = LlamaBackend::init()?;
    backend.void_logs();
    let model_params = LlamaModelParams::default().with_n_gpu_layers(args.gpu_layers);
    let model = LlamaModel::load_from_file(&backend, &args.gguf, &model_params)?;
    let params = LlamaContextParams::default()
        .with_n_ctx(NonZeroU32::new(4096))
        .with_n_threads(args.threads)
        .with_n_threads_batch(args.threads);
    let mut ctx = model.new_context(&backend, params.clone())?;

    // The prompt, with the model's own chat template.
    let template = model.chat_template(None)?;
    let chat = [LlamaChatMessage::new("user".into(), args.prompt.clone())?];
    let prompt = tokenize(&model, &model.apply_chat_template(&template, &chat, true)?);

    // selfspec on sequence 0 of that context.
    let mut target = LlamaTarget::new(&model, &mut ctx, Options::new(&params))?;
    let mut stepper = Stepper::new(&target)?
        .with_stop_tokens(&end_tokens(&model))
        .with_budget(PassTimes::new());
    let config = Config::recommended();
    let shared = Shared::new(&config)?;
    let spec = Speculative::with_shared(&config, &shared)?;
    let decode = if args.temperature > 0.0 {
        let sampler = Sampler {
            temperature: args.temperature,
            seed: args.seed,
            ..Sampler::default()
        };
        Decode::sampled(args.max_tokens, sampler)
    } else {
        Decode::greedy(args.max_tokens)
    };
    stepper.start(SeqId::new(0), &prompt, decode, Some(spec))?;

    let mut text = TextStream::new();
    let mut out = std::io::stdout().lock();
    while stepper.is_running() {
        stepper.step(&mut target)?;
        for event in stepper.events() {
            write!(out, "{}", text.push(&model, event.token))?;
        }
        out.flush()?;
    }
    writeln!(out, "{}", text.finish())?;
    if let Some(done) = stepper.finished().next() {
        let r = &done.reply;
        eprintln!(
            "{} tokens in {} passes ({:.2} a pass), {} drafted, {} accepted, {:.1} tokens/s",
            r.tokens.len(),
            r.decode_passes + 1,
            r.tau(),
            r.drafted,
            r.accepted,
            r.tokens.len() as f64 / (r.prefill_time + r.decode_time).as_secs_f64().max(1e-9),
        );
    }
    Ok(())
}
