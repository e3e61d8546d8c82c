//! The GGUF reader on files made here: a tiny Llama loads in each weight
//! representation; a truncated or corrupt file, a tensor whose shape
//! disagrees with the metadata, missing metadata and an unsupported
//! architecture are typed errors, never panics.

mod common;

use std::io::Cursor;
use std::path::Path;

use candle_core::quantized::gguf_file::{self, Value};
use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::{DType, Device, Tensor};
use selfspec_candle::{Error, GgufFile, Model, Representation};

const HIDDEN: usize = 64;
const FFN: usize = 128;
const LAYERS: usize = 2;
const HEADS: usize = 4;
const KV_HEADS: usize = 2;
const VOCAB: usize = 96;

/// Deterministic small weights of `shape`, in `dtype`.
fn weight(shape: &[usize], seed: f64, dtype: GgmlDType) -> QTensor {
    let n: usize = shape.iter().product();
    let t = Tensor::arange(0u32, u32::try_from(n).unwrap(), &Device::Cpu)
        .unwrap()
        .to_dtype(DType::F32)
        .unwrap()
        .affine(0.618_033_9, seed)
        .unwrap()
        .sin()
        .unwrap()
        .affine(0.2, 0.0)
        .unwrap()
        .reshape(shape)
        .unwrap();
    QTensor::quantize(&t, dtype).unwrap()
}

/// The tensors of the tiny Llama; `bad_shape` gives `blk.1.attn_q` the
/// wrong one.
fn tensors(bad_shape: bool) -> Vec<(String, QTensor)> {
    let d = HIDDEN / HEADS;
    let mut out = vec![
        (
            "token_embd.weight".to_string(),
            weight(&[VOCAB, HIDDEN], 0.1, GgmlDType::Q8_0),
        ),
        (
            "output_norm.weight".to_string(),
            weight(&[HIDDEN], 0.2, GgmlDType::F32),
        ),
    ];
    for i in 0..LAYERS {
        let q_rows = if bad_shape && i == 1 {
            HIDDEN / 2
        } else {
            HIDDEN
        };
        let layer: [(&str, Vec<usize>, GgmlDType); 9] = [
            ("attn_norm.weight", vec![HIDDEN], GgmlDType::F32),
            ("ffn_norm.weight", vec![HIDDEN], GgmlDType::F32),
            ("attn_q.weight", vec![q_rows, HIDDEN], GgmlDType::Q4_1),
            ("attn_k.weight", vec![KV_HEADS * d, HIDDEN], GgmlDType::Q4_1),
            ("attn_v.weight", vec![KV_HEADS * d, HIDDEN], GgmlDType::Q4_1),
            ("attn_output.weight", vec![HIDDEN, HIDDEN], GgmlDType::Q4_1),
            ("ffn_gate.weight", vec![FFN, HIDDEN], GgmlDType::Q4_1),
            ("ffn_up.weight", vec![FFN, HIDDEN], GgmlDType::Q4_1),
            ("ffn_down.weight", vec![HIDDEN, FFN], GgmlDType::Q4_1),
        ];
        for (j, (name, shape, dtype)) in layer.into_iter().enumerate() {
            #[allow(clippy::cast_precision_loss)]
            let seed = (i * 10 + j) as f64;
            out.push((format!("blk.{i}.{name}"), weight(&shape, seed, dtype)));
        }
    }
    out
}

fn metadata(arch: &str, skip: Option<&str>) -> Vec<(String, Value)> {
    let u = |n: usize| Value::U32(u32::try_from(n).unwrap());
    let key = |k: &str| format!("{arch}.{k}");
    let all = vec![
        (
            "general.architecture".to_string(),
            Value::String(arch.into()),
        ),
        (key("embedding_length"), u(HIDDEN)),
        (key("feed_forward_length"), u(FFN)),
        (key("block_count"), u(LAYERS)),
        (key("attention.head_count"), u(HEADS)),
        (key("attention.head_count_kv"), u(KV_HEADS)),
        (key("context_length"), u(512)),
        (key("rope.freq_base"), Value::F32(10_000.0)),
        (key("attention.layer_norm_rms_epsilon"), Value::F32(1e-5)),
    ];
    all.into_iter()
        .filter(|(k, _)| skip != Some(k.as_str()))
        .collect()
}

fn gguf_bytes(meta: &[(String, Value)], tensors: &[(String, QTensor)]) -> Vec<u8> {
    let meta: Vec<(&str, &Value)> = meta.iter().map(|(k, v)| (k.as_str(), v)).collect();
    let tensors: Vec<(&str, &QTensor)> = tensors.iter().map(|(k, v)| (k.as_str(), v)).collect();
    let mut out = Cursor::new(Vec::new());
    gguf_file::write(&mut out, &meta, &tensors).unwrap();
    out.into_inner()
}

fn good_file() -> Vec<u8> {
    gguf_bytes(&metadata("llama", None), &tensors(false))
}

