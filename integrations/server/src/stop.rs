//! Stop strings: a reply is cut at the first one, and text that may be the
//! start of one is held back from the stream until it is known not to be.

/// Cuts a reply's text, arriving in pieces, at the first of its stop
/// strings.
#[derive(Clone, Debug, Default)]
pub struct StopCutter {
    stops: Vec<String>,
    held: String,
}

impl StopCutter {
    /// A cutter for `stops` (empty strings are ignored).
    pub fn new(stops: Vec<String>) -> StopCutter {
        StopCutter {
            stops: stops.into_iter().filter(|s| !s.is_empty()).collect(),
            held: String::new(),
        }
    }

    /// Adds `text` to the reply; gives the text that can be sent now and
    /// whether a stop string ended the reply (the text before it is then
    /// all given, the stop string and what follows dropped).
    pub fn push(&mut self, text: &str) -> (String, bool) {
        self.held.push_str(text);
        if let Some(at) = self.stops.iter().filter_map(|s| self.held.find(s)).min() {
            let out = self.held[..at].to_string();
            self.held.clear();
            return (out, true);
        }
        let keep = self
            .stops
            .iter()
            .map(|s| suffix_prefix(&self.held, s))
            .max()
            .unwrap_or(0);
        let cut = self.held.len() - keep;
        let out = self.held[..cut].to_string();
        self.held.drain(..cut);
        (out, false)
    }

    /// The text held back, at the end of a reply with no stop string.
    pub fn finish(&mut self) -> String {
        std::mem::take(&mut self.held)
    }
}

/// The length of the longest end of `text` that is a proper start of
/// `stop` (0 if none).
fn suffix_prefix(text: &str, stop: &str) -> usize {
    (1..stop.len())
        .rev()
        .find(|&k| stop.is_char_boundary(k) && text.ends_with(&stop[..k]))
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(stops: &[&str], pieces: &[&str]) -> (Vec<String>, bool) {
        let mut c = StopCutter::new(stops.iter().map(|s| s.to_string()).collect());
        let mut out = Vec::new();
        for p in pieces {
            let (text, hit) = c.push(p);
            out.push(text);
            if hit {
                return (out, true);
            }
        }
        out.push(c.finish());
        (out, false)
    }

    #[test]
    fn no_stop_strings_pass_everything() {
        assert_eq!(
            run(&[], &["a", "b"]),
            (vec!["a".into(), "b".into(), String::new()], false)
        );
        assert_eq!(run(&[""], &["ab"]).0.concat(), "ab");
    }

    #[test]
    fn cut_at_the_first_stop_string() {
        let (out, hit) = run(&["END", "x"], &["hello E", "N", "D and more"]);
        assert!(hit);
        assert_eq!(out.concat(), "hello ");
        let (out, hit) = run(&["world", "lo"], &["hello world"]);
        assert!(hit);
        assert_eq!(out.concat(), "hel");
    }

    #[test]
    fn held_back_text_that_is_not_a_stop_comes_out() {
        let (out, hit) = run(&["END"], &["a E", "N", "d"]);
        assert!(!hit);
        assert_eq!(out, vec!["a ", "", "ENd", ""]);
        let (out, hit) = run(&["END"], &["a EN"]);
        assert!(!hit);
        assert_eq!(out, vec!["a ", "EN"]);
    }

    #[test]
    fn multibyte_stop_strings() {
        let (out, hit) = run(&["é!"], &["caf", "é", "!"]);
        assert!(hit);
        assert_eq!(out.concat(), "caf");
        let (out, hit) = run(&["éa"], &["xé", "b"]);
        assert!(!hit);
        assert_eq!(out.concat(), "xéb");
    }
}
