//! The conversation files, the figure set and where the model lives.

use std::path::{Path, PathBuf};
use std::str::FromStr;

use serde::Deserialize;

use crate::Error;

/// The model file the engine packages decode by default (fetched by
/// `integrations/fetch-model.sh`).
pub const MODEL_FILE: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";

/// One text conversation: the user's turns; the model writes the replies.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
pub struct Conversation {
    /// The session's id, e.g. `chat-i6R80ro`.
    pub id: String,
    /// `chat`, `code-edit`, `code`, or any other label the file gives.
    pub kind: String,
    /// The user turns, in order; turn k follows the model's reply to turn k-1.
    pub turns: Vec<String>,
}

/// Who wrote a chat message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// The system prompt.
    System,
    /// The user.
    User,
    /// The model.
    Assistant,
}

impl Role {
    /// The role's name in chat templates (`system`, `user`, `assistant`).
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Role::System => "system",
            Role::User => "user",
            Role::Assistant => "assistant",
        }
    }
}

/// A conversation file, and optionally how many of its conversations to take
/// from its start. Parsed from `FILE` or `FILE:N`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Source {
    /// The JSON Lines file.
    pub path: PathBuf,
    /// The first `limit` conversations only (all when `None`).
    pub limit: Option<usize>,
}

impl FromStr for Source {
    type Err = Error;

    fn from_str(s: &str) -> Result<Source, Error> {
        // A trailing `:N` is a limit; any other colon belongs to the path.
        if let Some((path, n)) = s.rsplit_once(':') {
            if !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) {
                let limit = n.parse::<usize>().ok().filter(|&n| n > 0).ok_or_else(|| {
                    Error::Source(format!(
                        "{s}: the limit after ':' must be in 1..={}",
                        usize::MAX
                    ))
                })?;
                return Ok(Source {
                    path: path.into(),
                    limit: Some(limit),
                });
            }
        }
        if s.is_empty() {
            return Err(Error::Source("an empty conversation file name".into()));
        }
        Ok(Source {
            path: s.into(),
            limit: None,
        })
    }
}

/// Reads one conversation file (JSON Lines; blank lines are skipped).
///
/// # Errors
///
/// [`Error::Io`] if it cannot be read, [`Error::Parse`] for a line that is not
/// a conversation or has no turns.
pub fn read(path: &Path) -> Result<Vec<Conversation>, Error> {
    let text = std::fs::read_to_string(path).map_err(|source| Error::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let parse = |message: String| Error::Parse {
            path: path.to_path_buf(),
            line: i + 1,
            message,
        };
        let c: Conversation = serde_json::from_str(line).map_err(|e| parse(e.to_string()))?;
        if c.turns.is_empty() {
            return Err(parse(format!("conversation {:?} has no turns", c.id)));
        }
        out.push(c);
    }
    Ok(out)
}

/// Reads every source in order, each cut to its limit.
///
/// # Errors
///
/// As [`read`]; [`Error::Source`] when the sources hold no conversation.
pub fn load(sources: &[Source]) -> Result<Vec<Conversation>, Error> {
    let mut out = Vec::new();
    for source in sources {
        let mut conversations = read(&source.path)?;
        conversations.truncate(source.limit.unwrap_or(usize::MAX));
        out.extend(conversations);
    }
    if out.is_empty() {
        return Err(Error::Source(
            "the conversation files hold no conversation".into(),
        ));
    }
    Ok(out)
}

/// The conversations the published figures decode: all of sample-code-edit,
/// the first 10 sessions of sample-chat and the first 40 problems of
/// sample-code, from `data_dir`.
#[must_use]
pub fn figure_set(data_dir: &Path) -> Vec<Source> {
    let file = |name: &str, limit| Source {
        path: data_dir.join(name),
        limit,
    };
    vec![
        file("sample-chat.text.jsonl", Some(10)),
        file("sample-code-edit.text.jsonl", None),
        file("sample-code.text.jsonl", Some(40)),
    ]
}

