//! [`AgentFailure`]: a violated invariant of the agent campaign, with the
//! seed, the one command that replays it, and the run's readable history
//! when it was recorded.
//!
//! **Invariant:** the replay command names every setting that is not drawn
//! from the seed (the planted bug), so it reproduces the run exactly.

use std::fmt;

use actum::planted::PlantedBug;

/// Lines of history printed with a failure (the latest ones).
pub const HISTORY_LINES_SHOWN_MAX: usize = 400;

/// A violated invariant, with everything needed to replay it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AgentFailure {
    /// The seed of the failing run.
    pub seed: u64,
    /// The invariant (or stage) that failed.
    pub invariant: &'static str,
    /// What was found.
    pub detail: String,
    /// The bug planted in the run, if any.
    pub planted: Option<PlantedBug>,
    /// The run's history, if it was recorded.
    pub history: Vec<String>,
}

impl AgentFailure {
    /// The command that replays this run with its history printed.
    pub fn replay_command(&self) -> String {
        let planted = self
            .planted
            .map(|bug| format!(" --planted {}", bug.name()))
            .unwrap_or_default();
        format!(
            "cargo run --release -p actum-sim -- agents --seed {}{planted} --history",
            self.seed
        )
    }
}

impl fmt::Display for AgentFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "seed {}: invariant `{}` violated: {}",
            self.seed, self.invariant, self.detail
        )?;
        if !self.history.is_empty() {
            let skip = self.history.len().saturating_sub(HISTORY_LINES_SHOWN_MAX);
            writeln!(f, "\n  history (virtual time since the start):")?;
            if skip > 0 {
                writeln!(f, "    ... {skip} earlier lines")?;
            }
            for line in &self.history[skip..] {
                writeln!(f, "    {line}")?;
            }
        }
        write!(f, "\n  replay: {}", self.replay_command())
    }
}
