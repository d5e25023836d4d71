//! Stop-string matching over a stream of text pieces, holding back text that may begin a stop string.

/// What [`StopMatcher::push`] decided for one piece of text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StopOutcome {
    /// Text that is now safe to show.
    pub emit: String,
    /// A stop string was found; `emit` ends right before it and nothing more is to be shown.
    pub stopped: bool,
}

/// Finds the first occurrence of any stop string in streamed text.
#[derive(Debug, Clone, Default)]
pub struct StopMatcher {
    stops: Vec<String>,
    pending: String,
}

impl StopMatcher {
    /// A matcher for these stop strings (empty strings are ignored).
    pub fn new(stops: &[String]) -> Self {
        Self {
            stops: stops.iter().filter(|s| !s.is_empty()).cloned().collect(),
            pending: String::new(),
        }
    }

    /// Adds a piece of text; returns what can be shown now.
    pub fn push(&mut self, piece: &str) -> StopOutcome {
        if self.stops.is_empty() {
            return StopOutcome {
                emit: piece.to_string(),
                stopped: false,
            };
        }
        self.pending.push_str(piece);
        let first = self
            .stops
            .iter()
            .filter_map(|s| self.pending.find(s.as_str()))
            .min();
        if let Some(at) = first {
            let emit = self.pending[..at].to_string();
            self.pending.clear();
            return StopOutcome {
                emit,
                stopped: true,
            };
        }
        // Hold back the longest suffix that is a proper prefix of some stop string.
        let mut hold = 0;
        for s in &self.stops {
            let max = s.len().saturating_sub(1).min(self.pending.len());
            for len in (1..=max).rev() {
                let start = self.pending.len() - len;
                if self.pending.is_char_boundary(start) && s.starts_with(&self.pending[start..]) {
                    hold = hold.max(len);
                    break;
                }
            }
        }
        let cut = self.pending.len() - hold;
        let emit = self.pending[..cut].to_string();
        self.pending.drain(..cut);
        StopOutcome {
            emit,
            stopped: false,
        }
    }

    /// Text held back at the end of generation (no stop string completed): shown as is.
    pub fn flush(&mut self) -> String {
        std::mem::take(&mut self.pending)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(stops: &[&str], pieces: &[&str]) -> (String, bool) {
        let stops: Vec<String> = stops.iter().map(|s| s.to_string()).collect();
        let mut m = StopMatcher::new(&stops);
        let mut out = String::new();
        for p in pieces {
            let o = m.push(p);
            out.push_str(&o.emit);
            if o.stopped {
                return (out, true);
            }
        }
        out.push_str(&m.flush());
        (out, false)
    }

    #[test]
    fn stop_across_pieces() {
        assert_eq!(
            run(&["END"], &["abc E", "N", "D tail"]),
            ("abc ".into(), true)
        );
    }

    #[test]
    fn partial_prefix_released() {
        assert_eq!(run(&["END"], &["abc E", "x"]), ("abc Ex".into(), false));
        assert_eq!(run(&["END"], &["abc EN"]), ("abc EN".into(), false));
    }

    #[test]
    fn earliest_stop_wins() {
        assert_eq!(run(&["b", "a"], &["xxab"]), ("xx".into(), true));
    }

    #[test]
    fn multibyte_safe() {
        assert_eq!(run(&["é!"], &["café", "!"]), ("caf".into(), true));
        assert_eq!(run(&["日本"], &["今日", "は"]), ("今日は".into(), false));
    }
}
