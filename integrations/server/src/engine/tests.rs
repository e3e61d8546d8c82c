use super::*;
use selfspec::step::{Batch, Kept, Shape, Target};

/// A target whose passes panic: an engine bug, as the engine thread
/// would meet it.
struct Panics;

impl Target for Panics {
    type Error = std::io::Error;
    fn shape(&self) -> Shape {
        Shape {
            sequences: 2,
            context: 64,
            vocab: 8,
            batch: 16,
        }
    }
    fn forward(&mut self, _: &Batch) -> Result<(), Self::Error> {
        panic!("a pass that panics");
    }
    fn logits(&mut self, _: usize) -> Result<&[f32], Self::Error> {
        Err(std::io::Error::other("no logits"))
    }
    fn truncate(&mut self, _: SeqId, _: usize) -> Result<Kept, Self::Error> {
        Ok(Kept::Exact)
    }
}

impl Restore for Panics {
    fn save(&mut self, _: SeqId) -> Option<selfspec_llama_cpp::SavedSeq> {
        None
    }
    fn restore(&mut self, _: SeqId, _: &selfspec_llama_cpp::SavedSeq) -> bool {
        false
    }
}

#[test]
fn an_engine_thread_that_panics_clears_running_and_ends_its_requests() {
    let (jobs_tx, jobs) = std::sync::mpsc::sync_channel(4);
    let config = Config::recommended();
    let parts = Parts {
        shared: Shared::new(&config).unwrap(),
        config,
        jobs,
        metrics: Arc::new(Metrics::default()),
        shutdown: Arc::new(AtomicBool::new(false)),
        running: Arc::new(AtomicBool::new(false)),
    };
    let running = Arc::clone(&parts.running);
    let stepper = Stepper::new(&Panics).unwrap();
    let (ready_tx, ready) = std::sync::mpsc::sync_channel(1);
    let thread = std::thread::spawn(move || {
        let engine = Engine::new(stepper, parts, 2, 0);
        let _running = Running::set(&engine.parts.running);
        ready_tx.send(()).unwrap();
        engine.run(Panics);
    });
    ready.recv().unwrap();
    assert!(
        running.load(Ordering::Relaxed),
        "running while the engine steps"
    );
    let job = || {
        let (events, rx) = tokio::sync::mpsc::unbounded_channel();
        let job = Job {
            prompt: vec![1, 2, 3],
            decode: Decode::greedy(4),
            speculative: false,
            scope: String::new(),
            events,
            cancel: Arc::new(AtomicBool::new(false)),
        };
        (job, rx)
    };
    let (first, mut rx) = job();
    jobs_tx.send(first).unwrap();
    assert!(thread.join().is_err(), "the pass's panic ends the thread");
    assert!(!running.load(Ordering::Relaxed), "cleared by the panic");
    assert_eq!(rx.blocking_recv(), None, "the request's channel is closed");
    let disconnected = matches!(
        jobs_tx.try_send(job().0),
        Err(std::sync::mpsc::TrySendError::Disconnected(_))
    );
    assert!(disconnected, "the queue is closed");
}
