//! `FaultConfig`: every fault the simulated disk can inject, as a named
//! probability in parts per million (see docs/SIMULATION.md, "Fault model").
//!
//! **Invariant:** a config is valid when every probability is at most
//! [`PPM_ONE`] and the crash outcomes of a write (lost, torn) sum to at most
//! [`PPM_ONE`]; [`FaultConfig::assert_valid`] checks it and the disk calls it
//! whenever a config is installed.

use crate::rng::{PPM_ONE, Rng};

/// The granularity at which a crash tears a write: one disk sector.
pub const SECTOR_SIZE_BYTES: u64 = 512;

/// Named fault probabilities (parts per million) and limits for a `SimDisk`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FaultConfig {
    /// At a crash, the probability that an unsynced write is lost whole.
    pub crash_write_lost_ppm: u32,
    /// At a crash, the probability that an unsynced write is torn: each of
    /// its sectors independently holds the new bytes, the old bytes or
    /// (see `torn_sector_garbage_ppm`) garbage. The rest are kept whole.
    pub crash_write_torn_ppm: u32,
    /// For each sector of a torn write, the probability that it holds random
    /// bytes; otherwise it is new or old with even odds.
    pub torn_sector_garbage_ppm: u32,
    /// At a crash, the probability that an unsynced size change is lost: a
    /// `set_len`, or the file growth of a torn write.
    pub crash_size_change_lost_ppm: u32,
    /// At a crash, the probability that a directory's unsynced entry changes
    /// (creates, renames, removes) persist anyway, all together, as if the
    /// file system had flushed that directory on its own.
    pub crash_dir_flushed_ppm: u32,
    /// The probability that `sync_data` on a file with unsynced changes
    /// fails with EIO and drops some of them (Linux writeback-error
    /// semantics: reported once, the pages are gone).
    pub sync_eio_ppm: u32,
    /// The probability that `write_at` writes a strict prefix of its data,
    /// then fails with EIO.
    pub write_short_ppm: u32,
    /// The probability that `write_at`, or a `set_len` that grows a file,
    /// fails with ENOSPC without writing anything (a transiently full disk).
    pub enospc_ppm: u32,
    /// The disk's size: writes beyond it write what fits, then fail with
    /// ENOSPC. `None` is unbounded.
    pub capacity_bytes: Option<u64>,
    /// Files whose path ends with one of these never get garbage in a torn
    /// sector: each sector lands old or new, as on a device with atomic
    /// sector writes. redb needs this for its header sector (a garbage
    /// header makes it refuse to open; see docs/SIMULATION.md, findings), so
    /// campaigns that put redb on the disk name its file here.
    pub sector_atomic_suffixes: Vec<String>,
}

impl FaultConfig {
    /// No injected I/O errors, and the plainest crash: every unsynced change
    /// (writes, size changes, directory entries) is lost whole, nothing is
    /// torn and nothing unsynced survives by luck.
    pub fn none() -> Self {
        FaultConfig {
            crash_write_lost_ppm: PPM_ONE,
            crash_write_torn_ppm: 0,
            torn_sector_garbage_ppm: 0,
            crash_size_change_lost_ppm: PPM_ONE,
            crash_dir_flushed_ppm: 0,
            sync_eio_ppm: 0,
            write_short_ppm: 0,
            enospc_ppm: 0,
            capacity_bytes: None,
            sector_atomic_suffixes: Vec::new(),
        }
    }

    /// No injected I/O errors, but a full-strength crash: unsynced writes
    /// are kept, lost or torn (with garbage) in equal measure, size changes
    /// and directory flushes go either way.
    pub fn crash_only() -> Self {
        FaultConfig {
            crash_write_lost_ppm: PPM_ONE / 3,
            crash_write_torn_ppm: PPM_ONE / 3,
            torn_sector_garbage_ppm: PPM_ONE / 3,
            crash_size_change_lost_ppm: PPM_ONE / 2,
            crash_dir_flushed_ppm: PPM_ONE / 4,
            ..FaultConfig::none()
        }
    }