/// `integrations/data/` of this repository: the text samples.
#[must_use]
pub fn default_data_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../data")
}

/// The GGUF to decode: `given` (a `--gguf` option), else `$SELFSPEC_MODEL`,
/// else [`MODEL_FILE`] in `$SELFSPEC_MODEL_DIR`, else in
/// `${XDG_CACHE_HOME:-~/.cache}/selfspec/models` (where
/// `integrations/fetch-model.sh` puts it).
///
/// # Errors
///
/// [`Error::ModelMissing`] when that file does not exist; its message says how
/// to fetch the model.
pub fn model_path(given: Option<PathBuf>) -> Result<PathBuf, Error> {
    let var = |name| {
        std::env::var_os(name)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    let path = given.or_else(|| var("SELFSPEC_MODEL")).unwrap_or_else(|| {
        let dir = var("SELFSPEC_MODEL_DIR").unwrap_or_else(|| {
            let cache = var("XDG_CACHE_HOME")
                .or_else(|| var("HOME").map(|h| h.join(".cache")))
                .unwrap_or_else(|| PathBuf::from(".cache"));
            cache.join("selfspec/models")
        });
        dir.join(MODEL_FILE)
    });
    if path.is_file() {
        Ok(path)
    } else {
        Err(Error::ModelMissing { path })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sources_parse_a_limit_only_after_the_last_colon() {
        // (input, Some((path, limit))) or None for an error
        type Case<'a> = (&'a str, Option<(&'a str, Option<usize>)>);
        let cases: &[Case] = &[
            ("a.jsonl", Some(("a.jsonl", None))),
            ("a.jsonl:10", Some(("a.jsonl", Some(10)))),
            ("c:/x/a.jsonl", Some(("c:/x/a.jsonl", None))),
            ("dir:1/a.jsonl:3", Some(("dir:1/a.jsonl", Some(3)))),
            ("a.jsonl:0", None),
            ("a.jsonl:99999999999999999999999", None),
            ("", None),
        ];
        for &(input, want) in cases {
            let got = input.parse::<Source>().ok();
            let want = want.map(|(p, limit)| Source {
                path: p.into(),
                limit,
            });
            assert_eq!(got, want, "{input:?}");
        }
    }

    #[test]
    fn the_figure_set_reads_the_shipped_samples() {
        let conversations = load(&figure_set(&default_data_dir())).unwrap();
        let count = |kind: &str| conversations.iter().filter(|c| c.kind == kind).count();
        assert_eq!(
            (count("chat"), count("code-edit"), count("code")),
            (10, 10, 40)
        );
        assert!(conversations.iter().all(|c| !c.turns.is_empty()));
    }

    #[test]
    fn bad_lines_name_their_file_and_line() {
        let dir = std::env::temp_dir().join(format!("selfspec-conv-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let cases = [
            (
                "{\"id\":\"a\",\"kind\":\"chat\",\"turns\":[\"hi\"]}\nnot json\n",
                2,
            ),
            ("\n{\"id\":\"a\",\"kind\":\"chat\",\"turns\":[]}\n", 2),
            ("{\"id\":\"a\",\"turns\":[\"x\"]}\n", 1),
        ];
        for (i, (text, line)) in cases.iter().enumerate() {
            let path = dir.join(format!("{i}.jsonl"));
            std::fs::write(&path, text).unwrap();
            match read(&path) {
                Err(Error::Parse { line: got, .. }) => assert_eq!(got, *line, "{text:?}"),
                other => panic!("{text:?}: {other:?}"),
            }
        }
        let missing = dir.join("missing.jsonl");
        assert!(matches!(read(&missing), Err(Error::Io { .. })));
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn a_missing_model_says_how_to_fetch_it() {
        let err = model_path(Some("/nonexistent/model.gguf".into())).unwrap_err();
        assert!(matches!(err, Error::ModelMissing { .. }));
        assert!(err.to_string().contains("fetch-model.sh"), "{err}");
    }
}
