//! Known bugs, plantable only with the `planted-bugs` cargo feature, so the
//! simulator can show it catches each one (docs/SIMULATION.md, "The harness
//! bites"). Without the feature, [`planted`] is a constant `false` and the
//! options carry no bug.

use super::options::WalOptions;

/// A known durability bug the simulator must catch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PlantedBug {
    /// Acknowledge appends without `fdatasync`.
    AckBeforeFsync,
    /// Recovery accepts a record whose payload checksum fails.
    AcceptBadChecksum,
    /// Skip the directory sync after creating a segment.
    SkipSegmentDirSync,
    /// Recovery treats damage to acknowledged records as a torn tail.
    CorruptionAsTornTail,
}

impl PlantedBug {
    /// Every plantable bug.
    pub const ALL: [PlantedBug; 4] = [
        PlantedBug::AckBeforeFsync,
        PlantedBug::AcceptBadChecksum,
        PlantedBug::SkipSegmentDirSync,
        PlantedBug::CorruptionAsTornTail,
    ];

    /// The bug's command-line name.
    pub fn name(self) -> &'static str {
        match self {
            PlantedBug::AckBeforeFsync => "ack-before-fsync",
            PlantedBug::AcceptBadChecksum => "accept-bad-checksum",
            PlantedBug::SkipSegmentDirSync => "skip-segment-dir-sync",
            PlantedBug::CorruptionAsTornTail => "corruption-as-torn-tail",
        }
    }

    /// The bug named `name`, if any.
    pub fn from_name(name: &str) -> Option<PlantedBug> {
        PlantedBug::ALL.into_iter().find(|bug| bug.name() == name)
    }
}

/// Whether `bug` is planted in these options.
#[cfg(feature = "planted-bugs")]
pub(crate) fn planted(options: &WalOptions, bug: PlantedBug) -> bool {
    options.planted_bug == Some(bug)
}

/// Whether `bug` is planted in these options: never, without the feature.
#[cfg(not(feature = "planted-bugs"))]
pub(crate) fn planted(_options: &WalOptions, _bug: PlantedBug) -> bool {
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for bug in PlantedBug::ALL {
            assert_eq!(PlantedBug::from_name(bug.name()), Some(bug));
        }
        assert_eq!(PlantedBug::from_name("no-such-bug"), None);
    }
}
