//! Stop conditions: end-of-generation token ids and stop strings. Text that could be the start of
//! a stop string is held back until it is known not to be one; a matched stop string is never
//! emitted.

/// Why generation stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StopReason {
    /// An end-of-generation token (EOS, EOT, ...).
    Token(u32),
    /// One of the stop strings matched (its index in the list given to [`StopChecker::new`]).
    String(usize),
}

/// The outcome of feeding one token to the checker.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StopStep {
    /// Text that is safe to show now.
    pub text: String,
    /// Set when generation must stop.
    pub stop: Option<StopReason>,
}

/// Watches generated tokens and text for stop conditions.
///
/// ```
/// use pocket_models::sampling::{StopChecker, StopReason};
/// let mut stop = StopChecker::new([2], vec!["###".to_string()]);
/// assert_eq!(stop.push(10, "Hello #").text, "Hello "); // "#" held back
/// let step = stop.push(11, "## tail");
/// assert_eq!(step.text, "");
/// assert_eq!(step.stop, Some(StopReason::String(0)));
/// ```
#[derive(Debug, Clone)]
pub struct StopChecker {
    stop_ids: Vec<u32>,
    stop_strings: Vec<String>,
    pending: String,
    stopped: bool,
}

impl StopChecker {
    /// A checker for the given stop ids and stop strings (empty strings are ignored).
    pub fn new(stop_ids: impl IntoIterator<Item = u32>, stop_strings: Vec<String>) -> Self {
        let mut ids: Vec<u32> = stop_ids.into_iter().collect();
        ids.sort_unstable();
        ids.dedup();
        Self {
            stop_ids: ids,
            stop_strings: stop_strings.into_iter().filter(|s| !s.is_empty()).collect(),
            pending: String::new(),
            stopped: false,
        }
    }

    /// Whether `id` ends generation.
    pub fn is_stop_token(&self, id: u32) -> bool {
        self.stop_ids.binary_search(&id).is_ok()
    }

    /// Feeds one token and the text it decoded to; returns what to emit and whether to stop.
    pub fn push(&mut self, id: u32, text: &str) -> StopStep {
        if self.stopped {
            return StopStep {
                text: String::new(),
                stop: None,
            };
        }
        if self.is_stop_token(id) {
            self.stopped = true;
            return StopStep {
                text: std::mem::take(&mut self.pending),
                stop: Some(StopReason::Token(id)),
            };
        }
        self.push_text(text)
    }

    /// Feeds text only (no token id check).
    pub fn push_text(&mut self, text: &str) -> StopStep {
        if self.stopped {
            return StopStep::default();
        }
        self.pending.push_str(text);
        // earliest match of any stop string
        let mut hit: Option<(usize, usize)> = None;
        for (i, s) in self.stop_strings.iter().enumerate() {
            if let Some(pos) = self.pending.find(s.as_str()) {
                if hit.is_none_or(|(p, _)| pos < p) {
                    hit = Some((pos, i));
                }
            }
        }
        if let Some((pos, i)) = hit {
            self.stopped = true;
            let text = self.pending[..pos].to_string();
            self.pending.clear();
            return StopStep {
                text,
                stop: Some(StopReason::String(i)),
            };
        }
        let hold = self.held_back_len();
        let emit_to = self.pending.len() - hold;
        let text = self.pending[..emit_to].to_string();
        self.pending.drain(..emit_to);
        StopStep { text, stop: None }
    }

    /// Length of the longest suffix of the pending text that starts some stop string.
    fn held_back_len(&self) -> usize {
        let p = &self.pending;
        let mut best = 0;
        for s in &self.stop_strings {
            let max = s.len().saturating_sub(1).min(p.len());
            for len in (best + 1..=max).rev() {
                let start = p.len() - len;
                if p.is_char_boundary(start) && s.starts_with(&p[start..]) {
                    best = len;
                    break;
                }
            }
        }
        best
    }

    /// Ends generation for another reason (length limit): returns the held-back text.
    pub fn finish(&mut self) -> String {
        self.stopped = true;
        std::mem::take(&mut self.pending)
    }

    /// Whether a stop condition has been met.
    pub fn is_stopped(&self) -> bool {
        self.stopped
    }
}
