//! A run's readable history: one line per event and per engine or tool
//! call, stamped with virtual time since the run began. Kept only when
//! asked (a failing seed is replayed with it on), and byte-identical from
//! one replay to the next: it holds virtual time only, never a timing.
//!
//! **Invariant:** nothing in a line depends on the host (no wall clock, no
//! addresses, no hash order).

/// The lines of one run, if recording.
#[derive(Clone, Debug, Default)]
pub struct History {
    recording: bool,
    start_ms: u64,
    lines: Vec<String>,
}

impl History {
    /// A history that records (`recording`) or drops every line.
    pub fn new(recording: bool, start_ms: u64) -> History {
        History {
            recording,
            start_ms,
            lines: Vec::new(),
        }
    }

    /// True if lines are kept (build a line only then).
    pub fn recording(&self) -> bool {
        self.recording
    }

    /// Records `line` at virtual time `now_ms`.
    pub fn note(&mut self, now_ms: u64, line: impl FnOnce() -> String) {
        if !self.recording {
            return;
        }
        let elapsed_ms = now_ms.saturating_sub(self.start_ms);
        self.lines.push(format!(
            "{:>7}.{:03}s  {}",
            elapsed_ms / 1000,
            elapsed_ms % 1000,
            line()
        ));
    }

    /// Every line, in order.
    pub fn lines(&self) -> &[String] {
        &self.lines
    }
}
