//! After a draft rejected at position j (0..k), truncating the KV cache
//! leaves exactly the keys and values that plain decoding of the same
//! history has.

mod common;

use selfspec::verify;
use selfspec_candle::{decode, Model, RandomModel};

/// The largest absolute difference between two models' caches (same length).
fn cache_diff(a: &Model, b: &Model) -> f32 {
    assert_eq!(a.cache_len(), b.cache_len());
    let mut max = 0.0f32;
    for (x, y) in a.cache().unwrap().iter().zip(b.cache().unwrap()) {
        let (x, y) = (x.as_ref().unwrap(), y.as_ref().unwrap());
        assert_eq!(x.k.dims(), y.k.dims());
        assert_eq!(x.v.dims(), y.v.dims());
        for (p, q) in [(&x.k, &y.k), (&x.v, &y.v)] {
            let d = (p - q)
                .unwrap()
                .abs()
                .unwrap()
                .flatten_all()
                .unwrap()
                .max(0)
                .unwrap();
            max = max.max(d.to_scalar::<f32>().unwrap());
        }
    }
    max
}

#[test]
fn truncated_cache_equals_plain_cache() {
    let random = RandomModel::tiny(3);
    let mut model = common::load(&random);
    let prompt = common::random_tokens(9, 40, 128);
    // The model's own continuation: a draft of it is accepted up to where we break it.
    let cont = decode::plain(&mut model, &prompt, 12).unwrap().tokens;
    let k = 8;
    let last = cont[0];
    let mut worst = 0.0f32;
    for j in 0..=k {
        // A draft equal to the model's continuation up to j, wrong at j (j = k: all right).
        let mut draft: Vec<u32> = cont[1..=k].to_vec();
        if j < k {
            draft[j] = (draft[j] + 1) % 128;
        }
        let mut spec_model = model.clone();
        spec_model.reset();
        spec_model.forward(&prompt).unwrap();
        let mut input = vec![last];
        input.extend_from_slice(&draft);
        let rows = decode::argmax_rows(&spec_model.forward(&input).unwrap()).unwrap();
        let argmax: Vec<u32> = rows.iter().map(|r| r.0).collect();
        let v = verify::greedy_next(&draft, &argmax).unwrap();
        assert_eq!(v.n_accepted, j, "draft broken at {j}");
        assert_eq!(
            v.next_token,
            cont[j + 1],
            "the correction is the plain token"
        );
        assert_eq!(spec_model.cache_len(), prompt.len() + 1 + k);
        spec_model.truncate(prompt.len() + 1 + j);

        // Plain decoding of the same history: the prompt, then one token per pass.
        let mut plain_model = model.clone();
        plain_model.reset();
        plain_model.forward(&prompt).unwrap();
        for &t in &cont[..=j] {
            plain_model.forward(&[t]).unwrap();
        }
        let diff = cache_diff(&spec_model, &plain_model);
        worst = worst.max(diff);
        assert!(diff <= 1e-5, "rejected at {j}: cache differs by {diff:e}");

        // And decoding goes on identically from the rolled-back cache.
        let a = decode::argmax_rows(&spec_model.forward(&[v.next_token]).unwrap()).unwrap();
        let b = decode::argmax_rows(&plain_model.forward(&[cont[j + 1]]).unwrap()).unwrap();
        assert_eq!(a[0].0, b[0].0);
    }
    eprintln!("largest cache difference after rollback: {worst:e}");
}

#[test]
fn truncate_beyond_the_cache_is_a_no_op() {
    let random = RandomModel::tiny(3);
    let mut model = common::load(&random);
    model.forward(&[1, 2, 3]).unwrap();
    model.truncate(10);
    assert_eq!(model.cache_len(), 3);
    model.truncate(0);
    assert_eq!(model.cache_len(), 0);
    assert!(model.cache().unwrap().iter().all(Option::is_none));
}
