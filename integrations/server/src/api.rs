//! OpenAI's chat completions: the request (parsed by serde, then checked),
//! the reply's JSON and the streamed chunks (server-sent events).

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::error::ApiError;

/// A `POST /v1/chat/completions` body. Fields OpenAI has and the server
/// does not use (`n`, `frequency_penalty`, ...) are accepted and ignored.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct ChatRequest {
    /// The conversation so far.
    pub messages: Vec<ChatMessage>,
    /// Tokens to generate at most (default: the rest of the slot's context).
    #[serde(default)]
    pub max_tokens: Option<i64>,
    /// OpenAI's newer name for `max_tokens` (used when `max_tokens` is not).
    #[serde(default)]
    pub max_completion_tokens: Option<i64>,
    /// 0: greedy; up to 2 (default 0.8, llama.cpp's).
    #[serde(default)]
    pub temperature: Option<f32>,
    /// Nucleus sampling, in (0, 1] (default 0.95, llama.cpp's).
    #[serde(default)]
    pub top_p: Option<f32>,
    /// The seed of sampled decoding (default: a new one per request).
    #[serde(default)]
    pub seed: Option<u64>,
    /// A stop string or a list of them: the reply is cut at the first.
    #[serde(default)]
    pub stop: Option<StopField>,
    /// Server-sent events.
    #[serde(default)]
    pub stream: Option<bool>,
    /// The end user: the speculation scope when no `X-Selfspec-Scope` header.
    #[serde(default)]
    pub user: Option<String>,
    /// selfspec's: draft from the token history (default true).
    #[serde(default)]
    pub speculative: Option<bool>,
}

/// `stop`: one string or several.
#[derive(Clone, Debug, Deserialize)]
#[serde(untagged)]
pub enum StopField {
    /// One stop string.
    One(String),
    /// Several.
    Many(Vec<String>),
}

/// One message: a role and its text.
#[derive(Clone, Debug, Deserialize)]
pub struct ChatMessage {
    /// `system`, `user`, `assistant`, ...
    pub role: String,
    /// The text, as a string or as a list of text parts (`null`: empty).
    #[serde(default)]
    pub content: Option<Content>,
}

/// A message's content.
#[derive(Clone, Debug, Deserialize)]
#[serde(untagged)]
pub enum Content {
    /// Plain text.
    Text(String),
    /// Parts; only `{"type": "text", "text": ...}` ones are taken.
    Parts(Vec<Part>),
}

/// One part of a message's content.
#[derive(Clone, Debug, Deserialize)]
pub struct Part {
    /// The part's type: only `text` is taken.
    #[serde(rename = "type")]
    pub kind: String,
    /// Its text.
    #[serde(default)]
    pub text: Option<String>,
}

/// A request the server can run: checked fields, defaults filled in.
#[derive(Clone, Debug, PartialEq)]
pub struct Checked {
    /// `(role, text)` of each message.
    pub messages: Vec<(String, String)>,
    /// Tokens to generate at most, when given.
    pub max_tokens: Option<usize>,
    /// The temperature (0: greedy).
    pub temperature: f32,
    /// Nucleus sampling.
    pub top_p: f32,
    /// The seed, when given.
    pub seed: Option<u64>,
    /// Stop strings (none empty).
    pub stop: Vec<String>,
    /// Server-sent events.
    pub stream: bool,
    /// Draft from the token history.
    pub speculative: bool,
}

impl ChatRequest {
    /// Checks each field against a slot of `context` tokens.
    ///
    /// # Errors
    ///
    /// 400 naming the field: no messages, a content part that is not text,
    /// `max_tokens` outside `1..=context`, a temperature outside `[0, 2]`,
    /// `top_p` outside `(0, 1]`.
    pub fn check(self, context: usize) -> Result<Checked, ApiError> {
        if self.messages.is_empty() {
            return Err(ApiError::invalid("messages", "messages must not be empty"));
        }
        let messages = self
            .messages
            .into_iter()
            .map(ChatMessage::into_text)
            .collect::<Result<Vec<_>, _>>()?;
        let max_tokens = match self.max_tokens.or(self.max_completion_tokens) {
            None => None,
            Some(n) => match usize::try_from(n) {
                Ok(n) if (1..=context).contains(&n) => Some(n),
                _ => {
                    let message =
                        format!("max_tokens is {n}: it must be from 1 to {context} (the context)");
                    return Err(ApiError::invalid("max_tokens", message));
                }
            },
        };
        let temperature = self.temperature.unwrap_or(0.8);
        if !(0.0..=2.0).contains(&temperature) {
            let message = format!("temperature is {temperature}: it must be from 0 to 2");
            return Err(ApiError::invalid("temperature", message));
        }
        let top_p = self.top_p.unwrap_or(0.95);
        if !(top_p > 0.0 && top_p <= 1.0) {
            let message = format!("top_p is {top_p}: it must be above 0 and at most 1");
            return Err(ApiError::invalid("top_p", message));
        }
        let stop = match self.stop {
            None => Vec::new(),
            Some(StopField::One(s)) => vec![s],
            Some(StopField::Many(v)) => v,
        };
        Ok(Checked {
            messages,
            max_tokens,
            temperature,
            top_p,
            seed: self.seed,
            stop: stop.into_iter().filter(|s| !s.is_empty()).collect(),
            stream: self.stream.unwrap_or(false),
            speculative: self.speculative.unwrap_or(true),
        })
    }
}

