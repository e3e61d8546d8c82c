//! `selfspec-server`: an OpenAI-compatible chat completions server on
//! llama.cpp (through `llama-cpp-2` and the `selfspec-llama-cpp` adapter),
//! decoding S requests together in one context with selfspec's
//! self-speculative drafts. See README.md.
//!
//! Threads: the HTTP side is tokio's; one engine thread owns the llama.cpp
//! context, the adapter's target, the stepper and the engine-wide memory
//! (llama.cpp's context is not `Sync`). The model itself is `Sync` and
//! shared: handlers apply its chat template, tokenize and detokenize.

mod api;
mod app;
mod args;
mod engine;
mod error;
mod http;
mod metrics;
mod prompt_cache;
mod reply;
mod slots;
mod stop;
mod tokens;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use llama_cpp_2::llama_backend::LlamaBackend;
use llama_cpp_2::model::params::LlamaModelParams;
use llama_cpp_2::model::{LlamaChatTemplate, LlamaModel};
use selfspec::{Config, Shared};

use crate::args::Args;
use crate::error::StartError;
use crate::metrics::Metrics;

/// Rows one step puts into its forward pass at most: decoding rows and
/// drafts of every slot, and a joining prompt's chunk of up to half of it.
const STEP_ROWS: usize = 256;

/// How long shutdown waits for open responses before saving and exiting.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

fn main() -> ExitCode {
    let args = match args::parse(std::env::args_os().skip(1)) {
        Ok(Some(a)) => a,
        Ok(None) => {
            println!("{}", args::USAGE);
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("selfspec-server: {e} (see --help)");
            return ExitCode::from(2);
        }
    };
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("selfspec-server: {e}");
            ExitCode::FAILURE
        }
    }
}

/// llama.cpp's process-wide backend, its log silenced.
fn backend() -> Result<&'static LlamaBackend, StartError> {
    static BACKEND: OnceLock<Result<LlamaBackend, String>> = OnceLock::new();
    BACKEND
        .get_or_init(|| {
            let mut b = LlamaBackend::init().map_err(|e| e.to_string())?;
            b.void_logs();
            Ok(b)
        })
        .as_ref()
        .map_err(|e| StartError::Backend(e.clone()))
}

fn run(args: &Args) -> Result<(), StartError> {
    let path = selfspec_conversations::model_path(args.gguf.clone())
        .map_err(|e| StartError::NoModel(e.to_string()))?;
    let backend = backend()?;
    let model =
        LlamaModel::load_from_file(backend, &path, &LlamaModelParams::default()).map_err(|e| {
            StartError::Model {
                path: path.clone(),
                message: e.to_string(),
            }
        })?;
    let model = Arc::new(model);
    // The model's own template; ChatML for a model without one.
    let template = model
        .chat_template(None)
        .or_else(|_| LlamaChatTemplate::new("chatml"))
        .map_err(|e| StartError::Model {
            path: path.clone(),
            message: e.to_string(),
        })?;
    let config = Config::recommended();
    let shared = match &args.memory {
        Some(file) => {
            let existed = file.exists();
            let shared = Shared::builder().load_or_create(file).build(&config)?;
            if existed {
                eprintln!(
                    "selfspec-server: memory loaded from {} ({} bytes in memory)",
                    file.display(),
                    shared.heap_bytes()
                );
            }
            shared
        }
        None => Shared::new(&config)?,
    };
    let metrics = Arc::new(Metrics::default());
    let shutdown = Arc::new(AtomicBool::new(false));
    let running = Arc::new(AtomicBool::new(false));
    let (jobs_tx, jobs) = std::sync::mpsc::sync_channel(args.queue);
    let settings = engine::Settings {
        slots: args.parallel,
        context: args.context,
        threads: args.threads,
        step_rows: STEP_ROWS.max(2 * args.parallel),
        kv_unified: args.kv_unified,
        prompt_cache_bytes: args.cache_ram_mib.saturating_mul(1 << 20),
    };
    let engine = engine::spawn(
        settings,
        engine::Weights {
            model: Arc::clone(&model),
            backend,
        },
        engine::Parts {
            shared: shared.clone(),
            config,
            jobs,
            metrics: Arc::clone(&metrics),
            shutdown: Arc::clone(&shutdown),
            running: Arc::clone(&running),
        },
    )?;
    let app = Arc::new(app::App {
        model,
        template,
        model_id: model_id(&path),
        context: args.context,
        slots: args.parallel,
        jobs: jobs_tx,
        metrics,
        shutdown: Arc::clone(&shutdown),
        running,
    });
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let served = runtime.block_on(serve(args, app, &shared, &shutdown));
    shutdown.store(true, Ordering::Relaxed);
    runtime.shutdown_timeout(Duration::from_secs(1));
    let _ = engine.join();
    if let Some(file) = &args.memory {
        shared.save(file)?;
        eprintln!("selfspec-server: memory saved to {}", file.display());
    }
    served
}

