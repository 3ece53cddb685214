//! The crash: what a power cut leaves on the disk.
//!
//! Each file is rebuilt from its durable image by replaying its unsynced
//! changes in order, each one independently kept, lost, or (for writes) torn
//! at sector granularity; then each directory's unsynced entry changes are
//! reverted (or, rarely, flushed whole); then everything unreachable is
//! forgotten, every handle and lock dies, and power comes back.
//!
//! **Invariant:** after a crash every file's volatile image equals its
//! durable image, nothing is pending, and every byte a completed `sync_data`
//! covered (and every entry a completed `sync_dir` covered) is unchanged.

use super::faults::{FaultConfig, SECTOR_SIZE_BYTES};
use super::image::{Pending, to_usize};
use super::state::{DiskState, OpKind};
use crate::rng::{PPM_ONE, Rng};

/// What one unsynced write leaves behind after a crash.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum WriteOutcome {
    Kept,
    Lost,
    Torn,
}

fn write_outcome(rng: &mut Rng, faults: &FaultConfig) -> WriteOutcome {
    let draw = rng.below(u64::from(PPM_ONE));
    let lost_ppm = u64::from(faults.crash_write_lost_ppm);
    let torn_ppm = u64::from(faults.crash_write_torn_ppm);
    if draw < lost_ppm {
        WriteOutcome::Lost
    } else if draw < lost_ppm + torn_ppm {
        WriteOutcome::Torn
    } else {
        WriteOutcome::Kept
    }
}

/// Rebuilds a file's post-crash image from `durable` and its unsynced
/// changes, oldest first.
pub(crate) fn rebuild(
    durable: &[u8],
    pending: &[Pending],
    rng: &mut Rng,
    faults: &FaultConfig,
) -> Vec<u8> {
    let mut image = durable.to_vec();
    for change in pending {
        match change {
            Pending::SetLen { .. } => {
                if !rng.chance_ppm(faults.crash_size_change_lost_ppm) {
                    change.apply(&mut image);
                }
            }
            Pending::Write { offset_bytes, data } => match write_outcome(rng, faults) {
                WriteOutcome::Kept => change.apply(&mut image),
                WriteOutcome::Lost => {}
                WriteOutcome::Torn => tear(&mut image, *offset_bytes, data, rng, faults),
            },
        }
    }
    image
}

/// Applies a torn write: each 512-byte sector it touches (aligned to the
/// file, not to the write) independently gets the new bytes, keeps the old
/// ones, or gets garbage; any subset, not only a prefix. Growth of the file
/// is a separate size change, kept or lost on its own.
///
/// Only the bytes the write covered change: a torn sector never spills
/// garbage onto neighbouring bytes of the same sector that the write did not
/// touch (see docs/SIMULATION.md for why).
fn tear(image: &mut Vec<u8>, offset_bytes: u64, data: &[u8], rng: &mut Rng, faults: &FaultConfig) {
    let old_len_bytes = image.len() as u64;
    let end_bytes = offset_bytes + data.len() as u64;
    let grows = end_bytes > old_len_bytes;
    let keep_growth = grows && !rng.chance_ppm(faults.crash_size_change_lost_ppm);
    if grows {
        image.resize(to_usize(end_bytes), 0);
    }
    let mut sector_start_bytes = offset_bytes - offset_bytes % SECTOR_SIZE_BYTES;
    while sector_start_bytes < end_bytes {
        let start_bytes = sector_start_bytes.max(offset_bytes);
        let stop_bytes = (sector_start_bytes + SECTOR_SIZE_BYTES).min(end_bytes);
        let target = &mut image[to_usize(start_bytes)..to_usize(stop_bytes)];
        if rng.chance_ppm(faults.torn_sector_garbage_ppm) {
            rng.fill(target);
        } else if rng.chance_ppm(PPM_ONE / 2) {
            let source_start = to_usize(start_bytes - offset_bytes);
            target.copy_from_slice(&data[source_start..source_start + target.len()]);
        }
        sector_start_bytes += SECTOR_SIZE_BYTES;
    }
    if grows && !keep_growth {
        image.truncate(to_usize(old_len_bytes));
    }
    assert!(
        image.len() as u64
            == if keep_growth {
                end_bytes
            } else {
                old_len_bytes
            }
    );
}

