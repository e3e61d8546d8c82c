//! llama.cpp's cache file format.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::table::LookupCache;
use super::{hash_of, UNUSED};
use crate::int::{ix32, wide};
use crate::CacheFileProblem;
use crate::Error;

impl LookupCache {
    /// Parses llama.cpp's cache file format (`name` labels errors): records of
    /// `i32[4]` key, `i32` follower count n > 0, n x (`i32` token, `i32` count > 0),
    /// little-endian. A repeated key or follower keeps the first; a trailing
    /// fragment shorter than a key is ignored (as llama.cpp does).
    ///
    /// # Errors
    ///
    /// [`Error::CacheFile`] with the byte offset of a follower count or a
    /// count that is not positive, or of a record cut short.
    pub fn from_bytes(bytes: &[u8], name: &str) -> Result<LookupCache, Error> {
        let bad = |offset: usize, problem: CacheFileProblem| Error::CacheFile {
            path: PathBuf::from(name),
            offset: wide(offset),
            problem,
        };
        let word = |at: usize| -> Option<[u8; 4]> {
            bytes.get(at..at + 4).map(|b| [b[0], b[1], b[2], b[3]])
        };
        // Ids are llama.cpp's i32 tokens read as u32 (the same bits).
        let id = |at: usize| word(at).map(u32::from_le_bytes);
        let int = |at: usize| word(at).map(i32::from_le_bytes);
        let mut cache = LookupCache::new();
        let mut at = 0;
        while at + 16 <= bytes.len() {
            let record = at;
            let mut key = [0u32; 4];
            for (j, slot) in key.iter_mut().enumerate() {
                *slot = id(at + 4 * j).unwrap_or(UNUSED);
            }
            at += 16;
            let n = int(at).ok_or_else(|| bad(at, CacheFileProblem::MissingFollowerCount))?;
            if n <= 0 {
                return Err(bad(at, CacheFileProblem::FollowerCount { count: n }));
            }
            at += 4;
            // (Saturating: a count too large for memory is a truncated record.)
            let need = (ix32(n.unsigned_abs())).saturating_mul(8);
            if bytes.len() - at < need {
                return Err(bad(
                    at,
                    CacheFileProblem::Truncated {
                        record: wide(record),
                        followers: n,
                        need: wide(need),
                        left: wide(bytes.len() - at),
                    },
                ));
            }
            let hash = hash_of(&key);
            let is_new = cache.part(&key).is_none();
            for _ in 0..n {
                let (token, count) = (id(at).unwrap_or(0), int(at + 4).unwrap_or(0));
                if count <= 0 {
                    return Err(bad(at + 4, CacheFileProblem::Count { token, count }));
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
    ///
    /// # Errors
    ///
    /// [`Error::CacheFile`]: the file cannot be read (offset 0), or as
    /// [`from_bytes`](LookupCache::from_bytes).
    pub fn load(path: impl AsRef<Path>) -> Result<LookupCache, Error> {
        let path = path.as_ref();
        let bytes = std::fs::read(path).map_err(|e| Error::CacheFile {
            path: path.to_path_buf(),
            offset: 0,
            problem: CacheFileProblem::Io(Arc::new(e)),
        })?;
        LookupCache::from_bytes(&bytes, &path.display().to_string())
    }

    /// The cache in llama.cpp's file format: n-grams and followers in insertion
    /// order, so that loading the bytes gives back an equal cache.
    #[must_use]
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::new();
        for (key, followers) in self.iter() {
            for j in 0..4 {
                out.extend_from_slice(&key.get(j).copied().unwrap_or(UNUSED).to_le_bytes());
            }
            // A part of 2^31 followers would take 16 GiB.
            let n = i32::try_from(followers.len()).expect("fewer than 2^31 followers");
            out.extend_from_slice(&n.to_le_bytes());
            for (t, c) in followers {
                out.extend_from_slice(&t.to_le_bytes());
                out.extend_from_slice(&c.to_le_bytes());
            }
        }
        out
    }

    /// Writes the cache to `path` in llama.cpp's file format.
    ///
    /// # Errors
    ///
    /// [`Error::CacheFile`] (offset 0) when the file cannot be written.
    pub fn save(&self, path: impl AsRef<Path>) -> Result<(), Error> {
        let path = path.as_ref();
        std::fs::write(path, self.to_bytes()).map_err(|e| Error::CacheFile {
            path: path.to_path_buf(),
            offset: 0,
            problem: CacheFileProblem::Io(Arc::new(e)),
        })
    }
}