    /// A random mix for swarm testing: each seed turns each fault on or off
    /// and picks its rate, so some runs hammer one fault while others see
    /// none of it. Draws a fixed number of values from `rng`.
    pub fn swarm(rng: &mut Rng) -> Self {
        const CRASH_RATES_PPM: [u32; 6] = [0, 50_000, 250_000, 500_000, 750_000, PPM_ONE];
        const IO_RATES_PPM: [u32; 4] = [100, 1_000, 10_000, 50_000];
        const CAPACITY_MIN_BYTES: u64 = 256 * 1024;
        const CAPACITY_MAX_BYTES: u64 = 64 * 1024 * 1024;

        let crash_write_lost_ppm = *rng.pick(&CRASH_RATES_PPM);
        let crash_write_torn_ppm =
            (*rng.pick(&CRASH_RATES_PPM)).min(PPM_ONE - crash_write_lost_ppm);
        let io_rate = |rng: &mut Rng| {
            let on = rng.chance_ppm(PPM_ONE / 2);
            let rate_ppm = *rng.pick(&IO_RATES_PPM);
            if on { rate_ppm } else { 0 }
        };
        let sync_eio_ppm = io_rate(rng);
        let write_short_ppm = io_rate(rng);
        let enospc_ppm = io_rate(rng);
        let capacity_on = rng.chance_ppm(PPM_ONE / 4);
        let capacity_bytes = rng.range_inclusive(CAPACITY_MIN_BYTES, CAPACITY_MAX_BYTES);
        let config = FaultConfig {
            crash_write_lost_ppm,
            crash_write_torn_ppm,
            torn_sector_garbage_ppm: *rng.pick(&CRASH_RATES_PPM),
            crash_size_change_lost_ppm: *rng.pick(&CRASH_RATES_PPM),
            crash_dir_flushed_ppm: *rng.pick(&CRASH_RATES_PPM),
            sync_eio_ppm,
            write_short_ppm,
            enospc_ppm,
            capacity_bytes: capacity_on.then_some(capacity_bytes),
            sector_atomic_suffixes: Vec::new(),
        };
        config.assert_valid();
        config
    }

    /// Whether any call can fail for a reason other than power loss, a bad
    /// argument or a dead handle (so a harness knows to expect errors).
    pub fn injects_io_errors(&self) -> bool {
        self.sync_eio_ppm > 0
            || self.write_short_ppm > 0
            || self.enospc_ppm > 0
            || self.capacity_bytes.is_some()
    }

    /// Panics if a probability exceeds one or the write outcomes overlap.
    pub fn assert_valid(&self) {
        for (name, ppm) in [
            ("crash_write_lost_ppm", self.crash_write_lost_ppm),
            ("crash_write_torn_ppm", self.crash_write_torn_ppm),
            ("torn_sector_garbage_ppm", self.torn_sector_garbage_ppm),
            (
                "crash_size_change_lost_ppm",
                self.crash_size_change_lost_ppm,
            ),
            ("crash_dir_flushed_ppm", self.crash_dir_flushed_ppm),
            ("sync_eio_ppm", self.sync_eio_ppm),
            ("write_short_ppm", self.write_short_ppm),
            ("enospc_ppm", self.enospc_ppm),
        ] {
            assert!(ppm <= PPM_ONE, "{name} = {ppm} exceeds {PPM_ONE}");
        }
        assert!(
            self.crash_write_lost_ppm + self.crash_write_torn_ppm <= PPM_ONE,
            "crash write outcomes sum past one"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presets_are_valid_and_none_injects_nothing() {
        FaultConfig::none().assert_valid();
        FaultConfig::crash_only().assert_valid();
        assert!(!FaultConfig::none().injects_io_errors());
        assert!(!FaultConfig::crash_only().injects_io_errors());
    }

    #[test]
    fn swarm_is_deterministic_and_varies_across_seeds() {
        let a = FaultConfig::swarm(&mut Rng::new(1));
        assert_eq!(a, FaultConfig::swarm(&mut Rng::new(1)));
        let configs: Vec<FaultConfig> = (0..32)
            .map(|seed| FaultConfig::swarm(&mut Rng::new(seed)))
            .collect();
        assert!(configs.iter().any(|c| c.sync_eio_ppm == 0));
        assert!(configs.iter().any(|c| c.sync_eio_ppm > 0));
        assert!(configs.iter().any(|c| c.capacity_bytes.is_some()));
        assert!(configs.iter().any(|c| c != &configs[0]));
    }

    #[test]
    #[should_panic(expected = "sum past one")]
    fn overlapping_write_outcomes_are_refused() {
        FaultConfig {
            crash_write_lost_ppm: PPM_ONE,
            crash_write_torn_ppm: 1,
            ..FaultConfig::none()
        }
        .assert_valid();
    }
}