impl DiskState {
    /// Power cut and reboot, drawing every outcome from `rng`.
    pub(crate) fn crash(&mut self, rng: &mut Rng) {
        let faults = self.faults.clone();
        // Files the config names as sector-atomic tear into old or new
        // sectors, never garbage (see FaultConfig::sector_atomic_suffixes).
        let mut atomic_faults = faults.clone();
        atomic_faults.torn_sector_garbage_ppm = 0;
        let sector_atomic: std::collections::BTreeSet<_> = self
            .namespace
            .files()
            .into_iter()
            .filter(|(path, _)| {
                faults
                    .sector_atomic_suffixes
                    .iter()
                    .any(|suffix| path.ends_with(suffix.as_str()))
            })
            .map(|(_, inode)| inode)
            .collect();
        for (id, inode) in self.inodes.iter_mut() {
            let file_faults = if sector_atomic.contains(id) {
                &atomic_faults
            } else {
                &faults
            };
            let image = rebuild(&inode.durable, &inode.pending, rng, file_faults);
            inode.durable.clone_from(&image);
            inode.volatile = image;
            inode.pending.clear();
            inode.open_handles = 0;
        }
        self.namespace.crash(rng, faults.crash_dir_flushed_ppm);
        let referenced = self.namespace.referenced_inodes();
        self.inodes.retain(|id, _| referenced.contains(id));
        self.locked_dirs.clear();
        self.generation += 1;
        self.powered_off = false;
        self.power_loss_at_op = None;
        self.record(OpKind::Crash, "", 0, 0, self.generation, &Ok(()));
        assert!(
            self.inodes
                .values()
                .all(|inode| inode.pending.is_empty() && inode.durable == inode.volatile)
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECTORS: usize = 8;

    fn torn_only(garbage_ppm: u32) -> FaultConfig {
        FaultConfig {
            crash_write_lost_ppm: 0,
            crash_write_torn_ppm: PPM_ONE,
            torn_sector_garbage_ppm: garbage_ppm,
            crash_size_change_lost_ppm: 0,
            ..FaultConfig::none()
        }
    }

    /// Which sectors of an 8-sector overwrite of zeros with 0xAA landed.
    fn torn_pattern(seed: u64, faults: &FaultConfig) -> Vec<Option<bool>> {
        let sector = to_usize(SECTOR_SIZE_BYTES);
        let durable = vec![0u8; SECTORS * sector];
        let pending = [Pending::Write {
            offset_bytes: 0,
            data: vec![0xAA; SECTORS * sector],
        }];
        let image = rebuild(&durable, &pending, &mut Rng::new(seed), faults);
        assert_eq!(image.len(), durable.len());
        image
            .chunks(sector)
            .map(|bytes| {
                if bytes.iter().all(|&b| b == 0xAA) {
                    Some(true)
                } else if bytes.iter().all(|&b| b == 0) {
                    Some(false)
                } else {
                    None // garbage
                }
            })
            .collect()
    }

    #[test]
    fn torn_writes_land_as_arbitrary_sector_subsets_not_only_prefixes() {
        let faults = torn_only(0);
        let mut non_prefix_seen = false;
        let mut patterns = std::collections::BTreeSet::new();
        for seed in 0..64 {
            let pattern = torn_pattern(seed, &faults);
            let landed: Vec<bool> = pattern
                .iter()
                .map(|sector| sector.expect("without garbage each sector is wholly old or new"))
                .collect();
            let is_prefix = landed.windows(2).all(|pair| pair[0] || !pair[1]);
            non_prefix_seen |= !is_prefix;
            patterns.insert(landed);
        }
        assert!(non_prefix_seen, "every torn write landed as a prefix");
        assert!(
            patterns.len() > 16,
            "too few distinct tears: {}",
            patterns.len()
        );
    }

    #[test]
    fn torn_sectors_may_hold_garbage() {
        let pattern = torn_pattern(1, &torn_only(PPM_ONE));
        assert!(pattern.iter().all(Option::is_none), "{pattern:?}");
    }

    #[test]
    fn tears_follow_file_sectors_and_spare_untouched_bytes() {
        // A write from the middle of sector 0 to the middle of sector 1.
        let durable = vec![1u8; 1024];
        let pending = [Pending::Write {
            offset_bytes: 256,
            data: vec![2; 512],
        }];
        for seed in 0..32 {
            let image = rebuild(&durable, &pending, &mut Rng::new(seed), &torn_only(0));
            assert!(image[..256].iter().all(|&b| b == 1));
            assert!(image[768..].iter().all(|&b| b == 1));
            let first = &image[256..512];
            let second = &image[512..768];
            assert!(first.iter().all(|&b| b == first[0]));
            assert!(second.iter().all(|&b| b == second[0]));
        }
    }

    #[test]
    fn kept_and_lost_writes_and_size_changes_replay_in_order() {
        let pending = [
            Pending::SetLen { len_bytes: 4 },
            Pending::Write {
                offset_bytes: 2,
                data: vec![9, 9, 9],
            },
        ];
        let kept = FaultConfig {
            crash_write_lost_ppm: 0,
            crash_size_change_lost_ppm: 0,
            ..FaultConfig::none()
        };
        assert_eq!(
            rebuild(&[5; 8], &pending, &mut Rng::new(0), &kept),
            [5, 5, 9, 9, 9]
        );
        assert_eq!(
            rebuild(&[5; 8], &pending, &mut Rng::new(0), &FaultConfig::none()),
            [5; 8]
        );
    }

    #[test]
    fn torn_growth_is_kept_or_lost_as_a_size_change() {
        let pending = [Pending::Write {
            offset_bytes: 0,
            data: vec![3; 1024],
        }];
        let lost_growth = FaultConfig {
            crash_size_change_lost_ppm: PPM_ONE,
            ..torn_only(0)
        };
        let image = rebuild(&[1; 100], &pending, &mut Rng::new(4), &lost_growth);
        assert_eq!(image.len(), 100);
        let image = rebuild(&[1; 100], &pending, &mut Rng::new(4), &torn_only(0));
        assert_eq!(image.len(), 1024);
    }

    #[test]
    fn apply_write_zero_fills_gaps() {
        use super::super::image::apply_write;
        let mut image = vec![1];
        apply_write(&mut image, 3, &[2]);
        assert_eq!(image, [1, 0, 0, 2]);
    }
}