/// The model's name: its file name without `.gguf`.
fn model_id(path: &Path) -> String {
    path.file_stem()
        .map_or_else(|| "model".into(), |s| s.to_string_lossy().into_owned())
}

/// Serves until SIGTERM or Ctrl-C, saving the memory every
/// `--save-every` seconds.
async fn serve(
    args: &Args,
    app: Arc<app::App>,
    shared: &Shared,
    shutdown: &Arc<AtomicBool>,
) -> Result<(), StartError> {
    let listener = tokio::net::TcpListener::bind((args.host.as_str(), args.port)).await?;
    eprintln!(
        "selfspec-server: {} on http://{} ({} slots of {} tokens)",
        app.model_id,
        listener.local_addr()?,
        args.parallel,
        args.context
    );
    if let (Some(file), true) = (&args.memory, args.save_every > 0) {
        tokio::spawn(save_every(
            shared.clone(),
            file.clone(),
            Duration::from_secs(args.save_every),
            Arc::clone(&app.metrics),
        ));
    }
    let stop = Arc::new(tokio::sync::Notify::new());
    let signalled = {
        let (stop, shutdown) = (Arc::clone(&stop), Arc::clone(shutdown));
        async move {
            signal().await;
            eprintln!("selfspec-server: shutting down");
            // The engine cancels what is decoding: open streams end.
            shutdown.store(true, Ordering::Relaxed);
            stop.notify_one();
        }
    };
    let server = axum::serve(listener, http::router(app)).with_graceful_shutdown(signalled);
    tokio::select! {
        served = server => served?,
        () = async { stop.notified().await; tokio::time::sleep(SHUTDOWN_GRACE).await } => {
            eprintln!("selfspec-server: connections still open after {SHUTDOWN_GRACE:?}: closing them");
        }
    }
    Ok(())
}

/// SIGTERM or Ctrl-C.
async fn signal() {
    let ctrl_c = async {
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {}
        () = term => {}
    }
}

/// Saves the memory to `file` every `every` (on a blocking thread: a save
/// never holds up the HTTP side).
async fn save_every(shared: Shared, file: PathBuf, every: Duration, metrics: Arc<Metrics>) {
    let mut tick = tokio::time::interval(every);
    tick.tick().await;
    loop {
        tick.tick().await;
        let (s, f) = (shared.clone(), file.clone());
        let saved = tokio::task::spawn_blocking(move || s.save(&f)).await;
        match saved {
            Ok(Ok(())) => metrics.saves.fetch_add(1, Ordering::Relaxed),
            Ok(Err(e)) => {
                eprintln!("selfspec-server: saving the memory failed: {e}");
                metrics.save_failures.fetch_add(1, Ordering::Relaxed)
            }
            Err(_) => metrics.save_failures.fetch_add(1, Ordering::Relaxed),
        };
    }
}
