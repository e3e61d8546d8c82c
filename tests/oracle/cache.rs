//! ngram-cache's oracle (context cache only: no cache files).

use super::*;

/// Lookup decoding as llama.cpp does it: parts as follower lists in insertion
/// order, winners by scanning them, no entries, indexes or successor guesses.
#[derive(Default)]
pub struct Cache {
    parts: std::collections::HashMap<[Token; 4], Vec<(Token, i64)>>,
    cache_size: usize,
}

/// The reference's key: four slots, unused ones -1 (so a token -1 as i32,
/// `u32::MAX`, reads as an unused slot there too).
fn cache_key(ngram: &[Token]) -> [Token; 4] {
    let mut key = [u32::MAX; 4];
    key[..ngram.len()].copy_from_slice(ngram);
    key
}

impl Oracle for Cache {
    fn begin(&mut self, _: &[Token]) {}
    fn draft(&mut self, hist: &[Token], last: Token, _: usize, _: usize) -> Vec<Token> {
        let l = hist.len();
        if self.cache_size < l + 1 {
            let mut seg = hist[self.cache_size..].to_vec();
            seg.push(last);
            for s in 1..=4 {
                for i in s..seg.len() {
                    let part = self.parts.entry(cache_key(&seg[i - s..i])).or_default();
                    match part.iter_mut().find(|f| f.0 == seg[i]) {
                        Some(f) => f.1 += 1,
                        None => part.push((seg[i], 1)),
                    }
                }
            }
            self.cache_size = l + 1;
        }
        let mut seq = hist.to_vec();
        seq.push(last);
        if seq.len() < 2 {
            return vec![];
        }
        const SAMPLE: [i64; 4] = [2, 2, 1, 1];
        const PCT: [i64; 4] = [66, 50, 50, 50];
        let mut draft = vec![];
        'step: while draft.len() < 8 {
            for s in (1..=4).rev() {
                if s > seq.len() {
                    continue;
                }
                let Some(part) = self.parts.get(&cache_key(&seq[seq.len() - s..])) else {
                    continue;
                };
                // Highest count; ties to the follower inserted last.
                let (mut best, mut sum) = (0, 0);
                for (i, f) in part.iter().enumerate() {
                    if f.1 >= part[best].1 {
                        best = i;
                    }
                    sum += f.1;
                }
                if sum < SAMPLE[s - 1] || 100 * part[best].1 < PCT[s - 1] * sum {
                    continue;
                }
                draft.push(part[best].0);
                seq.push(part[best].0);
                continue 'step;
            }
            break;
        }
        draft
    }
    fn accept(&mut self, _: usize) {}
}
