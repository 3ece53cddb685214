//! What a campaign run does, beyond what its seed chooses.

pub use actum::planted::PlantedBug;

/// Settings of a storage campaign that are not drawn from the seed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CampaignConfig {
    /// Workload steps (appends, checkpoints, clean reopens) per seed.
    pub steps: u32,
    /// WAL segment size; small, so rotation and GC happen often.
    pub segment_size_bytes: u64,
    /// After the workload, flip one durable bit and demand an error or the
    /// right data on reopen (detect-only bit rot).
    pub rot: bool,
    /// A known bug to plant in the engine, to show the campaign catches it.
    pub planted: Option<PlantedBug>,
}

impl Default for CampaignConfig {
    fn default() -> Self {
        CampaignConfig {
            steps: 120,
            segment_size_bytes: 16 * 1024,
            rot: true,
            planted: None,
        }
    }
}
