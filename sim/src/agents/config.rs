//! What an agent run does beyond what its schedule says.

pub use actum::planted::PlantedBug;

/// Settings of the agent campaign that are not drawn from the seed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AgentConfig {
    /// Event slots of the fault phase.
    pub events: u32,
    /// A known engine bug to plant, to show the campaign catches it.
    pub planted: Option<PlantedBug>,
    /// Keep a readable history (a failing seed is replayed with it on).
    pub history: bool,
}

impl Default for AgentConfig {
    fn default() -> Self {
        AgentConfig {
            events: 240,
            planted: None,
            history: false,
        }
    }
}