fn load(path: &Path) -> Result<Model, Error> {
    GgufFile::open(path)?.model(Representation::F32)
}

#[test]
fn a_tiny_llama_loads_in_each_representation() {
    let dir = common::TempDir::new("gguf");
    let path = dir.0.join("tiny.gguf");
    std::fs::write(&path, good_file()).unwrap();
    let config = GgufFile::open(&path).unwrap().config().unwrap();
    assert_eq!(
        (
            config.hidden_size,
            config.num_hidden_layers,
            config.kv_heads(),
            config.vocab_size
        ),
        (HIDDEN, LAYERS, KV_HEADS, VOCAB)
    );
    assert_eq!(config.max_position_embeddings, Some(512));
    assert!(config.tie_word_embeddings && config.rope_interleaved);
    let mut outputs = Vec::new();
    for repr in [
        Representation::F32,
        Representation::Q8_0,
        Representation::Native,
    ] {
        let mut model = Model::from_gguf(&path, repr).unwrap();
        let logits = model.forward(&[1, 2, 3, 4]).unwrap();
        assert_eq!(logits.dims(), &[4, VOCAB]);
        outputs.push(logits.to_vec2::<f32>().unwrap());
        // The context ends where the metadata says.
        model.reset();
        let long: Vec<u32> = (0..513).map(|i| i % 90).collect();
        assert!(matches!(
            model.forward(&long),
            Err(Error::ContextFull {
                needed: 513,
                max: 512
            })
        ));
    }
    // The three representations are the same model, within rounding.
    for other in &outputs[1..] {
        let diff = outputs[0]
            .iter()
            .flatten()
            .zip(other.iter().flatten())
            .map(|(a, b)| (a - b).abs())
            .fold(0.0f32, f32::max);
        assert!(diff < 0.1, "representations differ by {diff}");
    }
}

#[test]
fn truncated_files_are_errors() {
    let dir = common::TempDir::new("gguf-cut");
    let bytes = good_file();
    let path = dir.0.join("cut.gguf");
    let mut cuts: Vec<usize> = (0..600.min(bytes.len())).collect();
    cuts.extend((600..bytes.len()).step_by(97));
    for cut in cuts {
        std::fs::write(&path, &bytes[..cut]).unwrap();
        match load(&path) {
            Err(Error::Gguf { what, .. }) => assert!(!what.is_empty()),
            other => panic!("cut at {cut} of {}: {other:?}", bytes.len()),
        }
    }
}

#[test]
fn corrupt_bytes_are_errors_or_a_model_never_a_panic() {
    let dir = common::TempDir::new("gguf-corrupt");
    let bytes = good_file();
    let path = dir.0.join("corrupt.gguf");
    let mut errors = 0;
    // Every byte of the header and metadata, and a sample of the rest, set
    // to values that break lengths, counts, types and dimensions.
    let positions = (0..700.min(bytes.len())).chain((700..bytes.len()).step_by(131));
    for at in positions {
        for value in [0x00, 0xff, 0x7f, 0x13] {
            let mut b = bytes.clone();
            if b[at] == value {
                continue;
            }
            b[at] = value;
            std::fs::write(&path, &b).unwrap();
            if load(&path).is_err() {
                errors += 1;
            }
        }
    }
    assert!(errors > 500, "only {errors} corruptions were noticed");
}

#[test]
fn shapes_metadata_and_architecture_are_checked() {
    let dir = common::TempDir::new("gguf-bad");
    let path = dir.0.join("bad.gguf");
    let expect = |bytes: Vec<u8>, needle: &str| {
        std::fs::write(&path, bytes).unwrap();
        match load(&path) {
            Err(e @ Error::Gguf { .. }) => assert!(e.to_string().contains(needle), "{e}"),
            other => panic!("expected an error about {needle}: {other:?}"),
        }
    };
    expect(
        gguf_bytes(&metadata("llama", None), &tensors(true)),
        "tensor blk.1.attn_q.weight has shape [32, 64], the metadata says [64, 64]",
    );
    expect(
        gguf_bytes(
            &metadata("llama", Some("llama.block_count")),
            &tensors(false),
        ),
        "no llama.block_count",
    );
    expect(
        gguf_bytes(&metadata("gpt2", None), &tensors(false)),
        "architecture \"gpt2\" is not supported (allowed: llama, qwen2, qwen3)",
    );
    let mut few = tensors(false);
    few.retain(|(name, _)| name != "blk.1.ffn_up.weight");
    expect(
        gguf_bytes(&metadata("llama", None), &few),
        "no tensor blk.1.ffn_up.weight",
    );
    let missing = dir.0.join("missing.gguf");
    assert!(matches!(GgufFile::open(&missing), Err(Error::Io { .. })));
    std::fs::write(&path, b"GGUF").unwrap();
    assert!(matches!(GgufFile::open(&path), Err(Error::Gguf { .. })));
}
