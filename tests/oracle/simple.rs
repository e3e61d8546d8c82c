//! ngram-simple's oracle.

use super::*;

pub struct Simple {
    pub n: usize,
    pub m: usize,
}

impl Oracle for Simple {
    fn begin(&mut self, _: &[Token]) {}
    fn draft(&mut self, hist: &[Token], last: Token, _: usize, _: usize) -> Vec<Token> {
        let (n, m, l) = (self.n, self.m, hist.len());
        if l <= n + m + 1 {
            return vec![];
        }
        let key = key_of(hist, last, n);
        let mut j = l - n - 1;
        while j >= 1 {
            if hist[j..j + n] == key[..] {
                let copy = m.min(l - (j + n));
                if copy < n {
                    return vec![];
                }
                return hist[j + n..j + n + copy].to_vec();
            }
            j -= 1;
        }
        vec![]
    }
    fn accept(&mut self, _: usize) {}
}
