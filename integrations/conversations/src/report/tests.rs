use super::*;

/// A reply of `generated` tokens decoded in `ms` ms and `passes`
/// forward passes (the prompt's last one counted), as the report takes it.
fn decoded(generated: usize, ms: u64, passes: usize, drafted: usize, accepted: usize) -> Decoded {
    Decoded::from(&Reply {
        tokens: vec![7; generated],
        margins: vec![1.0; generated],
        prefill_passes: 1,
        decode_passes: passes - 1,
        drafted,
        accepted,
        stop: selfspec::step::Stop::MaxTokens,
        prefill_time: Duration::from_millis(1),
        decode_time: Duration::from_millis(ms),
    })
}

#[test]
fn summaries_add_up_per_kind_and_in_all() {
    let mut t = Tally::new();
    let near = Divergence::NearTie {
        position: 3,
        gap: 0.1,
    };
    let far = Divergence::NotNearTie {
        position: 0,
        gap: 4.0,
    };
    t.add_turn(
        "code",
        &decoded(100, 1000, 100, 0, 0),
        &decoded(100, 500, 40, 90, 60),
        &Divergence::Identical,
    );
    t.add_turn(
        "chat",
        &decoded(50, 1000, 50, 0, 0),
        &decoded(48, 1200, 45, 10, 3),
        &near,
    );
    t.add_turn(
        "chat",
        &decoded(50, 1000, 50, 0, 0),
        &decoded(50, 1000, 50, 0, 0),
        &far,
    );
    t.note_skipped("chat");
    let rows = t.summaries("recall", Some(4));
    let kinds: Vec<&str> = rows.iter().map(|r| r.kind.as_str()).collect();
    assert_eq!(kinds, ["chat", "code", "all"]);
    let (chat, code, all) = (&rows[0], &rows[1], &rows[2]);
    assert_eq!(
        (chat.turns, chat.generated, chat.plain_generated),
        (2, 98, 100)
    );
    assert!((chat.plain_tokens_per_s - 50.0).abs() < 1e-9);
    assert!((chat.spec_tokens_per_s - 98.0 / 2.2).abs() < 1e-9);
    assert_eq!(
        (chat.diverged, chat.diverged_not_near_tie, chat.identical),
        (2, 1, false)
    );
    assert!(code.identical && (code.speedup - 2.0).abs() < 1e-9);
    assert!((code.tau - 2.5).abs() < 1e-9 && (code.acceptance - 60.0 / 90.0).abs() < 1e-9);
    assert_eq!(
        (
            all.turns,
            all.generated,
            all.drafted,
            all.accepted,
            all.skipped
        ),
        (3, 198, 100, 63, 1)
    );
    assert!((all.plain_tokens_per_s - 200.0 / 3.0).abs() < 1e-9);
    assert_eq!(all.parallel, Some(4));
}

#[test]
fn tau_is_the_replies_tau() {
    let reply = |tokens: usize, decode_passes: usize| Reply {
        tokens: vec![3; tokens],
        margins: vec![f32::NAN; tokens],
        prefill_passes: 2,
        decode_passes,
        drafted: 0,
        accepted: 0,
        stop: selfspec::step::Stop::StopToken,
        prefill_time: Duration::ZERO,
        decode_time: Duration::from_millis(10),
    };
    // (tokens, decode passes): a plain reply, a speculative one, one
    // that stopped at its first token.
    for (n, passes) in [(10, 9), (10, 3), (1, 0)] {
        let r = reply(n, passes);
        let mut t = Tally::new();
        let plain = Decoded::from(&reply(n, n - 1));
        t.add_turn("chat", &plain, &Decoded::from(&r), &Divergence::Identical);
        let all = &t.summaries("x", None)[1];
        assert_eq!(all.tau, r.tau(), "{n} tokens in {passes} decode passes");
        assert_eq!(all.plain_forward_passes, n);
    }
    // Summed over replies: all tokens over all passes.
    let mut t = Tally::new();
    for r in [reply(10, 3), reply(4, 1)] {
        let d = Decoded::from(&r);
        t.add_turn("chat", &d, &d, &Divergence::Identical);
    }
    assert_eq!(t.summaries("x", None)[1].tau, 14.0 / 6.0);
}

#[test]
fn batched_time_is_added_per_kind() {
    let mut t = Tally::new();
    let d = decoded(10, 999_000, 10, 0, 0);
    t.add_counts("chat", &d, &d, &Divergence::Identical);
    t.add_counts("chat", &d, &d, &Divergence::Identical);
    t.add_time("chat", Duration::from_secs(2), Duration::from_secs(1));
    let rows = t.summaries("x", None);
    assert!((rows[0].plain_tokens_per_s - 10.0).abs() < 1e-9);
    assert!((rows[0].speedup - 2.0).abs() < 1e-9);
}

#[test]
fn nothing_decoded_gives_zeros_not_nan() {
    let rows = Tally::new().summaries("x", None);
    assert_eq!(rows.len(), 1);
    let all = &rows[0];
    for v in [
        all.plain_tokens_per_s,
        all.spec_tokens_per_s,
        all.speedup,
        all.tau,
        all.acceptance,
    ] {
        assert_eq!(v, 0.0);
    }
}

#[test]
fn the_json_file_has_the_documented_fields() {
    let mut t = Tally::new();
    t.add_turn(
        "chat",
        &decoded(5, 100, 5, 0, 0),
        &decoded(5, 50, 3, 4, 2),
        &Divergence::Identical,
    );
    let path = std::env::temp_dir().join(format!("selfspec-report-{}.json", std::process::id()));
    write_json(&path, &t.summaries("recall", None)).unwrap();
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    std::fs::remove_file(&path).ok();
    let rows = v.as_array().unwrap();
    assert_eq!(rows.len(), 2);
    for field in [
        "strategy",
        "kind",
        "turns",
        "generated",
        "plain_tokens_per_s",
        "spec_tokens_per_s",
        "speedup",
        "tau",
        "acceptance",
        "identical",
        "diverged",
        "diverged_not_near_tie",
    ] {
        assert!(rows[1].get(field).is_some(), "{field}");
    }
    assert!(rows[1].get("parallel").is_none());
    assert_eq!(rows[1]["kind"], "all");
    let mut table = Vec::new();
    print_table(&mut table, &t.summaries("recall", None)).unwrap();
    assert_eq!(String::from_utf8(table).unwrap().lines().count(), 3);
}
