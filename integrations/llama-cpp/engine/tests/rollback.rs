//! After a draft rejected at any position, removing the rejected positions
//! from llama.cpp's KV cache leaves exactly the accepted ones: the next
//! token's logits are plain decoding's (within llama.cpp's own batched vs
//! one-token difference), and they would not be without the removal.

mod common;

use selfspec::verify;
use selfspec_llama_cpp_engine::cost::measure_logit_noise;
use selfspec_llama_cpp_engine::{argmax_gap, Decoder, Message, Role};

const K: usize = 8;
const BASE: usize = 6;

fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

#[test]
fn a_draft_rejected_at_every_position_rolls_back_to_plain_decoding() {
    let model = common::model();
    let mut decoder = Decoder::new(&model, common::settings(1)).unwrap();
    let turn = &common::conversations("sample-chat.text.jsonl", 1)[0].turns[0];
    let prompt = model
        .chat_prompt(&[Message {
            role: Role::User,
            content: turn,
        }])
        .unwrap();

    // Plain decoding, one token a pass: tokens x[i] and the logits after each.
    let n = BASE + K + 3;
    let mut rows = decoder.evaluate(0, &prompt).unwrap();
    let mut x = Vec::new();
    let mut after = Vec::new(); // after[i]: logits once x[..=i] is evaluated
    for _ in 0..n {
        let next = argmax_gap(rows.last().unwrap()).0;
        x.push(next);
        rows = decoder.evaluate(0, &[next]).unwrap();
        after.push(rows[0].clone());
    }
    assert!(
        x.iter().all(|&t| !model.is_end(t)),
        "the reply ended too early for the test"
    );

    // llama.cpp's own difference between a (K + 1)-token pass and one-token
    // passes over the same tokens: the tolerance.
    let mut tokens = prompt.clone();
    tokens.extend_from_slice(&x);
    let noise = measure_logit_noise(&mut decoder, &tokens, prompt.len(), &[K + 1, 2], 0).unwrap();
    let tolerance = noise.max_abs_diff.max(1e-4);
    eprintln!("tolerance {tolerance:.5} ({noise:?})");

    let wrong = |t: u32| (t + 1) % u32::try_from(model.n_vocab()).unwrap();
    for j in 0..=K {
        // cache: prompt + x[..BASE]; last = x[BASE]; the draft agrees with
        // plain decoding for j tokens, then every token is wrong.
        decoder.rollback(0, 0).unwrap();
        decoder.evaluate(0, &prompt).unwrap();
        decoder.evaluate(0, &x[..BASE]).unwrap();
        let draft: Vec<u32> = (0..K)
            .map(|i| {
                if i < j {
                    x[BASE + 1 + i]
                } else {
                    wrong(x[BASE + 1 + i])
                }
            })
            .collect();
        let mut input = vec![x[BASE]];
        input.extend_from_slice(&draft);
        let pass = decoder.evaluate(0, &input).unwrap();
        let argmax: Vec<u32> = pass.iter().map(|r| argmax_gap(r).0).collect();
        let v = verify::greedy_next(&draft, &argmax).unwrap();
        assert_eq!(v.n_accepted, j, "rejected at {j}");
        assert_eq!(v.next_token, x[BASE + 1 + j]);

        let keep = prompt.len() + BASE + 1 + j;
        if j < K {
            // Without the removal, the rejected positions stay visible.
            let stale = decoder.evaluate(0, &[v.next_token]).unwrap();
            decoder.rollback(0, keep + K - j).unwrap();
            assert!(
                max_diff(&stale[0], &after[BASE + 1 + j]) > 10.0 * tolerance,
                "the stale cache would not be noticed at {j}"
            );
        }
        decoder.rollback(0, keep).unwrap();
        assert_eq!(decoder.kv_pos_max(0), i64::try_from(keep).unwrap() - 1);
        assert_eq!(decoder.cached(0).len(), keep);
        let next = decoder.evaluate(0, &[v.next_token]).unwrap();
        let d = max_diff(&next[0], &after[BASE + 1 + j]);
        assert!(
            d <= tolerance,
            "rejected at {j}: logits differ by {d} > {tolerance}"
        );
        assert_eq!(argmax_gap(&next[0]).0, x[BASE + 2 + j]);
    }
}