impl ChatMessage {
    fn into_text(self) -> Result<(String, String), ApiError> {
        if self.role.is_empty() {
            return Err(ApiError::invalid("messages", "a message has an empty role"));
        }
        let text = match self.content {
            None => String::new(),
            Some(Content::Text(t)) => t,
            Some(Content::Parts(parts)) => {
                let mut text = String::new();
                for p in parts {
                    match (p.kind.as_str(), p.text) {
                        ("text", Some(t)) => text.push_str(&t),
                        (kind, _) => {
                            let message = format!(
                                "content parts of type {kind:?} are not supported (text only)"
                            );
                            return Err(ApiError::invalid("messages", message));
                        }
                    }
                }
                text
            }
        };
        Ok((self.role, text))
    }
}

/// Token counts, as OpenAI's `usage`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Usage {
    /// Tokens of the prompt (the messages with the chat template).
    pub prompt_tokens: usize,
    /// Tokens generated.
    pub completion_tokens: usize,
    /// Both.
    pub total_tokens: usize,
}

/// Times and draft counts, as llama-server's `timings`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct Timings {
    /// Prompt tokens.
    pub prompt_n: usize,
    /// From the start of decoding to the first token, milliseconds.
    pub prompt_ms: f64,
    /// Prompt tokens a second.
    pub prompt_per_second: f64,
    /// Tokens generated.
    pub predicted_n: usize,
    /// From the first token to the last, milliseconds.
    pub predicted_ms: f64,
    /// Milliseconds a generated token.
    pub predicted_per_token_ms: f64,
    /// Generated tokens a second (after the first).
    pub predicted_per_second: f64,
    /// Draft tokens sent to verification.
    pub draft_n: usize,
    /// Draft tokens accepted.
    pub draft_n_accepted: usize,
}

/// What every JSON answer of one request shares.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Meta {
    /// `chatcmpl-...`.
    pub id: String,
    /// Unix seconds.
    pub created: u64,
    /// The model's name.
    pub model: String,
}

/// How a reply ended, with its counts.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Outcome {
    /// `stop` or `length`.
    pub finish: &'static str,
    /// Token counts.
    pub usage: Usage,
    /// Times and drafts.
    pub timings: Timings,
}

/// The whole reply of a request that was not streamed.
#[must_use]
pub fn completion(meta: &Meta, text: &str, outcome: &Outcome) -> Value {
    json!({
        "id": meta.id,
        "object": "chat.completion",
        "created": meta.created,
        "model": meta.model,
        "choices": [{
            "index": 0,
            "message": {"role": "assistant", "content": text},
            "finish_reason": outcome.finish,
        }],
        "usage": outcome.usage,
        "timings": outcome.timings,
    })
}

/// A streamed chunk: `delta` (`{"role": ...}` first, then `{"content":
/// ...}`, `{}` in the last), the finish reason in the last one, with the
/// usage and timings.
#[must_use]
pub fn chunk(meta: &Meta, delta: &Value, end: Option<&Outcome>) -> Value {
    let mut c = json!({
        "id": meta.id,
        "object": "chat.completion.chunk",
        "created": meta.created,
        "model": meta.model,
        "choices": [{
            "index": 0,
            "delta": delta,
            "finish_reason": end.map(|o| o.finish),
        }],
    });
    if let (Some(o), Some(map)) = (end, c.as_object_mut()) {
        map.insert("usage".into(), json!(o.usage));
        map.insert("timings".into(), json!(o.timings));
    }
    c
}

/// One server-sent event carrying `data`.
#[must_use]
pub fn sse(data: &str) -> String {
    format!("data: {data}\n\n")
}

