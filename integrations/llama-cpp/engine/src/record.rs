//! The plain replies as a replay workload (the repository's
//! `docs/replay.md`): JSON Lines, one session a conversation, each decoded
//! turn a request of its whole prompt and the model's reply, for the
//! replay tools and the GPU simulation (`gpu_sim`), which decode recorded
//! outputs without the model.

use std::path::Path;

use selfspec_conversations::Conversation;
use serde::Serialize;

use crate::run::Pass;
use crate::Error;

/// One request of a recorded session.
#[derive(Serialize)]
struct Request<'a> {
    prompt: &'a [u32],
    output: &'a [u32],
    /// Each output token's top-1 / top-2 logit margin (greedy decoding):
    /// where another engine's reply may differ at a near tie. The replay
    /// tools ignore it.
    margins: &'a [f32],
}

/// One recorded session.
#[derive(Serialize)]
struct Session<'a> {
    id: &'a str,
    kind: &'a str,
    tokenizer: &'a str,
    requests: Vec<Request<'a>>,
}

/// Conversation `c` of `pass` (`conversation` itself) as one workload line:
/// `{"id", "kind", "tokenizer", "requests": [{"prompt": [..], "output":
/// [..], "margins": [..]}]}`, its turns in order up to the first one not decoded (a skipped
/// turn ends the conversation); `None` when not even its first turn was.
/// Each output is the reply's tokens, its stop token included when it
/// reached one.
///
/// # Errors
///
/// [`Error::Conversations`] if the line cannot be serialized.
pub fn session_line(
    conversation: &Conversation,
    pass: &Pass,
    c: usize,
    tokenizer: &str,
) -> Result<Option<String>, Error> {
    let replies = pass.replies.get(c).map_or(&[][..], Vec::as_slice);
    let prompts = pass.prompts.get(c).map_or(&[][..], Vec::as_slice);
    let requests: Vec<Request<'_>> = replies
        .iter()
        .zip(prompts)
        .map_while(|(reply, prompt)| {
            reply.as_ref().map(|r| Request {
                prompt,
                output: &r.tokens,
                margins: &r.margins,
            })
        })
        .collect();
    if requests.is_empty() {
        return Ok(None);
    }
    let session = Session {
        id: &conversation.id,
        kind: &conversation.kind,
        tokenizer,
        requests,
    };
    let line = serde_json::to_string(&session).map_err(selfspec_conversations::Error::from)?;
    Ok(Some(line))
}

/// Writes `lines` to `path`, one a line.
///
/// # Errors
///
/// [`Error::Io`] if the file cannot be written.
pub fn write_workload<'a>(
    path: &Path,
    lines: impl IntoIterator<Item = &'a String>,
) -> Result<(), Error> {
    let mut text = String::new();
    for line in lines {
        text.push_str(line);
        text.push('\n');
    }
    std::fs::write(path, text).map_err(|source| Error::Io {
        path: path.to_path_buf(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use selfspec::step::{Reply, Stop};

    use super::*;

    fn reply(tokens: &[u32]) -> Option<Reply> {
        Some(Reply {
            tokens: tokens.to_vec(),
            margins: (1..=tokens.len()).map(|i| i as f32 / 4.0).collect(),
            prefill_passes: 1,
            decode_passes: tokens.len().saturating_sub(1),
            drafted: 0,
            accepted: 0,
            stop: Stop::StopToken,
            prefill_time: Duration::ZERO,
            decode_time: Duration::ZERO,
        })
    }

    fn conversation(turns: usize) -> Conversation {
        Conversation {
            id: "code-7".into(),
            kind: "code".into(),
            turns: vec!["?".into(); turns],
        }
    }

    #[test]
    fn a_conversation_is_a_session_of_its_decoded_turns() {
        let pass = Pass {
            replies: vec![
                vec![reply(&[5, 6, 2]), reply(&[8, 2]), None, reply(&[9])],
                vec![None],
            ],
            prompts: vec![
                vec![vec![1, 4], vec![1, 4, 5, 6, 2, 7], Vec::new(), vec![1]],
                vec![Vec::new()],
            ],
            decode_time: Duration::ZERO,
            prices: crate::Prices::default(),
            loop_work: crate::run::LoopWork::default(),
            pinned: 0,
        };
        let line = session_line(&conversation(4), &pass, 0, "smollm2")
            .unwrap()
            .unwrap();
        let v: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(v["id"], "code-7");
        assert_eq!(v["kind"], "code");
        assert_eq!(v["tokenizer"], "smollm2");
        // The third turn was skipped: the session ends before it.
        let requests = v["requests"].as_array().unwrap();
        assert_eq!(requests.len(), 2);
        assert_eq!(requests[0]["prompt"], serde_json::json!([1, 4]));
        assert_eq!(requests[0]["output"], serde_json::json!([5, 6, 2]));
        assert_eq!(requests[1]["prompt"], serde_json::json!([1, 4, 5, 6, 2, 7]));
        assert_eq!(requests[1]["output"], serde_json::json!([8, 2]));
        assert_eq!(requests[0]["margins"], serde_json::json!([0.25, 0.5, 0.75]));
        assert_eq!(requests[1]["margins"], serde_json::json!([0.25, 0.5]));
        assert!(!line.contains('\n'));
        assert_eq!(
            session_line(&conversation(1), &pass, 1, "smollm2").unwrap(),
            None
        );
        assert_eq!(
            session_line(&conversation(1), &pass, 2, "smollm2").unwrap(),
            None
        );
    }

    #[test]
    fn the_workload_has_one_line_a_session() {
        let path = std::env::temp_dir().join(format!(
            "selfspec-llama-cpp-record-{}.jsonl",
            std::process::id()
        ));
        let lines = vec![r#"{"id":"a"}"#.to_string(), r#"{"id":"b"}"#.to_string()];
        write_workload(&path, &lines).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        std::fs::remove_file(&path).ok();
        assert_eq!(text, "{\"id\":\"a\"}\n{\"id\":\"b\"}\n");
        let e = write_workload(Path::new("/nonexistent/dir/w.jsonl"), &lines).unwrap_err();
        assert!(matches!(e, Error::Io { .. }), "{e:?}");
    }
}
