//! Prompts from the command line or a JSON Lines file.
//!
//! A JSONL line is one request, `{"prompt": [token ids]}` or, with a
//! tokenizer, `{"prompt": "text"}`; a line of the crate's workload files
//! (`examples/data/*.jsonl`: `{"requests": [{"prompt": [...]}, ...]}`)
//! gives one request per entry of `requests`.

use serde_json::Value;

use crate::Error;

/// One request's prompt, before tokenization.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Prompt {
    /// Token ids.
    Tokens(Vec<u32>),
    /// Text, for a tokenizer.
    Text(String),
}

fn bad(line: usize, what: impl Into<String>) -> Error {
    Error::Prompt {
        line,
        what: what.into(),
    }
}

/// Token ids separated by commas and/or whitespace (`"1, 2 3"`).
///
/// # Errors
///
/// [`Error::Prompt`] for a part that is not a `u32`, or no ids at all.
pub fn parse_ids(text: &str) -> Result<Vec<u32>, Error> {
    let ids = text
        .split(|c: char| c == ',' || c.is_whitespace())
        .filter(|s| !s.is_empty())
        .map(|s| {
            s.parse::<u32>()
                .map_err(|_| bad(0, format!("{s:?} is not a token id")))
        })
        .collect::<Result<Vec<u32>, Error>>()?;
    if ids.is_empty() {
        return Err(bad(0, "no token ids"));
    }
    Ok(ids)
}

fn prompt_value(line: usize, v: &Value) -> Result<Prompt, Error> {
    match v {
        Value::String(s) => Ok(Prompt::Text(s.clone())),
        Value::Array(items) => items
            .iter()
            .map(|x| {
                x.as_u64()
                    .and_then(|x| u32::try_from(x).ok())
                    .ok_or_else(|| bad(line, format!("{x} is not a token id")))
            })
            .collect::<Result<Vec<u32>, Error>>()
            .map(Prompt::Tokens),
        _ => Err(bad(
            line,
            "\"prompt\" must be a list of token ids or a string",
        )),
    }
}

/// The requests of a JSON Lines text (blank lines skipped).
///
/// # Errors
///
/// [`Error::Prompt`] naming the line that is not JSON or has no prompt.
pub fn parse_jsonl(text: &str) -> Result<Vec<Prompt>, Error> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let n = i + 1;
        if line.trim().is_empty() {
            continue;
        }
        let v: Value = serde_json::from_str(line).map_err(|e| bad(n, format!("not JSON: {e}")))?;
        if let Some(p) = v.get("prompt") {
            out.push(prompt_value(n, p)?);
        } else if let Some(Value::Array(reqs)) = v.get("requests") {
            for r in reqs {
                let p = r
                    .get("prompt")
                    .ok_or_else(|| bad(n, "a request without \"prompt\""))?;
                out.push(prompt_value(n, p)?);
            }
        } else {
            return Err(bad(n, "no \"prompt\" (or \"requests\") field"));
        }
    }
    if out.is_empty() {
        return Err(bad(0, "the file has no requests"));
    }
    Ok(out)
}
