//! A sequence's cache saved to host memory and restored into another
//! sequence (a server's prompt cache): the next pass on the restored
//! sequence gives the saved one's logits bit for bit, and the target's view
//! of both caches stays llama.cpp's.

mod common;

use selfspec::step::{Row, SeqId, Target};
use selfspec_llama_cpp::{Error, LlamaTarget, Options};

fn rows(seq: usize, tokens: &[u32], from: usize) -> impl Iterator<Item = Row> + '_ {
    tokens.iter().enumerate().map(move |(i, &token)| Row {
        seq: SeqId::new(seq),
        token,
        pos: from + i,
        output: true,
    })
}

/// Positions llama.cpp's cache of `seq` holds.
fn kv_len<'m>(
    target: &LlamaTarget<'m, &mut llama_cpp_2::context::LlamaContext<'m>>,
    seq: usize,
) -> i64 {
    target.kv_pos_max(SeqId::new(seq)) + 1
}

#[test]
fn a_restored_cache_gives_the_saved_sequences_logits() {
    let model = common::model();
    let (mut ctx, params) = common::context(&model, 1024, 2);
    let prompt = common::chat(&model, "Name three colors, and say why you like them.");
    let (head, last) = prompt.split_at(prompt.len() - 1);
    let (s0, s1) = (SeqId::new(0), SeqId::new(1));
    let mut target = LlamaTarget::new(&model, &mut ctx, Options::new(&params)).unwrap();
    target.decode_rows(rows(0, head, 0)).unwrap();
    let saved = target.save(s0).unwrap();
    assert_eq!(saved.tokens(), head);
    assert!(saved.bytes() > std::mem::size_of_val(head));
    // Sequence 1 holds other tokens: the restore replaces them.
    target.decode_rows(rows(1, &prompt[..5], 0)).unwrap();
    target.decode_rows(rows(0, last, head.len())).unwrap();
    let want = target.logits(0).unwrap().to_vec();
    target.restore(s1, &saved).unwrap();
    assert_eq!(target.cached(s1), head);
    assert_eq!(kv_len(&target, 1), i64::try_from(head.len()).unwrap());
    target.decode_rows(rows(1, last, head.len())).unwrap();
    assert!(
        target.logits(0).unwrap() == want.as_slice(),
        "the restored sequence's logits differ"
    );
    // Sequence 0 is as it was: its prompt and nothing else.
    assert_eq!(target.cached(s0), &prompt[..]);
    assert_eq!(kv_len(&target, 0), i64::try_from(prompt.len()).unwrap());
    // Errors: a sequence that does not exist; a cache longer than the
    // target's context (the sequence then untouched).
    assert!(matches!(
        target.save(SeqId::new(2)),
        Err(Error::Sequence { .. })
    ));
    assert!(matches!(
        target.restore(SeqId::new(2), &saved),
        Err(Error::Sequence { .. })
    ));
    drop(target);
    let small = Options::new(&params).with_context(4);
    let mut target = LlamaTarget::new(&model, &mut ctx, small).unwrap();
    let e = target.restore(s0, &saved).unwrap_err();
    assert!(matches!(e, Error::Setting { .. }), "{e:?}");
    assert!(target.cached(s0).is_empty());
}
