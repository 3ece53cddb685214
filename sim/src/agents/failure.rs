//! [`AgentFailure`]: a violated invariant of the agent campaign, with the
//! seed, the one command that replays it, and the run's readable history
//! when it was recorded.
//!
//! **Invariant:** the replay command names every setting that is not drawn
//! from the seed (the planted bug), so it reproduces the run exactly.

use std::fmt;

use actum::planted::PlantedBug;

use super::schedule::AgentSchedule;

/// Lines of history printed with a failure (the latest ones).
pub const HISTORY_LINES_SHOWN_MAX: usize = 400;

/// Where the failing schedule came from, which says how to replay it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Origin {
    /// `AgentSchedule::from_seed(seed)`: the seed replays it.
    Seed,
    /// The exhaustive enumeration, at this index.
    Exhaustive(usize),
    /// A schedule built elsewhere (proptest, the fuzzer): it is printed.
    Schedule(Box<AgentSchedule>),
    /// The runtime family (`actum-sim runtime`): the seed replays it.
    Runtime,
}

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
    /// Where the schedule came from.
    pub origin: Origin,
}

impl AgentFailure {
    /// How to replay this run with its history printed.
    pub fn replay_command(&self) -> String {
        let planted = self
            .planted
            .map(|bug| format!(" --planted {}", bug.name()))
            .unwrap_or_default();
        match &self.origin {
            Origin::Seed => format!(
                "cargo run --release -p actum-sim -- agents --seed {}{planted} --history",
                self.seed
            ),
            Origin::Exhaustive(index) => format!(
                "cargo run --release -p actum-sim -- agents --exhaustive --seed {index}{planted} \
                 --history"
            ),
            Origin::Runtime => format!(
                "cargo run --release -p actum-sim -- runtime --seed {}{planted} --history",
                self.seed
            ),
            Origin::Schedule(_) => "actum_sim::agents::run_agent_schedule on the schedule \
                                    above (proptest keeps it in its regressions file)"
                .to_string(),
        }
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
        if let Origin::Schedule(schedule) = &self.origin {
            write!(f, "\n  schedule: {schedule:?}")?;
        }
        write!(f, "\n  replay: {}", self.replay_command())
    }
}
