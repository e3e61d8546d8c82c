//! Shared by the tests: random models written to a temporary directory and
//! read back through the loading code.

#![allow(dead_code)]

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};

use selfspec_candle::{Model, ModelConfig, RandomModel};

/// A fresh directory under the system's temp dir (removed on drop).
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        static N: AtomicUsize = AtomicUsize::new(0);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        let dir = std::env::temp_dir().join(format!(
            "selfspec-candle-{tag}-{}-{}-{nanos}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).expect("temp dir");
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Writes `random` as safetensors + config.json and loads it back.
pub fn load(random: &RandomModel) -> Model {
    let dir = TempDir::new("model");
    let (weights, config) = random.write(&dir.0).expect("write the random model");
    let config = ModelConfig::from_file(&config).expect("read config.json");
    assert_eq!(config, random.config, "config.json round trip");
    Model::load(&weights, &config).expect("load the safetensors file")
}

#[allow(unused_imports)] // not every test uses it
pub use selfspec_candle::random::random_tokens;

/// `block` repeated `times` times.
pub fn repeated(block: &[u32], times: usize) -> Vec<u32> {
    block
        .iter()
        .copied()
        .cycle()
        .take(block.len() * times)
        .collect()
}

/// The decisions of plain greedy decoding of `prompts` whose top-1 / top-2
/// gap is below `target`: (top-1, top-2, the lm_head's input there).
fn near_ties(
    model: &mut Model,
    lm_head: &[Vec<f32>],
    prompts: &[Vec<u32>],
    max_tokens: usize,
    target: f32,
) -> Vec<(usize, usize, Vec<f32>)> {
    let mut out = Vec::new();
    for prompt in prompts {
        model.reset();
        let mut h = last_row(model.hidden(prompt).unwrap());
        for _ in 0..max_tokens {
            let logits: Vec<f32> = lm_head
                .iter()
                .map(|w| w.iter().zip(&h).map(|(a, b)| a * b).sum())
                .collect();
            let mut order: Vec<usize> = (0..logits.len()).collect();
            order.sort_by(|&a, &b| logits[b].total_cmp(&logits[a]).then(a.cmp(&b)));
            let (a, b) = (order[0], order[1]);
            if logits[a] - logits[b] < target {
                out.push((a, b, h.clone()));
            }
            h = last_row(model.hidden(&[u32::try_from(a).unwrap()]).unwrap());
        }
    }
    out
}

fn last_row(t: candle_core::Tensor) -> Vec<f32> {
    t.to_vec2::<f32>().unwrap().pop().unwrap()
}

/// `random`'s weights, with the lm_head nudged until no decision of plain
/// greedy decoding of `prompts` (`max_tokens` each) has a top-1 / top-2 gap
/// below 1e-3: at each near tie, the top-1 row moves towards the hidden
/// state there and the top-2 row away from it, widening that gap to 2e-3
/// (the change to other rows' logits is of the same order, so it repeats
/// until a whole pass over the workload finds none). Written to safetensors
/// and loaded back; returns the model and the number of nudges.
pub fn with_clear_margins(
    random: &RandomModel,
    prompts: &[Vec<u32>],
    max_tokens: usize,
) -> (Model, usize) {
    let mut tensors = random.tensors().unwrap();
    let mut lm_head = tensors["lm_head.weight"].to_vec2::<f32>().unwrap();
    let mut nudges = 0;
    for _ in 0..100 {
        let mut model = Model::from_tensors(tensors.clone(), &random.config).unwrap();
        let ties = near_ties(&mut model, &lm_head, prompts, max_tokens, 1e-3);
        if ties.is_empty() {
            let dir = TempDir::new("clear");
            let path = dir.0.join("model.safetensors");
            candle_core::safetensors::save(&tensors, &path).unwrap();
            return (Model::load(&path, &random.config).unwrap(), nudges);
        }
        for (a, b, h) in ties {
            let gap: f32 = lm_head[a]
                .iter()
                .zip(&lm_head[b])
                .zip(&h)
                .map(|((x, y), z)| (x - y) * z)
                .sum();
            let norm2: f32 = h.iter().map(|x| x * x).sum();
            let step = (2e-3 - gap) / 2.0 / norm2;
            for (j, &z) in h.iter().enumerate() {
                lm_head[a][j] += step * z;
                lm_head[b][j] -= step * z;
            }
            nudges += 1;
        }
        let (v, hd) = (lm_head.len(), lm_head[0].len());
        let flat: Vec<f32> = lm_head.iter().flatten().copied().collect();
        tensors.insert(
            "lm_head.weight".into(),
            candle_core::Tensor::from_vec(flat, (v, hd), &candle_core::Device::Cpu).unwrap(),
        );
    }
    panic!("the lm_head still has near ties after 100 rounds of nudges");
}
