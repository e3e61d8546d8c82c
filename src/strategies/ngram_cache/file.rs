//! llama.cpp's cache file format.

use std::path::{Path, PathBuf};

use super::table::LookupCache;
use super::{hash_of, UNUSED};
use crate::Error;

impl LookupCache {
    /// Parses llama.cpp's cache file format (`name` labels errors): records of
    /// `i32[4]` key, `i32` follower count n > 0, n x (`i32` token, `i32` count > 0),
    /// little-endian. A repeated key or follower keeps the first; a trailing
    /// fragment shorter than a key is ignored (as llama.cpp does).
    pub fn from_bytes(bytes: &[u8], name: &str) -> Result<LookupCache, Error> {
        let bad = |offset: usize, reason: String| Error::CacheFile {
            path: PathBuf::from(name),
            offset: offset as u64,
            reason,
        };
        let word = |at: usize| -> Option<i32> {
            bytes
                .get(at..at + 4)
                .map(|b| i32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        };
        let mut cache = LookupCache::new();
        let mut at = 0;
        while at + 16 <= bytes.len() {
            let record = at;
            let mut key = [0u32; 4];
            for (j, slot) in key.iter_mut().enumerate() {
                *slot = word(at + 4 * j).unwrap_or(-1) as u32;
            }
            at += 16;
            let n = word(at)
                .ok_or_else(|| bad(at, "truncated record: missing follower count".into()))?;
            if n <= 0 {
                return Err(bad(at, format!("follower count {n}; must be positive")));
            }
            at += 4;
            let need = n as usize * 8;
            if bytes.len() - at < need {
                return Err(bad(
                    at,
                    format!(
                        "truncated record at {record}: {n} followers need {need} bytes, {} left",
                        bytes.len() - at
                    ),
                ));
            }
            let hash = hash_of(&key);
            let is_new = cache.part(&key).is_none();
            for _ in 0..n {
                let (token, count) = (word(at).unwrap_or(0) as u32, word(at + 4).unwrap_or(0));
                if count <= 0 {
                    return Err(bad(
                        at + 4,
                        format!("count {count} of token {token}; must be positive"),
                    ));
                }
                if is_new && cache.part(&key).map_or(true, |p| p.find(token).is_none()) {
                    cache.add(&key, hash, token, count);
                }
                at += 8;
            }
        }
        Ok(cache)
    }

    /// Reads a llama.cpp cache file (see [`from_bytes`](LookupCache::from_bytes)).
    pub fn load(path: impl AsRef<Path>) -> Result<LookupCache, Error> {
        let path = path.as_ref();
        let bytes = std::fs::read(path).map_err(|e| Error::CacheFile {
            path: path.to_path_buf(),
            offset: 0,
            reason: e.to_string(),
        })?;
        LookupCache::from_bytes(&bytes, &path.display().to_string())
    }

    /// The cache in llama.cpp's file format: n-grams and followers in insertion
    /// order, so that loading the bytes gives back an equal cache.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::new();
        for (key, followers) in self.iter() {
            for j in 0..4 {
                out.extend_from_slice(&key.get(j).copied().unwrap_or(UNUSED).to_le_bytes());
            }
            out.extend_from_slice(&(followers.len() as i32).to_le_bytes());
            for (t, c) in followers {
                out.extend_from_slice(&t.to_le_bytes());
                out.extend_from_slice(&c.to_le_bytes());
            }
        }
        out
    }

    /// Writes the cache to `path` in llama.cpp's file format.
    pub fn save(&self, path: impl AsRef<Path>) -> Result<(), Error> {
        let path = path.as_ref();
        std::fs::write(path, self.to_bytes()).map_err(|e| Error::CacheFile {
            path: path.to_path_buf(),
            offset: 0,
            reason: e.to_string(),
        })
    }
}
