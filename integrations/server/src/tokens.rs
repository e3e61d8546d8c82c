//! llama-server's token endpoints: `POST /tokenize` (text to the model's
//! tokens, as a prompt is tokenized) and `POST /detokenize` (tokens to the
//! text a reply of them streams). Clients use them to count a prompt's
//! tokens and to read recorded token ids.

use std::sync::Arc;

use axum::extract::rejection::JsonRejection;
use axum::extract::State;
use axum::Json;
use llama_cpp_2::model::LlamaModel;
use selfspec_llama_cpp::TextStream;
use serde::Deserialize;
use serde_json::{json, Value};

use crate::app::App;
use crate::error::ApiError;

/// A `POST /tokenize` body.
#[derive(Debug, Deserialize)]
pub struct TokenizeRequest {
    /// The text.
    pub content: String,
    /// Whether to add the model's start token (llama-server's default:
    /// no). Special tokens written in the text (`<|im_start|>`) are
    /// parsed as such either way.
    #[serde(default)]
    pub add_special: bool,
}

/// A `POST /detokenize` body.
#[derive(Debug, Deserialize)]
pub struct DetokenizeRequest {
    /// Token ids of the model's vocabulary.
    pub tokens: Vec<i64>,
}

/// `{"tokens": [..]}`.
pub async fn tokenize(
    State(app): State<Arc<App>>,
    body: Result<Json<TokenizeRequest>, JsonRejection>,
) -> Result<Json<Value>, ApiError> {
    let Json(request) = body?;
    let model = Arc::clone(&app.model);
    // A long text takes a while: off the async workers.
    let tokens = tokio::task::spawn_blocking(move || {
        let vocab = model.vocab();
        let add = request.add_special && vocab.should_add_bos();
        vocab
            .tokenize(request.content.as_bytes(), add, true)
            .into_iter()
            .map(|t| t.0)
            .collect::<Vec<i32>>()
    })
    .await
    .map_err(|e| ApiError::internal(format!("tokenizing failed: {e}")))?;
    Ok(Json(json!({ "tokens": tokens })))
}

/// `{"content": ".."}`: the tokens' text as a reply streams it (turn-ending
/// tokens give none). 400 for an id outside the vocabulary.
pub async fn detokenize(
    State(app): State<Arc<App>>,
    body: Result<Json<DetokenizeRequest>, JsonRejection>,
) -> Result<Json<Value>, ApiError> {
    let Json(request) = body?;
    let ids = checked_ids(&request.tokens, vocab_size(&app.model))?;
    let mut stream = TextStream::new();
    let mut content = String::new();
    for id in ids {
        content.push_str(stream.push(&app.model, id));
    }
    content.push_str(stream.finish());
    Ok(Json(json!({ "content": content })))
}

/// The model's vocabulary size.
fn vocab_size(model: &LlamaModel) -> usize {
    usize::try_from(model.n_vocab()).unwrap_or(0)
}

/// `tokens` as ids below `vocab`, or a 400 naming the first one that is
/// not.
fn checked_ids(tokens: &[i64], vocab: usize) -> Result<Vec<u32>, ApiError> {
    tokens
        .iter()
        .enumerate()
        .map(|(i, &t)| {
            u32::try_from(t)
                .ok()
                .filter(|&id| usize::try_from(id).is_ok_and(|id| id < vocab))
                .ok_or_else(|| {
                    let message = format!(
                        "tokens[{i}] = {t}: token ids are 0 to {}",
                        vocab.saturating_sub(1)
                    );
                    ApiError::invalid("tokens", message)
                })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Ids given, and the ids or a part of the error's message.
    type Case = (&'static [i64], Result<Vec<u32>, &'static str>);

    #[test]
    fn token_ids_outside_the_vocabulary_are_refused() {
        let cases: [Case; 5] = [
            (&[], Ok(vec![])),
            (&[0, 5, 9], Ok(vec![0, 5, 9])),
            (&[3, 10], Err("tokens[1] = 10: token ids are 0 to 9")),
            (&[-1], Err("tokens[0] = -1: token ids are 0 to 9")),
            (&[i64::MAX], Err("token ids are 0 to 9")),
        ];
        for (tokens, want) in cases {
            let got = checked_ids(tokens, 10);
            match (got, want) {
                (Ok(ids), Ok(w)) => assert_eq!(ids, w),
                (Err(e), Err(w)) => {
                    assert!(e.message.contains(w), "{tokens:?}: {}", e.message);
                    assert_eq!(e.param, Some("tokens"));
                }
                (got, want) => panic!("{tokens:?}: {got:?} against {want:?}"),
            }
        }
    }
}