/// The event that ends a stream.
pub const DONE: &str = "data: [DONE]\n\n";

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(body: &str) -> Result<Checked, ApiError> {
        let req: ChatRequest =
            serde_json::from_str(body).map_err(|e| ApiError::invalid("body", e.to_string()))?;
        req.check(4096)
    }

    fn param(body: &str) -> Option<&'static str> {
        parse(body).err().and_then(|e| e.param)
    }

    #[test]
    fn a_plain_request_gets_the_defaults() {
        let c = parse(r#"{"model": "x", "messages": [{"role": "user", "content": "hi"}], "n": 1}"#)
            .unwrap();
        assert_eq!(c.messages, vec![("user".to_string(), "hi".to_string())]);
        assert_eq!(
            (c.max_tokens, c.temperature, c.top_p, c.seed),
            (None, 0.8, 0.95, None)
        );
        assert!(c.speculative && !c.stream && c.stop.is_empty());
    }

    #[test]
    fn every_field_is_read() {
        let c = parse(
            r#"{"messages": [{"role": "system", "content": null},
                {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}],
                "max_tokens": 7, "temperature": 0, "top_p": 1, "seed": 3, "stop": ["x", ""],
                "stream": true, "user": "u", "speculative": false}"#,
        )
        .unwrap();
        assert_eq!(c.messages[0], ("system".to_string(), String::new()));
        assert_eq!(c.messages[1].1, "ab");
        assert_eq!(
            (c.max_tokens, c.temperature, c.top_p, c.seed),
            (Some(7), 0.0, 1.0, Some(3))
        );
        assert_eq!(c.stop, vec!["x".to_string()]);
        assert!(c.stream && !c.speculative);
        let one = parse(
            r#"{"messages": [{"role": "user", "content": "q"}], "stop": "END", "max_completion_tokens": 5}"#,
        );
        let one = one.unwrap();
        assert_eq!(
            (one.stop, one.max_tokens),
            (vec!["END".to_string()], Some(5))
        );
    }

    #[test]
    fn out_of_range_fields_name_the_field() {
        let m = r#""messages": [{"role": "user", "content": "q"}]"#;
        assert_eq!(param(r#"{"messages": []}"#), Some("messages"));
        assert_eq!(
            param(&format!("{{{m}, \"max_tokens\": 0}}")),
            Some("max_tokens")
        );
        assert_eq!(
            param(&format!("{{{m}, \"max_tokens\": -3}}")),
            Some("max_tokens")
        );
        assert_eq!(
            param(&format!("{{{m}, \"max_tokens\": 4097}}")),
            Some("max_tokens")
        );
        assert!(parse(&format!("{{{m}, \"max_tokens\": 4096}}")).is_ok());
        assert_eq!(
            param(&format!("{{{m}, \"temperature\": -0.1}}")),
            Some("temperature")
        );
        assert_eq!(
            param(&format!("{{{m}, \"temperature\": 2.5}}")),
            Some("temperature")
        );
        assert_eq!(param(&format!("{{{m}, \"top_p\": 0}}")), Some("top_p"));
        assert_eq!(param(&format!("{{{m}, \"top_p\": 1.5}}")), Some("top_p"));
        let image = r#"{"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}"#;
        assert_eq!(param(image), Some("messages"));
    }

    #[test]
    fn wrong_types_do_not_parse() {
        for body in [
            r#"{"messages": "hi"}"#,
            r#"{"messages": [{"role": "user", "content": "q"}], "temperature": "hot"}"#,
            r#"{"messages": [{"role": "user", "content": "q"}], "stop": 3}"#,
            r#"{"messages": [{"role": "user", "content": "q"}], "stream": "yes"}"#,
            r#"{"messages": [{"content": "q"}]}"#,
            r#"{}"#,
            "not json",
        ] {
            assert_eq!(param(body), Some("body"), "{body}");
        }
    }

    #[test]
    fn the_chunks_have_openais_shape() {
        let meta = Meta {
            id: "chatcmpl-1".into(),
            created: 5,
            model: "m".into(),
        };
        let first = chunk(&meta, &json!({"role": "assistant", "content": ""}), None);
        assert_eq!(first["object"], "chat.completion.chunk");
        assert_eq!(first["choices"][0]["delta"]["role"], "assistant");
        assert!(first["choices"][0]["finish_reason"].is_null());
        assert!(first.get("usage").is_none());
        let usage = Usage {
            prompt_tokens: 3,
            completion_tokens: 2,
            total_tokens: 5,
        };
        let outcome = Outcome {
            finish: "length",
            usage,
            timings: Timings {
                draft_n: 4,
                ..Timings::default()
            },
        };
        let last = chunk(&meta, &json!({}), Some(&outcome));
        assert_eq!(last["choices"][0]["finish_reason"], "length");
        assert_eq!(last["usage"]["total_tokens"], 5);
        assert_eq!(last["timings"]["draft_n"], 4);
        let event = sse(&last.to_string());
        assert!(event.starts_with("data: {") && event.ends_with("}\n\n"));
        assert_eq!(event.matches('\n').count(), 2, "one line of JSON");
        assert_eq!(DONE, "data: [DONE]\n\n");
        let whole = completion(&meta, "hi", &outcome);
        assert_eq!(whole["object"], "chat.completion");
        assert_eq!(whole["choices"][0]["message"]["content"], "hi");
        assert_eq!(whole["usage"]["prompt_tokens"], 3);
    }
}
